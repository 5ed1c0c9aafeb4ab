"""The storage seam for readers: every read goes through a pyarrow FileSystem, and this module can
count what is really read (opens, read calls, bytes) for tests and benchmarks."""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq


@dataclass
class IOStats:
    opens: int = 0
    reads: int = 0
    bytes_read: int = 0

    def snapshot(self) -> IOStats:
        return IOStats(self.opens, self.reads, self.bytes_read)

    def since(self, earlier: IOStats) -> IOStats:
        return IOStats(self.opens - earlier.opens, self.reads - earlier.reads, self.bytes_read - earlier.bytes_read)


class _CountingReader(io.RawIOBase):
    def __init__(self, inner: pa.NativeFile, stats: IOStats, lock: threading.Lock) -> None:
        self._inner = inner
        self._stats = stats
        self._lock = lock

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._inner.seek(offset, whence)

    def tell(self) -> int:
        return self._inner.tell()

    def readinto(self, buffer) -> int:
        data = self._inner.read(len(buffer))
        n = len(data)
        buffer[:n] = data
        with self._lock:
            self._stats.reads += 1
            self._stats.bytes_read += n
        return n

    def read(self, size: int = -1) -> bytes:
        data = self._inner.read() if size is None or size < 0 else self._inner.read(size)
        with self._lock:
            self._stats.reads += 1
            self._stats.bytes_read += len(data)
        return data

    def size(self) -> int:
        return self._inner.size()

    def close(self) -> None:
        self._inner.close()
        super().close()


class CountingFileSystem:
    """Opens files through an inner pyarrow FileSystem and counts opens, reads and bytes."""

    def __init__(self, inner: pafs.FileSystem | None = None) -> None:
        self.inner = inner
        self.stats = IOStats()
        self._lock = threading.Lock()

    def open_input_file(self, uri: str) -> pa.PythonFile:
        fs, path = (self.inner, uri) if self.inner else resolve_uri(uri)
        with self._lock:
            self.stats.opens += 1
        return pa.PythonFile(_CountingReader(fs.open_input_file(path), self.stats, self._lock), mode="r")


_LOCAL = pafs.LocalFileSystem()


class PlainFileSystem:
    """The uncounted seam: the same interface, straight to pyarrow."""

    def open_input_file(self, uri: str) -> pa.NativeFile:
        fs, path = resolve_uri(uri)
        return fs.open_input_file(path)


def resolve_uri(uri: str) -> tuple[pafs.FileSystem, str]:
    """A file URI or local path as (filesystem, path) through pyarrow's filesystem seam."""
    if uri.startswith("file:") and not uri.startswith("file://"):
        return pafs.LocalFileSystem(), uri[len("file:") :]  # Hadoop's spelling (Spark-written files)
    if "://" not in uri:
        return _LOCAL, uri
    if uri.startswith("file://") and "%" not in uri:  # no percent-escapes to decode: skip URI parsing
        return _LOCAL, uri[len("file://") :]
    if uri.startswith(("s3://", "s3a://")):
        from seqlake.storage import s3_filesystem  # endpoint and credentials from the AWS settings

        return s3_filesystem(), uri.split("://", 1)[1]
    return pafs.FileSystem.from_uri(uri)


def engine_location(uri: str) -> str:
    """A location DuckDB opens itself: a local path for a file URI, any other URI (s3://...) unchanged."""
    if uri.startswith("file:"):
        return resolve_uri(uri)[1]
    return uri


def is_local(uri: str) -> bool:
    """Whether a file URI or path names a file on the local file system."""
    return "://" not in uri or uri.startswith("file:")


class FooterCache:
    """A bounded LRU of parsed Parquet footers: a reader that looks up many users in the same file
    parses its footer once. Files are immutable, so an entry never goes stale."""

    def __init__(self, capacity: int = 1024) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[str, pq.FileMetaData] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, uri: str) -> pq.FileMetaData | None:
        with self._lock:
            meta = self._entries.get(uri)
            if meta is None:
                self.misses += 1
                return None
            self.hits += 1
            self._entries.move_to_end(uri)
            return meta

    def put(self, uri: str, meta: pq.FileMetaData) -> None:
        with self._lock:
            self._entries[uri] = meta
            self._entries.move_to_end(uri)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)


