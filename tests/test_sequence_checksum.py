"""The sequence checksum of tableformat/SPEC.md: its test vectors on DuckDB, Spark and the capture
path, and what it must notice (a changed value, a missing, extra or reordered row)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
import yaml
from pyspark.sql import functions as F

from pipelines.training.sequence import Tenant
from pipelines.training.sequence import sequence_checksums as capture_sequence_checksums
from pipelines.training.sequence_digest import checksum_sql, sequence_checksums
from seqlake.config import DEFAULT_CONFIG_PATH, parse_config

T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
SCHEMA = pa.schema(
    [
        ("feature_group", pa.string()),
        ("event_ts", pa.timestamp("us", tz="UTC")),
        ("item_id", pa.int64()),
        ("watch_time_ms", pa.int32()),
        ("completion_ratio", pa.float32()),
        ("is_autoplay", pa.bool_()),
    ]
)
ROW_ONE = ("engagement", T0, 7, 2, 0.1, True)
ROW_TWO = ("é", T0 + timedelta(minutes=1), -3, None, -1.5, False)
TEXT_ONE = "10:engagement|1772445600000000|7|2|7205759511166976p-4|t|\n"
TEXT_TWO = "2:é|1772445660000000|-3|~|-6755399441055744p0|f|\n"
# (sequence, row texts, checksum) exactly as SPEC.md lists them.
VECTORS = [
    ([], [], "00000001000000010000000100000001"),
    ([ROW_ONE], [TEXT_ONE], "796f8f0468c39886411ba448633fb825"),
    ([ROW_ONE, ROW_TWO], [TEXT_ONE, TEXT_TWO], "06e6f13d655182ab25867055223f1842"),
]
# The row digests SPEC.md lists: the first 8 bytes of the SHA-256 of each row's text.
ROW_DIGESTS = {TEXT_ONE: "d8daf44c0ddd6d18", TEXT_TWO: "24b1e18584798b66"}
MODULUS = 2**31 - 1
BASES = (2037298730, 1757586490, 1092327019, 1665092365)
COLUMNS = [f"seq_{f.name}" for f in SCHEMA]


def as_lists(sequences: list[list[tuple]], schema: pa.Schema = SCHEMA) -> pa.Table:
    return pa.table(
        {
            f"seq_{f.name}": pa.array([[row[i] for row in s] for s in sequences], pa.list_(f.type))
            for i, f in enumerate(schema)
        }
    )


def duckdb_checksums(sequences, schema: pa.Schema = SCHEMA) -> list[str]:
    return [c.hex() for c in sequence_checksums(as_lists(sequences, schema), schema, "seq_").to_pylist()]


def spark_checksums(spark, sequences, schema: pa.Schema = SCHEMA) -> list[str]:
    frame = spark.createDataFrame(as_lists(sequences, schema))
    columns = [f"seq_{f.name}" for f in schema]
    hashed = frame.select(F.lower(F.hex(F.expr(checksum_sql(schema, columns, "spark")))).alias("c"))
    return [r["c"] for r in hashed.collect()]


def reference_checksum(texts: list[str]) -> str:
    """SPEC.md's definition, row by row in plain Python: four lanes, Horner's rule from 1, each over
    one 16-bit piece of every row's digest, modulo 2^31 - 1; the lanes as 4 bytes big-endian."""
    lanes = [1, 1, 1, 1]
    for text in texts:
        digest = hashlib.sha256(text.encode()).digest()[:8]
        for k in range(4):
            lanes[k] = (lanes[k] * BASES[k] + int.from_bytes(digest[2 * k : 2 * k + 2], "big")) % MODULUS
    return b"".join(lane.to_bytes(4, "big") for lane in lanes).hex()


def test_the_spec_texts_give_the_spec_row_digests_and_checksums():
    for text, digest in ROW_DIGESTS.items():
        assert hashlib.sha256(text.encode()).hexdigest()[:16] == digest
    for _, texts, checksum in VECTORS:
        assert reference_checksum(texts) == checksum


def capture_tenant() -> Tenant:
    """A tenant whose model columns are SCHEMA's, as capture sees it."""
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    columns = [f.name for f in SCHEMA][2:]
    data["tenants"] = {"vectors": {"feature_groups": ["engagement"], "columns": columns, "max_length": 10}}
    return Tenant(parse_config(data, "test"), "vectors")


def test_duckdb_and_the_capture_path_reproduce_the_vectors():
    assert duckdb_checksums([v[0] for v in VECTORS]) == [v[2] for v in VECTORS]
    tenant = capture_tenant()
    assert tenant.schema == SCHEMA
    sequences = [pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in v[0]], SCHEMA) for v in VECTORS]
    assert [c.hex() for c in capture_sequence_checksums(sequences, tenant)] == [v[2] for v in VECTORS]


def test_a_long_sequence_folds_exactly_as_the_reference():
    # Thousands of rows in a pattern the first rows do not predict: every lane wraps many times.
    pattern = [ROW_ONE, ROW_TWO, ROW_TWO, ROW_ONE, ROW_ONE, ROW_ONE, ROW_TWO]
    rows = [pattern[(i * i) % len(pattern)] for i in range(3_001)]
    texts = [TEXT_ONE if row is ROW_ONE else TEXT_TWO for row in rows]
    assert duckdb_checksums([rows]) == [reference_checksum(texts)]


@pytest.mark.spark
def test_spark_reproduces_the_vectors_and_agrees_on_edge_values(spark):
    assert spark_checksums(spark, [v[0] for v in VECTORS]) == [v[2] for v in VECTORS]
    # Floats at the edges of the token rules (both widths), strings of any bytes, extreme integers.
    schema = pa.schema([("s", pa.string()), ("i", pa.int64()), ("f", pa.float32()), ("d", pa.float64())])
    edge = [
        ("", -(2**63), 1e-45, 5e-324),
        ("a|b\n~", 2**63 - 1, 3.4028235e38, 1.7976931348623157e308),
        (None, 0, -0.0, 2.0**-1022),
        ("日本", None, float("inf"), -float("inf")),
        ("x", 1, 1.0, 0.1 + 0.2),
        ("y", -1, 2.0**-126 * 0.75, float("nan")),
    ]
    sequences = [edge, edge[::-1], [edge[1]]]
    assert spark_checksums(spark, sequences, schema) == duckdb_checksums(sequences, schema)


def test_a_changed_missing_extra_or_reordered_row_changes_the_checksum():
    base = [ROW_ONE, ROW_TWO, ROW_ONE]
    variants = [
        base,
        [ROW_ONE, ROW_TWO],  # missing
        [*base, ROW_TWO],  # extra
        [ROW_TWO, ROW_ONE, ROW_ONE],  # reordered
        [ROW_ONE, (*ROW_TWO[:3], 0, *ROW_TWO[4:]), ROW_ONE],  # null -> 0
        [ROW_ONE, (*ROW_TWO[:4], -1.4999999, *ROW_TWO[5:]), ROW_ONE],  # float changed in its last bit
        [ROW_ONE, ("é|", *ROW_TWO[1:]), ROW_ONE],  # a string grows by a separator
        [(*ROW_ONE[:5], False), ROW_TWO, ROW_ONE],  # boolean flipped
        [(ROW_ONE[0], ROW_ONE[1] + timedelta(microseconds=1), *ROW_ONE[2:]), ROW_TWO, ROW_ONE],
    ]
    checksums = duckdb_checksums(variants)
    assert len(set(checksums)) == len(variants)
