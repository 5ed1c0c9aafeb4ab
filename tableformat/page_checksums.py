"""Page checksums on every Parquet file seqlake writes, and a way to see that a file carries them.

History runs are written by `seqlake.tableformat.writer` with `write_page_checksum`; the other tables
get them from `seqlake.engines.iceberg_writes`. `page_checksum_counts` reads a file's page headers
and tells how many pages carry a CRC (what tests and `fsck` check).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from seqlake.tableformat import thrift_compact as tc

_PAGE_COMPRESSED_SIZE, _PAGE_CRC = 3, 4  # parquet.thrift PageHeader fields


def page_checksum_counts(handle: pa.NativeFile, meta: pq.FileMetaData | None = None) -> tuple[int, int]:
    """(pages, pages with a CRC) over every column chunk of an open Parquet file."""
    meta = meta or pq.ParquetFile(handle).metadata
    pages = with_crc = 0
    for rg in range(meta.num_row_groups):
        group = meta.row_group(rg)
        for column in range(group.num_columns):
            chunk = group.column(column)
            start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
            handle.seek(start)
            data = handle.read(chunk.total_compressed_size)
            position = 0
            while position < len(data):
                header, position = tc.decode(data, position)
                position += tc.get(header, _PAGE_COMPRESSED_SIZE)
                pages += 1
                with_crc += tc.get(header, _PAGE_CRC) is not None
    return pages, with_crc
