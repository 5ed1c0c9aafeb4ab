"""Each merge operator on Spark, checked against hand-written expected rows (chispa), and the same
definition on DuckDB (`aggregate_window_local`) held to the same rows and to Spark's on random input.

The configurations are the default one with its feature groups replaced by two tiny ones: `clicks`
declares `value` with the operator under test, `views` does not declare `value` (its rows carry a
stray value there anyway, which must not leak) and declares `other`.
"""

from __future__ import annotations

import random
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from chispa import assert_df_equality

from seqlake.core.config import Config, parse_config
from seqlake.engines.duckdb_session import connect
from seqlake.pipelines.compaction.aggregation import aggregation_sql, dedupe_sql
from seqlake.pipelines.compaction.duckdb_aggregate import SORT_COLUMNS, aggregate_window_local
from seqlake.pipelines.landing.schema import landing_schema
from seqlake.tableformat.schema import history_arrow_schema
from tests.conftest import make_config

pytestmark = pytest.mark.spark

WAREHOUSE = Path(tempfile.gettempdir()) / "seqlake-merge-operators" / "warehouse"
T0 = datetime(2026, 1, 5, tzinfo=UTC)


def tiny_config(value_type: str, value_merge: str, views_value_merge: str | None = None) -> Config:
    """Default configuration with two tiny feature groups; `views` declares `value` only if given a merge."""
    data = make_config(WAREHOUSE).model_dump(mode="json")
    views = {"item_id": {"type": "int64"}, "other": {"type": "int32", "merge": "max"}}
    if views_value_merge is not None:
        views["value"] = {"type": value_type, "merge": views_value_merge}
    data["feature_groups"] = {
        "clicks": {
            "item_column": "item_id",
            "columns": {"item_id": {"type": "int64"}, "value": {"type": value_type, "merge": value_merge}},
        },
        "views": {"item_column": "item_id", "columns": views},
    }
    data["tenants"] = {}
    return parse_config(data, "tiny")


def event(event_id, group, item, seconds, lsn, value=None, other=None, *, partition=0, user=1) -> dict:
    """One landing row (window 0)."""
    return {
        "user_id": user,
        "feature_group": group,
        "event_ts": T0 + timedelta(seconds=seconds),
        "source_partition": partition,
        "lsn": lsn,
        "arrival_ts": T0 + timedelta(hours=1),
        "event_id": event_id,
        "item_id": item,
        "value": value,
        "other": other,
        "window_id": 0,
    }


def row(group, item, seconds, lsn, min_lsn, count, value, other=None, *, partition=0, user=1, last=None) -> dict:
    """One expected history row (window 0); `last` is its latest event's seconds (default `seconds`;
    none for a single event's row)."""
    return {
        "user_id": user,
        "feature_group": group,
        "event_ts": T0 + timedelta(seconds=seconds),
        "lsn": lsn,
        "last_event_ts": None if count == 1 else T0 + timedelta(seconds=seconds if last is None else last),
        "min_lsn": min_lsn,
        "source_partition": partition,
        "event_count": count,
        "window_id": 0,
        "item_id": item,
        "value": value,
        "other": other,
    }


# A `views` event in every case: it carries a stray `value`, which stays NULL in history (count: not 0).
STRAY = {"int16": 9, "int32": 9, "int64": 9, "string": "stray"}
VIEWS_ROW = row("views", 10, 0, 50, 50, 1, None, 4)


def views_event(value_type: str) -> dict:
    return event("v1", "views", 10, 0, 50, STRAY[value_type], 4)


