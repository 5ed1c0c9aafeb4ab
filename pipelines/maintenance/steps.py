"""Keep a long-lived warehouse small: each step removes what nothing needs any more and says how much.

- `drop_detail_windows`: detail rows of windows past `layout.detail_retention_windows`, kept longer
  when a training pointer's open window still needs them (its rebuild reads the detail of windows
  from its open window on, and checks ids against the retention before it).
- `expire_snapshots`: snapshots older than the retention, always keeping the newest ones, but never
  one from before a forget. Pipeline state is in table properties (`tableformat/registry.py`), so no
  state goes with them.
- `remove_orphan_files`: files under a table's location that no live snapshot or metadata file
  references, and never one younger than the safety interval (a job may be writing it now).
- `rewrite_small_files`: the many small files that per-step appends leave in the training and fat-row
  tables, rewritten into one file per bucket (`maintenance.small_file_bytes`), in one commit.
- `remove_landing_leftovers`: the files of a landing folder that holds no Delta table yet (an ingest
  killed before its first commit to that table left them; nothing can ever reference them), older
  than the safety interval; no engine needed.
- `vacuum_landing`: Delta's VACUUM of the landing and quarantine tables (files their log no longer
  references, and leftovers of killed writes), on Spark or in-process (delta-rs).

- `forget_raw`: the raw source tables' records a forget's tombstone covers
  (`seqlake.pipelines.ingest.tombstones`), removed by rewriting the files that hold them; with the
  landing tier known, the raw snapshots every ingest has consumed are expired (older than the snapshot
  retention), so the replaced files go with the orphans. A source snapshot not ingested yet is kept,
  and with it the files it delivers: the next ingest drops their covered records, the next `maintain`
  removes them.
- `seal_forget_records`: the users of every finished forget older than the snapshot retention leave
  the tables' forget records (their keyed hashes stay), and the metadata log keeps one file, so older
  metadata files, which name them, go with the orphans (`seqlake.tableformat.forgets`).
- `expire_landing_log`: the landing tables' Delta logs checkpointed, and their commit files older than
  the landing retention (and than the checkpoint) removed: the log keeps no old file statistics.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.expressions import LessThan
from pyiceberg.io.pyarrow import _dataframe_to_data_files, pyarrow_to_schema, write_file
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionFieldValue, PartitionKey
from pyiceberg.table import Table, WriteTask
from pyiceberg.table.snapshots import Operation

from seqlake.core.config import Config
from seqlake.core.progress import Progress
from seqlake.engines.catalog import open_catalog
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.faults import kill_point
from seqlake.pipelines.ingest import tombstones as forget_tombstones
from seqlake.pipelines.ingest.plan import ingest_app_id
from seqlake.pipelines.landing.delta_writer import applied_version, check_writable_in_process, open_table
from seqlake.pipelines.landing.tables import LandingPaths, LandingTier, is_delta_table
from seqlake.tableformat.evolution import known_field_ids, projection
from seqlake.tableformat.forgets import FORGETS_PROPERTY, TRIMMED_LOG, forgets_of, guard
from seqlake.tableformat.io import resolve_uri
from seqlake.tableformat.registry import published_windows
from seqlake.tableformat.schema import table_arrow_schema
from seqlake.tableformat.snapshots import in_commit_order, sequence_number

log = logging.getLogger(__name__)


@dataclass
class StepReport:
    step: str
    target: str  # the table (or landing path) the step worked on
    removed: int = 0  # snapshots, files or rows, as `unit` says
    unit: str = "files"
    bytes: int = 0
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        extra = f" ({'; '.join(self.notes)})" if self.notes else ""
        return f"{self.step}: {self.target}: removed {self.removed:,} {self.unit}, {self.bytes:,} bytes{extra}"


def user_tables(config: Config, *, besides: tuple[str, ...] = ()) -> list[Table]:
    """Every table of the namespace with a `user_id` column (by name), except those in `besides`:
    detail, quarantines, each tenant's training, fat-row and samples tables. Never the raw source."""
    catalog = open_catalog(config)
    found = []
    for identifier in sorted(catalog.list_tables(config.warehouse.namespace)):
        if identifier[-1] in besides:
            continue
        table = catalog.load_table(identifier)
        if "user_id" in table.schema().column_names:
            found.append(table)
    return found


