"""Window-close compaction, what both engines share: the plan of a batch and its publication.

A batch is one closed window (the steady state) or many (a backlog: an import, a job that was down),
compacted in one pass into one sorted run that holds exactly those windows, and published by one
Iceberg commit that records them and the LSN frontier. Here: the run ids, the history and detail
tables, which windows a batch publishes, how a backlog is cut into batches, which runs a merge takes,
the commit of a written run (and of a merge), the retries a lost race or a forget asks for, and the
fault points. How an engine reads, aggregates and writes a batch is in its own module
(`seqlake.pipelines.compaction.spark`, `seqlake.pipelines.compaction.duckdb`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass

from pyiceberg.exceptions import TableAlreadyExistsError
from pyiceberg.io.pyarrow import pyarrow_to_schema
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.table import Table
from pyiceberg.table.sorting import SortField, SortOrder
from pyiceberg.transforms import IdentityTransform

from seqlake.core.config import Config
from seqlake.core.errors import CommitFailed, ForgetCommitted, SeqlakeError, SimulatedCrash
from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.engines.catalog_tables import load_table_if_exists
from seqlake.pipelines.commit_failures import committing
from seqlake.pipelines.compaction.merge_policy import policy_of, runs_to_merge
from seqlake.pipelines.faults import kill_point
from seqlake.pipelines.landing.schema import landing_schema
from seqlake.pipelines.landing.tables import LandingPaths, LandingQuery, LandingScan
from seqlake.pipelines.tables import DETAIL, HISTORY
from seqlake.tableformat.forgets import ReadPoint, inherited, read_point
from seqlake.tableformat.frontier import Frontier
from seqlake.tableformat.io import resolve_uri
from seqlake.tableformat.registry import (
    RunRecord,
    RunsChanged,
    WindowsAlreadyPublished,
    check_matches_config,
    commit_runs,
    create_history_table,
    live_runs,
    published_frontier,
    published_windows,
)
from seqlake.tableformat.schema import with_field_ids

log = logging.getLogger(__name__)

CRASH_POINTS = ("before_write", "after_write", "after_detail", "after_commit")
COMMIT_ATTEMPTS = 5  # a publication that loses a race re-decides on the new snapshot this many times
# Why a compaction whose commit failed may run again: the windows a run holds are recorded with it.
PUBLISHED_ONCE = "compaction publishes each window once"


@dataclass(frozen=True)
class CompactionResult:
    window_id: int  # the batch's last window
    run_id: str
    published: bool  # False: the windows were published before (no-op)
    events: int = 0
    rows: int = 0
    files: int = 0
    windows: tuple[int, ...] = ()  # the windows the published run holds
    quarantined: int = 0  # events of groups whose aggregate did not fit (seqlake.pipelines.compaction.quarantine)


def window_run_id(window_id: int) -> str:
    return f"w{window_id}"


def batch_run_id(windows: list[int]) -> str:
    """`w<window>` for one window, `b<first>t<last>n<count>` for a batch of several."""
    if len(windows) == 1:
        return window_run_id(windows[0])
    return f"b{windows[0]}t{windows[-1]}n{len(windows)}"


def merge_run_id(windows: list[int]) -> str:
    """`m<first>t<last>n<count>`: the count tells runs over the same span apart (a window published
    after a merge joins the next one)."""
    return f"m{windows[0]}t{windows[-1]}n{len(windows)}"


def history_tables(config: Config) -> tuple[Table, Table]:
    """The history table and the detail table, created on first use."""
    catalog = open_catalog(config)
    history_id, detail_id = table_identifier(config, HISTORY), table_identifier(config, DETAIL)
    history = create_history_table(catalog, history_id, config)
    iceberg_schema = pyarrow_to_schema(with_field_ids(landing_schema(config)))
    existing = load_table_if_exists(catalog, detail_id)
    if existing is not None:
        # The detail table holds landing rows: its columns follow the feature groups too.
        return history, check_matches_config(existing, config, schema=iceberg_schema)
    # By window only: a compaction replaces its windows' partitions. Not by user bucket as well: an
    # import's backlog spans thousands of small windows, and window x bucket partitions made one tiny
    # file each (most of a catch-up's time). Files are sorted by user, so a rebuild of some users'
    # events reads only the row groups that hold them.
    spec = PartitionSpec(
        PartitionField(
            source_id=iceberg_schema.find_field("window_id").field_id,
            field_id=1000,
            transform=IdentityTransform(),
            name="window_id",
        ),
    )
    order = SortOrder(
        SortField(source_id=iceberg_schema.find_field("user_id").field_id, transform=IdentityTransform()),
        SortField(source_id=iceberg_schema.find_field("event_ts").field_id, transform=IdentityTransform()),
    )
    properties = {"write.parquet.compression-codec": "zstd", **inherited(history)}
    try:
        detail = catalog.create_table(
            detail_id, schema=iceberg_schema, partition_spec=spec, sort_order=order, properties=properties
        )
    except TableAlreadyExistsError:
        detail = catalog.load_table(detail_id)
    return history, detail


def crash_at(point: str, fail_at: str | None) -> None:
    """Fault injection for the tests: a simulated crash (an exception) at `fail_at`, or a real one, the
    process killed with SIGKILL, where the environment names the point: `SEQLAKE_KILL_AT=after_detail`
    (its first passage) or `after_detail#2` (its second: inside the second batch)."""
    kill_point(point)
    if fail_at == point:
        raise SimulatedCrash(f"simulated crash at {point}")


def plan_batches(window_rows: dict[int, int], max_rows: int) -> list[list[int]]:
    """Windows (ascending) cut into batches of at most `max_rows` landing rows each; a window larger
    than the bound is a batch of its own. Bounds the memory and the size of each pass."""
    batches: list[list[int]] = []
    current: list[int] = []
    rows = 0
    for window in sorted(window_rows):
        if current and rows + window_rows[window] > max_rows:
            batches.append(current)
            current, rows = [], 0
        current.append(window)
        rows += window_rows[window]
    if current:
        batches.append(current)
    return batches


@dataclass(frozen=True)
class BatchPlan:
    """A batch either engine publishes: its tables, the windows published before, the requested ones
    it publishes (ascending), its run id and the forgets seen before its first read."""

    history: Table
    detail: Table
    published: set[int]
    windows: list[int]
    run_id: str
    point: ReadPoint


def batch_to_publish(config: Config, windows: list[int]) -> BatchPlan | CompactionResult:
    """The plan of a batch of `windows`, or the no-op result when all of them are published already.
    Taken before the batch reads anything: its read point is what the commit's forget check uses."""
    if not windows:
        raise SeqlakeError("no windows to compact")
    history, detail = history_tables(config)
    published = published_windows(history)
    todo = sorted(set(windows) - published)
    if not todo:
        return CompactionResult(max(windows), batch_run_id(sorted(windows)), published=False)
    return BatchPlan(history, detail, published, todo, batch_run_id(todo), read_point(history))


