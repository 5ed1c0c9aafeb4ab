"""Publication under races and any order of jobs: every valid event counted exactly once.

Deterministic races first: a second compaction is run at the worst moment of a first one (between its
file write and its commit), for different windows, the same window, and a merge. Then a property test
draws random interleavings of ingest steps, out-of-order `compact --window`, end-of-stream compaction,
merges, imports of old events and killed compactions, and checks history and detail at the end.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import shutil
import zlib
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.table import Table

from seqlake.core.config import Config, GeneratorSpec
from seqlake.core.errors import SimulatedCrash
from seqlake.core.windows import window_ids
from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.engines.duckdb_session import lake_cursor
from seqlake.pipelines.compaction import spark as compaction
from seqlake.pipelines.compaction import spark_runs as spark_history
from seqlake.pipelines.compaction.duckdb import compact_batch_duckdb
from seqlake.pipelines.compaction.plan import CRASH_POINTS, history_tables
from seqlake.pipelines.compaction.publication_check import publication_findings
from seqlake.pipelines.compaction.spark import compact_batch, compact_window, merge_runs_if_needed
from seqlake.pipelines.demo.generator import EventGenerator
from seqlake.pipelines.ingest.duckdb import ingest_source_in_process
from seqlake.pipelines.ingest.raw_source import create_raw_table, land_raw_records
from seqlake.pipelines.landing.tables import LandingPaths
from seqlake.pipelines.landing.windows import landed_windows
from seqlake.tableformat.fsck import fsck_table
from seqlake.tableformat.registry import live_runs, published_windows

pytestmark = pytest.mark.spark

GENERATOR = {
    "users": 25,
    "heavy_users": 0,
    "max_events": 60,
    "windows": 4,
    "source_partitions": 2,
    "duplicate_share": 0.05,
    "very_late_share": 0.05,
    "malformed_share": 0.01,
}
RAW = "raw"
_lakes = itertools.count()


@dataclass
class Lake:
    config: Config
    paths: LandingPaths
    raw: Table  # the raw source table
    chunks: list[pa.Table]  # the stream's records, one table per arrival window, in order
    delivered: int = 0  # chunks landed in the raw source so far


_lakes_of_test: collections.Counter[str] = collections.Counter()


def _test_seed() -> int:
    """A seed of the running test's own, different for each lake it makes: its data is the same
    whichever worker runs it, after whichever tests."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]
    _lakes_of_test[test] += 1
    return 100 + (zlib.crc32(test.encode()) + _lakes_of_test[test]) % 10_000


def example_seed(*example: object) -> int:
    """A seed of a Hypothesis example's own: its replay (to confirm or shrink a failure) makes the same
    lake, so a failure reproduces instead of being reported as flaky."""
    return 100 + zlib.crc32(repr(example).encode()) % 10_000


def new_lake(lake_config: Config, max_runs: int = 2, seed: int | None = None, **generator) -> Lake:
    """A fresh namespace (raw source, history, detail) and landing tier on the session's warehouse."""
    n = next(_lakes)
    chosen = {**GENERATOR, **generator, "seed": _test_seed() if seed is None else seed}
    spec = GeneratorSpec.model_validate({**lake_config.generator.model_dump(), **chosen})
    layout = lake_config.layout.model_copy(update={"bucket_count": 2, "max_runs": max_runs})
    warehouse = lake_config.warehouse.model_copy(update={"namespace": f"races{n}"})
    config = lake_config.model_copy(update={"generator": spec, "layout": layout, "warehouse": warehouse})
    root = config.warehouse_path() / f"landing_races{n}"
    shutil.rmtree(root, ignore_errors=True)
    paths = LandingPaths(events=f"{root.as_uri()}/events", quarantine=f"{root.as_uri()}/quarantine")
    records = pa.Table.from_batches(list(EventGenerator(config).batches()))
    arrival = window_ids(records["arrival_ts"], config.layout.window_seconds)
    chunks = [records.filter(pc.equal(arrival, w)) for w in sorted(set(arrival.to_pylist()))]
    raw = create_raw_table(open_catalog(config), table_identifier(config, RAW), replace=True)
    return Lake(config, paths, raw, chunks)