def maintained_tables(config: Config) -> list[Table]:
    """The Iceberg tables maintenance expires and cleans: history, detail, then every other table that
    holds users' rows (quarantines, the tenants' training, fat-row and samples tables). Never the raw
    source."""
    history, detail = history_tables(config)
    return [history, detail, *user_tables(config, besides=(history.name()[-1], detail.name()[-1]))]


# -- detail retention ------------------------------------------------------------------------------


def detail_keep_from(config: Config, history: Table, training_tables: Iterable[Table] = ()) -> int | None:
    """The oldest detail window to keep: the retention counted back from the newest published window,
    moved further back for the oldest open window a training pointer holds. None: keep everything."""
    published = published_windows(history)
    if not published:
        return None
    retention = config.layout.detail_retention_windows
    keep_from = max(published) + 1 - retention
    for table in training_tables:
        if "open_window" not in table.schema().column_names or table.current_snapshot() is None:
            continue
        windows = table.scan(selected_fields=("open_window",)).to_arrow()["open_window"]
        if len(windows):
            oldest = min(int(w) for w in windows.unique().to_pylist() if w is not None)
            keep_from = min(keep_from, oldest - retention)
    return keep_from


def drop_detail_windows(detail: Table, keep_from: int | None) -> StepReport:
    """Delete the detail rows of windows before `keep_from` (whole partitions: no file is rewritten)."""
    report = StepReport("drop-detail", detail.name()[-1], unit="rows")
    if keep_from is None:
        report.notes.append("nothing published")
        return report
    condition = LessThan("window_id", keep_from)
    files = [task.file for task in detail.refresh().scan(row_filter=condition).plan_files()]
    if not files:
        report.notes.append(f"no window before {keep_from}")
        return report
    detail.delete(condition, snapshot_properties={"seqlake.operation": "drop-detail"})
    report.removed = sum(f.record_count for f in files)
    report.bytes = sum(f.file_size_in_bytes for f in files)
    report.notes.append(f"windows before {keep_from}; {len(files)} files, gone once their snapshots expire")
    return report


# -- snapshots ---------------------------------------------------------------------------------------


def expire_snapshots(table: Table, older_than: datetime, keep_last: int = 1) -> StepReport:
    """Expire the snapshots taken before `older_than`, except the newest `keep_last` (at least the
    current one) and branch or tag heads (pyiceberg protects them). A snapshot from before a forget
    (`seqlake.tableformat.forgets`: up to the sequence number the table's forget record keeps) is never one of
    the kept newest: time travel must not reach a forgotten user."""
    table.refresh()
    report = StepReport("expire-snapshots", table.name()[-1], unit="snapshots")
    snapshots = in_commit_order(table)
    forgotten_through = forgets_of(table.metadata).sequence
    after_forgets = [s for s in snapshots if sequence_number(s) > forgotten_through]
    kept = {s.snapshot_id for s in after_forgets[-max(keep_last, 1) :]}
    report.removed = _expire_older(table, snapshots, kept, older_than)
    return report


def _expire_older(table: Table, candidates: list, kept: set[int], older_than: datetime) -> int:
    """Expire the `candidates` committed before `older_than`, except `kept` and the current snapshot:
    how many were expired."""
    current = table.current_snapshot()
    if current is not None:
        kept = kept | {current.snapshot_id}
    cutoff = older_than.timestamp() * 1000
    old = [s.snapshot_id for s in candidates if s.timestamp_ms < cutoff and s.snapshot_id not in kept]
    if old:
        table.maintenance.expire_snapshots().by_ids(old).commit()
        table.refresh()
    return len(old)


# -- orphan files ------------------------------------------------------------------------------------


