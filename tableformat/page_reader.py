"""Read a row range of a row group by its pages, using the page index every history file carries.

pyarrow decodes whole column chunks; its Python API exposes neither the offset index nor row ranges.
For a Top-K of a long history, which needs the last K rows of a row group of up to 65,536, this
module reads the offset index (page locations and first rows) of the asked columns, then only the
pages that hold the rows (plus the dictionary page), and has pyarrow decode them as a one-column
Parquet file whose footer is the original column chunk's metadata narrowed to those pages. Pages are
self-contained (their levels and values start at the page), so the decoded rows are exactly the
original ones, each page's checksum checked as pyarrow decodes it; the caller slices the asked range
out of the pages' rows.

A hot user's Top-K asks for the same pages again: the narrowed footer is parsed once per page range
and kept (a few hundred bytes each), so a repeated Top-K costs one read of the pages' bytes and their
decoding per column.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tableformat import thrift_compact as tc

# [(offset, length)] -> the bytes of each range, read in one open of the file.
ReadRanges = Callable[[list[tuple[int, int]]], list[bytes]]
# (one-column Parquet file held in memory, its parsed footer, read as dictionary indices) -> its rows
# (tableformat.io.decode_pages).
Decode = Callable[[bytes, pq.FileMetaData, bool], pa.Table]
FOOTERS_KEPT = 4096  # narrowed footers a file keeps (a few hundred bytes each)
_BINARY = 6  # Parquet physical type BYTE_ARRAY: strings, read as dictionary indices and expanded once


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
        self._rows = [tc.get(group, 3) for group in self.row_groups]
        orders = tc.get(self.fields, 7)
        self.orders = orders[1] if orders is not None else None
        self.pages_read = 0  # data pages handed to the decoder, for tests and benchmarks
        self._locations: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray] | None] = {}
        self._footers: dict[tuple[int, int, int, int], tuple[pq.FileMetaData, bool]] = {}
        self._plans: dict[tuple, tuple | None] = {}  # (rg, first row, end row, columns) -> `_plan`
        self._lock = threading.Lock()

    def chunk(self, rg: int, column: int) -> tc.Fields:
        return tc.get(self.row_groups[rg], 1)[1][column]

    def num_rows(self, rg: int) -> int:
        return self._rows[rg]

    def locations(self, rg: int, columns: Sequence[int], read: ReadRanges) -> list:
        """(page offsets, compressed sizes, first rows) of each column's pages in row group `rg`; None
        for a column without an offset index. Read once, in one call for the missing columns."""
        known = self._locations
        if all((rg, c) in known for c in columns):  # a hot user's row group: no lock, no reads
            return [known[rg, c] for c in columns]
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
        key = (rg, low, high, tuple(names))
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plan(rg, low, high, names, read)
            with self._lock:
                if len(self._plans) >= FOOTERS_KEPT:
                    self._plans.pop(next(iter(self._plans)))
                self._plans[key] = plan
        if not plan:
            return None
        ranges, columns, pages = plan
        blobs = read(ranges)
        arrays, fields, at = [], [], 0
        for has_dictionary, meta, as_indices, offset in columns:
            if has_dictionary:
                data = b"".join((b"PAR1", blobs[at], blobs[at + 1]))
                at += 2
            else:
                data = b"PAR1" + blobs[at]
                at += 1
            decoded = decode(data, meta, as_indices)
            field, values = decoded.schema.field(0), decoded.column(0).slice(offset, high - low)
            if as_indices:  # only the asked rows' strings are built
                field = field.with_type(field.type.value_type)
                values = pa.chunked_array([chunk.dictionary_decode() for chunk in values.chunks], field.type)
            arrays.append(values)
            fields.append(field)
        with self._lock:
            self.pages_read += pages
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))

    def _plan(self, rg: int, low: int, high: int, names: Sequence[str], read: ReadRanges) -> tuple | None:
        """The byte ranges to read for rows [low, high) and, per column, how to decode them (a hot
        user's Top-K asks for the same rows again: the plan is kept); None without a usable page index."""
        if not self.flat or not 0 <= low <= high <= self.num_rows(rg):
            return None
        columns = [self.column[n] for n in names]
        locations = self.locations(rg, columns, read)
        if any(loc is None or not len(loc[0]) for loc in locations):
            return None
        ranges, decoding, pages = [], [], 0
        for column, (offsets, sizes, first) in zip(columns, locations, strict=True):
            p = max(0, int(first.searchsorted(low, "right")) - 1)
            q = max(p, int(first.searchsorted(high, "left")) - 1)
            start_row = int(first[p])
            end_row = int(first[q + 1]) if q + 1 < len(first) else self.num_rows(rg)
            dictionary = self._dictionary_offset(rg, column, int(offsets[0]))
            dictionary_size = 0 if dictionary is None else int(offsets[0]) - dictionary
            if dictionary is not None:
                ranges.append((dictionary, dictionary_size))
            data_size = int(offsets[q] + sizes[q] - offsets[p])
            ranges.append((int(offsets[p]), data_size))
            meta, as_indices = self._narrowed(rg, column, start_row, end_row, dictionary_size, data_size)
            decoding.append((dictionary is not None, meta, as_indices, low - start_row))
            pages += q - p + 1
        return ranges, decoding, pages

    def _dictionary_offset(self, rg: int, column: int, first_page: int) -> int | None:
        offset = tc.get(tc.get(self.chunk(rg, column), 3), 11)
        return offset if offset is not None and offset < first_page else None

    def _narrowed(
        self, rg: int, column: int, start_row: int, end_row: int, dictionary: int, data: int
    ) -> tuple[pq.FileMetaData, bool]:
        """The parsed footer of the one-column file holding a page range, and whether its values are
        strings to read as dictionary indices (the same pages are asked again for a hot user's Top-K)."""
        key = (rg, column, start_row, end_row)
        found = self._footers.get(key)
        if found is None:
            meta = tc.get(self.chunk(rg, column), 3)
            footer = self._footer(column, meta, dictionary, data, end_row - start_row)
            parsed = pq.read_metadata(pa.BufferReader(b"PAR1" + footer))
            found = (parsed, bool(dictionary) and tc.get(meta, 1) == _BINARY)
            with self._lock:
                if len(self._footers) >= FOOTERS_KEPT:
                    self._footers.pop(next(iter(self._footers)))
                self._footers[key] = found
        return found

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
