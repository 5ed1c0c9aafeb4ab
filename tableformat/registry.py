"""Register history files in Iceberg: the table, its data files with exact metrics, and its sorted runs.

Files are written by seqlake's own writer (from Python or from Spark tasks) and then committed here.
Each commit adds whole sorted runs (and, for a merge, removes the runs it replaces) in one Iceberg
snapshot, together with the table property `seqlake.runs` that lists the live runs: a reader never
sees half a run, and every engine can ignore the property safely. The LSN frontier is a table
property too (`seqlake.frontier`, set in the same commit as the runs it covers), and so is the forget
record (`seqlake.forgets`, `seqlake.tableformat.forgets`) that fences every commit of new files: table
properties live in the table metadata, not in a snapshot, so expiring old snapshots loses none.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException, TableAlreadyExistsError
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import BucketTransform
from pyiceberg.typedef import Record

from seqlake.core.errors import ForgetCommitted, RunsChanged, SchemaError, SeqlakeError, WindowsAlreadyPublished
from seqlake.engines.catalog_tables import load_table_if_exists
from seqlake.tableformat.evolution import (
    COLUMN_TYPES_PROPERTY,
    SchemaDiff,
    compare,
    mismatch_error,
    table_declared_types,
    with_groups,
)
from seqlake.tableformat.forgets import Forgets, ReadPoint, files_holding, guard, missed_users, record_forget

# The frontier is published here, in the runs' commit; its type and codec live in tableformat.frontier.
from seqlake.tableformat.frontier import FRONTIER_PROPERTY as FRONTIER_PROPERTY
from seqlake.tableformat.frontier import published_frontier as published_frontier
from seqlake.tableformat.io import resolve_uri
from seqlake.tableformat.layout import STATISTICS_COLUMNS
from seqlake.tableformat.schema import (
    ADDED_BOOKKEEPING,
    FORMAT_VERSION,
    history_iceberg_schema,
    history_partition_spec,
    history_sort_order,
)
from seqlake.tableformat.spec import HistorySpec
from seqlake.tableformat.writer import WrittenFile

log = logging.getLogger(__name__)

RUNS_PROPERTY = "seqlake.runs"
FORMAT_PROPERTY = "seqlake.format-version"
GROUPS_PROPERTY = "seqlake.feature-groups"
COMMIT_RETRIES = "commit.retry.num-retries"


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    kind: str  # "window": one closed window; "merge": runs merged by capacity
    # The exact set of processing windows whose rows the run holds (sorted): a merge holds the union
    # of its inputs' sets, never a [first, last] range, so a window left out of every run stays
    # publishable whatever was merged around it.
    windows: list[int]
    files: int
    rows: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "windows", sorted({int(w) for w in self.windows}))


def create_history_table(catalog: Catalog, identifier: str, config: HistorySpec, replace: bool = False) -> Table:
    """Create the history table (bucket(N, user_id), sorted by the key) unless it exists."""
    if replace and catalog.table_exists(identifier):
        catalog.purge_table(identifier)
    existing = load_table_if_exists(catalog, identifier)
    if existing is not None:
        return check_matches_config(existing, config)
    schema = history_iceberg_schema(config)
    properties = {
        FORMAT_PROPERTY: FORMAT_VERSION,
        # A commit that lost a race must fail, not be retried: pyiceberg's retry re-applies the
        # snapshot on the new base but replays `seqlake.runs` computed from the old one, which
        # would publish a run twice or drop a concurrently published one.
        COMMIT_RETRIES: "0",
        GROUPS_PROPERTY: ",".join(config.feature_groups),
        COLUMN_TYPES_PROPERTY: json.dumps(config.column_types(), sort_keys=True),
        RUNS_PROPERTY: "{}",
        "write.parquet.compression-codec": "zstd",
        # Manifests keep bounds for the key columns (what planners prune on), counts elsewhere.
        "write.metadata.metrics.default": "counts",
        **{f"write.metadata.metrics.column.{c}": "full" for c in STATISTICS_COLUMNS},
    }
    try:
        return catalog.create_table(
            identifier,
            schema=schema,
            partition_spec=history_partition_spec(schema, config.layout.bucket_count),
            sort_order=history_sort_order(schema),
            properties=properties,
        )
    except TableAlreadyExistsError:  # another job created it between the check and the create
        return check_matches_config(catalog.load_table(identifier), config)


def table_bucket_count(table: Table) -> int | None:
    """N of the table's `bucket(N, user_id)` partition field (None if it has none)."""
    for field in table.spec().fields:
        if isinstance(field.transform, BucketTransform):
            return field.transform.num_buckets
    return None