def _path(uri: str) -> str:
    """A file's path as a listing of its table's location spells it, whichever writer spelled the URI:
    pyiceberg writes `file:///x`, Spark (Hadoop) `file:/x`; the same file either way."""
    return resolve_uri(uri)[1]


def referenced_files(table: Table) -> set[str]:
    """Every file a live snapshot or the table's metadata references (paths without scheme): data
    files live in any snapshot, manifests, manifest lists, statistics, the metadata files in the log."""
    table.refresh()
    metadata = table.metadata
    io = table.io
    found = {_path(table.metadata_location)}
    found |= {_path(entry.metadata_file) for entry in metadata.metadata_log}
    found |= {_path(s.statistics_path) for s in getattr(metadata, "statistics", [])}
    found |= {_path(s.statistics_path) for s in getattr(metadata, "partition_statistics", [])}
    seen_manifests: set[str] = set()
    for snapshot in metadata.snapshots:
        found.add(_path(snapshot.manifest_list))
        for manifest in snapshot.manifests(io):
            if manifest.manifest_path in seen_manifests:
                continue
            seen_manifests.add(manifest.manifest_path)
            found.add(_path(manifest.manifest_path))
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
                found.add(_path(entry.data_file.file_path))
    return found


def remove_orphan_files(table: Table, safety: timedelta, *, now: datetime | None = None) -> StepReport:
    """Delete the files under the table's location that nothing references and that are older than
    `safety` (a file being written by a running job is younger)."""
    report = StepReport("remove-orphans", table.name()[-1])
    fs, root = pafs.FileSystem.from_uri(table.location())
    cutoff = (now or datetime.now(UTC)) - safety
    # Listed before the references are read: a file committed in between is then referenced.
    listed = [
        info
        for info in fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
        if info.type == pafs.FileType.File
    ]
    keep = referenced_files(table)
    for info in listed:
        if info.path in keep or info.mtime is None or info.mtime >= cutoff:
            continue
        fs.delete_file(info.path)
        report.removed += 1
        report.bytes += info.size or 0
    return report


# -- small files -------------------------------------------------------------------------------------

SMALL_FILE_TABLES = ("training_", "fatrow_")  # tables that grow by many small appends (one per capture step)


def rewrite_small_files(table: Table, small_bytes: int, min_files: int = 2) -> StepReport:
    """Rewrite the small data files of each partition (bucket) into one, where a partition holds at
    least `min_files` files under `small_bytes`, in one commit for the table that deletes those files
    and adds the new ones (pyiceberg validates that no concurrent commit removed them first). Memory
    holds one partition's small files at a time: each partition's new file is written before the next
    partition is read. One commit, not one per partition: each commit rewrites every manifest listing
    a replaced file, and the appends that made the small files left one manifest each. The replaced
    files go once their snapshots expire."""
    report = StepReport("rewrite-small-files", table.name()[-1])
    table.refresh()
    if table.current_snapshot() is None:
        return report
    tasks = list(table.scan().plan_files())
    if any(task.delete_files for task in tasks):
        report.notes.append("row-level deletes: left as they are")
        return report
    by_partition: dict[tuple, list] = {}
    for task in tasks:
        if task.file.file_size_in_bytes < small_bytes:
            # pyiceberg's Record iterates by __getitem__, which its type does not declare
            key: tuple = (task.file.spec_id, tuple(task.file.partition))  # type: ignore[arg-type]
            by_partition.setdefault(key, []).append(task.file)
    target, loose = table_arrow_schema(table.schema())
    known = known_field_ids(table)
    replaced: list[DataFile] = []
    written: list[DataFile] = []
    write_uuid = uuid.uuid4()
    for (spec_id, partition), files in by_partition.items():
        if len(files) < min_files:
            continue
        parts = []
        for data_file in files:
            fs, path = resolve_uri(data_file.file_path)
            with fs.open_input_file(path) as handle:
                parquet = pq.ParquetFile(handle)
                found = projection(parquet.schema_arrow, target, loose, known)
                parts.append(found.apply(parquet.read(columns=found.file_columns(target.names)), target.names))
        # As the files hold them (plain, not large, strings and lists): rewritten files read alike.
        rows = pa.concat_tables([p.cast(parts[0].schema) for p in parts])
        written += _write_partition(table, rows, spec_id, partition, write_uuid, len(written))
        replaced += files
    if not replaced:
        return report
    tagged = {"seqlake.operation": "rewrite-small-files"}
    try:
        with table.transaction() as tx, tx.update_snapshot(snapshot_properties=tagged).overwrite() as swap:
            for data_file in replaced:
                swap.delete_data_file(data_file)
            for data_file in written:
                swap.append_data_file(data_file)
    except (CommitFailedException, ValidationException):
        # A concurrent commit (a forget, another rewrite) changed these files: never write rows it
        # removed back in. The new files were never committed; the next maintenance plans again.
        for data_file in written:
            table.io.delete(data_file.file_path)
        report.notes.append("a partition changed while rewriting it: left for the next run")
        table.refresh()
        return report
    kill_point("maintain_rewrote")
    report.removed = len(replaced)
    report.bytes = sum(f.file_size_in_bytes for f in replaced)
    report.notes.append(f"{report.removed} files rewritten as {len(written)}")
    return report


