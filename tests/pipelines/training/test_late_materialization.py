"""Versioned late materialization: what a training sample rebuilds is exactly what inference saw.

The two worked examples of the brief run through the real parts: landing rows in Delta, window
compaction on Spark, captures against the online view, pointers in an Iceberg training table, and
reconstruction on Arrow and on Spark.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from functools import partial

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from seqlake.core.config import DEFAULT_CONFIG_PATH, parse_config
from seqlake.engines.catalog import spark_name
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.compaction.spark import compact_window
from seqlake.pipelines.demo.full import reset_demo_tables
from seqlake.pipelines.landing.schema import landing_schema
from seqlake.pipelines.landing.tables import append_idempotent, landing_paths
from seqlake.pipelines.tables import HISTORY, load_existing_table
from seqlake.pipelines.training.capture.online_view import ViewSnapshot
from seqlake.pipelines.training.capture.pointers import Request, capture_requests, fat_rows, training_rows
from seqlake.pipelines.training.rebuild.duckdb import Reconstruction, sample_batches
from seqlake.pipelines.training.rebuild.plan import Mode
from seqlake.pipelines.training.rebuild.prefetch import PrefetchingIterator
from seqlake.pipelines.training.rebuild.samples import write_arrow_samples
from seqlake.pipelines.training.rebuild.spark import (
    rebuild_plan,
    reconstruct_with_spark,
    samples_files,
    write_spark_samples,
)
from seqlake.pipelines.training.sequence import Tenant
from seqlake.pipelines.training.tables import (
    QUARANTINE,
    QUARANTINE_SCHEMA,
    all_table_names,
    create_bucketed_table,
    drop_tables,
    fatrow_table_name,
    samples_table_name,
    sequence_table_schema,
    training_schema,
    training_table_name,
)
from seqlake.tableformat.frontier import Frontier
from seqlake.tableformat.reader import HistoryReader
from seqlake.tableformat.registry import commit_file_rewrite, history_file_uri, live_runs, run_id_of_path
from seqlake.tableformat.run_writer import write_run
from seqlake.tableformat.schema import history_arrow_schema

pytestmark = pytest.mark.spark

USER = 4242
T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
WINDOW = int(T0.timestamp()) // 3600  # the processing window everything first arrives in
APP = "test-late-materialization"


def example_config(warehouse, top_k: int, fragment: int):
    """The default configuration with one tenant `example`: engagement items and watch time."""
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    data["warehouse"] = {**data["warehouse"], "path": str(warehouse), "catalog_uri": None}
    data["tenants"] = {
        "example": {"feature_groups": ["engagement"], "columns": ["item_id", "watch_time_ms"], "max_length": top_k}
    }
    data["training"] = {**data["training"], "fragment_events": fragment}
    return parse_config(data, "test")


def land(spark, config, version: int, events: list[dict]) -> None:
    """Append landing rows (one Delta commit), as ingest would for one source batch."""
    schema = landing_schema(config)
    rows = []
    for e in events:
        row = dict.fromkeys(schema.names)
        row.update(
            user_id=USER,
            feature_group="engagement",
            source_partition=0,
            event_id=f"e{e['lsn']}",
            window_id=e.get("window", WINDOW),
            arrival_ts=T0 + timedelta(minutes=e["lsn"]),
        )
        row.update({k: v for k, v in e.items() if k != "window"})
        rows.append(row)
    table = pa.Table.from_pylist(rows, schema=schema)
    append_idempotent(spark.createDataFrame(table), landing_paths(config).events, APP, version)


def event(minute: int, lsn: int, item: int, watch: int = 1000, window: int = WINDOW) -> dict:
    return {
        "event_ts": T0 + timedelta(minutes=minute),
        "lsn": lsn,
        "item_id": item,
        "watch_time_ms": watch,
        "window": window,
    }


def fresh_lake(spark, lake_config, top_k: int, fragment: int):
    config = example_config(lake_config.warehouse_path(), top_k, fragment)
    reset_demo_tables(config)
    drop_tables(config, all_table_names([Tenant(config, "example")]))
    return config, Tenant(config, "example")


def capture_now(config, tenant, request_id: str = "r1"):
    """Capture one request against the online view as it is now, and log it like inference does."""
    history, detail = history_tables(config)
    with ViewSnapshot(config, history, detail, landing_paths(config)) as view:
        request = Request(request_id, USER, view.now or T0, True, 5000, "feed", 10)
        [capture] = capture_requests(view, HistoryReader(history), tenant, [request], config.training.fragment_events)
    create_bucketed_table(config, training_table_name(tenant), training_schema(tenant)).append(
        training_rows([capture], tenant)
    )
    create_bucketed_table(config, fatrow_table_name(tenant), sequence_table_schema(tenant)).append(
        fat_rows([capture], tenant)
    )
    return capture


def replay(config, tenant, mode: Mode):
    history, detail = history_tables(config)
    training = load_existing_table(config, training_table_name(tenant))
    [batch] = list(Reconstruction(config, tenant, training, history, detail, mode=mode).batches())
    return batch


def minutes(sequence: pa.Table) -> list[int]:
    return [int((ts - T0).total_seconds() // 60) for ts in sequence["event_ts"].to_pylist()]


def out_of_order_example(spark, lake_config):
    """Events at times 0..8 arrive with LSNs a,b,c,d,h,i,e,f,g: 4 and 5 arrive late. Inference has
    seen up to g and uses the newest 5 with a fragment of 3."""
    config, tenant = fresh_lake(spark, lake_config, top_k=5, fragment=3)
    on_time = [(0, 1), (1, 2), (2, 3), (3, 4), (6, 5), (7, 6), (8, 7)]  # (event time, LSN a..g)
    land(spark, config, 1, [event(m, lsn, item=100 + m) for m, lsn in on_time])
    compact_window(spark, config, landing_paths(config), WINDOW)
    capture = capture_now(config, tenant)
    late = [(4, 8), (5, 9)]  # LSNs h, i, in the next window
    land(spark, config, 2, [event(m, lsn, item=100 + m, window=WINDOW + 1) for m, lsn in late])
    compact_window(spark, config, landing_paths(config), WINDOW + 1)
    return config, tenant, capture


def test_out_of_order_arrivals_replay_what_inference_saw(spark, lake_config):
    config, tenant, capture = out_of_order_example(spark, lake_config)
    assert minutes(capture.sequence) == [2, 3, 6, 7, 8]
    assert minutes(capture.fragment) == [6, 7, 8]
    assert (capture.pointer["range_start"], capture.pointer["range_end"]) == (
        T0 + timedelta(minutes=2),
        T0 + timedelta(minutes=8),
    )
    assert capture.pointer["lsn_bound"] == Frontier({0: 7})

    time_only = replay(config, tenant, "time")
    assert sample_minutes(time_only.assembled) == [2, 3, 4, 5, 6, 7, 8]
    assert time_only.samples.num_rows == 0
    assert time_only.quarantined["reason"].to_pylist() == ["length 7 != captured 5"]

    exact = replay(config, tenant, "lsn")
    assert exact.quarantined.num_rows == 0
    assert sample_minutes(exact.samples) == [2, 3, 6, 7, 8]
    assert exact.samples.column("seq_item_id")[0].as_py() == [102, 103, 106, 107, 108]

    # Spark rebuilds the same sequence: one task per bucket runs the in-process rebuild.
    job = reconstruct_with_spark(spark, config, tenant, "lsn")
    rows = job.collect()
    assert [(r["ok"], r["seq_item_id"]) for r in rows] == [(True, [102, 103, 106, 107, 108])]
    plan = job._jdf.queryExecution().executedPlan()
    assert exchanges(plan) == []  # nothing is shuffled, history rows least of all
    nodes = plan_nodes(plan)
    # A range of bucket numbers, then Python on Arrow batches: no scan of history or pointers by Spark
    # (a task reads its bucket's files), no join, no window, no aggregation, no Python per row.
    assert set(nodes) <= {"RangeExec", "MapInArrowExec", "WholeStageCodegenExec", "InputAdapter"}, nodes
    assert {"RangeExec", "MapInArrowExec"} <= set(nodes), nodes
    assert f"BatchScan {spark_name(config, HISTORY)}" not in plan.toString()
    # The samples job's stage is the same, its tasks writing their bucket's files.
    samples = create_bucketed_table(config, samples_table_name(tenant), sequence_table_schema(tenant))
    stage = samples_files(spark, rebuild_plan(config, tenant), samples)._jdf.queryExecution().executedPlan()
    assert exchanges(stage) == [] and {"RangeExec", "MapInArrowExec"} <= set(plan_nodes(stage))
    assert set(plan_nodes(stage)) <= {"RangeExec", "MapInArrowExec", "WholeStageCodegenExec", "InputAdapter"}


def test_a_value_changed_after_the_bound_is_rebuilt_from_detail(spark, lake_config):
    """Watch time of one item is 2 at LSN v1 and 5 at v2; history keeps max = 5. A replay bounded
    by v1 must yield 2."""
    config, tenant = fresh_lake(spark, lake_config, top_k=10, fragment=0)
    land(spark, config, 1, [event(0, 1, item=7, watch=2), event(1, 2, item=8, watch=9)])
    capture = capture_now(config, tenant)  # the window is still open: the online view aggregates landing
    assert capture.sequence["watch_time_ms"].to_pylist() == [2, 9]
    land(spark, config, 2, [event(3, 3, item=7, watch=5)])
    compact_window(spark, config, landing_paths(config), WINDOW)

    history = HistoryReader(history_tables(config)[0]).read_user(
        USER, columns=["item_id", "watch_time_ms", "min_lsn", "lsn"]
    )
    assert history.to_pylist()[0] == {"item_id": 7, "watch_time_ms": 5, "min_lsn": 1, "lsn": 3}

    exact = replay(config, tenant, "lsn")
    assert exact.quarantined.num_rows == 0
    assert exact.samples.column("seq_watch_time_ms")[0].as_py() == [2, 9]
    time_only = replay(config, tenant, "time")
    assert time_only.assembled.column("seq_watch_time_ms")[0].as_py() == [5, 9]
    assert time_only.quarantined["reason"].to_pylist() == ["checksum mismatch"]
    [row] = reconstruct_with_spark(spark, config, tenant, "lsn").collect()
    assert row["ok"] and row["seq_watch_time_ms"] == [2, 9]

    # The sample job replaces its output: run twice, it holds the one verified sample once.
    for _ in range(2):
        result = write_arrow_samples(config, tenant, "lsn")
        assert (result.samples, result.quarantined, result.matched) == (1, 0, 1)
    samples = load_existing_table(config, samples_table_name(tenant)).scan().to_arrow()
    assert samples["seq_watch_time_ms"].to_pylist() == [[2, 9]]

    # The streamed iterator yields the same sample as Arrow record batches.
    history, detail = history_tables(config)
    training = load_existing_table(config, training_table_name(tenant))
    with sample_batches(Reconstruction(config, tenant, training, history, detail)) as batches:
        streamed = [row for batch in batches for row in batch.to_pylist()]
    assert [row["seq_watch_time_ms"] for row in streamed] == [[2, 9]]


def test_corrupted_history_under_a_capture_is_quarantined(spark, lake_config):
    config, tenant, _ = out_of_order_example(spark, lake_config)
    history, _ = history_tables(config)
    # Change one stored watch time of a row the rebuild reads from history (item 103 at time 3; the
    # rows at 6..8 come from the captured fragment), in a commit that rewrites its file: the table
    # stays valid, its content is not what the capture saw. (A file replaced on storage behind the
    # table's back is refused by every reader instead: tests/tableformat/test_replaced_files.py.)
    uris = set(HistoryReader(history).files_for_user(USER))
    for data_file in (t.file for t in history.scan().plan_files() if t.file.file_path in uris):
        table = pq.read_table(data_file.file_path.removeprefix("file://").removeprefix("file:"))
        if 103 in table["item_id"].to_pylist():
            watch = table["watch_time_ms"].to_pylist()
            watch[table["item_id"].to_pylist().index(103)] += 1
            column = table.schema.get_field_index("watch_time_ms")
            table = table.set_column(column, table.schema.field(column), pa.array(watch, pa.int32()))
            run_id = run_id_of_path(data_file.file_path)
            schema = history_arrow_schema(config, history.schema())
            written = write_run(
                table.cast(schema).to_batches(),
                file_uri=partial(history_file_uri, history.location(), run_id, attempt="changed"),
                schema=schema,
                run_id=run_id,
                bucket_count=config.layout.bucket_count,
                group_order=list(config.feature_groups),
            )
            commit_file_rewrite(history, live_runs(history), [data_file], written)
            break
    else:
        pytest.fail("no history file holds the captured item")

    # A row an earlier release quarantined under the in-process engine's former name, arrow: the
    # engine's next run replaces it like its own.
    former = {"tenant": tenant.name, "request_id": "r1", "user_id": USER, "engine": "arrow/lsn", "reason": "old"}
    former |= {"expected_checksum": "a", "actual_checksum": "b", "expected_length": 1, "actual_length": 1}
    create_bucketed_table(config, QUARANTINE, QUARANTINE_SCHEMA).append(
        pa.Table.from_pylist([former], schema=QUARANTINE_SCHEMA)
    )
    result = write_arrow_samples(config, tenant, "lsn")
    assert (result.samples, result.quarantined) == (0, 1)
    quarantine = load_existing_table(config, QUARANTINE).scan().to_arrow().to_pylist()
    assert [(q["request_id"], q["reason"], q["engine"]) for q in quarantine] == [
        ("r1", "checksum mismatch", "duckdb/lsn")
    ]
    assert load_existing_table(config, samples_table_name(tenant)).scan().to_arrow().num_rows == 0

    # Spark verifies the same way and quarantines the sample under its own engine name.
    assert write_spark_samples(spark, config, tenant) == (0, 1)
    quarantine = load_existing_table(config, QUARANTINE).scan().to_arrow().to_pylist()
    assert sorted((q["engine"], q["reason"]) for q in quarantine) == [
        ("duckdb/lsn", "checksum mismatch"),
        ("spark/lsn", "checksum mismatch"),
    ]
    assert load_existing_table(config, samples_table_name(tenant)).scan().to_arrow().num_rows == 0


def sample_minutes(samples: pa.Table) -> list[int]:
    return minutes(pa.table({"event_ts": samples.column("seq_event_ts")[0].values}))


def exchanges(plan) -> list[str]:
    """Shuffle and broadcast nodes of an executed Spark plan (AQE stages included)."""
    found = []

    def walk(node) -> None:
        name = node.getClass().getSimpleName()
        if name == "AdaptiveSparkPlanExec":
            return walk(node.executedPlan())
        if name in ("ShuffleQueryStageExec", "BroadcastQueryStageExec") or "Exchange" in name:
            found.append(name)
        if name.endswith("QueryStageExec"):
            return walk(node.plan())
        children = node.children()
        for i in range(children.size()):
            walk(children.apply(i))

    walk(plan)
    return found


def plan_nodes(plan) -> list[str]:
    """The class names of an executed Spark plan's nodes (AQE stages included)."""
    found = []

    def walk(node) -> None:
        name = node.getClass().getSimpleName()
        if name == "AdaptiveSparkPlanExec":
            return walk(node.executedPlan())
        found.append(name)
        if name.endswith("QueryStageExec"):
            return walk(node.plan())
        children = node.children()
        for i in range(children.size()):
            walk(children.apply(i))

    walk(plan)
    return found


