"""The sequence checksum of tableformat/SPEC.md: its test vectors on DuckDB, Spark and the capture
path, and what it must notice (a changed value, a missing, extra or reordered row)."""

from __future__ import annotations

import hashlib
import math
import struct
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pytest
import yaml
from pyspark.sql import functions as F

from seqlake.core.config import DEFAULT_CONFIG_PATH, parse_config
from seqlake.engines.duckdb_session import connect
from seqlake.pipelines.training.sequence import Tenant
from seqlake.pipelines.training.sequence import sequence_checksums as capture_sequence_checksums
from seqlake.pipelines.training.sequence_digest import checksum_sql, row_lanes, sequence_checksums_of

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
# Each row's pieces and digest (its four lane values) exactly as SPEC.md lists them.
PIECES_ONE = [84315, 37795, 34468, 14044, 65542, 19463, 42591, 10240, 65536, 0, 0, 7, 65536, 2]
PIECES_ONE += [66607, 9, 39321, 40960, 0, 65537]
PIECES_TWO = [84633, 21886, 16435, 50003, 65542, 19463, 43506, 44800, 131071, 65535, 65535, 65533, 0, 0]
PIECES_TWO += [70707, 8, 0, 0, 0, 65536]
ROW_DIGESTS = {ROW_ONE: "002ca4ad 15804207 296ca311 5bc1358d", ROW_TWO: "7fc7f2ae 7239a9c9 3e7aaa97 7e9e8604"}
# (sequence, checksum) exactly as SPEC.md lists them.
VECTORS: list[tuple[list[tuple], str]] = [
    ([], "00000001000000010000000100000001"),
    ([ROW_ONE], "799b5ad77e42e6416a88397c3f00809b"),
    ([ROW_ONE, ROW_TWO], "0099be68357bd2fd595d7c891f51018c"),
]
MODULUS = 2**31 - 1
BASES = (2037298730, 1757586490, 1092327019, 1665092365)
COLUMNS = [f"seq_{f.name}" for f in SCHEMA]


def reference_pieces(value, kind: pa.DataType) -> list[int]:
    """SPEC.md's pieces of one value, in plain Python."""
    if pa.types.is_floating(kind):
        if value is None:
            return [0] * 5
        x = struct.unpack("f", struct.pack("f", value))[0] if kind == pa.float32() else float(value)
        sign = 4096 if math.copysign(1, x) < 0 else 0
        if math.isnan(x):
            return [65536 + 4094, 0, 0, 0, 0]
        if x == 0:
            return [65536, 0, 0, 0, 0]
        if math.isinf(x):
            return [65536 + sign + 4095, 0, 0, 0, 0]
        significand, exponent = math.frexp(abs(x))  # |x| = significand * 2^exponent, 1/2 <= significand < 1
        fraction = int(significand * 2**53) - 2**52
        return [65536 + sign + exponent - 1 + 1075] + [(fraction >> s) & 0xFFFF for s in (48, 32, 16, 0)]
    if pa.types.is_string(kind):
        if value is None:
            return [0] * 4
        digest = hashlib.sha256(value.encode()).digest()[:8]
        pieces = [int.from_bytes(digest[2 * i : 2 * i + 2], "big") for i in range(4)]
    else:
        count = {1: 1, 8: 1, 16: 1, 32: 2, 64: 4}[kind.bit_width]
        if value is None:
            return [0] * count
        if pa.types.is_timestamp(kind):
            value = (value - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
        pieces = [(int(value) >> (16 * (count - 1 - i))) & 0xFFFF for i in range(count)]
    pieces[0] += 65536
    return pieces


def horner(values: list[int], base: int) -> int:
    h = 1
    for x in values:
        h = (h * base + x) % MODULUS
    return h


def reference_row_digest(row: tuple, schema: pa.Schema = SCHEMA) -> list[int]:
    pieces = [x for value, f in zip(row, schema, strict=True) for x in reference_pieces(value, f.type)]
    return [horner(pieces, b) for b in BASES]


def reference_checksum(rows: list[tuple], schema: pa.Schema = SCHEMA) -> str:
    """SPEC.md's definition, row by row in plain Python: each row's four lanes over its pieces, then
    each lane folded over the rows, modulo 2^31 - 1; the lanes as 4 bytes big-endian."""
    digests = [reference_row_digest(row, schema) for row in rows]
    lanes = [horner([d[k] for d in digests], b) for k, b in enumerate(BASES)]
    return b"".join(lane.to_bytes(4, "big") for lane in lanes).hex()


def as_lists(sequences: list[list[tuple]], schema: pa.Schema = SCHEMA) -> pa.Table:
    return pa.table(
        {
            f"seq_{f.name}": pa.array([[row[i] for row in s] for s in sequences], pa.list_(f.type))
            for i, f in enumerate(schema)
        }
    )


def duckdb_checksums(sequences, schema: pa.Schema = SCHEMA) -> list[str]:
    """The checksums in DuckDB SQL (`checksum_sql` over list columns)."""
    with connect(extensions=()) as con:
        con.register("_sequences", as_lists(sequences, schema))
        sql = checksum_sql(schema, [f'"seq_{f.name}"' for f in schema], "duckdb")
        return [r[0].hex() for r in con.execute(f"SELECT {sql} FROM _sequences").fetchall()]


def numpy_checksums(sequences, schema: pa.Schema = SCHEMA) -> list[str]:
    """The checksums of the samples job (numpy over Arrow)."""
    rows = pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for s in sequences for r in s], schema)
    lengths = np.array([len(s) for s in sequences], np.int64)
    return [c.hex() for c in sequence_checksums_of(rows, schema, lengths).to_pylist()]


