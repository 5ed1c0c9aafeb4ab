"""Files of every encoding and codec the per-file choice can take read as the same rows in DuckDB,
pyiceberg and Spark (tableformat/SPEC.md, "Encodings")."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from seqlake.engines.duckdb_session import lake_cursor
from seqlake.tableformat.encoding_choice import BYTE_STREAM_SPLIT, CODECS, DELTA, DICTIONARY, PLAIN
from seqlake.tableformat.footer import FileFacts
from seqlake.tableformat.io import resolve_uri
from seqlake.tableformat.layout import DICTIONARY_KEYS
from seqlake.tableformat.schema import KEY_COLUMNS, history_arrow_schema
from tests.history_data import (
    SMALL_ROW_GROUPS,
    history_table,
    micros_rows,
    micros_select,
    publish_run,
    synthetic_history,
)

pytestmark = pytest.mark.spark

# Per column kind, the encodings a file may choose; variant i gives every column its kind's i-th.
ENCODINGS = {
    "integer": (PLAIN, DELTA, DICTIONARY),
    "float": (PLAIN, BYTE_STREAM_SPLIT, DICTIONARY),
    "string": (PLAIN, DICTIONARY, DICTIONARY),
    "bool": (PLAIN, PLAIN, PLAIN),
}
USERS_PER_VARIANT = 3


def kind_of(kind: pa.DataType) -> str:
    if pa.types.is_boolean(kind):
        return "bool"
    if pa.types.is_floating(kind):
        return "float"
    if pa.types.is_string(kind):
        return "string"
    return "integer"


def forced(schema: pa.Schema, variant: int, codec: str) -> tuple[tuple[str, str, str], ...]:
    return tuple(
        (f.name, DICTIONARY if f.name in DICTIONARY_KEYS else ENCODINGS[kind_of(f.type)][variant], codec)
        for f in schema
    )


rows = micros_rows


def test_every_encoding_choice_reads_the_same_in_duckdb_pyiceberg_and_spark(spark, lake_config):
    schema = history_arrow_schema(lake_config)
    table = history_table(lake_config, "history_encodings")
    variants = [(v, codec) for v in range(3) for codec in CODECS]
    expected: list[dict] = []
    seen: set[tuple[str, str, str]] = set()
    for n, (variant, codec) in enumerate(variants):
        first = 2_000_000 + n * USERS_PER_VARIANT
        data = synthetic_history(lake_config, {first + i: 40 + 300 * i for i in range(USERS_PER_VARIANT)}, seed=n)
        policy = dataclasses.replace(SMALL_ROW_GROUPS, forced_encodings=forced(schema, variant, codec))
        for written in publish_run(table, lake_config, data, f"w{n + 1}", policy=policy):
            assert written.facts.encodings == {name: [e, c] for name, e, c in policy.forced_encodings}
            fs, path = resolve_uri(written.uri)
            with fs.open_input_file(path) as f:
                meta = pq.read_metadata(f)
            assert FileFacts.from_metadata(meta.metadata) == written.facts
            for g in range(meta.num_row_groups):
                for i in range(meta.num_columns):
                    chunk = meta.row_group(g).column(i)
                    seen |= {(chunk.path_in_schema, e, chunk.compression) for e in chunk.encodings}
        expected += rows(data.select(schema.names).cast(schema))
    # Each float, integer and string encoding under each codec is in some file.
    kinds = {f.name: kind_of(f.type) for f in schema}
    for kind, encoding, compression in {
        (k, e, c) for k in ("integer", "float") for e in ENCODINGS[k] for c in ("UNCOMPRESSED", "LZ4", "ZSTD")
    }:
        assert any(kinds[name] == kind and (e, c) == (encoding, compression) for name, e, c in seen), (kind, encoding)

    columns = schema.names
    select = micros_select(schema, "{ts}")
    order = ", ".join(KEY_COLUMNS)
    from_pyiceberg = rows(table.scan(selected_fields=tuple(columns)).to_arrow())
    with lake_cursor() as con:
        cursor = con.execute(
            f"SELECT {select.format(ts='epoch_us')} FROM iceberg_scan(?) ORDER BY {order}", [table.metadata_location]
        )
        names = [d[0] for d in cursor.description]
        from_duckdb = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    name = f"{lake_config.warehouse.catalog_name}.{lake_config.warehouse.namespace}.history_encodings"
    from_spark = [
        r.asDict()
        for r in spark.sql(f"SELECT {select.format(ts='unix_micros')} FROM {name} ORDER BY {order}").collect()
    ]
    assert len(expected) == len(variants) * sum(40 + 300 * i for i in range(USERS_PER_VARIANT))
    assert from_pyiceberg == expected
    assert from_duckdb == expected
    assert from_spark == expected