def test_prefetching_iterator_reads_ahead_and_surfaces_errors():
    ahead = threading.Event()

    def source():
        yield 1
        yield 2
        ahead.set()  # produced while the consumer still holds the first item
        raise ValueError("broken batch")

    with PrefetchingIterator(source(), depth=2) as batches:
        assert next(batches) == 1
        assert ahead.wait(timeout=60)
        assert next(batches) == 2
        with pytest.raises(ValueError, match="broken batch"):
            next(batches)


def test_capture_reads_the_top_k_not_the_whole_history(tmp_path):
    """A capture of the newest 100 events reads about as much for a 20,000-row history as for a
    2,000-row one: cost follows the Top-K, not the history length."""
    from seqlake.tableformat.io import CountingFileSystem
    from tests.history_data import SMALL_ROW_GROUPS, publish_run, synthetic_history

    config = example_config(tmp_path / "warehouse", top_k=100, fragment=8)
    tenant = Tenant(config, "example")
    short_user, long_user = 1_000_001, 1_000_002
    history, detail = history_tables(config)
    data = synthetic_history(config, {short_user: 2_000, long_user: 20_000})
    publish_run(history, config, data, "w1", policy=SMALL_ROW_GROUPS)
    history.refresh()

    read = {}
    for user in (short_user, long_user):
        fs = CountingFileSystem()
        with ViewSnapshot(config, history, detail, landing_paths(config)) as view:
            request = Request(f"r{user}", user, T0, False, 0, "feed", 10)
            [capture] = capture_requests(view, HistoryReader(history, filesystem=fs), tenant, [request], 8)
        assert capture.pointer["length"] == 100
        read[user] = fs.stats.bytes_read
    whole = CountingFileSystem()
    HistoryReader(history, filesystem=whole).read_user(long_user, columns=list(tenant.read_columns()))
    assert read[long_user] < 2 * read[short_user]
    assert read[long_user] * 5 < whole.stats.bytes_read