def deliver(lake: Lake, count: int = 1) -> None:
    """The next `count` arrival windows of the stream reach the raw source and are ingested (in-process:
    the engines land the same rows, tests/pipelines/ingest/test_ingest_engines.py; compaction is what is under test)."""
    for chunk in lake.chunks[lake.delivered : lake.delivered + count]:
        land_raw_records(lake.raw, chunk.to_batches(), window_seconds=lake.config.layout.window_seconds)
    lake.delivered = min(len(lake.chunks), lake.delivered + count)
    ingest_source_in_process(lake.config, RAW, lake.paths)


def import_old_events(lake: Lake, rows: int = 12) -> None:
    """Events already delivered, copied as new events (new ids) into a new source partition whose
    arrival time is that of the first window: an import of old events."""
    first = lake.chunks[0]
    valid = [r for r in first.to_pylist() if r["payload"].startswith('{"event_id"')][:rows]
    payloads = []
    for r in valid:
        try:
            event = json.loads(r["payload"])
        except ValueError:
            continue
        event["event_id"] = f"imported-{lake.delivered}-{event['event_id']}"
        payloads.append(json.dumps(event))
    partition = 100 + lake.delivered + len(lake.raw.refresh().snapshots())
    batch = pa.table(
        {
            "source_partition": pa.array([partition] * len(payloads), pa.int32()),
            "lsn": pa.array(range(len(payloads)), pa.int64()),
            "arrival_ts": pa.array(
                [first["arrival_ts"][0].as_py()] * len(payloads), first.schema.field("arrival_ts").type
            ),
            "payload": pa.array(payloads, pa.string()),
        },
        schema=first.schema,
    )
    land_raw_records(lake.raw, batch.to_batches())
    ingest_source_in_process(lake.config, RAW, lake.paths)


def closed_unpublished(lake: Lake, end_of_stream: bool = False) -> list[int]:
    history, _ = history_tables(lake.config)
    done = published_windows(history.refresh())
    return [w for w in landed_windows(lake.paths).closed(end_of_stream) if w not in done]


def compact_all(spark, lake: Lake) -> None:
    for window in closed_unpublished(lake, end_of_stream=True):
        compact_window(spark, lake.config, lake.paths, window)
        merge_runs_if_needed(spark, lake.config)


def assert_every_valid_event_once(lake: Lake) -> None:
    with lake_cursor() as con:
        found = con.execute(
            "SELECT count(DISTINCT event_id) FROM delta_scan(?)", [lake.paths.events.removeprefix("file://")]
        ).fetchone()
    assert found is not None  # an aggregate answers one row
    expected = found[0]
    history, detail = history_tables(lake.config)
    rows = history.refresh().scan(selected_fields=("event_count",)).to_arrow()
    assert pc.sum(rows["event_count"]).as_py() == expected
    ids = detail.refresh().scan(selected_fields=("event_id",)).to_arrow()["event_id"].to_pylist()
    assert len(ids) == len(set(ids)) == expected
    assert publication_findings(history, lake.paths) == []
    fsck_table(history)


def referenced_files(lake: Lake) -> set[str]:
    history, _ = history_tables(lake.config)
    history.refresh()
    return {t.file.file_path for s in history.snapshots() for t in history.scan(snapshot_id=s.snapshot_id).plan_files()}


def files_on_disk(lake: Lake) -> set[str]:
    history, _ = history_tables(lake.config)
    return {f"file://{p}" for p in Path(history.location().removeprefix("file://"), "data").rglob("*.parquet")}


def run_before_commit(monkeypatch, action) -> None:
    """Run `action` once, just before the next window publication commits (after files and detail)."""
    original = compaction.window_lsns
    pending = [action]

    def interleaved(*args, **kwargs):
        if pending:
            pending.pop()()
        return original(*args, **kwargs)

    monkeypatch.setattr(compaction, "window_lsns", interleaved)


# -- deterministic races ---------------------------------------------------------------------------


def test_a_publication_that_loses_to_another_window_retries_on_the_new_snapshot(spark, lake_config, monkeypatch):
    lake = new_lake(lake_config, max_runs=10)
    deliver(lake, len(lake.chunks))
    first, second = closed_unpublished(lake, end_of_stream=True)[:2]
    run_before_commit(monkeypatch, lambda: compact_window(spark, lake.config, lake.paths, second))
    result = compact_window(spark, lake.config, lake.paths, first)
    assert result.published
    history, _ = history_tables(lake.config)
    assert {first, second} <= published_windows(history.refresh())
    compact_all(spark, lake)
    assert_every_valid_event_once(lake)
    assert files_on_disk(lake) <= referenced_files(lake)


