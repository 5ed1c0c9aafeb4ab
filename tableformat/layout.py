"""Physical layout policy of history files: how rows become row groups and pages, and how columns
are encoded. SPEC.md explains each choice and the measurement behind it (tests/test_layout_bench.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from tableformat.schema import KEY_COLUMNS


@dataclass(frozen=True)
class LayoutPolicy:
    # Users with at least this many rows get row groups of their own, so a lookup of a long history
    # reads only that user's column chunks.
    dedicated_user_rows: int = 4096
    # Short histories are packed together up to this many rows per row group.
    packed_row_group_rows: int = 16_384
    # A very long history is cut into row groups of at most this many rows (Top-K reads the last).
    max_row_group_rows: int = 65_536
    compression: str = "zstd"
    compression_level: int = 3
    data_page_size: int = 64 * 1024
    bloom_filter_fpp: float = 0.01

    def __post_init__(self) -> None:
        if not 0 < self.bloom_filter_fpp < 1:
            raise ValueError(f"bloom_filter_fpp must be between 0 and 1, got {self.bloom_filter_fpp}")
        if not 0 < self.dedicated_user_rows <= self.max_row_group_rows:
            raise ValueError("need 0 < dedicated_user_rows <= max_row_group_rows")
        if self.packed_row_group_rows > self.max_row_group_rows:
            raise ValueError("packed_row_group_rows may not exceed max_row_group_rows")


DEFAULT_POLICY = LayoutPolicy()

# Monotonic within a user: delta encoding stores them in a few bits per row.
DELTA_COLUMNS = ("event_ts", "lsn", "min_lsn")
# Only keys get min/max statistics: they are what readers prune on, and skipping the rest keeps the
# footer (read by every lookup) small.
STATISTICS_COLUMNS = ("user_id", "feature_group", "event_ts", "lsn", "window_id")


def parquet_writer_options(schema: pa.Schema, policy: LayoutPolicy, expected_users: int) -> dict:
    """Keyword arguments for pyarrow.parquet.ParquetWriter implementing the policy."""
    import pyarrow.parquet as pq

    # Dictionaries for strings and the user key only. Integer attributes (item, author, session ids,
    # durations) are high-cardinality: their dictionary page (up to a row group's distinct values)
    # must be decoded whole to read any page, so a Top-K paid for it on every lookup. Plain pages
    # under zstd are as small or smaller and decode as fast in full (SPEC.md, "Encodings").
    dictionary = [f.name for f in schema if f.name not in DELTA_COLUMNS and pa.types.is_string(f.type)]
    return {
        "compression": policy.compression,
        "compression_level": policy.compression_level,
        "use_dictionary": dictionary + ["user_id"],
        "column_encoding": {name: "DELTA_BINARY_PACKED" for name in DELTA_COLUMNS if name in schema.names},
        "write_statistics": [c for c in STATISTICS_COLUMNS if c in schema.names],
        "write_page_index": True,
        "data_page_size": policy.data_page_size,
        "sorting_columns": [pq.SortingColumn(schema.get_field_index(c)) for c in KEY_COLUMNS],
        "bloom_filter_options": {"user_id": {"ndv": max(1024, expected_users), "fpp": policy.bloom_filter_fpp}},
        "store_schema": False,  # the Parquet schema (with field ids) is enough; keeps footers small
    }