# operator -> (value type, landing rows of `clicks`, expected history rows of `clicks`)
CASES = {
    "max": (
        "int32",
        [
            event("a", "clicks", 10, 5, 1, 3),
            event("b", "clicks", 10, 2, 2, None),
            event("c", "clicks", 10, 9, 3, -7),
            event("d", "clicks", 11, 1, 4, None),  # no value at all: NULL
        ],
        [row("clicks", 10, 2, 3, 1, 3, 3, last=9), row("clicks", 11, 1, 4, 4, 1, None)],
    ),
    "min": (
        "int16",
        [
            event("a", "clicks", 10, 0, 1, 3),
            event("b", "clicks", 10, 1, 2, None),
            event("c", "clicks", 10, 2, 3, -2),
            event("d", "clicks", 10, 3, 4, 8, partition=1),  # another source partition: its own row
        ],
        [row("clicks", 10, 0, 3, 1, 3, -2, last=2), row("clicks", 10, 3, 4, 4, 1, 8, partition=1)],
    ),
    "sum": (
        "int64",
        [
            event("a", "clicks", 10, 0, 1, 3),
            event("b", "clicks", 10, 0, 2, None),
            event("c", "clicks", 10, 0, 3, 5_000_000_000),
            event("d", "clicks", 11, 0, 4, None),  # sum of no values is NULL, not 0
            event("e", "clicks", 11, 0, 5, None, user=2),
            event("f", "clicks", 11, 0, 6, 2, user=2),
        ],
        [
            row("clicks", 10, 0, 3, 1, 3, 5_000_000_003),
            row("clicks", 11, 0, 4, 4, 1, None),
            row("clicks", 11, 0, 6, 5, 2, 2, user=2),
        ],
    ),
    "count": (
        "int32",
        [
            event("a", "clicks", 10, 0, 1, 3),
            event("b", "clicks", 10, 0, 2, None),
            event("c", "clicks", 10, 0, 3, 0),
            event("d", "clicks", 11, 0, 4, None),  # the group owns the column: 0, not NULL
        ],
        [row("clicks", 10, 0, 3, 1, 3, 2), row("clicks", 11, 0, 4, 4, 1, 0)],
    ),
    "bit_or": (
        "int32",
        [
            event("a", "clicks", 10, 0, 1, 1),
            event("b", "clicks", 10, 0, 2, None),
            event("c", "clicks", 10, 0, 3, 4),
            event("d", "clicks", 10, 0, 4, 1),
            event("e", "clicks", 11, 0, 5, 32),
            event("f", "clicks", 12, 0, 6, None),
        ],
        [row("clicks", 10, 0, 4, 1, 4, 5), row("clicks", 11, 0, 5, 5, 1, 32), row("clicks", 12, 0, 6, 6, 1, None)],
    ),
    "first": (
        "string",
        [
            event("a", "clicks", 10, 7, 1, None),  # the earliest arrival carries no value: skipped
            event("b", "clicks", 10, 8, 2, "b"),
            event("c", "clicks", 10, 3, 3, "a"),  # earliest event time, later arrival: not first
            event("d", "clicks", 11, 0, 4, ""),  # an empty string is a value
            event("e", "clicks", 11, 0, 5, "z"),
            event("f", "clicks", 12, 0, 6, None),
        ],
        [
            row("clicks", 10, 3, 3, 1, 3, "b", last=8),
            row("clicks", 11, 0, 5, 4, 2, ""),
            row("clicks", 12, 0, 6, 6, 1, None),
        ],
    ),
    "last": (
        "string",
        [
            event("a", "clicks", 10, 0, 1, "a"),
            event("b", "clicks", 10, 9, 2, "b"),
            event("c", "clicks", 10, 1, 3, None),  # the latest arrival carries no value: skipped
            event("d", "clicks", 11, 5, 4, "partition 0"),
            event("e", "clicks", 11, 9, 1, "x", partition=1),  # LSNs count per source partition
            event("f", "clicks", 11, 9, 5, "y", partition=1),
            event("g", "clicks", 11, 0, 6, "z", partition=1),  # latest arrival, earliest event time: last
        ],
        [
            row("clicks", 10, 0, 3, 1, 3, "b", last=9),
            row("clicks", 11, 5, 4, 4, 1, "partition 0"),
            row("clicks", 11, 0, 6, 1, 3, "z", partition=1, last=9),
        ],
    ),
}


def _table(rows: list[dict], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=schema)


def _spark_aggregate(spark, config: Config, landing: pa.Table, *, dedupe: bool = False, published=None):
    spark.createDataFrame(landing).createOrReplaceTempView("_merge_test_landing")
    source = "_merge_test_landing"
    if dedupe:
        events = spark.sql(dedupe_sql(source))
        if published is not None:
            ids = spark.createDataFrame([(i,) for i in published], "event_id STRING")
            events = events.join(ids, "event_id", "left_anti")
        events.select(*landing_schema(config).names).createOrReplaceTempView("_merge_test_events")
        source = "_merge_test_events"
    return spark.sql(aggregation_sql(config, source)).select(*history_arrow_schema(config).names)


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by([(name, "ascending") for name in SORT_COLUMNS])


@pytest.mark.parametrize("merge", sorted(CASES))
def test_merge_operator(spark, merge: str) -> None:
    value_type, events, expected_rows = CASES[merge]
    config = tiny_config(value_type, merge)
    landing = _table([*events, views_event(value_type)], landing_schema(config))
    expected = _table([*expected_rows, VIEWS_ROW], history_arrow_schema(config))

    actual = _spark_aggregate(spark, config, landing)
    assert_df_equality(
        actual, spark.createDataFrame(expected), ignore_row_order=True, ignore_nullable=True, ignore_metadata=True
    )
    # The same definition on DuckDB gives the same rows, with the history schema exactly.
    local = aggregate_window_local(config, landing)
    assert local.schema.equals(history_arrow_schema(config), check_metadata=True)
    assert local.to_pylist() == _sorted(expected).to_pylist()