def check_matches_config(
    table: Table, config: HistorySpec, *, check_schema: bool = True, schema: Schema | None = None
) -> Table:
    """Refuse a table whose bucket count or columns differ from the configuration's: writers and
    readers take both from the configuration, and a mismatch silently misplaces or misses rows.
    `schema` is what the configuration makes of the table (default: the history schema). A column
    difference names each column and the command that migrates it (`seqlake migrate`)."""
    name = ".".join(table.name())
    buckets = table_bucket_count(table)
    if buckets is not None and buckets != config.layout.bucket_count:
        raise SchemaError(
            f"{name} is partitioned by bucket({buckets}, user_id) but layout.bucket_count is "
            f"{config.layout.bucket_count}; set layout.bucket_count: {buckets} or write to a new table"
        )
    if check_schema:
        diff = schema_diff(table, config, schema)
        if not diff.empty:
            raise mismatch_error(diff)
    return table


def schema_diff(table: Table, config: HistorySpec, schema: Schema | None = None) -> SchemaDiff:
    """What the configuration asks of `table`'s columns (and, for history, of its feature groups and
    declared column types). Columns that are not feature-group columns (keys, bookkeeping) are fixed,
    but for bookkeeping the format added later (`ADDED_BOOKKEEPING`), which a migration adds."""
    expected = schema or history_iceberg_schema(config)
    features = config.column_types()
    addable = frozenset(ADDED_BOOKKEEPING) if schema is None else frozenset()
    fixed = frozenset(f.name for f in expected.fields if f.name not in features and f.name not in addable)
    if schema is not None:
        return compare(".".join(table.name()), table.schema(), expected, fixed=fixed)
    diff = compare(
        ".".join(table.name()),
        table.schema(),
        expected,
        actual_declared=table_declared_types(table.metadata.properties),
        expected_declared=features,
        fixed=fixed,
    )
    recorded = table.metadata.properties.get(GROUPS_PROPERTY)
    groups = recorded.split(",") if recorded else list(config.feature_groups)
    return with_groups(diff, groups, list(config.feature_groups), GROUPS_PROPERTY)


def live_runs(table: Table) -> dict[str, RunRecord]:
    """The sorted runs of the table's current snapshot, oldest first."""
    raw = json.loads(table.metadata.properties.get(RUNS_PROPERTY, "{}"))
    return {run_id: RunRecord(**record) for run_id, record in raw.items()}


def published_windows(table: Table) -> set[int]:
    """Windows held by a live run of the table's current snapshot."""
    return {w for record in live_runs(table).values() for w in record.windows}


def data_file_for(table: Table, written: WrittenFile) -> DataFile:
    """An Iceberg DataFile for a written history file, with metrics read from its footer."""
    fs, path = resolve_uri(written.uri)
    with fs.open_input_file(path) as handle:
        metadata = pq.read_metadata(handle)
    schema = table.schema()
    with _quiet_missing_statistics():
        statistics = data_file_statistics_from_parquet_metadata(
            parquet_metadata=metadata,
            stats_columns=compute_statistics_plan(schema, table.metadata.properties),
            parquet_column_mapping=parquet_path_to_id_mapping(schema),
        )
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=written.uri,
        file_format=FileFormat.PARQUET,
        # One file holds one bucket: the partition is known, not inferred from bounds.
        partition=Record(written.facts.bucket),
        file_size_in_bytes=written.file_size,
        sort_order_id=table.sort_order().order_id,
        spec_id=table.spec().spec_id,
        equality_ids=None,
        key_metadata=None,
        **statistics.to_serialized_dict(),
    )