def test_the_loser_of_a_race_on_one_window_publishes_nothing_and_leaves_no_file(spark, lake_config, monkeypatch):
    lake = new_lake(lake_config, max_runs=10)
    deliver(lake, len(lake.chunks))
    window = closed_unpublished(lake, end_of_stream=True)[0]
    winner: list = []
    run_before_commit(monkeypatch, lambda: winner.append(compact_window(spark, lake.config, lake.paths, window)))
    loser = compact_window(spark, lake.config, lake.paths, window)
    assert winner[0].published and not loser.published
    history, _ = history_tables(lake.config)
    assert list(live_runs(history.refresh())) == [f"w{window}"]
    assert files_on_disk(lake) <= referenced_files(lake)
    compact_all(spark, lake)
    assert_every_valid_event_once(lake)


def test_a_merge_that_loses_to_a_publication_gives_up_and_removes_its_files(spark, lake_config, monkeypatch):
    lake = new_lake(lake_config, max_runs=2)
    deliver(lake, len(lake.chunks))
    windows = closed_unpublished(lake, end_of_stream=True)
    for window in windows[:3]:
        compact_window(spark, lake.config, lake.paths, window)  # 3 runs > max_runs: a merge is due
    original = spark_history.write_run_with_spark

    def publish_during_merge(rows, table, config, run_id):
        files = original(rows, table, config, run_id)
        if run_id.startswith("m"):
            compact_window(spark, lake.config, lake.paths, windows[3])
        return files

    monkeypatch.setattr(spark_history, "write_run_with_spark", publish_during_merge)
    assert merge_runs_if_needed(spark, lake.config) is None
    monkeypatch.setattr(spark_history, "write_run_with_spark", original)
    assert files_on_disk(lake) <= referenced_files(lake)
    assert merge_runs_if_needed(spark, lake.config) is not None
    compact_all(spark, lake)
    assert_every_valid_event_once(lake)


# -- any order of jobs -------------------------------------------------------------------------------

STEPS = st.one_of(
    st.just(("deliver",)),
    st.tuples(st.just("compact"), st.integers(0, 5)),
    st.tuples(st.just("crash"), st.integers(0, 5), st.sampled_from(CRASH_POINTS[:-1])),
    st.just(("end_of_stream",)),
    st.just(("merge",)),
    st.just(("import_old",)),
    st.tuples(st.just("batch"), st.integers(1, 3), st.sampled_from(("spark", "duckdb"))),
)


@settings(max_examples=3, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(steps=st.lists(STEPS, min_size=3, max_size=7))
def test_any_interleaving_counts_every_valid_event_once(spark, lake_config, steps):
    lake = new_lake(lake_config, max_runs=2, seed=example_seed(steps))
    for step in steps:
        if step[0] == "deliver":
            deliver(lake)
        elif step[0] in ("compact", "crash"):
            candidates = closed_unpublished(lake)
            if not candidates:
                continue
            window = candidates[step[1] % len(candidates)]  # any closed window, in any order
            if step[0] == "compact":
                compact_window(spark, lake.config, lake.paths, window)
            else:
                with pytest.raises(SimulatedCrash):
                    compact_window(spark, lake.config, lake.paths, window, fail_at=step[2])
        elif step[0] == "batch":
            # A batch of closed windows, every `stride`-th one: batches with gaps, on either engine.
            batch = closed_unpublished(lake)[:: step[1]]
            if batch and step[2] == "spark":
                compact_batch(spark, lake.config, lake.paths, batch)
            elif batch:
                compact_batch_duckdb(lake.config, lake.paths, batch)
        elif step[0] == "end_of_stream":
            compact_all(spark, lake)
        elif step[0] == "merge":
            merge_runs_if_needed(spark, lake.config)
        elif step[0] == "import_old" and lake.delivered:
            import_old_events(lake)
    deliver(lake, len(lake.chunks))  # the rest of the stream arrives; then everything closes
    # In one DuckDB batch: the drawn steps already run every Spark path (windows, batches, merges,
    # crashes); closing what is left goes through the commit both engines share (plan.publish_batch).
    if left := closed_unpublished(lake, end_of_stream=True):
        compact_batch_duckdb(lake.config, lake.paths, left)
    assert_every_valid_event_once(lake)