def _write_partition(
    table: Table, rows: pa.Table, spec_id: int, partition: tuple, write_uuid: uuid.UUID, task_id: int
) -> list[DataFile]:
    """`rows` (all of one partition) as data files of that partition, through pyiceberg's own Parquet
    writer (field ids, statistics, the table's write properties); nothing is committed."""
    metadata = table.metadata
    spec, schema = metadata.specs()[spec_id], metadata.schema()
    key = PartitionKey(
        [PartitionFieldValue(field, value) for field, value in zip(spec.fields, partition, strict=True)], spec, schema
    )
    file_schema = pyarrow_to_schema(
        rows.schema, name_mapping=schema.name_mapping, format_version=metadata.format_version
    )
    task = WriteTask(
        write_uuid=write_uuid, task_id=task_id, schema=file_schema, record_batches=rows.to_batches(), partition_key=key
    )
    return list(write_file(table.io, metadata, iter([task])))


# -- forgotten users in the raw source and in metadata ------------------------------------------------


def forget_raw(
    config: Config, table: Table, tombstones: forget_tombstones.Tombstones, paths: LandingPaths | None
) -> StepReport:
    """Rewrite each live data file of the raw source `table` that holds records the tombstones cover
    without them (one commit), then, when `paths` tell what ingest consumed, expire every snapshot
    older than the retention that no ingest still needs (`expire_raw_snapshots` does, after)."""
    report = StepReport("forget-raw", table.name()[-1], unit="records")
    table.refresh()
    if not tombstones or table.current_snapshot() is None:
        return report
    from seqlake.engines.duckdb_session import connect

    replaced: list[DataFile] = []
    kept: list[pa.Table] = []
    con = connect(extensions=())
    try:
        for task in table.scan().plan_files():
            fs, path = resolve_uri(task.file.file_path)
            with fs.open_input_file(path) as handle:
                rows = pq.read_table(handle)
            con.register("_raw", rows)
            left = con.execute(tombstones.raw_kept_sql("_raw")).to_arrow_table()
            con.unregister("_raw")
            if left.num_rows == rows.num_rows:
                continue
            replaced.append(task.file)
            kept.append(left.select(rows.column_names).cast(rows.schema))
            report.removed += rows.num_rows - left.num_rows
    finally:
        con.close()
    if not replaced:
        return report
    tagged = {"seqlake.operation": "forget-raw"}
    rows = pa.concat_tables(kept)
    try:
        with table.transaction() as tx:
            written = list(_dataframe_to_data_files(tx.table_metadata, rows, table.io)) if rows.num_rows else []
            with tx.update_snapshot(snapshot_properties=tagged).overwrite() as swap:
                for data_file in replaced:
                    swap.delete_data_file(data_file)
                for data_file in written:
                    swap.append_data_file(data_file)
    except (CommitFailedException, ValidationException):
        report.notes.append("the table changed while rewriting it: left for the next run")
        report.removed = 0
        return report
    report.bytes = sum(f.file_size_in_bytes for f in replaced)
    report.notes.append(f"{len(replaced)} files rewritten; gone once their snapshots expire")
    return report


