"""Each column's Parquet encoding and codec, chosen per file from a sample of the rows it holds.

Every candidate (encoding, codec) of a column is written to memory with pyarrow and measured; the
column takes the cheapest-to-decode candidate whose size is within `SIZE_SLACK` of the smallest zstd
candidate. The decode-cost order and the measurement behind it are in SPEC.md ("Encodings").
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

PLAIN = "PLAIN"
DICTIONARY = "RLE_DICTIONARY"
DELTA = "DELTA_BINARY_PACKED"
BYTE_STREAM_SPLIT = "BYTE_STREAM_SPLIT"

# Cheapest to decode first: every encoding without a codec, then under lz4 (LZ4_RAW), then under
# zstd; within a codec the encodings in their measured decode cost (SPEC.md, "Encodings").
CODECS = ("none", "lz4", "zstd")
ENCODING_COST = (PLAIN, BYTE_STREAM_SPLIT, DELTA, DICTIONARY)
LEVELLED = ("zstd", "gzip", "brotli")  # codecs that take a compression level
# A cheaper candidate may be this much larger than the smallest zstd one.
SIZE_SLACK = 1.1


@dataclass(frozen=True)
class Choice:
    encoding: str
    codec: str


def decode_rank(choice: Choice) -> tuple[int, int]:
    return CODECS.index(choice.codec), ENCODING_COST.index(choice.encoding)


def candidate_encodings(field: pa.Field, *, fixed_dictionary: bool, byte_stream_split: bool) -> tuple[str, ...]:
    """The encodings a column of this type may take; `fixed_dictionary` columns keep a dictionary."""
    kind = field.type
    if fixed_dictionary:
        return (DICTIONARY,)
    if pa.types.is_boolean(kind):
        return (PLAIN,)  # a bit a value; Parquet has no dictionary of booleans worth having
    if pa.types.is_integer(kind) or pa.types.is_timestamp(kind):
        return (PLAIN, DELTA, DICTIONARY)
    if pa.types.is_floating(kind):
        return (PLAIN, BYTE_STREAM_SPLIT, DICTIONARY) if byte_stream_split else (PLAIN, DICTIONARY)
    return (PLAIN, DICTIONARY)


def candidates(field: pa.Field, *, fixed_dictionary: bool, byte_stream_split: bool) -> list[Choice]:
    """Every candidate of a column, cheapest to decode first."""
    encodings = candidate_encodings(field, fixed_dictionary=fixed_dictionary, byte_stream_split=byte_stream_split)
    return sorted((Choice(e, c) for e in encodings for c in CODECS), key=decode_rank)


def writer_options(choices: dict[str, Choice], compression_level: int) -> dict:
    """ParquetWriter keyword arguments that give each column its chosen encoding and codec."""
    options = {
        "compression": {name: c.codec for name, c in choices.items()},
        "use_dictionary": [name for name, c in choices.items() if c.encoding == DICTIONARY],
        "column_encoding": {name: c.encoding for name, c in choices.items() if c.encoding != DICTIONARY},
    }
    levels = {name: compression_level for name, c in choices.items() if c.codec.lower() in LEVELLED}
    return options | ({"compression_level": levels} if levels else {})


def encoded_size(
    column: pa.Array | pa.ChunkedArray,
    field: pa.Field,
    choice: Choice,
    *,
    compression_level: int,
    data_page_size: int,
    max_rows_per_page: int | None,
) -> int:
    """Bytes of the column chunk (pages, headers, dictionary) the column takes under `choice`."""
    table = pa.table([column], schema=pa.schema([field.remove_metadata()]))
    sizes = candidate_sizes(
        table,
        {field.name: [choice]},
        compression_level=compression_level,
        data_page_size=data_page_size,
        max_rows_per_page=max_rows_per_page,
    )
    return sizes[field.name][choice]


def candidate_sizes(
    sample: pa.Table,
    options: dict[str, list[Choice]],
    *,
    compression_level: int,
    data_page_size: int,
    max_rows_per_page: int | None,
) -> dict[str, dict[Choice, int]]:
    """Each column's candidates and the bytes of its column chunk under each: one in-memory file
    holds the column once per candidate (a chunk's size does not depend on the other columns), so a
    file's whole choice costs one write, not one per candidate."""
    slots: list[tuple[str, Choice]] = []
    columns, fields, choices = [], [], {}
    for name, candidates_of_column in options.items():
        field = sample.schema.field(name).remove_metadata()
        for choice in candidates_of_column:
            slot = f"c{len(slots)}"
            slots.append((name, choice))
            columns.append(sample.column(name))
            fields.append(field.with_name(slot))
            choices[slot] = choice
    schema = pa.schema(fields)
    buffer = io.BytesIO()
    extra = {} if max_rows_per_page is None else {"max_rows_per_page": max_rows_per_page}
    with pq.ParquetWriter(
        buffer,
        schema,
        write_statistics=False,
        data_page_size=data_page_size,
        store_schema=False,
        **writer_options(choices, compression_level),
        **extra,
    ) as writer:
        writer.write_table(pa.table(columns, schema=schema), row_group_size=max(sample.num_rows, 1))
    meta = pq.ParquetFile(pa.BufferReader(buffer.getvalue())).metadata
    sizes: dict[str, dict[Choice, int]] = {name: {} for name in options}
    for index, (name, choice) in enumerate(slots):
        chunks = (meta.row_group(g).column(index) for g in range(meta.num_row_groups))
        sizes[name][choice] = sum(chunk.total_compressed_size for chunk in chunks)
    return sizes


def pick(options: list[Choice], sizes: dict[Choice, int]) -> Choice:
    """The cheapest to decode of `options` (cheapest first) within `SIZE_SLACK` of the smallest zstd."""
    bound = SIZE_SLACK * min(size for c, size in sizes.items() if c.codec == "zstd")
    return next(c for c in options if sizes[c] <= bound)


def choose(
    column: pa.Array | pa.ChunkedArray,
    field: pa.Field,
    *,
    fixed_dictionary: bool = False,
    byte_stream_split: bool = False,
    compression_level: int = 3,
    data_page_size: int = 64 * 1024,
    max_rows_per_page: int | None = None,
) -> tuple[Choice, dict[Choice, int]]:
    """The column's choice for its sample `column`, and every candidate's size."""
    options = candidates(field, fixed_dictionary=fixed_dictionary, byte_stream_split=byte_stream_split)
    table = pa.table([column], schema=pa.schema([field.remove_metadata()]))
    sizes = candidate_sizes(
        table,
        {field.name: options},
        compression_level=compression_level,
        data_page_size=data_page_size,
        max_rows_per_page=max_rows_per_page,
    )[field.name]
    return pick(options, sizes), sizes