def spark_checksums(spark, sequences, schema: pa.Schema = SCHEMA) -> list[str]:
    frame = spark.createDataFrame(as_lists(sequences, schema))
    columns = [f"seq_{f.name}" for f in schema]
    hashed = frame.select(F.lower(F.hex(F.expr(checksum_sql(schema, columns, "spark")))).alias("c"))
    return [r["c"] for r in hashed.collect()]


def test_the_spec_rows_give_the_spec_pieces_digests_and_checksums():
    for row, pieces in ((ROW_ONE, PIECES_ONE), (ROW_TWO, PIECES_TWO)):
        assert [x for v, f in zip(row, SCHEMA, strict=True) for x in reference_pieces(v, f.type)] == pieces
        assert " ".join(f"{lane:08x}" for lane in reference_row_digest(row)) == ROW_DIGESTS[row]
    for rows, checksum in VECTORS:
        assert reference_checksum(rows) == checksum


def test_numpy_gives_the_spec_row_digests():
    rows = pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in (ROW_ONE, ROW_TWO)], SCHEMA)
    lanes = row_lanes(rows, SCHEMA)
    assert [" ".join(f"{int(v):08x}" for v in lanes[:, i]) for i in range(2)] == list(ROW_DIGESTS.values())


def capture_tenant() -> Tenant:
    """A tenant whose model columns are SCHEMA's, as capture sees it."""
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    columns = [f.name for f in SCHEMA][2:]
    data["tenants"] = {"vectors": {"feature_groups": ["engagement"], "columns": columns, "max_length": 10}}
    return Tenant(parse_config(data, "test"), "vectors")


def test_duckdb_numpy_and_the_capture_path_reproduce_the_vectors():
    expected = [v[1] for v in VECTORS]
    assert duckdb_checksums([v[0] for v in VECTORS]) == expected
    assert numpy_checksums([v[0] for v in VECTORS]) == expected
    tenant = capture_tenant()
    assert tenant.schema == SCHEMA
    sequences = [pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in v[0]], SCHEMA) for v in VECTORS]
    assert [c.hex() for c in capture_sequence_checksums(sequences, tenant)] == expected


def test_a_long_sequence_folds_exactly_as_the_reference():
    # Thousands of rows in a pattern the first rows do not predict: every lane wraps many times.
    pattern = [ROW_ONE, ROW_TWO, ROW_TWO, ROW_ONE, ROW_ONE, ROW_ONE, ROW_TWO]
    rows = [pattern[(i * i) % len(pattern)] for i in range(3_001)]
    expected = [reference_checksum(rows)]
    assert duckdb_checksums([rows]) == expected
    # Sequences that share rows (as a user's requests do) fold each from the same row digests.
    assert numpy_checksums([rows, rows[5:], rows[:7], []]) == [
        *expected,
        reference_checksum(rows[5:]),
        reference_checksum(rows[:7]),
        reference_checksum([]),
    ]


# Floats at the edges of the piece rules (both widths), strings of any bytes, extreme integers.
EDGE_SCHEMA = pa.schema(
    [("s", pa.string()), ("i", pa.int64()), ("f", pa.float32()), ("d", pa.float64()), ("h", pa.int16())]
)
EDGE = [
    ("", -(2**63), 1e-45, 5e-324, -32768),
    ("a|b\n~", 2**63 - 1, 3.4028235e38, 1.7976931348623157e308, 32767),
    (None, 0, -0.0, 2.0**-1022, None),
    ("日本", None, float("inf"), -float("inf"), 0),
    ("x", 1, 1.0, 0.1 + 0.2, -1),
    ("y", -1, 2.0**-126 * 0.75, float("nan"), 1),
]
EDGE_SEQUENCES = [EDGE, EDGE[::-1], [EDGE[1]]]


def test_numpy_and_duckdb_agree_with_the_reference_on_edge_values():
    expected = [reference_checksum(s, EDGE_SCHEMA) for s in EDGE_SEQUENCES]
    assert numpy_checksums(EDGE_SEQUENCES, EDGE_SCHEMA) == expected
    assert duckdb_checksums(EDGE_SEQUENCES, EDGE_SCHEMA) == expected


@pytest.mark.spark
def test_spark_reproduces_the_vectors_and_agrees_on_edge_values(spark):
    assert spark_checksums(spark, [v[0] for v in VECTORS]) == [v[1] for v in VECTORS]
    expected = [reference_checksum(s, EDGE_SCHEMA) for s in EDGE_SEQUENCES]
    assert spark_checksums(spark, EDGE_SEQUENCES, EDGE_SCHEMA) == expected


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
    checksums = numpy_checksums(variants)
    assert len(set(checksums)) == len(variants)
    assert duckdb_checksums(variants) == checksums
