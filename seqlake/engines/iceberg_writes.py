"""Page checksums on every Parquet file pyiceberg writes for seqlake.

The tables other than history runs (detail, training samples and their quarantines, the compaction
quarantine) are Iceberg tables written through pyiceberg or Spark. Iceberg's Spark writer
(parquet-java) writes page CRCs by default; pyiceberg has no table property for them, so
`enable_iceberg_page_checksums` adds `write_page_checksum=True` to the options pyiceberg hands
pyarrow's ParquetWriter. `seqlake.tableformat.page_checksums` checks that a file carries them.
"""

from __future__ import annotations


def enable_iceberg_page_checksums() -> None:
    """Make pyiceberg's Parquet writes carry page checksums (idempotent, process-wide)."""
    from pyiceberg.io import pyarrow as iceberg_pyarrow

    original = iceberg_pyarrow._get_parquet_writer_kwargs
    if getattr(original, "_seqlake_page_checksums", False):
        return

    def with_page_checksums(table_properties):
        return original(table_properties) | {"write_page_checksum": True}

    with_page_checksums._seqlake_page_checksums = True  # type: ignore[attr-defined]  # a marker on the function
    iceberg_pyarrow._get_parquet_writer_kwargs = with_page_checksums