@contextmanager
def _quiet_missing_statistics() -> Iterator[None]:
    # Only key columns carry Parquet statistics (small footers, SPEC.md); pyiceberg warns once per
    # other column and file, which says nothing here.
    log = logging.getLogger("pyiceberg.io.pyarrow")

    def keep(record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("PyArrow statistics missing")

    log.addFilter(keep)
    try:
        yield
    finally:
        log.removeFilter(keep)


def commit_runs(
    table: Table,
    new_runs: Sequence[tuple[RunRecord, Sequence[WrittenFile]]],
    *,
    replaces: Sequence[str] = (),
    snapshot_properties: dict[str, str] | None = None,
    point: ReadPoint | None = None,
) -> int:
    """Add runs (and drop the runs in `replaces`) in one snapshot; return its id.

    A `seqlake.frontier` among the snapshot properties also becomes the table property, in the same
    commit. Raises RunsChanged when another commit won the race (the caller refreshes and decides
    again), WindowsAlreadyPublished when a new run would hold a window a remaining live run holds.
    With `point` (where the writer's read began: `seqlake.tableformat.forgets`), ForgetCommitted when a
    forget the read did not see names a user the new files hold; the commit is fenced on it."""
    if point is not None:
        _check_forgets(table, point, [item for _, written in new_runs for item in written])
    runs = live_runs(table)
    missing = [r for r in replaces if r not in runs]
    if missing:
        raise RunsChanged(f"cannot replace runs {missing}: not live in {'.'.join(table.name())}")
    for run_id in replaces:
        del runs[run_id]
    held = {w for record in runs.values() for w in record.windows}
    for record, _ in new_runs:
        if record.run_id in runs:
            raise WindowsAlreadyPublished(".".join(table.name()), set(record.windows) & held or set(record.windows))
        if held & set(record.windows):
            raise WindowsAlreadyPublished(".".join(table.name()), held & set(record.windows))
        held |= set(record.windows)
    for record, _ in new_runs:
        runs[record.run_id] = record
    properties = {
        "seqlake.operation": "merge-runs" if replaces else "publish-runs",
        "seqlake.added-runs": ",".join(r.run_id for r, _ in new_runs),
        **(snapshot_properties or {}),
    }
    if replaces:
        properties["seqlake.replaced-runs"] = ",".join(replaces)
    removed = files_of_runs(table, set(replaces)) if replaces else []
    try:
        with table.transaction() as tx:
            if point is not None:
                guard(tx)  # the check above holds at the commit, or the commit fails
            state = {RUNS_PROPERTY: json.dumps({k: asdict(v) for k, v in runs.items()})}
            if FRONTIER_PROPERTY in properties:
                state[FRONTIER_PROPERTY] = properties[FRONTIER_PROPERTY]
            tx.set_properties(state)
            update = tx.update_snapshot(snapshot_properties=properties)
            producer = update.overwrite() if replaces else update.fast_append()
            with producer as files:
                for data_file in removed:
                    files.delete_data_file(data_file)
                for _, written in new_runs:
                    for item in written:
                        files.append_data_file(data_file_for(table, item))
    except CommitFailedException as error:
        raise RunsChanged(f"{'.'.join(table.name())} changed while committing runs: {error}") from error
    log.debug(
        "%s: committed runs %s (replacing %s)", ".".join(table.name()), properties["seqlake.added-runs"], replaces
    )
    table.refresh()
    return _current_snapshot_id(table)


def _check_forgets(table: Table, point: ReadPoint, written: Sequence[WrittenFile]) -> None:
    """Raise ForgetCommitted if a file about to be committed holds a user a forget removed after the
    writer's read (its footer's user range first, then its user_id column)."""
    missed = missed_users(table, point)
    if not len(missed):
        return
    users = missed.to_numpy()
    ranged = [
        item.uri
        for item in written
        if item.facts.row_count and bool(((users >= item.facts.key_min[0]) & (users <= item.facts.key_max[0])).any())
    ]
    if files_holding(ranged, missed):
        raise ForgetCommitted(
            f"{'.'.join(table.name())}: users {missed.to_pylist()[:10]} were forgotten after this job read "
            "its input, and its files hold their rows"
        )


def run_id_of_path(path: str) -> str:
    """History file names start with `r<run_id>-`: the run is readable from the path alone."""
    name = path.rsplit("/", 1)[-1]
    if not name.startswith("r") or "-b" not in name:
        raise SeqlakeError(f"{path} is not a seqlake history file name")
    return name[1 : name.index("-b")]


def history_file_uri(location: str, run_id: str, bucket: int, attempt: str = "0") -> str:
    """Where a run's file for one bucket goes. `attempt` keeps racing or retried writers of the same
    run from writing to the same path; only the committed attempt's files become live."""
    return f"{location}/data/user_id_bucket={bucket}/r{run_id}-b{bucket:04d}-{attempt}.parquet"


def files_of_runs(table: Table, run_ids: set[str]) -> list[DataFile]:
    return [task.file for task in table.scan().plan_files() if run_id_of_path(task.file.file_path) in run_ids]


def commit_file_rewrite(
    table: Table,
    runs_read: dict[str, RunRecord],
    replaced: Sequence[DataFile],
    written: Sequence[WrittenFile],
    *,
    snapshot_properties: dict[str, str] | None = None,
    forgets: Forgets | None = None,
) -> int:
    """Replace some files of live runs by rewritten ones (the same runs, buckets and windows, fewer
    rows) in one snapshot, with the runs' file and row counts updated in the same commit, and with
    `forgets` the table's forget record (a forget's commit: `seqlake.tableformat.forgets`).

    `runs_read` is the registry the rewrite was planned on: a run published, merged or rewritten
    since then raises RunsChanged (the caller plans again on the new snapshot)."""
    runs = live_runs(table)
    if runs != runs_read:
        raise RunsChanged(f"{'.'.join(table.name())}: the runs changed while rewriting files")
    counts = {run_id: [record.files, record.rows] for run_id, record in runs.items()}
    for data_file in replaced:
        run = run_id_of_path(data_file.file_path)
        counts[run][0] -= 1
        counts[run][1] -= data_file.record_count
    for item in written:
        counts[item.facts.run_id][0] += 1
        counts[item.facts.run_id][1] += item.facts.row_count
    updated = {
        run_id: asdict(RunRecord(run_id, record.kind, record.windows, *counts[run_id]))
        for run_id, record in runs.items()
    }
    properties = {"seqlake.operation": "rewrite-files", **(snapshot_properties or {})}
    try:
        with table.transaction() as tx:
            if forgets is not None:
                guard(tx)  # the snapshot this rewrite read, before the overwrite stages its own
            tx.set_properties({RUNS_PROPERTY: json.dumps(updated)})
            with tx.update_snapshot(snapshot_properties=properties).overwrite() as files:
                for data_file in replaced:
                    files.delete_data_file(data_file)
                for item in written:
                    files.append_data_file(data_file_for(table, item))
            if forgets is not None:
                record_forget(tx, forgets, snapshot_staged=True)
    except CommitFailedException as error:
        raise RunsChanged(f"{'.'.join(table.name())} changed while rewriting files: {error}") from error
    table.refresh()
    return _current_snapshot_id(table)


def _current_snapshot_id(table: Table) -> int:
    snapshot = table.current_snapshot()
    assert snapshot is not None  # the commit just made one
    return snapshot.snapshot_id
