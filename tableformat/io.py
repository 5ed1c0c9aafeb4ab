"""The storage seam for readers: every read goes through a pyarrow FileSystem, and this module can
count what is really read (opens, read calls, bytes) for tests and benchmarks."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from dataclasses import field as dataclass_field

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from cachetools import LRUCache
from pyarrow._parquet import ParquetReader  # the reader without ParquetFile's per-open Python set-up

from seqlake.core.errors import CorruptFileError
from seqlake.tableformat.counted_cache import CountedCache
from seqlake.tableformat.damage import DAMAGE, describe, table_of, verified_file


@dataclass
class IOStats:
    opens: int = 0
    reads: int = 0
    bytes_read: int = 0
    reads_by_file: dict[str, int] = dataclass_field(default_factory=dict)

    @property
    def files(self) -> int:
        """Files read from (readers keep files open, so opens count first uses only)."""
        return sum(1 for n in self.reads_by_file.values() if n)

    def snapshot(self) -> IOStats:
        return IOStats(self.opens, self.reads, self.bytes_read, dict(self.reads_by_file))

    def since(self, earlier: IOStats) -> IOStats:
        by_file = {f: n - earlier.reads_by_file.get(f, 0) for f, n in self.reads_by_file.items()}
        return IOStats(
            self.opens - earlier.opens, self.reads - earlier.reads, self.bytes_read - earlier.bytes_read, by_file
        )


class _CountingReader(io.RawIOBase):
    def __init__(self, inner: pa.NativeFile, owner: CountingFileSystem, uri: str) -> None:
        self._inner = inner
        self._owner = owner  # its `stats` at the time of each read (a caller may swap in fresh ones)
        self._uri = uri

    def _count(self, n: int) -> None:
        with self._owner._lock:
            stats = self._owner.stats
            stats.reads += 1
            stats.bytes_read += n
            stats.reads_by_file[self._uri] = stats.reads_by_file.get(self._uri, 0) + 1

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
        self._count(n)
        return n

    def read(self, size: int = -1) -> bytes:
        data = self._inner.read() if size is None or size < 0 else self._inner.read(size)
        self._count(len(data))
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
        return pa.PythonFile(_CountingReader(fs.open_input_file(path), self, uri), mode="r")


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
        from seqlake.engines.storage import s3_filesystem  # endpoint and credentials from the AWS settings

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


class FooterCache(CountedCache[str, tuple[pq.FileMetaData, int | None]]):
    """A bounded LRU of parsed Parquet footers (cachetools): a reader that looks up many users in the
    same file parses its footer once. Files are immutable, so an entry never goes stale. Each footer
    is kept with the size the file had when it was read, which a snapshot's manifest must agree with."""

    def __init__(self, capacity: int = 1024) -> None:
        super().__init__(LRUCache(maxsize=capacity))
        self.capacity = capacity

    def get(self, uri: str) -> pq.FileMetaData | None:
        found = self.entry(uri)
        return None if found is None else found[0]

    def entry(self, uri: str) -> tuple[pq.FileMetaData, int | None] | None:
        """(footer, file size when read) of `uri`, counted as a hit or a miss."""
        return self.lookup(uri)

    def put(self, uri: str, meta: pq.FileMetaData, size: int | None = None) -> None:
        with self._lock:
            self._entries[uri] = (meta, size)


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


def verifying() -> bool:
    """Whether reads check page CRCs and footer digests (always, but inside `unverified_reads`)."""
    return _verify


def open_parquet(
    source, meta: pq.FileMetaData | None = None, pre_buffer: bool = False, read_dictionary: list[str] | None = None
) -> pq.ParquetFile:
    """The one place readers turn bytes into a ParquetFile to decode rows (whole row groups of a data
    file, or the pages `seqlake.tableformat.page_reader` assembles): read options belong here."""
    # Every page's CRC is checked as it is decoded: a flipped byte is an error, never wrong rows.
    return pq.ParquetFile(
        source,
        metadata=meta,
        pre_buffer=pre_buffer,
        page_checksum_verification=_verify,
        read_dictionary=read_dictionary,
    )


class _IdleFiles(LRUCache):
    """uri -> idle (handle, ParquetFile) pairs; the pairs of an evicted file are kept to be closed."""

    def __init__(self, maxsize: int) -> None:
        super().__init__(maxsize=maxsize)
        self.evicted: list[tuple[pa.NativeFile, pq.ParquetFile]] = []

    def popitem(self):
        uri, pairs = super().popitem()
        self.evicted += pairs
        return uri, pairs