def expire_raw_snapshots(config: Config, table: Table, older_than: datetime, paths: LandingPaths) -> StepReport:
    """Expire the raw source's snapshots older than `older_than` that every ingest has consumed (its
    sequence number at most what the landing tier records for it), keeping the newest consumed one
    (the first pending snapshot's parent, which Spark's incremental read starts from) and the current."""
    report = StepReport("expire-snapshots", table.name()[-1], unit="snapshots")
    table.refresh()
    done = applied_version(paths.events, ingest_app_id(config, table.name()[-1]))
    snapshots = in_commit_order(table)
    consumed = [s for s in snapshots if sequence_number(s) <= done]
    # Only an append delivers records (a rewrite such as `forget_raw`'s delivers none): Spark's
    # incremental read of the first pending one starts from its parent.
    pending = [s for s in snapshots if sequence_number(s) > done and _operation(s) == Operation.APPEND]
    kept = {pending[0].parent_snapshot_id} if pending and pending[0].parent_snapshot_id is not None else set()
    report.removed = _expire_older(table, consumed, kept, older_than)
    if pending:
        report.notes.append(f"{len(pending)} not ingested yet: kept")
    return report


def _operation(snapshot) -> Operation | None:
    return snapshot.summary.operation if snapshot.summary is not None else None


SEALED_AT = "seqlake.forgets-sealed-at"


def seal_forget_records(table: Table, finished: frozenset[str], before: datetime, now: datetime) -> StepReport:
    """Seal the table's forget record (`Forgets.sealed`: finished forgets older than `before` keep
    their users' hashes only) and keep one file in its metadata log (`TRIMMED_LOG`), in a guarded
    commit (a forget recording meanwhile fails it: planned again), then one more commit, so that the
    log holds the sealed metadata only and every older metadata file is an orphan."""
    report = StepReport("seal-forgets", table.name()[-1], unit="users")
    for _ in range(3):
        table.refresh()
        metadata = table.metadata
        if FORGETS_PROPERTY not in metadata.properties:
            return report
        current = forgets_of(metadata)
        updated = current.sealed(finished, before, now)
        trimmed = all(metadata.properties.get(k) == v for k, v in TRIMMED_LOG.items())
        if updated == current and trimmed and len(metadata.metadata_log) <= 1:
            return report
        try:
            with table.transaction() as tx:
                guard(tx).set_properties({FORGETS_PROPERTY: updated.to_json(), **TRIMMED_LOG})
            with table.transaction() as tx:  # the log now drops every metadata file before the seal
                tx.set_properties({SEALED_AT: now.isoformat()})
        except CommitFailedException:
            continue  # a forget came first: seal again
        report.removed = sum(len(e.users) for e in current.epochs) - sum(len(e.users) for e in updated.epochs)
        return report
    report.notes.append("the table kept changing: left for the next run")
    return report


def expire_landing_log(tier: LandingTier, retention: timedelta, *, now: datetime | None = None) -> list[StepReport]:
    """Checkpoint each landing table's Delta log (delta-rs) and remove its commit files (and older
    checkpoints) before that checkpoint and older than `retention`: what they said is in the
    checkpoint, and no reader starts before it."""
    cutoff = (now or datetime.now(UTC)) - retention
    reports = []
    for uri in (tier.paths.events, tier.paths.quarantine):
        report = StepReport("expire-landing-log", uri.rstrip("/").rsplit("/", 1)[-1])
        reports.append(report)
        table = open_table(uri) if is_delta_table(uri) else None
        if table is None:
            report.notes.append("no table")
            continue
        table.create_checkpoint()
        version = table.version()
        fs, root = resolve_uri(uri)
        log_dir = f"{root.rstrip('/')}/_delta_log"
        for info in fs.get_file_info(pafs.FileSelector(log_dir, allow_not_found=True)):
            name = info.base_name
            digits = name.lstrip(".").split(".", 1)[0]
            if info.type != pafs.FileType.File or not digits.isdigit() or int(digits) >= version:
                continue
            if info.mtime is None or info.mtime >= cutoff:
                continue
            fs.delete_file(info.path)
            report.removed += 1
            report.bytes += info.size or 0
    return reports


