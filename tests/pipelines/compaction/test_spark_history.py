"""Spark writes sorted runs with the same layout as Python; every engine reads the same rows."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from pyiceberg.expressions import EqualTo

from seqlake.engines.duckdb_session import lake_cursor
from seqlake.pipelines.compaction.spark_runs import BUCKET, with_bucket, write_run_with_spark
from seqlake.tableformat.bucketing import bucket_of
from seqlake.tableformat.fsck import fsck_table
from seqlake.tableformat.reader import HistoryReader
from seqlake.tableformat.registry import RunRecord, commit_runs
from seqlake.tableformat.schema import KEY_COLUMNS, history_arrow_schema
from tests.history_data import history_table, micros_rows, micros_select, publish_run, synthetic_history

pytestmark = pytest.mark.spark

LENGTHS = {1_000_000 + i: 10 + 29 * i for i in range(60)} | {1_000_005: 6000}


@pytest.fixture(scope="module")
def data(lake_config) -> pa.Table:
    return synthetic_history(lake_config, LENGTHS, seed=11)


def test_spark_bucket_function_matches_seqlake_bucketing(spark, lake_config):
    ids = [0, 1, -1, 34, 1_000_000, 2**40 + 7, -(2**63)]
    df = spark.createDataFrame([(i,) for i in ids], "user_id bigint")
    spark_buckets = [r[BUCKET] for r in with_bucket(df, lake_config).orderBy("user_id").collect()]
    assert spark_buckets == bucket_of(pa.array(sorted(ids), pa.int64()), lake_config.layout.bucket_count).tolist()


def test_spark_written_run_equals_python_written_run(spark, lake_config, data):
    python_table = history_table(lake_config, "history_py")
    python_files = publish_run(python_table, lake_config, data, "w1")

    spark_table = history_table(lake_config, "history_spark")
    shuffled = spark.createDataFrame(data.take(np.random.default_rng(3).permutation(data.num_rows)))
    spark_files = write_run_with_spark(shuffled, spark_table, lake_config, "w1")
    commit_runs(spark_table, [(RunRecord("w1", "window", [0, 0], len(spark_files), data.num_rows), spark_files)])

    # Same buckets, same rows, same key ranges and the same content checksum per file.
    def strip(files):
        return [(f.facts.bucket, f.facts.row_count, f.facts.key_min, f.facts.checksum) for f in files]

    assert strip(spark_files) == strip(python_files)
    assert fsck_table(spark_table).rows == data.num_rows


def test_engines_return_identical_rows_for_a_user(spark, lake_config, data):
    table = history_table(lake_config, "history_engines")
    publish_run(table, lake_config, data, "w1")
    user = 1_000_005
    # Every column, so every encoding the layout uses (delta-packed integers, plain floats and
    # booleans, dictionary strings) is read by each engine's default (vectorized) reader.
    columns = history_arrow_schema(lake_config).names
    order = ", ".join(KEY_COLUMNS)
    # Event times compared as epoch microseconds: engines differ in how they hand out time zones.
    select = micros_select(history_arrow_schema(lake_config), "{ts}")
    rows = micros_rows

    scan = table.scan(row_filter=EqualTo("user_id", user), selected_fields=tuple(columns))
    from_pyiceberg = rows(scan.to_arrow())
    from_reader = rows(HistoryReader(table).read_user(user, columns))
    with lake_cursor() as con:
        cursor = con.execute(
            f"SELECT {select.format(ts='epoch_us')} FROM iceberg_scan(?) WHERE user_id = ? ORDER BY {order}",
            [table.metadata_location, user],
        )
        names = [d[0] for d in cursor.description]
        from_duckdb = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    name = f"{lake_config.warehouse.catalog_name}.{lake_config.warehouse.namespace}.history_engines"
    query = f"SELECT {select.format(ts='unix_micros')} FROM {name} WHERE user_id = {user} ORDER BY {order}"
    from_spark = [r.asDict() for r in spark.sql(query).collect()]
    assert len(from_pyiceberg) == LENGTHS[user]
    assert from_reader == from_pyiceberg
    assert from_duckdb == from_pyiceberg
    assert from_spark == from_pyiceberg


def test_spark_reader_applies_the_same_selections(spark, lake_config, data):
    from datetime import timedelta

    from seqlake.pipelines.reads.spark import history_df, order_sequence
    from seqlake.tableformat.frontier import Frontier
    from seqlake.tableformat.reader import Selection
    from tests.history_data import BASE_TS_US

    table = history_table(lake_config, "history")
    publish_run(table, lake_config, data, "w1")
    base = pa.scalar(BASE_TS_US, pa.timestamp("us", tz="UTC")).as_py()
    users = [1_000_005, 1_000_010, 1_000_033]
    for selection in (
        Selection(columns=("item_id",), feature_groups=("engagement",), top_k=25),
        Selection(columns=("watch_time_ms", "surface"), start=base + timedelta(hours=5), end=base + timedelta(days=2)),
        # Users 1_000_005 and 1_000_033 are in source partition 1, 1_000_010 in 2 (LSNs from u % 1000 * 1e6).
        Selection(columns=("item_id",), as_of=Frontier({1: 5_000_400, 2: 5_000_400}), top_k=7),
        Selection(columns=("item_id", "lsn"), as_of=Frontier({1: 5_000_400, 2: 10_000_300})),
    ):
        columns = selection.columns
        assert columns is not None  # every selection above names its columns
        rows = order_sequence(history_df(spark, lake_config, selection, users)).collect()
        for user in users:
            expected = HistoryReader(table).read_user(user, selection=selection).to_pylist()
            got = [{c: r[c] for c in columns} for r in rows if r["user_id"] == user]
            assert got == [{c: e[c] for c in columns} for e in expected]
