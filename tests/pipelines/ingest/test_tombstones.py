"""A forget's tombstones in the validation query: both engines drop exactly the records they cover (a
valid record by its user, a malformed one by the ids its payload names, at or below the partition's
frontier), and hash as Python does."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import duckdb
import pyarrow as pa
import pytest

from seqlake.core.config import load_config
from seqlake.core.events import RAW_SCHEMA
from seqlake.core.forget_key import bucket_sql, hash_sql, user_bucket, user_hash
from seqlake.pipelines.ingest import tombstones as forget_tombstones
from seqlake.pipelines.ingest.validation import validation_sql

CONFIG = load_config()
KEY = b"a key for the tests"
NOW = datetime(2024, 1, 1, tzinfo=UTC)


def _good(user: int) -> str:
    return json.dumps(
        {"user_id": user, "feature_group": "engagement", "event_ts": 1704067200000, "event_id": f"e{user}"}
    )


RECORDS = [  # (partition, lsn, payload, dropped by a tombstone of user 7 at LSN 5 in partition 0)
    (0, 1, _good(7), True),
    (0, 5, _good(7), True),  # at the frontier
    (0, 6, _good(7), False),  # after it: new data
    (1, 1, _good(7), False),  # a partition the forget saw nothing of
    (0, 2, _good(8), False),
    (0, 3, '{"user_id": "7x", oops', True),  # malformed, naming 7
    (0, 4, '{"user_id": 8, "user_id": 7}', True),  # a key twice: both named
    (0, 9, '{"user_id": 7', False),
    (0, 10, '{"user_id": 70}', False),
]


def tombstones() -> forget_tombstones.Tombstones:
    row = {"user_hash": user_hash(KEY, 7), "user_bucket": user_bucket(KEY, 7), "source_partition": 0, "lsn": 5}
    schema = pa.schema([forget_tombstones.SCHEMA.field(n) for n in row])
    return forget_tombstones.Tombstones(pa.Table.from_pylist([row], schema=schema), KEY)


def raw() -> pa.Table:
    rows = [{"source_partition": p, "lsn": n, "arrival_ts": NOW, "payload": text} for p, n, text, _ in RECORDS]
    return pa.Table.from_pylist(rows, schema=RAW_SCHEMA)


def kept() -> list[tuple[int, int]]:
    return sorted((p, n) for p, n, _, dropped in RECORDS if not dropped)


def test_duckdb_drops_what_the_tombstones_cover() -> None:
    con = duckdb.connect()
    con.register("raw_records", raw())
    out = con.execute(validation_sql(CONFIG, "raw_records", "duckdb", {}, tombstones())).to_arrow_table()
    assert sorted(zip(out["source_partition"].to_pylist(), out["lsn"].to_pylist(), strict=True)) == kept()
    everything = con.execute(validation_sql(CONFIG, "raw_records", "duckdb", {}, forget_tombstones.NONE))
    assert len(everything.fetchall()) == len(RECORDS)
    assert con.execute("SELECT " + hash_sql(KEY, "'1000031'", "duckdb")).fetchone() == (user_hash(KEY, 1000031),)
    assert con.execute(f"SELECT {bucket_sql(KEY, '1000031')}").fetchone() == (user_bucket(KEY, 1000031),)


@pytest.mark.spark
def test_spark_drops_what_the_tombstones_cover(spark) -> None:
    spark.createDataFrame(raw()).createOrReplaceTempView("raw_records")
    out = spark.sql(validation_sql(CONFIG, "raw_records", "spark", {}, tombstones())).toArrow()
    assert sorted(zip(out["source_partition"].to_pylist(), out["lsn"].to_pylist(), strict=True)) == kept()
    assert spark.sql("SELECT " + hash_sql(KEY, "'1000031'", "spark")).first()[0] == user_hash(KEY, 1000031)
    assert spark.sql(f"SELECT {bucket_sql(KEY, 'CAST(1000031 AS BIGINT)')}").first()[0] == user_bucket(KEY, 1000031)
