"""Schema evolution through the Spark pipeline: after a feature group gains a column, a column widens
and one is retired in the configuration, ingest refuses the landing tier until `seqlake migrate`
(which changes the Delta landing table on Spark as well as the Iceberg tables); then new events with
the new column and values beyond the old type land and are published, Spark merges old and new
runs, and Spark, DuckDB and seqlake's reader all return the same history, old rows with nulls."""

from __future__ import annotations

import json
from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from seqlake.core.config import Config
from seqlake.core.errors import SchemaError
from seqlake.engines.catalog import spark_name
from seqlake.engines.duckdb_session import lake_cursor
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.compaction.spark import merge_runs_if_needed
from seqlake.pipelines.ingest.raw_source import land_raw_records
from seqlake.pipelines.ingest.spark import ingest_source
from seqlake.pipelines.landing.schema import LANDING
from seqlake.pipelines.maintenance.migrate import migrate
from seqlake.tableformat.reader import HistoryReader
from seqlake.tableformat.registry import live_runs
from seqlake.tableformat.schema import KEY_COLUMNS, history_arrow_schema
from tests.pipelines.compaction.test_publication_races import (
    RAW,
    assert_every_valid_event_once,
    closed_unpublished,
    deliver,
    new_lake,
)
from tests.tableformat.test_durable_state import compact_closed

pytestmark = pytest.mark.spark

BIG = 2**40  # a watch time beyond int32


def evolved(config: Config) -> Config:
    data = config.model_dump()
    columns = data["feature_groups"]["engagement"]["columns"]
    columns["watch_time_ms"]["type"] = "int64"
    del columns["session_id"]
    columns["rating"] = {"type": "int32", "merge": "max", "max_length": None}
    return Config.model_validate(data)


def new_events(lake, config: Config, rows: int = 40) -> pa.Table:
    """Events written after the change: fresh ids, the new column, watch times beyond int32, no
    retired column; they arrive after everything delivered so far, in a new source partition."""
    last = lake.chunks[lake.delivered - 1]
    payloads: list[str] = []
    for record in last.to_pylist():
        if len(payloads) == rows:
            break
        try:
            event = json.loads(record["payload"])
        except ValueError:
            continue
        if not isinstance(event, dict) or event.get("feature_group") != "engagement" or "event_id" not in event:
            continue
        event.pop("session_id", None)
        event.update(event_id=f"v2-{event['event_id']}", rating=len(payloads), watch_time_ms=BIG + len(payloads))
        payloads.append(json.dumps(event))
    arrival = pc.max(last["arrival_ts"]).as_py()
    return pa.table(
        {
            "source_partition": pa.array([77] * len(payloads), pa.int32()),
            "lsn": pa.array(range(len(payloads)), pa.int64()),
            "arrival_ts": pa.array([arrival] * len(payloads), last.schema.field("arrival_ts").type),
            "payload": pa.array(payloads, pa.string()),
        },
        schema=last.schema,
    )


def test_spark_ingests_compacts_and_merges_across_a_migration(spark, lake_config) -> None:
    lake = new_lake(lake_config, max_runs=10)
    deliver(lake, 2)  # landed in-process; Spark ingests after the migration
    compact_closed(lake)
    before = {w for r in live_runs(history_tables(lake.config)[0]).values() for w in r.windows}
    v2 = evolved(lake.config)
    land_raw_records(lake.raw, new_events(lake, v2).to_batches())

    with pytest.raises(SchemaError) as refused:
        ingest_source(spark, v2, RAW, lake.paths)
    assert str(refused.value).startswith(f"{LANDING}: adds rating (int)") and "seqlake migrate" in str(refused.value)

    changed = {d.table.rsplit(".", 1)[-1] for d in migrate(v2, spark=spark, paths=lake.paths)}
    assert changed == {"history", "history_detail", LANDING}
    assert migrate(v2, spark=spark, paths=lake.paths) == []
    lake = replace(lake, config=v2)
    ingest_source(spark, v2, RAW, lake.paths)
    todo = closed_unpublished(lake, end_of_stream=True)
    compact_closed(lake, end_of_stream=True)  # the in-process engine: Spark's own steps follow
    squeezed = v2.model_copy(update={"layout": v2.layout.model_copy(update={"max_runs": 1})})
    merged = merge_runs_if_needed(spark, squeezed)
    history, _ = history_tables(v2)
    assert merged is not None and list(live_runs(history.refresh())) == [merged]
    assert set(live_runs(history)[merged].windows) >= before | set(todo)

    names = history_arrow_schema(v2).names
    order = [*KEY_COLUMNS, "source_partition"]
    by_spark = spark.table(spark_name(v2, "history")).select(*names).toArrow()
    with lake_cursor() as con:
        by_duckdb = con.execute("SELECT * FROM iceberg_scan(?)", [history.metadata_location]).to_arrow_table()
    users = pc.unique(by_duckdb["user_id"]).to_pylist()
    by_reader = pa.concat_tables(HistoryReader(history).read_users(users).values())
    expected = by_duckdb.select(names).sort_by([(k, "ascending") for k in order]).to_pylist()
    for found in (by_spark, by_reader):
        assert found.select(names).sort_by([(k, "ascending") for k in order]).to_pylist() == expected
    rated = by_duckdb.filter(pc.is_valid(by_duckdb["rating"]))
    assert rated.num_rows and pc.min(rated["watch_time_ms"]).as_py() >= BIG  # new rows, new values
    old = by_duckdb.filter(pc.is_in(by_duckdb["window_id"], pa.array(sorted(before), pa.int64())))
    assert old.num_rows and pc.count(old["rating"]).as_py() == 0  # rows from before: null
    assert_every_valid_event_once(lake)