def read_footer(handle: pa.NativeFile) -> pq.FileMetaData:
    """Parse a Parquet footer with two exact reads (length, then footer), instead of pyarrow's
    speculative 64 KiB tail read: a point lookup pays for the footer's real size only."""
    size = handle.size()
    handle.seek(size - 8)
    tail = handle.read(8)
    if tail[4:] != b"PAR1":
        raise OSError("not a Parquet file (no PAR1 magic at the end)")
    length = int.from_bytes(tail[:4], "little")
    handle.seek(size - 8 - length)
    footer = handle.read(length)
    return pq.read_metadata(pa.BufferReader(b"PAR1" + footer + tail))


_verify = True  # page CRCs and footer digests checked; off only inside `unverified_reads`


@contextmanager
def unverified_reads() -> Iterator[None]:
    """Reads in the block check neither page CRCs nor footer digests. Only the read benchmark uses it,
    to measure what verification costs (`seqlake bench-reads`); every other read is verified."""
    global _verify
    _verify = False
    try:
        yield
    finally:
        _verify = True


def load_footer(fs, footers: FooterCache, uri: str) -> pq.FileMetaData:
    """A file's parsed footer, from the cache or read with two exact reads and cached."""
    meta = footers.get(uri)
    if meta is None:
        from tableformat.verified import verified_file, verified_footer  # verified builds on this module

        with verified_file(fs, uri) as handle:
            # checked against the layout digest the writer stored
            meta = verified_footer(handle, uri) if _verify else read_footer(handle)
        footers.put(uri, meta)
    return meta


def open_parquet(
    source, meta: pq.FileMetaData | None = None, pre_buffer: bool = False, read_dictionary: list[str] | None = None
) -> pq.ParquetFile:
    """The one place readers turn bytes into a ParquetFile to decode rows (whole row groups of a data
    file, or the pages `tableformat.page_reader` assembles): read options belong here."""
    # Every page's CRC is checked as it is decoded: a flipped byte is an error, never wrong rows.
    return pq.ParquetFile(
        source,
        metadata=meta,
        pre_buffer=pre_buffer,
        page_checksum_verification=_verify,
        read_dictionary=read_dictionary,
    )


def read_row_groups(fs, uri: str, meta: pq.FileMetaData, groups: list[int], columns: list[str]) -> pa.Table:
    """The rows of `groups` (ascending) with `columns`. On an object store, pre-buffering fetches the
    column chunks in few coalesced requests; a local file is read chunk by chunk on the calling thread
    instead (pre-buffering hands each read to pyarrow's I/O pool and waits for it: a thread hand-off
    per lookup that costs more than the read from the page cache, `seqlake bench-peers`). Decoding on
    the calling thread is faster than pyarrow's pool for a lookup's few chunks, and leaves the
    parallelism to the caller."""
    from tableformat.verified import verified_file

    with verified_file(fs, uri) as handle:
        parquet = open_parquet(handle, meta, pre_buffer=not is_local(uri), read_dictionary=columns)
        return dictionaries_decoded(parquet.read_row_groups(groups, columns=columns, use_threads=False))


def dictionaries_decoded(table: pa.Table) -> pa.Table:
    """`table` with its dictionary-typed columns as plain values. Parquet decodes a dictionary-encoded
    string chunk into dictionary indices cheaply, and Arrow's take builds the strings faster than
    pyarrow's per-value string building (about 8% of a 15-column lookup, `seqlake bench-peers`)."""
    for i, field in enumerate(table.schema):
        if pa.types.is_dictionary(field.type):
            values = [chunk.dictionary_decode() for chunk in table.column(i).chunks]
            plain = field.with_type(field.type.value_type)
            table = table.set_column(i, plain, pa.chunked_array(values, plain.type))
    return table


def read_byte_ranges(fs, uri: str, ranges: list[tuple[int, int]]) -> list[bytes]:
    """The bytes of each (offset, length) range of a file, in one open (page index, single pages)."""
    from tableformat.verified import verified_file

    out = []
    with verified_file(fs, uri) as handle:
        for offset, length in ranges:
            handle.seek(offset)
            out.append(handle.read(length))
    return out


def decode_parquet(data: bytes) -> pa.Table:
    """All rows of a small Parquet file held in memory."""
    return open_parquet(pa.BufferReader(data)).read_row_group(0, use_threads=False)