# -- landing -----------------------------------------------------------------------------------------


def _file_size(path: str) -> int:
    """Size of a file as Spark's file system prints its path (`file:/tmp/x`, or a URI)."""
    if path.startswith("file:") or "://" not in path:
        fs, local = pafs.LocalFileSystem(), "/" + path.removeprefix("file:").lstrip("/")
    else:
        fs, local = pafs.FileSystem.from_uri(path)
    return fs.get_file_info(local).size or 0


def remove_landing_leftovers(
    paths: LandingPaths, safety: timedelta, *, now: datetime | None = None
) -> list[StepReport]:
    """Delete the files of each landing folder (events, quarantine) that holds no Delta table, when
    older than `safety`: an ingest killed between writing its files and the commit that would have
    created the table left them, and the next ingest writes new ones. A folder with a Delta table is
    left to `vacuum_landing`. A running ingest's files are younger than `safety`, so a first commit
    being made now keeps its files."""
    cutoff = (now or datetime.now(UTC)) - safety
    reports = []
    for uri in (paths.events, paths.quarantine):
        report = StepReport("remove-landing-leftovers", uri.rstrip("/").rsplit("/", 1)[-1])
        reports.append(report)
        if is_delta_table(uri):
            report.notes.append("a Delta table: left to its VACUUM")
            continue
        fs, root = resolve_uri(uri)
        listed = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
        young = 0
        for info in listed:
            if info.type != pafs.FileType.File:
                continue
            if info.mtime is None or info.mtime >= cutoff:
                young += 1
                continue
            fs.delete_file(info.path)
            report.removed += 1
            report.bytes += info.size or 0
        if young:
            report.notes.append(f"{young} younger than the safety interval kept")
    return reports


def vacuum_landing(tier: LandingTier, retention: timedelta) -> list[StepReport]:
    """Delta VACUUM of the landing and quarantine tables: files their log no longer references, and
    untracked leftovers, older than `retention`, on the tier's engine. Listed first (a dry run) to report
    what goes."""
    reports = []
    for uri in (tier.paths.events, tier.paths.quarantine):
        report = StepReport("vacuum-landing", uri.rsplit("/", 1)[-1])
        reports.append(report)
        if not is_delta_table(uri):
            report.notes.append("no table")
            continue
        vacuum = _vacuum_on_spark if tier.spark is not None else _vacuum_in_process
        sizes = vacuum(tier.spark, uri, retention)
        report.removed, report.bytes = len(sizes), sum(sizes)
    return reports


def _vacuum_on_spark(spark, uri: str, retention: timedelta) -> list[int]:
    """Delta's own VACUUM; the sizes of the files it removed."""
    hours = retention.total_seconds() / 3600
    # Delta refuses a retention below 7 days unless told; the caller's retention is the policy.
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    # VACUUM lists the table's folders with this many tasks (10,000 by default): on a small cluster
    # the tasks' overhead, not the listing, takes the time.
    spark.conf.set(
        "spark.sql.sources.parallelPartitionDiscovery.parallelism", str(spark.sparkContext.defaultParallelism * 4)
    )
    target = f"delta.`{uri}`"
    doomed = [row["path"] for row in spark.sql(f"VACUUM {target} RETAIN {hours} HOURS DRY RUN").collect()]
    sizes = [_file_size(path) for path in doomed]
    spark.sql(f"VACUUM {target} RETAIN {hours} HOURS").collect()
    return sizes


