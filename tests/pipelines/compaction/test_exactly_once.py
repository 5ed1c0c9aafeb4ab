"""Exactly once: each event is counted once in history whatever jobs are killed, retried, raced or
replayed; a published window is never rewritten, not even by events that arrive after it closed.

One small generated stream (3 arrival windows, duplicates, very late and malformed records) is landed
in a raw source table and ingested once (in-process; the replay test ingests it again on Spark) into a
landing tier of this module. The clean reference run is built incrementally, as a live system would:
window 1 arrives, is ingested and published, then the rest arrives (with very late events of window 1)
and is published. Every other scenario starts from fresh history tables on the same landing tier and
must end with the same history, byte for byte in content.
"""

from __future__ import annotations

import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from seqlake.core.config import Config, GeneratorSpec
from seqlake.core.errors import SimulatedCrash
from seqlake.core.windows import window_ids
from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.engines.duckdb_session import connect as duckdb_connect
from seqlake.pipelines.compaction.plan import CRASH_POINTS, CompactionResult, history_tables
from seqlake.pipelines.compaction.spark import compact_window
from seqlake.pipelines.demo.full import reset_demo_tables
from seqlake.pipelines.demo.generator import EventGenerator, GeneratorStats
from seqlake.pipelines.ingest import plan as ingest_plan
from seqlake.pipelines.ingest import spark as ingest_module
from seqlake.pipelines.ingest.duckdb import ingest_source_in_process
from seqlake.pipelines.ingest.raw_source import create_raw_table, land_raw_records
from seqlake.pipelines.ingest.spark import ingest_source
from seqlake.pipelines.landing.tables import LandingPaths
from seqlake.pipelines.landing.windows import closed_windows
from seqlake.pipelines.tables import DETAIL, HISTORY
from seqlake.tableformat.checksum import table_checksum
from seqlake.tableformat.fsck import fsck_table
from seqlake.tableformat.registry import files_of_runs, live_runs
from seqlake.tableformat.schema import KEY_COLUMNS
from tests.snapshots import current_snapshot, sequence_number, snapshot_by_id, summary

pytestmark = pytest.mark.spark

RAW = "raw_exactly_once"
GENERATOR = {
    "users": 60,
    "heavy_users": 1,
    "max_events": 2000,
    "windows": 3,
    "duplicate_share": 0.03,  # enough retransmissions that some cross into a later window
    "very_late_share": 0.03,
    "malformed_share": 0.01,
}


@dataclass
class Stream:
    config: Config
    paths: LandingPaths
    stats: GeneratorStats
    windows: list[int]  # arrival windows, in order
    raw_snapshots: int
    ingested: list  # IngestResult of each ingest round
    landing_events: int
    landing_quarantine: int
    reference_checksum: str
    reference_rows: pa.Table  # every history row of the clean run, sorted by key
    reference_detail_events: int
    reference_fsck_rows: int
    # The first window's published run, right after publication and at the end of the clean run.
    first_run_before: dict
    first_run_after: dict
    first_snapshot_id: int
    snapshots_after_first: list[dict]
    very_late: dict[str, int]  # event id -> arrival window, of events of window 1 first delivered later
    late_copies: set[str]  # event ids of window 1 events delivered in window 1 and again later
    detail_windows: dict[str, int]  # event id -> window whose detail holds it, in the clean run
    very_late_rows: pa.Table  # history rows of later windows whose event time lies in the first window


# -- helpers -----------------------------------------------------------------------------------


def drop_history(config: Config) -> None:
    """Fresh history and detail tables: purge them and remove their folders (orphans included)."""
    catalog = open_catalog(config)
    for name in (HISTORY, DETAIL):
        identifier = table_identifier(config, name)
        if catalog.table_exists(identifier):
            location = catalog.load_table(identifier).location()
            catalog.purge_table(identifier)
            shutil.rmtree(location.removeprefix("file://"), ignore_errors=True)


def history_rows(config: Config) -> pa.Table:
    history, _ = history_tables(config)
    rows = history.refresh().scan().to_arrow()
    return rows.sort_by([(k, "ascending") for k in KEY_COLUMNS])


def checksum(rows: pa.Table) -> str:
    return table_checksum(rows, rows.schema)


def detail_event_ids(config: Config) -> pa.Array:
    _, detail = history_tables(config)
    return detail.refresh().scan(selected_fields=("event_id", "window_id")).to_arrow()


def run_state(config: Config, run_id: str) -> dict:
    """What makes up a published run: its record and its live files (path, size, rows)."""
    history, _ = history_tables(config)
    history.refresh()
    files = sorted((f.file_path, f.file_size_in_bytes, f.record_count) for f in files_of_runs(history, {run_id}))
    return {"record": live_runs(history)[run_id], "files": files}


