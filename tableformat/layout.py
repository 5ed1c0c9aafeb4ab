"""Physical layout policy of history files: how rows become row groups and pages, and how columns
are encoded. SPEC.md explains each choice and the measurement behind it (tests/benchmarks/test_layout_bench.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from seqlake.tableformat.encoding_choice import DICTIONARY, Choice, candidate_sizes, candidates, pick, writer_options
from seqlake.tableformat.schema import KEY_COLUMNS


@dataclass(frozen=True)
class LayoutPolicy:
    # Users with at least this many rows get row groups of their own, so a lookup of a long history
    # reads only that user's column chunks.
    dedicated_user_rows: int = 4096
    # Short histories are packed together up to this many rows per row group.
    packed_row_group_rows: int = 16_384
    # A very long history is cut into row groups of at most this many rows (Top-K reads the last).
    max_row_group_rows: int = 65_536
    # Codec of the float, string and user_id columns (LZ4_RAW: no decompression context to set up per
    # page, unlike zstd). Integer and boolean columns are bit-packed by their encoding and stored with
    # `packed_compression` (SPEC.md, "Encodings").
    compression: str = "lz4"
    compression_level: int = 3  # for codecs with levels (zstd)
    packed_compression: str = "none"
    data_page_size: int = 64 * 1024
    # Pages hold at most this many rows, so a Top-K decodes at most this many rows per column.
    max_rows_per_page: int | None = 16_384
    bloom_filter_fpp: float = 0.01
    # Each file's columns take the encoding and codec its first rows measure best (`choose_encodings`,
    # SPEC.md "Encodings"); False keeps the fixed rule of `column_encodings`.
    choose_encodings: bool = True
    encoding_sample_rows: int = 16_384
    # BYTE_STREAM_SPLIT floats may be chosen only where no reader is Spark's or Iceberg's vectorized
    # Parquet reader, which cannot decode them (SPEC.md, "Encodings").
    byte_stream_split: bool = False
    # (column, encoding, codec) that a column takes whatever its rows: layouts compared side by side
    # (benchmarks, interoperability tests) name them so.
    forced_encodings: tuple[tuple[str, str, str], ...] = ()

    def __post_init__(self) -> None:
        if not 0 < self.bloom_filter_fpp < 1:
            raise ValueError(f"bloom_filter_fpp must be between 0 and 1, got {self.bloom_filter_fpp}")
        if not 0 < self.dedicated_user_rows <= self.max_row_group_rows:
            raise ValueError("need 0 < dedicated_user_rows <= max_row_group_rows")
        if self.packed_row_group_rows > self.max_row_group_rows:
            raise ValueError("packed_row_group_rows may not exceed max_row_group_rows")
        if self.max_rows_per_page is not None and self.max_rows_per_page < 1:
            raise ValueError(f"max_rows_per_page must be >= 1, got {self.max_rows_per_page}")
        if self.encoding_sample_rows < 1:
            raise ValueError(f"encoding_sample_rows must be >= 1, got {self.encoding_sample_rows}")


DEFAULT_POLICY = LayoutPolicy()

# Dictionary-encoded: the user key (a run per user) and every string column.
DICTIONARY_KEYS = ("user_id",)
# Only keys get min/max statistics: they are what readers prune on, and skipping the rest keeps the
# footer (read by every lookup) small.
STATISTICS_COLUMNS = (*KEY_COLUMNS, "window_id")


def parquet_writer_options(
    schema: pa.Schema, policy: LayoutPolicy, expected_users: int, choices: dict[str, Choice] | None = None
) -> dict:
    """Keyword arguments for pyarrow.parquet.ParquetWriter implementing the policy, with each column's
    encoding and codec from `choices` (by default the fixed rule, `fixed_choices`)."""
    import pyarrow.parquet as pq

    choices = choices or fixed_choices(schema, policy)
    options = writer_options({f.name: choices[f.name] for f in schema}, policy.compression_level) | {
        "write_statistics": [c for c in STATISTICS_COLUMNS if c in schema.names],
        "write_page_index": True,
        "data_page_size": policy.data_page_size,
        "sorting_columns": [pq.SortingColumn(schema.get_field_index(c)) for c in KEY_COLUMNS],
        "bloom_filter_options": {"user_id": {"ndv": max(1024, expected_users), "fpp": policy.bloom_filter_fpp}},
        "store_schema": False,  # the Parquet schema (with field ids) is enough; keeps footers small
    }
    if policy.max_rows_per_page is not None:
        options["max_rows_per_page"] = policy.max_rows_per_page
    return options


def fixed_choices(schema: pa.Schema, policy: LayoutPolicy) -> dict[str, Choice]:
    """The fixed rule by type (`column_encodings`): files written without a sample, and the
    `choose_encodings=False` layout."""
    encodings = column_encodings(schema)
    # Bit-packed values (integers, booleans) gain nothing from a codec; floats, strings and ids do.
    packed = {f.name for f in schema if encodings[f.name] == "DELTA_BINARY_PACKED" or pa.types.is_boolean(f.type)}
    return {
        f.name: Choice(encodings[f.name], policy.packed_compression if f.name in packed else policy.compression)
        for f in schema
    }


def choose_encodings(sample: pa.Table, policy: LayoutPolicy) -> dict[str, Choice]:
    """Each column's encoding and codec for a file whose first rows are `sample` (SPEC.md,
    "Encodings"); the fixed rule when the policy says so or there is no sample."""
    forced = {name: Choice(encoding, codec) for name, encoding, codec in policy.forced_encodings}
    if not policy.choose_encodings or sample.num_rows == 0:
        return fixed_choices(sample.schema, policy) | forced
    sample = sample.slice(0, policy.encoding_sample_rows)
    options = {
        f.name: candidates(f, fixed_dictionary=f.name in DICTIONARY_KEYS, byte_stream_split=policy.byte_stream_split)
        for f in sample.schema
        if f.name not in forced
    }
    sizes = candidate_sizes(
        sample,
        options,
        compression_level=policy.compression_level,
        data_page_size=policy.data_page_size,
        max_rows_per_page=policy.max_rows_per_page,
    )
    return {f.name: forced[f.name] if f.name in forced else pick(options[f.name], sizes[f.name]) for f in sample.schema}


def column_encodings(schema: pa.Schema) -> dict[str, str]:
    """Each column's Parquet encoding (SPEC.md, "Encodings"):

    - integers and timestamps, except the user key: DELTA_BINARY_PACKED. Sequence keys are monotonic
      within a user (a few bits a row); attribute ids and counts are bit-packed at their range's
      width, which decodes several times faster than plain values under a codec and, on uniform ids,
      takes less space. Their dictionary would hold most of a row group's values and would have to
      be decoded whole before any page (a Top-K's);
    - strings and `user_id`: dictionary (falling back to plain);
    - floats and booleans: plain. Byte-split floats compress a little better, but Iceberg's
      vectorized Parquet reader (Spark's default) cannot decode that encoding."""
    out = {}
    for f in schema:
        kind = f.type
        if f.name in DICTIONARY_KEYS or pa.types.is_string(kind) or pa.types.is_large_string(kind):
            out[f.name] = DICTIONARY
        elif pa.types.is_integer(kind) or pa.types.is_timestamp(kind):
            out[f.name] = "DELTA_BINARY_PACKED"
        else:
            out[f.name] = "PLAIN"
    return out
