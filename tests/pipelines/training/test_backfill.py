"""Backfills on a real lake: landing in Delta, compaction on Spark, captures, samples, and label
tables of every kind. Arrival semantics give exactly what `seqlake samples` rebuilds for captured
requests; event-time semantics take in the late events, and the leakage report counts them."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from seqlake.engines.catalog import spark_name
from seqlake.jobs.backfill import main as backfill_main
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.compaction.spark import compact_window
from seqlake.pipelines.landing.tables import landing_paths
from seqlake.pipelines.tables import HISTORY, load_existing_table
from seqlake.pipelines.training.backfill.plan import AsOf, write_backfill
from seqlake.pipelines.training.backfill.spark import label_candidates, write_label_pointers, write_spark_backfill
from seqlake.pipelines.training.capture.online_view import ViewSnapshot
from seqlake.pipelines.training.rebuild.samples import write_arrow_samples
from seqlake.pipelines.training.tables import samples_table_name, training_table_name
from tests.pipelines.training.test_late_materialization import (
    USER,
    WINDOW,
    capture_now,
    event,
    fresh_lake,
    land,
    minutes,
)

pytestmark = pytest.mark.spark


def late_arrivals_lake(spark, lake_config):
    """Window W published; W+1 partly landed when a request is captured (at the newest arrival);
    then two events with earlier event times arrive late in W+1, one of them changing an item the
    capture saw (its row is rebuilt from detail), and W+1 is published."""
    config, tenant = fresh_lake(spark, lake_config, top_k=10, fragment=2)
    land(spark, config, 1, [event(m, lsn, item=100 + m) for m, lsn in [(0, 1), (1, 2), (2, 3), (3, 4)]])
    compact_window(spark, config, landing_paths(config), WINDOW)
    land(spark, config, 2, [event(m, lsn, item=100 + m, window=WINDOW + 1) for m, lsn in [(6, 5), (7, 6), (8, 7)]])
    history, detail = history_tables(config)
    with ViewSnapshot(config, history, detail, landing_paths(config)) as view:
        assert view.now is not None  # the capture happens at the newest arrival
    capture = capture_now(config, tenant)
    late = [event(4, 8, item=104, window=WINDOW + 1), event(5, 9, item=106, watch=7, window=WINDOW + 1)]
    land(spark, config, 3, late)
    compact_window(spark, config, landing_paths(config), WINDOW + 1)
    return config, tenant, capture


def test_arrival_semantics_equal_the_samples_of_captured_requests(spark, lake_config, tmp_path, capsys):
    config, tenant, capture = late_arrivals_lake(spark, lake_config)
    result = write_arrow_samples(config, tenant)
    assert (result.samples, result.quarantined) == (1, 0)
    samples = load_existing_table(config, samples_table_name(tenant)).scan().to_arrow()
    # The training table itself is the label table (Iceberg, by name), its request time the ts. The
    # request was captured at the newest arrival and saw it: inclusive arrival is the capture's rule.
    arrival = write_backfill(
        config, training_table_name(tenant), tenant, "arrival", out="bf_arrival", ts_column="request_ts", inclusive=True
    )
    # The report names what is at ts: the event that arrived at it (minute 8), and the one that
    # happened at it (minute 7; it arrived a minute before it, at LSN 6).
    assert arrival.rows == 1 and arrival.leakage.at_label_time == 2
    rows = load_existing_table(config, "bf_arrival").scan().to_arrow()
    sequence_columns = [c for c in samples.column_names if c.startswith("seq_")]
    assert rows.select(sequence_columns).to_pylist() == samples.select(sequence_columns).to_pylist()
    assert rows["request_id"].to_pylist() == ["r1"] and rows["label_click"].to_pylist() == [True]
    assert minutes(pa.table({"event_ts": rows["seq_event_ts"][0].values})) == [0, 1, 2, 3, 6, 7, 8]
    # By default arrival is strict: what arrived before ts, without the event that arrived at it.
    strict = write_backfill(
        config, training_table_name(tenant), tenant, "arrival", out="bf_strict", ts_column="request_ts"
    )
    assert strict.leakage.leaked_events == strict.leakage.at_label_time == 1
    rows = load_existing_table(config, "bf_strict").scan().to_arrow()
    assert minutes(pa.table({"event_ts": rows["seq_event_ts"][0].values})) == [0, 1, 2, 3, 6, 7]

    # Event time takes the late events in: item 104 at minute 4, and item 106, whose row now starts
    # at minute 5 (the late event's time) and ends at minute 6, before ts (minute 7), so it is used
    # as it is. Two late rows per label: leakage of one kind.
    labels = tmp_path / "labels.parquet"
    pq.write_table(
        pa.table({"user_id": [USER, USER], "ts": [capture.request.request_ts] * 2, "clicked": [True, False]}), labels
    )
    out = backfill_main(
        ["--labels", str(labels), "--tenant", tenant.name, "--out", "bf_time"] + _config_args(config, tmp_path)
    )
    assert out == 0
    printed = capsys.readouterr().out
    assert "2 label rows backfilled (event-time, duckdb)" in printed
    assert (
        "leakage: 2 of 2 label rows (100.00%) hold rows known only after their ts: 4 arrived later, "
        "0 arrived or happened at ts, 0 merged events from ts on"
    ) in printed
    by_time = load_existing_table(config, "bf_time").scan().to_arrow()
    assert minutes(pa.table({"event_ts": by_time["seq_event_ts"][0].values})) == [0, 1, 2, 3, 4, 5]
    assert sorted(by_time["clicked"].to_pylist()) == [False, True]

    # Spark: the same rows and the same leakage, from a storage-partitioned join.
    semantics: tuple[tuple[AsOf, bool, str, tuple[int, int]], ...] = (
        ("arrival", True, "bf_arrival", (1, 2)),
        ("arrival", False, "bf_strict", (1, 1)),
        ("event-time", False, "bf_time", (2, 4)),
    )
    for as_of, inclusive, table, leaks in semantics:
        source = training_table_name(tenant) if as_of == "arrival" else labels
        ts = "request_ts" if as_of == "arrival" else "ts"
        count, report = write_spark_backfill(
            spark, config, source, tenant, as_of, out=f"{table}_spark", ts_column=ts, inclusive=inclusive
        )
        expected = load_existing_table(config, table).scan().to_arrow()
        on_spark = load_existing_table(config, f"{table}_spark").scan().to_arrow()
        key = "request_id" if as_of == "arrival" else "clicked"
        assert on_spark.sort_by(key).to_pylist() == expected.sort_by(key).to_pylist(), table
        assert count == expected.num_rows
        assert (report.leaking_rows, report.leaked_events) == leaks

    # The label pointers join history bucket by bucket, and history is read in place. Only rows
    # rebuilt from detail are shuffled: the open window (arrival), or the (label, window) pairs of
    # rows that merged events from ts on (event time; the pairs' keys come from history).
    write_label_pointers(config, labels, tenant, "bf_pointers")
    history = spark_name(config, HISTORY)
    for as_of in ("event-time", "arrival"):
        plan = label_candidates(spark, config, tenant, "bf_pointers", as_of)._jdf.queryExecution()
        scans = scans_below_exchanges(plan.executedPlan())
        of_history = {
            shuffled: [s for s in found if s.startswith(f"BatchScan {history}[")] for shuffled, found in scans.items()
        }
        assert of_history[False], as_of
        if as_of == "arrival":
            assert not of_history[True]


def scans_below_exchanges(plan) -> dict[bool, list[str]]:
    """The batch scans of an executed Spark plan (AQE stages included), by whether a shuffle or
    broadcast lies between them and the root."""
    found: dict[bool, list[str]] = {False: [], True: []}

    def walk(node, shuffled: bool) -> None:
        name = node.getClass().getSimpleName()
        if name == "AdaptiveSparkPlanExec":
            return walk(node.executedPlan(), shuffled)
        shuffled = shuffled or name in ("ShuffleQueryStageExec", "BroadcastQueryStageExec") or "Exchange" in name
        if name.endswith("QueryStageExec"):
            return walk(node.plan(), shuffled)
        if "BatchScan" in name:
            found[shuffled].append(node.simpleString(1000))
        children = node.children()
        for i in range(children.size()):
            walk(children.apply(i), shuffled)

    walk(plan, False)
    return found


def _config_args(config, tmp_path) -> list[str]:
    import yaml

    path = tmp_path / "seqlake.yaml"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    return ["--config", str(path)]
