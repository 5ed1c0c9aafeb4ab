"""Read a row range of a row group by its pages, using the page index every history file carries.

pyarrow decodes whole column chunks; its Python API exposes neither the offset index nor row ranges.
For a Top-K of a long history, which needs the last K rows of a row group of up to 65,536, this
module reads the offset index (page locations and first rows) of the asked columns, then only the
pages that hold the rows (plus the dictionary page), and has pyarrow decode them as a small Parquet
file whose footer is the original column chunks' metadata narrowed to those pages (one file for all
the columns whose pages cover the same rows, which the 16,384-row page cap makes the rule). Pages are
self-contained (their levels and values start at the page), so the decoded rows are exactly the
original ones, each page's checksum checked as pyarrow decodes it; the caller slices the asked range
out of the pages' rows.

A hot user's Top-K asks for the same pages again: the byte ranges and the parsed narrowed footer are
planned once per row range and kept (a few hundred bytes each), so a repeated Top-K costs one read of
each column's pages and one decoding call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from seqlake.tableformat import thrift_compact as tc

# [(offset, length)] -> the bytes of each range, read in one open of the file.
ReadRanges = Callable[[list[tuple[int, int]]], list[bytes]]
# (small Parquet file held in memory, its parsed footer, the columns to read as dictionary indices)
# -> its rows (seqlake.tableformat.io.decode_pages).
Decode = Callable[[bytes, pq.FileMetaData, list[int] | None], pa.Table]
FOOTERS_KEPT = 4096  # page plans a file keeps, each with its narrowed footer (a few hundred bytes)
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
        self.metadata = meta.metadata  # the key-value metadata, which rows read whole carry too
        self._rows = [tc.get(group, 3) for group in self.row_groups]
        orders = tc.get(self.fields, 7)
        self.orders = orders[1] if orders is not None else None
        self.pages_read = 0  # data pages handed to the decoder, for tests and benchmarks
        self._locations: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray] | None] = {}
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
            offsets, sizes, first = (np.array([tc.get(p, f) for p in pages], np.int64) for f in (1, 2, 3))
            with self._lock:
                self._locations[rg, c] = (offsets, sizes, first)
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
        ranges, files, pages = plan
        blobs = read(ranges)
        with self._lock:
            self.pages_read += pages
        if len(files) == 1 and not files[0][3]:  # one file, no strings: its rows are the answer
            _, _, meta, _, offset = files[0]
            return decode(b"".join([b"PAR1", *blobs]), meta, None).slice(offset, high - low)
        arrays: list = [None] * len(names)
        fields: list = [None] * len(names)
        at = 0
        for outputs, count, meta, strings, offset in files:
            # One small Parquet file per set of columns whose pages cover the same rows (usually all).
            data = b"".join([b"PAR1", *blobs[at : at + count]])
            at += count
            decoded = decode(data, meta, strings).slice(offset, high - low)
            for i, position in enumerate(outputs):
                field, values = decoded.schema.field(i), decoded.column(i)
                if i in strings:  # only the asked rows' strings are built
                    field = field.with_type(field.type.value_type)
                    values = pa.chunked_array([chunk.dictionary_decode() for chunk in values.chunks], field.type)
                arrays[position], fields[position] = values, field
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=self.metadata))

    def _plan(self, rg: int, low: int, high: int, names: Sequence[str], read: ReadRanges) -> tuple | None:
        """The byte ranges to read for rows [low, high) and how to decode them: columns whose pages
        cover the same rows go into one narrowed file. A hot user's Top-K asks for the same rows again,
        so the plan is kept. None without a usable page index."""
        if not self.flat or not 0 <= low <= high <= self.num_rows(rg):
            return None
        columns = [self.column[n] for n in names]
        locations = self.locations(rg, columns, read)
        if any(loc is None or not len(loc[0]) for loc in locations):
            return None
        by_rows: dict[tuple[int, int], list] = {}  # (first row, end row) -> the columns' pages
        pages = 0
        for position, (column, (offsets, sizes, first)) in enumerate(zip(columns, locations, strict=True)):
            p = max(0, int(first.searchsorted(low, "right")) - 1)
            q = max(p, int(first.searchsorted(high, "left")) - 1)
            start_row = int(first[p])
            end_row = int(first[q + 1]) if q + 1 < len(first) else self.num_rows(rg)
            dictionary = self._dictionary_offset(rg, column, int(offsets[0]))
            data = (int(offsets[p]), int(offsets[q] + sizes[q] - offsets[p]))
            by_rows.setdefault((start_row, end_row), []).append((position, column, dictionary, int(offsets[0]), data))
            pages += q - p + 1
        ranges: list[tuple[int, int]] = []
        files: list = []
        for (start_row, end_row), chosen in by_rows.items():
            parts, strings, first_range = [], [], len(ranges)
            for i, (_, column, dictionary, first_page, data) in enumerate(chosen):
                dictionary_size = 0 if dictionary is None else first_page - dictionary
                if dictionary is not None:
                    ranges.append((dictionary, dictionary_size))
                    if tc.get(tc.get(self.chunk(rg, column), 3), 1) == _BINARY:
                        strings.append(i)
                ranges.append(data)
                parts.append((column, dictionary_size, data[1]))
            footer = self._footer(rg, parts, end_row - start_row)
            meta = pq.read_metadata(pa.BufferReader(b"PAR1" + footer))
            outputs = [position for position, *_ in chosen]
            files.append((outputs, len(ranges) - first_range, meta, strings, low - start_row))
        return ranges, files, pages

    def _dictionary_offset(self, rg: int, column: int, first_page: int) -> int | None:
        offset = tc.get(tc.get(self.chunk(rg, column), 3), 11)
        return offset if offset is not None and offset < first_page else None

    def _footer(self, rg: int, parts: list[tuple[int, int, int]], rows: int) -> bytes:
        """The footer (thrift, length, magic) of a Parquet file of one row group whose column chunks,
        one per (column, dictionary page bytes (0: none), data page bytes) of `parts`, follow its
        magic back to back."""
        chunks, position = [], 4
        for column, dictionary, data in parts:
            size = dictionary + data
            chunk_meta = tc.replaced(
                tc.get(self.chunk(rg, column), 3),
                {
                    5: (tc.I64, rows),  # num_values: flat columns have one value (or null) per row
                    6: (tc.I64, size),
                    7: (tc.I64, size),
                    9: (tc.I64, position + dictionary),
                    10: None,
                    11: (tc.I64, position) if dictionary else None,
                    12: None,  # statistics, bloom filter and size statistics describe the whole chunk
                    14: None,
                    15: None,
                    16: None,
                },
            )
            chunks.append([[2, tc.I64, position], [3, tc.STRUCT, chunk_meta]])
            position += size
        row_group = [[1, tc.LIST, (tc.STRUCT, chunks)], [2, tc.I64, position - 4], [3, tc.I64, rows]]
        leaves = [self.leaves[column] for column, _, _ in parts]
        footer = [
            [1, tc.I32, tc.get(self.fields, 1)],
            [2, tc.LIST, (tc.STRUCT, [tc.replaced(self.root, {5: (tc.I32, len(parts))}), *leaves])],
            [3, tc.I64, rows],
            [4, tc.LIST, (tc.STRUCT, [row_group])],
        ]
        metadata = tc.get(self.fields, 5)
        if metadata is not None:  # the file's key-value metadata: decoded rows carry it as read rows do
            footer.append([5, tc.LIST, metadata])
        created_by = tc.get(self.fields, 6)
        if created_by is not None:  # readers apply writer-version fixes by it
            footer.append([6, tc.BINARY, created_by])
        if self.orders is not None:
            footer.append([7, tc.LIST, (tc.STRUCT, [self.orders[column] for column, _, _ in parts])])
        encoded = tc.encode(footer)
        return encoded + len(encoded).to_bytes(4, "little") + b"PAR1"