def files_on_disk(config: Config) -> set[str]:
    history, _ = history_tables(config)
    root = Path(history.location().removeprefix("file://")) / "data"
    return {f"file://{p}" for p in root.rglob("*.parquet")}  # as Iceberg spells paths: "=" not escaped


def live_files(config: Config) -> set[str]:
    history, _ = history_tables(config)
    return {t.file.file_path for t in history.refresh().scan().plan_files()}


def delta_rows(path: str, order: tuple[str, ...] = ("source_partition", "lsn")) -> pa.Table:
    with duckdb_connect() as con:
        rows = con.execute(f"SELECT * FROM delta_scan(?) ORDER BY {', '.join(order)}", [path]).arrow()
    return rows.read_all() if hasattr(rows, "read_all") else rows


def compact_all(spark, stream: Stream) -> list[CompactionResult]:
    return [compact_window(spark, stream.config, stream.paths, w) for w in stream.windows]


def assert_exactly_once(stream: Stream) -> None:
    """History equals the clean run's, counts every event once, and passes fsck."""
    rows = history_rows(stream.config)
    assert pc.sum(rows["event_count"]).as_py() == stream.stats.events
    assert checksum(rows) == stream.reference_checksum
    detail = detail_event_ids(stream.config)
    assert detail.num_rows == stream.stats.events == len(set(detail["event_id"].to_pylist()))
    history, _ = history_tables(stream.config)
    report = fsck_table(history.refresh())
    assert report.rows == rows.num_rows
    assert sorted(live_runs(history)) == sorted(f"w{w}" for w in stream.windows)


# -- the stream and the clean reference run ------------------------------------------------------


@pytest.fixture(scope="module")
def stream(spark, lake_config) -> Stream:
    spec = GeneratorSpec.model_validate({**lake_config.generator.model_dump(), **GENERATOR})
    # Two buckets: every run still has several files with disjoint users, and Spark has less to do.
    layout = lake_config.layout.model_copy(update={"bucket_count": 2})
    config = lake_config.model_copy(update={"generator": spec, "layout": layout})
    reset_demo_tables(config)
    drop_history(config)
    root = config.warehouse_path() / "landing_exactly_once"
    shutil.rmtree(root, ignore_errors=True)
    paths = LandingPaths(events=f"{root.as_uri()}/events", quarantine=f"{root.as_uri()}/quarantine")

    generator = EventGenerator(config)
    records = pa.Table.from_batches(list(generator.batches()))
    stats = generator.stats
    arrival = window_ids(records["arrival_ts"], config.layout.window_seconds)
    windows = sorted(set(arrival.to_pylist()))
    assert len(windows) == spec.windows
    first = windows[0]
    in_first = pc.equal(arrival, first)

    catalog = open_catalog(config)
    raw = create_raw_table(catalog, table_identifier(config, RAW), replace=True)
    seconds = config.layout.window_seconds

    # Window 1 arrives, is ingested and closes.
    land_raw_records(raw, records.filter(in_first).to_batches(), window_seconds=seconds)
    ingested = [ingest_source_in_process(config, RAW, paths)]
    assert compact_window(spark, config, paths, first).published
    history, _ = history_tables(config)
    first_snapshot_id = current_snapshot(history.refresh()).snapshot_id
    first_run_before = run_state(config, f"w{first}")

    # The rest arrives, with very late events of window 1, and closes.
    land_raw_records(raw, records.filter(pc.invert(in_first)).to_batches(), window_seconds=seconds)
    ingested.append(ingest_source_in_process(config, RAW, paths))
    assert closed_windows(paths, end_of_stream=True) == windows
    results = [compact_window(spark, config, paths, w) for w in windows[1:]]
    assert all(r.published for r in results)

    rows = history_rows(config)
    history.refresh()
    first_sequence = sequence_number(snapshot_by_id(history, first_snapshot_id))
    after = [s for s in history.snapshots() if sequence_number(s) > first_sequence]
    landing = delta_rows(paths.events)
    window_start_us = first * seconds * 1_000_000
    window_end_us = window_start_us + seconds * 1_000_000
    event_us = landing["event_ts"].cast(pa.int64())
    of_first = landing.filter(pc.less(event_us, window_end_us))  # events whose event time is in window 1
    arrivals: dict[str, set[int]] = {}
    for event_id, window in zip(of_first["event_id"].to_pylist(), of_first["window_id"].to_pylist(), strict=True):
        arrivals.setdefault(event_id, set()).add(window)
    detail = detail_event_ids(config)
    history_us = rows["event_ts"].cast(pa.int64())
    return Stream(
        config=config,
        paths=paths,
        stats=stats,
        windows=windows,
        raw_snapshots=len(raw.refresh().snapshots()),
        ingested=ingested,
        landing_events=landing.num_rows,
        landing_quarantine=delta_rows(paths.quarantine).num_rows,
        reference_checksum=checksum(rows),
        reference_rows=rows,
        reference_detail_events=detail.num_rows,
        reference_fsck_rows=fsck_table(history).rows,
        first_run_before=first_run_before,
        first_run_after=run_state(config, f"w{first}"),
        first_snapshot_id=first_snapshot_id,
        snapshots_after_first=[
            {"operation": summary(s).operation.value, **summary(s).additional_properties} for s in after
        ],
        very_late={e: min(w) for e, w in arrivals.items() if first not in w},
        late_copies={e for e, w in arrivals.items() if first in w and len(w) > 1},
        detail_windows=dict(zip(detail["event_id"].to_pylist(), detail["window_id"].to_pylist(), strict=True)),
        very_late_rows=rows.filter(pc.and_(pc.greater(rows["window_id"], first), pc.less(history_us, window_end_us))),
    )


