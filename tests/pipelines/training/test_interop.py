"""Round trips between engines over the shared embedded lakehouse (SQLite catalog, local warehouse)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from seqlake.engines.catalog import open_catalog, spark_name, table_identifier
from seqlake.engines.duckdb_session import lake_cursor

pytestmark = pytest.mark.spark

ROWS = [(1, "engagement", 10, 0.5), (1, "search", 11, None), (7, "purchase", 12, 2.25)]


def test_spark_written_iceberg_table_reads_the_same_in_pyiceberg_and_duckdb(spark, lake_config):
    catalog = open_catalog(lake_config)
    name = spark_name(lake_config, "interop_from_spark")
    spark.sql(f"DROP TABLE IF EXISTS {name}")
    spark.sql(
        f"CREATE TABLE {name} (user_id BIGINT, feature_group STRING, lsn BIGINT, score DOUBLE) "
        "USING iceberg PARTITIONED BY (bucket(4, user_id))"
    )
    spark.createDataFrame(ROWS, "user_id BIGINT, feature_group STRING, lsn BIGINT, score DOUBLE").writeTo(name).append()

    table = catalog.load_table(table_identifier(lake_config, "interop_from_spark"))
    assert str(table.spec().fields[0].transform) == "bucket[4]"
    from_pyiceberg = table.scan().to_arrow().sort_by("lsn")
    assert from_pyiceberg.to_pylist() == [
        dict(zip(("user_id", "feature_group", "lsn", "score"), row, strict=True)) for row in ROWS
    ]
    with lake_cursor() as con:
        from_duckdb = con.execute(
            "SELECT user_id, feature_group, lsn, score FROM iceberg_scan(?) ORDER BY lsn",
            [table.metadata_location],
        ).fetchall()
    assert from_duckdb == ROWS


def test_pyiceberg_written_table_reads_in_spark_with_appends_and_time_travel(spark, lake_config):
    catalog = open_catalog(lake_config)
    identifier = table_identifier(lake_config, "interop_from_pyiceberg")
    if catalog.table_exists(identifier):
        catalog.purge_table(identifier)
    schema = pa.schema([pa.field("user_id", pa.int64(), nullable=False), ("item", pa.string())])
    table = catalog.create_table(identifier, schema=schema)
    table.append(pa.table({"user_id": [1, 2], "item": ["a", "b"]}, schema=schema))
    first = table.current_snapshot()
    assert first is not None  # the append made one
    first_snapshot = first.snapshot_id
    table.append(pa.table({"user_id": [3], "item": ["c"]}, schema=schema))

    name = spark_name(lake_config, "interop_from_pyiceberg")
    spark.sql(f"REFRESH TABLE {name}")
    rows = spark.sql(f"SELECT user_id, item FROM {name} ORDER BY user_id").collect()
    assert [tuple(r) for r in rows] == [(1, "a"), (2, "b"), (3, "c")]
    old = spark.sql(f"SELECT count(*) AS n FROM {name} VERSION AS OF {first_snapshot}").first()
    assert old["n"] == 2


def test_spark_written_delta_table_reads_in_duckdb(spark, lake_config, tmp_path):
    path = str(tmp_path / "landing_delta")
    df = spark.createDataFrame(ROWS, "user_id BIGINT, feature_group STRING, lsn BIGINT, score DOUBLE")
    df.write.format("delta").mode("overwrite").save(path)
    df.limit(1).write.format("delta").mode("append").save(path)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()
    assert len(history) == 2
    with lake_cursor() as con:
        found = con.execute("SELECT count(*), list(DISTINCT lsn ORDER BY lsn) FROM delta_scan(?)", [path]).fetchone()
    assert found is not None  # an aggregate answers one row
    count, lsns = found
    assert count == 4 and lsns == [10, 11, 12]