@dataclass(frozen=True)
class MergePlan:
    """A merge either engine writes: the history table, the runs it replaces (oldest first), the union
    of their windows, its run id and the forgets seen before its first read."""

    history: Table
    runs: dict[str, RunRecord]
    windows: list[int]
    run_id: str
    point: ReadPoint


def merge_to_do(config: Config) -> MergePlan | None:
    """The merge the merge policy (`seqlake.pipelines.compaction.merge_policy`) picks, or None when it
    picks none. Shared by both engines.

    The registry lists runs oldest first and a merged run takes the place of the newest ones it
    replaces (it is registered last), so the list stays in age order."""
    history, _ = history_tables(config)
    live = live_runs(history)
    picked = runs_to_merge([record.rows for record in live.values()], policy_of(config))
    if picked == 0:
        return None
    runs = dict(list(live.items())[len(live) - picked :])
    windows = sorted({w for record in runs.values() for w in record.windows})
    return MergePlan(history, runs, windows, merge_run_id(windows), read_point(history))


def replanning(name: str, attempt: Callable[[], CompactionResult]) -> CompactionResult:
    """Run `attempt` (a batch's read, write and commit) again when a forget it did not see committed
    while it ran (ForgetCommitted: nothing of it was published); its next read sees the forget."""
    for _ in range(COMMIT_ATTEMPTS):
        try:
            return attempt()
        except ForgetCommitted as error:
            log.info("%s: %s; planning again", name, error)
    raise ForgetCommitted(f"{name}: forgets kept committing while it ran; run compact again")


def window_lsns_sql(windows: list[int]) -> LandingQuery:
    """Per source partition, the highest LSN of the windows' records in a relation of landing records
    (the range prunes the window partitions, the set keeps it exact)."""
    listed = ", ".join(str(int(w)) for w in windows)
    span = f"window_id >= {int(min(windows))} AND window_id <= {int(max(windows))}"
    return lambda relation: (
        f"SELECT source_partition, max(lsn) FROM {relation} WHERE {span} AND window_id IN ({listed}) "
        "GROUP BY source_partition"
    )


