"""No poison pill at compaction: a group whose merged value does not fit its column is quarantined,
and its window is published without it, on both engines.

Every value lands (each fits its column), but some groups' `sum`s leave int32 (dwell_ms,
impression_count, click_count and quantity, above and below the range). Real Spark ingests them; Spark
and DuckDB each compact the same landing tier into their own namespace. A user checks: every window is
published, history equals the fold of the groups that fit, the compaction quarantine holds exactly the
other groups' events with their reason, detail holds only the published events, and the engines agree;
every page of every file either engine wrote (history, detail, quarantine) carries a checksum.
"""

from __future__ import annotations

import json
import shutil
import warnings
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from seqlake.core.events import RAW_SCHEMA
from seqlake.core.payload import INT_RANGES
from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.pipelines.compaction.duckdb import compact_batch_duckdb
from seqlake.pipelines.compaction.duckdb_aggregate import aggregate_window_local
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.compaction.quarantine import compaction_quarantine_table
from seqlake.pipelines.compaction.spark import compact_batch, compact_window
from seqlake.pipelines.ingest.raw_source import create_raw_table, land_raw_records
from seqlake.pipelines.ingest.spark import ingest_source
from seqlake.pipelines.landing.tables import LandingPaths
from seqlake.pipelines.landing.windows import closed_windows
from seqlake.tableformat.page_checksums import page_checksum_counts
from seqlake.tableformat.schema import KEY_COLUMNS
from tests.pipelines.compaction.test_exactly_once import delta_rows

pytestmark = pytest.mark.spark

RAW = "raw_overflow"
W0 = 491_000
LOW, HIGH = INT_RANGES["int32"]


def event(event_id: str, user: int, group: str, item: int, **columns: object) -> dict:
    keys = {"event_id": event_id, "user_id": user, "feature_group": group, "event_ts": W0 * 3_600_000}
    return keys | {"item_id": item, **columns}


# (window offset, event); one source partition, so one (user, group, item) is one group per window.
EVENTS = [
    (0, event("a1", 7, "engagement", 1, dwell_ms=HIGH, impression_count=1)),
    (0, event("a2", 7, "engagement", 1, dwell_ms=HIGH, impression_count=HIGH)),  # both sums overflow
    (0, event("b1", 7, "engagement", 2, dwell_ms=HIGH)),
    (0, event("b1", 7, "engagement", 2, dwell_ms=HIGH)),  # a retransmission counts once: fits
    (0, event("c1", 8, "search", 3, click_count=HIGH)),
    (0, event("c2", 8, "search", 3, click_count=1)),  # overflow by one
    (0, event("d1", 8, "search", 4, click_count=5)),
    (0, event("d2", 8, "search", 4, click_count=HIGH - 5)),  # exactly the limit: fits
    (1, event("e1", 9, "purchase", 5, quantity=LOW)),
    (1, event("e2", 9, "purchase", 5, quantity=-1, currency="EUR")),  # below the range
    (1, event("f1", 7, "engagement", 1, dwell_ms=1)),  # item 1 again, in a window of its own: fits
]
QUARANTINED = {
    "a1": "aggregate_out_of_range:impression_count,dwell_ms",
    "a2": "aggregate_out_of_range:impression_count,dwell_ms",
    "c1": "aggregate_out_of_range:click_count",
    "c2": "aggregate_out_of_range:click_count",
    "e1": "aggregate_out_of_range:quantity",
    "e2": "aggregate_out_of_range:quantity",
}


def raw_records() -> pa.Table:
    start = datetime.fromtimestamp(W0 * 3600, UTC)
    return pa.Table.from_pylist(
        [
            {
                "source_partition": 0,
                "lsn": lsn,
                "arrival_ts": start + timedelta(hours=offset, seconds=lsn),
                "payload": json.dumps(payload),
            }
            for lsn, (offset, payload) in enumerate(EVENTS)
        ],
        schema=RAW_SCHEMA,
    )


def namespaced(lake_config, namespace: str):
    warehouse = lake_config.warehouse.model_copy(update={"namespace": namespace})
    return lake_config.model_copy(update={"warehouse": warehouse})


