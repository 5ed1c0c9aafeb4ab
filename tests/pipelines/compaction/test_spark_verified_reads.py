"""Spark reads verify page checksums too: a flipped byte in an Iceberg table's data file fails the read.

The table is written through pyiceberg (as the DuckDB engine writes detail and the Arrow path writes
training samples), uncompressed so that the flip decodes to other values: the control read without
verification returns wrong rows, Spark's read of the table (Iceberg's reader) and of the file
(Spark's Parquet source) refuse it.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from seqlake.engines.catalog import open_catalog, spark_name, table_identifier
from seqlake.tableformat.page_checksums import page_checksum_counts
from seqlake.tableformat.verified import CorruptFileError, read_verified

pytestmark = pytest.mark.spark

TABLE = "crc_probe"
ROWS = pa.table({"id": pa.array(range(2000), pa.int64()), "value": pa.array([i * 7 for i in range(2000)], pa.int64())})


@pytest.fixture
def damaged(lake_config):
    """A pyiceberg-written table whose one data file has a flipped byte in a data page of `value`."""
    catalog = open_catalog(lake_config)
    identifier = table_identifier(lake_config, TABLE)
    if catalog.table_exists(identifier):
        catalog.purge_table(identifier)
    table = catalog.create_table(
        identifier, schema=ROWS.schema, properties={"write.parquet.compression-codec": "uncompressed"}
    )
    table.append(ROWS)
    [task] = table.scan().plan_files()
    path = Path(task.file.file_path.removeprefix("file:"))
    with pa.OSFile(str(path)) as handle:
        pages, with_crc = page_checksum_counts(handle)
    assert pages and with_crc == pages  # every page pyiceberg wrote carries a CRC
    meta = pq.read_metadata(path)
    chunk = meta.row_group(0).column(1)
    data = bytearray(path.read_bytes())
    # The middle of the column's first page: its dictionary (plain values) or its only data page.
    first = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
    end = chunk.data_page_offset if chunk.has_dictionary_page else first + chunk.total_compressed_size
    data[(first + end) // 2] ^= 0x10
    path.write_bytes(bytes(data))
    assert pq.read_table(path).sort_by("id")["value"] != ROWS["value"]  # the control: silently wrong
    yield lake_config, str(path)
    catalog.purge_table(identifier)


def test_spark_refuses_a_damaged_page(spark, damaged):
    config, path = damaged
    with pytest.raises(CorruptFileError, match="checksum mismatch"):
        read_verified(path)
    with pytest.raises(Exception, match="(?i)crc checksum"):
        spark.table(spark_name(config, TABLE)).collect()
    with pytest.raises(Exception, match="(?i)crc checksum"):
        spark.read.parquet(path).collect()