def test_clean_run_counts_every_event_once(stream):
    stats = stream.stats
    assert sum(r.records for r in stream.ingested) == stats.records
    assert sum(r.landed for r in stream.ingested) == stream.landing_events == stats.events + stats.duplicates
    quarantined = sum((r.quarantined for r in stream.ingested), start=type(stream.ingested[0].quarantined)())
    assert dict(quarantined) == stats.malformed
    assert stream.landing_quarantine == sum(stats.malformed.values())
    assert stats.duplicates > 0 and stats.very_late > 0
    assert pc.sum(stream.reference_rows["event_count"]).as_py() == stats.events
    assert stream.reference_detail_events == stats.events
    assert stream.reference_fsck_rows == stream.reference_rows.num_rows


# -- late events ----------------------------------------------------------------------------------


def test_late_events_land_in_their_arrival_window_and_never_rewrite_a_published_run(stream):
    first = stream.windows[0]
    # Very late events exist: first delivered after window 1 closed, event time inside window 1.
    assert len(stream.very_late) >= 10 and stream.late_copies
    # Each is published once, by the window it arrived in; a late copy of an event window 1 already
    # published is not published again.
    assert {e: stream.detail_windows.get(e) for e in stream.very_late} == stream.very_late
    assert {stream.detail_windows.get(e) for e in stream.late_copies} == {first}
    # The rows holding them belong to the later windows' runs...
    assert stream.very_late_rows.num_rows > 0
    assert set(stream.very_late_rows["window_id"].to_pylist()) <= set(stream.windows[1:])
    # ...and window 1's run is exactly as it was published: same record, same files, same sizes.
    assert stream.first_run_after == stream.first_run_before
    # No later commit removed or replaced anything: every one only appended a new window's run.
    assert [s["operation"] for s in stream.snapshots_after_first] == ["append"] * (len(stream.windows) - 1)
    assert [s["seqlake.added-runs"] for s in stream.snapshots_after_first] == [f"w{w}" for w in stream.windows[1:]]
    assert all("seqlake.replaced-runs" not in s for s in stream.snapshots_after_first)
    # Window 1's rows hold none of the very late events: a row's window is the one that published it.
    first_rows = stream.reference_rows.filter(pc.equal(stream.reference_rows["window_id"], first))
    assert first_rows.num_rows == stream.first_run_before["record"].rows


# -- killed and re-run ------------------------------------------------------------------------------


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_killed_compaction_reruns_to_the_clean_result(spark, stream, point):
    config = stream.config
    drop_history(config)
    first, crashed = stream.windows[0], stream.windows[1]
    assert compact_window(spark, config, stream.paths, first).published
    with pytest.raises(SimulatedCrash):
        compact_window(spark, config, stream.paths, crashed, fail_at=point)
    history, _ = history_tables(config)
    published_before_rerun = set(live_runs(history.refresh()))
    if point == "after_commit":
        assert f"w{crashed}" in published_before_rerun
    else:
        # Killed before its commit: nothing of the window is visible, whatever was written.
        assert published_before_rerun == {f"w{first}"}
        if point in ("after_write", "after_detail"):
            assert files_on_disk(config) - live_files(config), "the killed job left no orphan files"

    results = compact_all(spark, stream)  # end of stream: every window is closed, compacted in order
    assert [r.published for r in results] == [False, point != "after_commit", True]
    assert_exactly_once(stream)

    # Re-running a published window is a no-op: nothing published, no new snapshot.
    snapshot = current_snapshot(history.refresh()).snapshot_id
    again = compact_all(spark, stream)
    assert [r.published for r in again] == [False] * len(stream.windows)
    assert current_snapshot(history.refresh()).snapshot_id == snapshot