class OpenFiles:
    """Opened data files kept between lookups: per file, idle (handle, ParquetFile) pairs, LRU-bounded
    by files (cachetools). Opening a file and building pyarrow's reader (its schema manifest, the
    dictionary columns) costs about as much as decoding a 10K-event lookup's two columns, and files are
    immutable, so a reader keeps them. A pair is used by one thread at a time (checked out, then
    returned); at most `per_file` idle pairs are kept per file, so threads reading one file each
    get their own."""

    def __init__(self, capacity: int = 64, per_file: int = 4) -> None:
        self.capacity, self.per_file = capacity, per_file
        self._idle = _IdleFiles(capacity)
        self._lock = threading.Lock()

    def take(self, fs, uri: str, meta: pq.FileMetaData) -> tuple[pa.NativeFile, pq.ParquetFile]:
        with self._lock:
            idle = self._idle.get(uri)  # a hit is the most recently used file now
            if idle:
                return idle.pop()
        handle = fs.open_input_file(uri)
        try:
            strings = [f.name for f in meta.schema.to_arrow_schema() if _is_string(f.type)]
            return handle, open_parquet(handle, meta, pre_buffer=not is_local(uri), read_dictionary=strings)
        except BaseException:
            handle.close()
            raise

    def give_back(self, uri: str, opened: tuple[pa.NativeFile, pq.ParquetFile]) -> None:
        if not (self.capacity and self.per_file):  # keeps nothing: a one-off read's files
            opened[0].close()
            return
        with self._lock:
            idle = self._idle.get(uri)
            if idle is None:
                idle = self._idle[uri] = []  # may evict the least recently used file
            kept = len(idle) < self.per_file
            if kept:
                idle.append(opened)
            evicted, self._idle.evicted = self._idle.evicted, []
        for handle, _ in evicted + ([] if kept else [opened]):
            handle.close()

    def opened(self, fs, uri: str, meta: pq.FileMetaData) -> _Opened:
        """A file's (handle, ParquetFile) for a `with` block; damage met while reading is raised as
        CorruptFileError (`seqlake.tableformat.verified`), and a pair that failed is not kept."""
        return _Opened(self, fs, uri, meta)

    def clear(self) -> None:
        with self._lock:
            idle, self._idle = [*self._idle.values(), self._idle.evicted], _IdleFiles(self.capacity)
        for pairs in idle:
            for handle, _ in pairs:
                handle.close()


class _Opened:
    """`OpenFiles.opened`: a class, not a generator, as it runs on every lookup."""

    __slots__ = ("files", "fs", "uri", "meta", "pair")

    def __init__(self, files: OpenFiles, fs, uri: str, meta: pq.FileMetaData) -> None:
        self.files, self.fs, self.uri, self.meta = files, fs, uri, meta

    def __enter__(self) -> tuple[pa.NativeFile, pq.ParquetFile]:
        try:
            self.pair = self.files.take(self.fs, self.uri, self.meta)
        except CorruptFileError:
            raise
        except DAMAGE as error:
            raise CorruptFileError(table_of(self.uri), self.uri, describe(error)) from error
        return self.pair

    def __exit__(self, kind, error, traceback) -> None:
        if kind is None:
            self.files.give_back(self.uri, self.pair)
            return
        self.pair[0].close()
        if isinstance(error, DAMAGE) and not isinstance(error, CorruptFileError):
            raise CorruptFileError(table_of(self.uri), self.uri, describe(error)) from error


def _is_string(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind)


def read_row_groups(
    fs, uri: str, meta: pq.FileMetaData, groups: list[int], columns: list[str], files: OpenFiles | None = None
) -> pa.Table:
    """The rows of `groups` (ascending) with `columns`, through the opened files `files` (a new
    one-use set if None). On an object store, pre-buffering fetches the column chunks in few
    coalesced requests; a local file is read chunk by chunk on the calling thread instead
    (pre-buffering hands each read to pyarrow's I/O pool and waits for it: a thread hand-off per
    lookup that costs more than the read from the page cache, `seqlake bench-peers`). Decoding on the
    calling thread is faster than pyarrow's pool for a lookup's few chunks, and leaves the parallelism
    to the caller."""
    files = files if files is not None else OpenFiles(capacity=0, per_file=0)
    with files.opened(fs, uri, meta) as (_, parquet):
        indices = [parquet.reader.column_name_idx(c) for c in columns]  # ParquetFile's own lookup, no Python wrapper
        return dictionaries_decoded(parquet.reader.read_row_groups(groups, column_indices=indices, use_threads=False))


def dictionaries_decoded(table: pa.Table) -> pa.Table:
    """`table` with its dictionary-typed columns as plain values. Parquet decodes a dictionary-encoded
    string chunk into dictionary indices cheaply, and Arrow's take builds the strings faster than
    pyarrow's per-value string building (about 8% of a 15-column lookup, `seqlake bench-peers`)."""
    schema = table.schema
    for i, kind in enumerate(schema.types):
        if isinstance(kind, pa.DictionaryType):
            values = [chunk.dictionary_decode() for chunk in table.column(i).chunks]
            plain = schema.field(i).with_type(kind.value_type)
            table = table.set_column(i, plain, pa.chunked_array(values, plain.type))
    return table


def read_byte_ranges(
    fs, uri: str, ranges: list[tuple[int, int]], meta: pq.FileMetaData | None = None, files: OpenFiles | None = None
) -> list[bytes]:
    """The bytes of each (offset, length) range of a file (page index, single pages), through an
    opened file of `files` when given (with the file's footer `meta`), else in one open."""
    if files is not None and meta is not None:
        with files.opened(fs, uri, meta) as (handle, _):
            return [handle.read_at(length, offset) for offset, length in ranges]
    with verified_file(fs, uri) as handle:
        return [_read_at(handle, offset, length) for offset, length in ranges]


def _read_at(handle, offset: int, length: int) -> bytes:
    return handle.read_at(length, offset)


def decode_pages(data: bytes, meta: pq.FileMetaData, strings: list[int] | None = None) -> pa.Table:
    """The rows of a small Parquet file held in memory whose footer `meta` is already parsed (the
    pages `seqlake.tableformat.page_reader` cuts out of column chunks), every page's CRC checked; the columns
    at `strings` are read as dictionary indices."""
    reader = ParquetReader()
    reader.open(
        pa.BufferReader(data),
        metadata=meta,
        pre_buffer=False,
        page_checksum_verification=_verify,
        read_dictionary=strings,
    )
    return reader.read_row_group(0, column_indices=range(meta.num_columns), use_threads=False)