def _vacuum_in_process(_spark, uri: str, retention: timedelta) -> list[int]:
    """delta-rs's VACUUM, full (untracked leftovers too, as Delta's own); the sizes of the files it
    removed. delta-rs takes whole hours: the retention is rounded up, so nothing younger than asked goes."""
    table = open_table(uri)
    assert table is not None  # the caller checked that there is a table
    check_writable_in_process(table, uri)
    hours = math.ceil(retention.total_seconds() / 3600)
    options = {"retention_hours": hours, "enforce_retention_duration": False, "full": True}
    fs, root = resolve_uri(uri)
    listed = table.vacuum(dry_run=True, **options)
    sizes = {name: fs.get_file_info(f"{root.rstrip('/')}/{name}").size or 0 for name in listed}
    removed = table.vacuum(dry_run=False, **options)
    return [sizes.get(name, 0) for name in removed]


def run_maintenance(
    config: Config,
    *,
    landing: LandingTier | None = None,
    vacuum: bool = True,
    now: datetime | None = None,
    progress: Progress | None = None,
) -> list[StepReport]:
    """Every step in order: drop detail past retention, expire snapshots, remove orphan files, and with
    the landing tier, remove the leftovers of its folders that hold no table yet and (unless `vacuum` is
    off) vacuum it on the tier's engine. Dropped detail files become orphans once the snapshots holding
    them expire, so the order frees them in one run when the retention allows. `progress` counts the
    steps done (per table) and the bytes removed."""
    spec = config.maintenance
    now = now or datetime.now(UTC)
    tables = maintained_tables(config)
    history, detail, training = tables[0], tables[1], tables[2:]
    rewritten = [t for t in tables if t.name()[-1].startswith(SMALL_FILE_TABLES)]
    raw = forget_tombstones.raw_tables(config)
    if progress is not None:
        landing_steps = 0 if landing is None else 1 + 2 * len(raw) + 2 * vacuum
        recorded = sum(FORGETS_PROPERTY in t.metadata.properties for t in tables)
        progress.set_total(1 + len(rewritten) + len(raw) + 2 * len(tables) + recorded + landing_steps)
    reports: list[StepReport] = []

    def done(*step: StepReport) -> None:
        for report in step:
            log.info("%s", report.line())
            reports.append(report)
        if progress is not None:  # bytes freed from storage (dropped detail rows are freed as orphans)
            freed = sum(r.bytes for r in step if r.step not in ("drop-detail", "rewrite-small-files"))
            progress.add(nbytes=freed, steps=1, note=" ".join(f"{r.step}: {r.target}" for r in step[:1]))
        kill_point("maintain_step")

    done(drop_detail_windows(detail, detail_keep_from(config, history, training)))
    for table in rewritten:
        done(rewrite_small_files(table, spec.small_file_bytes))
    older_than = now - timedelta(hours=spec.snapshot_retention_hours)
    tombstones = forget_tombstones.current(config)
    for table in raw if tombstones else []:  # only a forget's tombstone makes a raw source rewritten
        done(forget_raw(config, table, tombstones, landing.paths if landing is not None else None))
    finished = forgets_of(history.refresh().metadata).ids  # in history's record: every table is clean
    for table in [*tables[1:], history]:  # history last, as forget records
        if FORGETS_PROPERTY in table.refresh().metadata.properties:
            done(seal_forget_records(table, finished, older_than, now))
    for table in tables:
        done(expire_snapshots(table, older_than, spec.keep_snapshots))
    if landing is not None:
        for table in raw:
            done(expire_raw_snapshots(config, table, older_than, landing.paths))
    safety = timedelta(hours=spec.orphan_safety_hours)
    # The metadata files this run's own commits left out of a log are older than the safety interval
    # measured from now, not from the run's start.
    orphans_now = max(now, datetime.now(UTC))
    for table in [*tables, *(raw if landing is not None else [])]:
        done(remove_orphan_files(table, safety, now=orphans_now))
    if landing is not None:
        done(*remove_landing_leftovers(landing.paths, safety, now=now))
        if vacuum:
            retention = timedelta(hours=spec.landing_retention_hours)
            done(*vacuum_landing(landing, retention))
            done(*expire_landing_log(landing, retention, now=now))
    return reports