def test_shared_column_merges_with_each_groups_operator(spark) -> None:
    """Two groups declare `value` with different operators: each group's rows use its own."""
    config = tiny_config("int32", "max", views_value_merge="min")
    landing = _table(
        [
            event("a", "clicks", 10, 0, 1, 3),
            event("b", "clicks", 10, 0, 2, 7),
            event("c", "views", 10, 0, 3, 3, 1),
            event("d", "views", 10, 0, 4, 7, None),
        ],
        landing_schema(config),
    )
    expected = _table(
        [row("clicks", 10, 0, 2, 1, 2, 7), row("views", 10, 0, 4, 3, 2, 3, 1)], history_arrow_schema(config)
    )
    actual = _spark_aggregate(spark, config, landing)
    assert_df_equality(
        actual, spark.createDataFrame(expected), ignore_row_order=True, ignore_nullable=True, ignore_metadata=True
    )
    assert aggregate_window_local(config, landing).to_pylist() == _sorted(expected).to_pylist()


def test_overflow_fails_on_both_engines(spark) -> None:
    """An int32 sum beyond the column type fails the plain definition (ANSI CAST) on Spark and on
    DuckDB, never NULL; the rows compaction publishes leave the group out (it is quarantined)."""
    config = tiny_config("int32", "sum")
    landing = _table(
        [event("a", "clicks", 10, 0, 1, 2**31 - 1), event("b", "clicks", 10, 0, 2, 1)], landing_schema(config)
    )
    with pytest.raises(Exception, match="CAST_OVERFLOW"):
        _spark_aggregate(spark, config, landing).collect()
    with connect(extensions=()) as con, pytest.raises(duckdb.ConversionException, match="out of range"):
        con.register("events", landing)
        con.execute(aggregation_sql(config, "events", "duckdb")).fetchall()
    assert aggregate_window_local(config, landing).num_rows == 0


# -- Spark / DuckDB parity on random windows of the default configuration ---------------------------


def _random_value(rng: random.Random, kind: str):
    if rng.random() < 0.3:
        return None
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "string":
        return rng.choice(["", "a", "b", "ab", "é", "zz"])
    if kind in ("float32", "float64"):
        return rng.choice([0.5, -1.25, 3.0, 1e6, 7.75])
    return rng.randint(-1000, 1000)


def random_landing(config: Config, seed: int, events: int = 60) -> list[dict]:
    """A window's landing rows: few users and items, retransmissions, nulls, two source partitions."""
    rng = random.Random(seed)
    groups = sorted(config.feature_groups)
    distinct = []
    for i in range(events):
        group = rng.choice(groups)
        spec = config.feature_groups[group]
        base: dict = {  # a landing row: values of every column type
            "user_id": rng.randint(1, 3),
            "feature_group": group,
            "event_ts": T0 + timedelta(seconds=rng.randint(0, 30)),
            "source_partition": rng.randint(0, 1),
            "event_id": f"e{i}",
        }
        for column, kind in config.column_types().items():
            if column == spec.item_column:
                base[column] = rng.randint(1, 4)
            else:
                base[column] = _random_value(rng, kind) if column in spec.columns or rng.random() < 0.2 else None
        distinct.append(base)
    arrivals = distinct + rng.choices(distinct, k=events // 5)
    rng.shuffle(arrivals)
    next_lsn = {0: 1000, 1: 1000}
    rows = []
    for position, base in enumerate(arrivals):
        partition = base["source_partition"]
        rows.append(
            {**base, "lsn": next_lsn[partition], "arrival_ts": T0 + timedelta(seconds=position), "window_id": 7}
        )
        next_lsn[partition] += 1
    return rows


@pytest.mark.parametrize("seed", [1, 2])
def test_spark_and_duckdb_agree_on_random_windows(spark, seed: int) -> None:
    config = make_config(WAREHOUSE)
    rows = random_landing(config, seed)
    landing = _table(rows, landing_schema(config))
    published = sorted({r["event_id"] for r in rows if r["event_id"].endswith("3")}) if seed == 2 else None

    spark_rows = _spark_aggregate(spark, config, landing, dedupe=True, published=published).toArrow()
    spark_rows = _sorted(spark_rows.cast(history_arrow_schema(config)))
    ids = None if published is None else pa.array(published, pa.string())
    local = aggregate_window_local(config, landing, ids)

    assert local.num_rows > 10
    assert sum(local["event_count"].to_pylist()) == len({r["event_id"] for r in rows} - set(published or ()))
    assert local.schema.equals(history_arrow_schema(config), check_metadata=True)
    assert spark_rows.to_pylist() == local.to_pylist()
