"""Read a row range of a row group by its pages, using the page index every history file carries.

pyarrow decodes whole column chunks; its Python API exposes neither the offset index nor row ranges.
For a Top-K of a long history, which needs the last K rows of a row group of up to 65,536, this
module reads the offset index (page locations and first rows) of the asked columns, then only the
pages that hold the rows (plus the dictionary page), and has pyarrow decode them as a one-column
Parquet file whose footer is the original column chunk's metadata narrowed to those pages. Pages are
self-contained (their levels and values start at the page), so the decoded rows are exactly the
original ones; the caller slices the asked range out of the pages' rows.

Fixed-width columns without nulls in PLAIN pages (the history's integer and float columns) skip that
machinery once their Arrow field is known: each page's CRC is checked, its body decompressed and its
values taken as they are (`plain_values`); anything else (a dictionary page, another encoding, a null,
another codec) goes through pyarrow.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tableformat import thrift_compact as tc

# [(offset, length)] -> the bytes of each range, read in one open of the file.
ReadRanges = Callable[[list[tuple[int, int]]], list[bytes]]
# The decoder of a one-column Parquet file held in memory (tableformat.io.decode_parquet).
Decode = Callable[[bytes], pa.Table]
FOOTERS_KEPT = 4096  # narrowed footers a file keeps (a few hundred bytes each)
_WIDTH = {1: 4, 2: 8, 4: 4, 5: 8}  # Parquet physical type (INT32, INT64, FLOAT, DOUBLE) -> bytes a value
_DTYPE = {1: "<i4", 2: "<i8", 4: "<f4", 5: "<f8"}
_CODECS = {0: None, 6: "zstd"}  # UNCOMPRESSED, ZSTD


class PagedFile:
    """A history file's footer as thrift structures, and the offset indexes read so far."""

    def __init__(self, meta: pq.FileMetaData) -> None:
        sink = pa.BufferOutputStream()
        meta.write_metadata_file(sink)  # "PAR1", the footer's thrift bytes, length, "PAR1"
        raw = sink.getvalue().to_pybytes()
        self.fields, _ = tc.decode(raw[4:-8])
        schema = tc.get(self.fields, 2)[1]
        self.root, leaves = schema[0], schema[1:]
        # Flat schemas only (history files are flat): leaf i is schema element i + 1.
        self.flat = all(tc.get(element, 5) is None for element in leaves)
        self.leaves = leaves
        self.column = {tc.get(e, 4).decode(): i for i, e in enumerate(leaves)}
        self.row_groups = tc.get(self.fields, 4)[1]
        orders = tc.get(self.fields, 7)
        self.orders = orders[1] if orders is not None else None
        self.pages_read = 0  # data pages handed to the decoder, for tests and benchmarks
        self.plain_pages_read = 0  # of those, pages whose values were taken as stored (`plain_values`)
        self._locations: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray] | None] = {}
        self._footers: dict[tuple[int, int, int, int], bytes] = {}  # (rg, column, first row, end row)
        self._fields: dict[int, pa.Field] = {}  # column -> its Arrow field, as pyarrow decoded it once
        self._lock = threading.Lock()

    def chunk(self, rg: int, column: int) -> tc.Fields:
        return tc.get(self.row_groups[rg], 1)[1][column]

    def num_rows(self, rg: int) -> int:
        return tc.get(self.row_groups[rg], 3)

    def locations(self, rg: int, columns: Sequence[int], read: ReadRanges) -> list:
        """(page offsets, compressed sizes, first rows) of each column's pages in row group `rg`; None
        for a column without an offset index. Read once, in one call for the missing columns."""
        with self._lock:
            missing = [c for c in columns if (rg, c) not in self._locations]
        ranges, asked = [], []
        for c in missing:
            chunk = self.chunk(rg, c)
            offset, length = tc.get(chunk, 4), tc.get(chunk, 5)
            if offset is None or length is None:
                with self._lock:
                    self._locations[rg, c] = None
            else:
                ranges.append((offset, length))
                asked.append(c)
        for c, blob in zip(asked, read(ranges) if ranges else [], strict=True):
            index, _ = tc.decode(blob)
            pages = tc.get(index, 1)[1]
            found = tuple(np.array([tc.get(p, f) for p in pages], np.int64) for f in (1, 2, 3))
            with self._lock:
                self._locations[rg, c] = found
        with self._lock:
            return [self._locations[rg, c] for c in columns]

    def read_rows(
        self, rg: int, low: int, high: int, names: Sequence[str], read: ReadRanges, decode: Decode
    ) -> pa.Table | None:
        """Rows [low, high) of row group `rg` with columns `names`, decoding only the pages that hold
        them; None when the file has no usable page index (then read the row group whole)."""
        if not self.flat or not 0 <= low <= high <= self.num_rows(rg):
            return None
        columns = [self.column[n] for n in names]
        locations = self.locations(rg, columns, read)
        if any(loc is None or not len(loc[0]) for loc in locations):
            return None
        ranges, plans = [], []
        for column, (offsets, sizes, first) in zip(columns, locations, strict=True):
            meta = tc.get(self.chunk(rg, column), 3)
            p = max(0, int(np.searchsorted(first, low, "right")) - 1)
            q = max(p, int(np.searchsorted(first, high, "left")) - 1)
            start_row = int(first[p])
            end_row = int(first[q + 1]) if q + 1 < len(first) else self.num_rows(rg)
            dictionary = tc.get(meta, 11)
            has_dictionary = dictionary is not None and dictionary < offsets[0]
            if has_dictionary:
                ranges.append((int(dictionary), int(offsets[0] - dictionary)))
            ranges.append((int(offsets[p]), int(offsets[q] + sizes[q] - offsets[p])))
            plans.append((column, meta, has_dictionary, start_row, end_row, q - p + 1))
        blobs = iter(read(ranges))
        arrays, fields = [], []
        for column, meta, has_dictionary, start_row, end_row, pages in plans:
            dictionary = next(blobs) if has_dictionary else b""
            data = next(blobs)
            field = self._fields.get(column)
            values = None if has_dictionary or field is None else self.plain_values(column, meta, data)
            if values is not None and len(values) == end_row - start_row:
                arrays.append(pa.Array.from_buffers(field.type, len(values), [None, pa.py_buffer(values)]))
                arrays[-1] = arrays[-1].slice(low - start_row, high - low)
                fields.append(field)
                with self._lock:
                    self.pages_read += pages
                    self.plain_pages_read += pages
                continue
            key = (rg, column, start_row, end_row)
            with self._lock:
                footer = self._footers.get(key)
            if footer is None:  # the same pages are asked again for a hot user's Top-K
                footer = self._footer(column, meta, len(dictionary), len(data), end_row - start_row)
                with self._lock:
                    if len(self._footers) >= FOOTERS_KEPT:
                        self._footers.pop(next(iter(self._footers)))
                    self._footers[key] = footer
            table = decode(b"".join([b"PAR1", dictionary, data, footer]))
            arrays.append(table.column(0).slice(low - start_row, high - low))
            fields.append(table.schema.field(0))
            if _plain_type(table.schema.field(0).type, tc.get(meta, 1)):
                with self._lock:
                    self._fields.setdefault(column, table.schema.field(0))
            with self._lock:
                self.pages_read += pages
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))

    def plain_values(self, column: int, meta: tc.Fields, data: bytes) -> np.ndarray | None:
        """The values of consecutive data pages of a fixed-width column, when every page is a v1
        PLAIN page without nulls; None otherwise (then pyarrow decodes them). Each page's CRC is
        checked first (a mismatch raises, as pyarrow's check does)."""
        physical, codec = tc.get(meta, 1), tc.get(meta, 4)
        if physical not in _WIDTH or codec not in _CODECS:
            return None
        optional = tc.get(self.leaves[column], 3) == 1
        view, position, parts = memoryview(data), 0, []
        while position < len(data):
            header, body = tc.decode(view, position)
            size = tc.get(header, 3)
            page = view[body : body + size]
            position = body + size
            if tc.get(header, 1) != 0 or size is None or len(page) != size:
                return None
            crc = tc.get(header, 4)
            if crc is not None and zlib.crc32(page) != crc & 0xFFFFFFFF:
                raise OSError("CRC checksum verification failed for a data page (page_reader)")
            values, encoding = tc.get(tc.get(header, 5), 1), tc.get(tc.get(header, 5), 2)
            if encoding != 0:
                return None
            raw = memoryview(_decompress(page, codec, tc.get(header, 2)))
            if optional:  # definition levels: all present is one RLE run of `values` ones
                length = int.from_bytes(raw[:4], "little")
                levels = tc._Reader(raw[4 : 4 + length])
                run = levels.varint()
                if run & 1 or run >> 1 != values or levels.byte() != 1 or levels.position != length:
                    return None
                raw = raw[4 + length :]
            if len(raw) != values * _WIDTH[physical]:
                return None
            parts.append(np.frombuffer(raw, _DTYPE[physical]))
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _footer(self, column: int, meta: tc.Fields, dictionary: int, data: int, rows: int) -> bytes:
        """The footer (thrift, length, magic) of a Parquet file of one row group and one column chunk
        made of a dictionary page of `dictionary` bytes (0: none) and data pages of `data` bytes."""
        data_offset = 4 + dictionary
        size = dictionary + data
        chunk_meta = tc.replaced(
            meta,
            {
                5: (tc.I64, rows),  # num_values: flat columns have one value (or null) per row
                6: (tc.I64, size),
                7: (tc.I64, size),
                9: (tc.I64, data_offset),
                10: None,
                11: (tc.I64, 4) if dictionary else None,
                12: None,  # statistics, bloom filter and size statistics describe the whole chunk
                14: None,
                15: None,
                16: None,
            },
        )
        chunk = [[2, tc.I64, 4], [3, tc.STRUCT, chunk_meta]]
        row_group = [[1, tc.LIST, (tc.STRUCT, [chunk])], [2, tc.I64, size], [3, tc.I64, rows]]
        footer = [
            [1, tc.I32, tc.get(self.fields, 1)],
            [2, tc.LIST, (tc.STRUCT, [tc.replaced(self.root, {5: (tc.I32, 1)}), self.leaves[column]])],
            [3, tc.I64, rows],
            [4, tc.LIST, (tc.STRUCT, [row_group])],
        ]
        created_by = tc.get(self.fields, 6)
        if created_by is not None:  # readers apply writer-version fixes by it
            footer.append([6, tc.BINARY, created_by])
        if self.orders is not None:
            footer.append([7, tc.LIST, (tc.STRUCT, [self.orders[column]])])
        encoded = tc.encode(footer)
        return encoded + len(encoded).to_bytes(4, "little") + b"PAR1"


def _plain_type(kind: pa.DataType, physical: int) -> bool:
    """Whether an Arrow type is the Parquet physical type's values as stored (no conversion)."""
    if physical == 1:
        return kind == pa.int32()
    if physical == 2:
        return kind == pa.int64() or (pa.types.is_timestamp(kind) and kind.unit == "us")
    return kind == (pa.float32() if physical == 4 else pa.float64())


_DECOMPRESSORS = threading.local()


def _decompress(page: memoryview, codec: int, size: int) -> bytes | memoryview:
    """A page body decompressed with a per-thread zstd context (reused: creating one per page costs
    as much as decompressing a small page)."""
    if _CODECS[codec] is None:
        return page
    decompressor = getattr(_DECOMPRESSORS, "zstd", None)
    if decompressor is None:
        import zstandard

        decompressor = _DECOMPRESSORS.zstd = zstandard.ZstdDecompressor()
    return decompressor.decompress(page, max_output_size=size)