# -- two jobs racing on one window -------------------------------------------------------------------


def test_two_jobs_racing_on_one_window_publish_it_once(spark, stream, monkeypatch):
    import seqlake.pipelines.compaction.spark_runs as spark_history

    config = stream.config
    drop_history(config)
    window = stream.windows[0]
    # Both jobs get past the "already published?" check and write their files before either
    # commits: the race is certain, not left to the scheduler.
    barrier = threading.Barrier(2, timeout=300)
    write = spark_history.write_run_with_spark

    def write_then_wait(*args, **kwargs):
        files = write(*args, **kwargs)
        barrier.wait()
        return files

    monkeypatch.setattr(spark_history, "write_run_with_spark", write_then_wait)
    results: list = [None, None]

    def job(i: int) -> None:
        try:
            results[i] = compact_window(spark, config, stream.paths, window)
        except BaseException as error:  # noqa: BLE001 - reported below
            results[i] = error
            barrier.abort()

    threads = [threading.Thread(target=job, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(isinstance(r, CompactionResult) for r in results), results
    assert sorted(r.published for r in results) == [False, True]

    run = f"w{window}"
    history, _ = history_tables(config)
    assert list(live_runs(history.refresh())) == [run]
    rows = history_rows(config)
    expected = stream.reference_rows.filter(pc.equal(stream.reference_rows["window_id"], window))
    assert checksum(rows) == checksum(expected)
    fsck_table(history)
    # The loser removed its files; the window's events are in the detail table once.
    assert files_on_disk(config) == live_files(config)
    detail = detail_event_ids(config)
    ids = detail["event_id"].to_pylist()
    assert len(ids) == len(set(ids)) == pc.sum(expected["event_count"]).as_py()


# -- ingest replay -------------------------------------------------------------------------------------


def test_ingest_replay_lands_nothing_twice(spark, stream, monkeypatch):
    config = stream.config
    # A second run over the same source: every snapshot is skipped, the landing tier is unchanged.
    again = ingest_source(spark, config, RAW, stream.paths)
    assert (again.batches, again.skipped, again.records) == (0, stream.raw_snapshots, 0)
    assert delta_rows(stream.paths.events).num_rows == stream.landing_events

    # A job killed between the quarantine append and the landing append of the second snapshot.
    root = config.warehouse_path() / "landing_exactly_once_replay"
    shutil.rmtree(root, ignore_errors=True)
    paths = LandingPaths(events=f"{root.as_uri()}/events", quarantine=f"{root.as_uri()}/quarantine")
    append = ingest_module.append_idempotent
    calls: list[str] = []

    def append_then_die(df, path, app_id, version, *args, **kwargs):
        if len(calls) == 3:  # snapshot 2: quarantine appended, landing not yet
            raise SimulatedCrash("killed between the quarantine and the landing append")
        calls.append(path)
        return append(df, path, app_id, version, *args, **kwargs)

    monkeypatch.setattr(ingest_module, "append_idempotent", append_then_die)
    # This second landing tier replays the source while history already holds its windows; rows of
    # published windows would (rightly) be redirected to the next open window. Replay as the first
    # ingest saw the table, so the result can be compared row for row with the reference landing.
    monkeypatch.setattr(ingest_plan, "current_published_windows", lambda config: set())
    with pytest.raises(SimulatedCrash):
        ingest_source(spark, config, RAW, paths)
    assert calls == [paths.quarantine, paths.events, paths.quarantine]
    monkeypatch.setattr(ingest_module, "append_idempotent", append)

    rerun = ingest_source(spark, config, RAW, paths)
    assert (rerun.batches, rerun.skipped) == (stream.raw_snapshots - 1, 1)
    # Exactly the rows of the uninterrupted ingest: nothing lost, nothing twice.
    for mine, reference in ((paths.events, stream.paths.events), (paths.quarantine, stream.paths.quarantine)):
        assert checksum(delta_rows(mine)) == checksum(delta_rows(reference))
    assert delta_rows(paths.events).num_rows == stream.stats.events + stream.stats.duplicates
    assert delta_rows(paths.quarantine).num_rows == sum(stream.stats.malformed.values())

    third = ingest_source(spark, config, RAW, paths)
    assert (third.batches, third.skipped) == (0, stream.raw_snapshots)
    assert delta_rows(paths.events).num_rows == stream.stats.events + stream.stats.duplicates
    assert third.landed == 0