@pytest.fixture(scope="module")
def landed(spark, lake_config):
    """The events ingested once into a landing tier of their own: (config, paths, windows)."""
    config = namespaced(lake_config, "overflow_spark")
    root = config.warehouse_path() / "landing_overflow"
    shutil.rmtree(root, ignore_errors=True)
    paths = LandingPaths(events=f"{root.as_uri()}/events", quarantine=f"{root.as_uri()}/quarantine")
    raw = create_raw_table(open_catalog(config), table_identifier(config, RAW), replace=True)
    land_raw_records(raw, raw_records().to_batches(), window_seconds=config.layout.window_seconds)
    ingested = ingest_source(spark, config, RAW, paths)
    assert ingested.landed == len(EVENTS) and not ingested.quarantined  # every value fits its column
    windows = closed_windows(paths, end_of_stream=True)
    assert windows == [W0, W0 + 1]
    return config, paths, windows


def expected_history(config, paths) -> pa.Table:
    """The fold of the landed events outside the quarantined groups, window by window."""
    landing = delta_rows(paths.events)
    valid = landing.filter(pc.invert(pc.is_in(landing["event_id"], pa.array(list(QUARANTINED)))))
    windows = sorted(set(valid["window_id"].to_pylist()))
    folded = pa.concat_tables(
        aggregate_window_local(config, valid.filter(pc.equal(valid["window_id"], w))) for w in windows
    )
    return folded.sort_by([(k, "ascending") for k in KEY_COLUMNS])


def check_published(config, paths, results) -> tuple[pa.Table, pa.Table]:
    assert all(r.published for r in results)
    assert sum(r.quarantined for r in results) == len(QUARANTINED)
    assert sum(r.events for r in results) == len(EVENTS) - 1 - len(QUARANTINED)  # b1 once
    history, detail = history_tables(config)
    got = history.refresh().scan().to_arrow().sort_by([(k, "ascending") for k in KEY_COLUMNS])
    expected = expected_history(config, paths)
    assert got.select(expected.column_names).to_pylist() == expected.to_pylist()
    assert sorted(got.filter(pc.equal(got["feature_group"], "search"))["click_count"].to_pylist()) == [HIGH]

    quarantine = compaction_quarantine_table(config).refresh().scan().to_arrow().sort_by("event_id")
    assert dict(zip(quarantine["event_id"].to_pylist(), quarantine["reason"].to_pylist(), strict=True)) == QUARANTINED
    assert quarantine.filter(pc.equal(quarantine["event_id"], "e2"))["window_id"].to_pylist() == [W0 + 1]
    for table in (history, detail, compaction_quarantine_table(config)):  # every page verifiable on read
        for task in table.refresh().scan().plan_files():
            with pa.OSFile(task.file.file_path.removeprefix("file:")) as handle:  # file:/ or file:///
                pages, with_crc = page_checksum_counts(handle)
            assert pages and with_crc == pages, task.file.file_path
    detail_ids = set(detail.refresh().scan(selected_fields=("event_id",)).to_arrow()["event_id"].to_pylist())
    assert detail_ids == {e["event_id"] for _, e in EVENTS} - set(QUARANTINED)
    return got, quarantine


def test_spark_publishes_every_window_and_quarantines_groups_that_overflow(spark, landed):
    config, paths, windows = landed
    results = [compact_window(spark, config, paths, w) for w in windows]
    got, quarantine = check_published(config, paths, results)
    # Published windows are a no-op: nothing is quarantined twice.
    assert not compact_batch(spark, config, paths, windows).published
    assert compaction_quarantine_table(config).refresh().scan().to_arrow().num_rows == quarantine.num_rows


def test_duckdb_publishes_the_same_history_and_quarantine(spark, landed):
    spark_config, paths, windows = landed
    config = namespaced(spark_config, "overflow_duckdb")
    catalog = open_catalog(config)
    for name in ("history", "history_detail", "compaction_quarantine"):
        if catalog.table_exists(table_identifier(config, name)):
            catalog.purge_table(table_identifier(config, name))
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        results = [compact_batch_duckdb(config, paths, windows)]  # both windows in one batch
    # A first publication replaces nothing, and says nothing about it.
    assert not [w for w in shown if issubclass(w.category, UserWarning)], [str(w.message) for w in shown]
    got, quarantine = check_published(config, paths, results)
    spark_history, _ = history_tables(spark_config)
    from_spark = spark_history.refresh().scan().to_arrow().sort_by([(k, "ascending") for k in KEY_COLUMNS])
    assert got.to_pylist() == from_spark.to_pylist()
    from_spark_quarantine = compaction_quarantine_table(spark_config).scan().to_arrow().sort_by("event_id")
    assert (
        quarantine.select(["event_id", "window_id", "reason"]).to_pylist()
        == from_spark_quarantine.select(["event_id", "window_id", "reason"]).to_pylist()
    )