def window_lsns(scan: LandingScan, paths: LandingPaths, windows: list[int]) -> dict[int, int]:
    """Per source partition, the highest LSN of the windows' records (landed or quarantined), read by
    an engine's `scan`. LSNs grow with arrival, so only these windows of the landing tier are read."""
    query = window_lsns_sql(windows)
    highest: dict[int, int] = {}
    for uri in (paths.events, paths.quarantine):
        for partition, lsn in scan(uri, query):
            highest[int(partition)] = max(highest.get(int(partition), -1), int(lsn))
    return highest


def lsn_frontier(history: Table, window_lsn: dict[int, int]) -> Frontier:
    """The frontier once the windows are published: per source partition, the highest LSN of their
    records or of what was published before."""
    return published_frontier(history).advanced(window_lsn)


def publish_batch(
    history: Table,
    windows: list[int],
    files: list,
    own_lsns: dict[int, int],
    event_count: int,
    *,
    fail_at: str | None = None,
    point: ReadPoint | None = None,
) -> CompactionResult:
    """Commit a written batch run (any engine); a lost race retries on the new snapshot, or removes
    the files when the windows were published by someone else. A forget that committed after the
    batch's read (`point`) and names a user the files hold raises ForgetCommitted (files removed):
    the batch plans again (`replanning`)."""
    run_id = batch_run_id(windows)
    row_count = sum(f.facts.row_count for f in files)
    record = RunRecord(run_id, "window" if len(windows) == 1 else "batch", windows, len(files), row_count)
    what = f"publishing windows {windows[0]}..{windows[-1]} to {'.'.join(history.name())}"
    for _ in range(COMMIT_ATTEMPTS):
        properties = {
            "seqlake.window-id": str(windows[-1]),
            "seqlake.frontier": lsn_frontier(history, own_lsns).to_json(),
        }
        if len(windows) > 1:
            properties["seqlake.windows"] = json.dumps(windows)
        try:
            with committing(what, why_safe=PUBLISHED_ONCE):
                commit_runs(history, [(record, files)], snapshot_properties=properties, point=point)
            log.info("published run %s: windows %s, %d rows in %d files", run_id, windows, row_count, len(files))
            break
        except CommitFailed as error:
            if error.published is False:  # else the files may be live: a re-run finds out
                delete_files([f.uri for f in files])
            raise
        except ForgetCommitted:
            delete_files([f.uri for f in files])
            raise
        except WindowsAlreadyPublished:
            # Another job published these windows first: ours becomes a no-op and leaves no file behind.
            log.info("run %s: windows %s were published by another job first", run_id, windows)
            delete_files([f.uri for f in files])
            return CompactionResult(windows[-1], run_id, published=False)
        except RunsChanged:
            log.info("run %s: the history table changed while committing; deciding again", run_id)
            history.refresh()  # another window or a merge committed first: decide again on the new state
    else:
        delete_files([f.uri for f in files])
        raise RunsChanged(f"windows {windows[0]}..{windows[-1]}: the history table kept changing; run compact again")
    crash_at("after_commit", fail_at)
    return CompactionResult(windows[-1], run_id, True, event_count, row_count, len(files), tuple(windows))


def commit_merge(merge: MergePlan, files: list) -> str | None:
    """Commit a written merge run (any engine) in place of the runs it replaces; None, with its files
    removed, when another job published or merged first, or a forget the merge's read did not see
    committed (the rewrite is stale; the next compaction decides)."""
    replaced, run_id = list(merge.runs), merge.run_id
    record = RunRecord(run_id, "merge", merge.windows, len(files), sum(f.facts.row_count for f in files))
    kill_point("merge_written")
    what = f"merging runs {', '.join(replaced)} of {'.'.join(merge.history.name())} into {run_id}"
    try:
        with committing(what, why_safe="a merge replaces its runs whole, and the next compaction merges what is left"):
            commit_runs(merge.history, [(record, files)], replaces=replaced, point=merge.point)
    except CommitFailed as error:
        if error.published is False:
            delete_files([f.uri for f in files])
        raise
    except (RunsChanged, WindowsAlreadyPublished, ForgetCommitted):
        log.info("merge %s of %s: another job committed first; the next compaction decides", run_id, replaced)
        delete_files([f.uri for f in files])
        return None
    log.info("merged runs %s into %s (%d rows)", replaced, run_id, record.rows)
    kill_point("merge_committed")
    return run_id


def delete_files(uris: list[str]) -> None:
    for uri in uris:
        fs, path = resolve_uri(uri)
        with suppress(FileNotFoundError):
            fs.delete_file(path)
