"""Verified reads of seqlake's Parquet files: a corrupt, truncated or missing file is one clear error.

Files are written with Parquet page checksums (CRC-32 of every page, `seqlake.tableformat.writer`); opening
them with `open_verified` makes pyarrow check each page it decodes, so a flipped bit fails the read
instead of turning into wrong rows. Parquet has no checksum over its footer, so `verified_footer`
compares the footer with the layout digest the writer stored in it (`FileFacts.layout_digest`): a
flipped row-group statistic would otherwise make a lookup skip the user's rows. `verified_file` opens
the file and turns whatever pyarrow or the operating system raises while it is read (a missing file,
a short read, undecodable metadata, a checksum mismatch) into one `CorruptFileError` that names the
table, the file and what is wrong:

    with verified_file(fs, uri) as handle:
        meta = verified_footer(handle, uri)
        parquet = open_verified(handle, metadata=meta, pre_buffer=False)
        rows = parquet.read_row_groups(groups, columns=columns)
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from seqlake.core.errors import CorruptFileError
from seqlake.tableformat.damage import DAMAGE, describe, table_of, verified_file
from seqlake.tableformat.footer import FileFacts, layout_digest_of
from seqlake.tableformat.io import FooterCache, read_footer, resolve_uri, verifying


def check_footer(meta: pq.FileMetaData, uri: str, seqlake_file: bool = False) -> pq.FileMetaData:
    """`meta`, if it is the footer its writer wrote (layout digest); else CorruptFileError.

    With `seqlake_file` (a history file, which seqlake's writer always stamps), a footer without
    seqlake's metadata or layout digest is refused too: the file is not the one the manifest lists
    (replaced by another Parquet file)."""
    try:
        facts = FileFacts.from_metadata(meta.metadata)
        if facts is None or not facts.layout_digest:
            if seqlake_file:
                what = "seqlake metadata" if facts is None else "layout digest"
                raise CorruptFileError(
                    table_of(uri), uri, f"not a file seqlake wrote: its footer has no {what} (replaced?)"
                )
            return meta  # not a seqlake history file: nothing to compare
        actual = layout_digest_of(meta)
    except CorruptFileError:
        raise
    except DAMAGE as error:
        raise CorruptFileError(table_of(uri), uri, f"corrupt metadata: {describe(error)}") from error
    if actual != facts.layout_digest:
        raise CorruptFileError(
            table_of(uri),
            uri,
            "corrupt metadata: the footer's schema or row-group statistics differ from what was written",
        )
    return meta


def check_size(actual: int, expected: int | None, uri: str) -> None:
    """CorruptFileError unless the file has the size its manifest lists (when that is known)."""
    if expected is not None and actual != expected:
        raise CorruptFileError(
            table_of(uri), uri, f"size {actual} bytes differs from the manifest's {expected} (replaced or truncated)"
        )


def verified_footer(
    handle: pa.NativeFile, uri: str, size: int | None = None, seqlake_file: bool = False
) -> pq.FileMetaData:
    """The file's footer (two exact reads, `seqlake.tableformat.io.read_footer`), checked against its layout
    digest, and the file's size against `size` (the manifest's) when given."""
    actual = handle.size()
    check_size(actual, size, uri)
    if actual >= 12:
        handle.seek(actual - 8)
        tail = handle.read(8)
        length = int.from_bytes(tail[:4], "little")
    if actual < 12 or tail[4:] != b"PAR1" or length > actual - 12:
        raise CorruptFileError(
            table_of(uri), uri, f"truncated or not a Parquet file ({actual} bytes, no complete footer)"
        )
    return check_footer(read_footer(handle), uri, seqlake_file)


def open_verified(source: pa.NativeFile | str, **options) -> pq.ParquetFile:
    """A ParquetFile whose reads check every page's checksum (pages written without one are read as they are)."""
    return pq.ParquetFile(source, page_checksum_verification=True, **options)


def read_verified(uri: str, columns: list[str] | None = None) -> pa.Table:
    """Every row of a local or remote Parquet file (optionally some columns), pages verified."""

    fs, path = resolve_uri(uri)
    with verified_file(fs, path, uri) as handle:
        meta = verified_footer(handle, uri)
        return open_verified(handle, metadata=meta).read(columns=columns)


def load_footer(fs, footers: FooterCache, uri: str, size: int | None = None) -> pq.FileMetaData:
    """A history file's parsed footer, from the cache or read with two exact reads and cached; the
    file must have `size` bytes (its manifest's, when the caller knows it), and its footer seqlake's
    metadata and layout digest: a file replaced by another Parquet file is refused, never read."""
    found = footers.entry(uri)
    if found is not None:
        meta, actual = found
        if actual is not None:
            check_size(actual, size, uri)  # the file read before is the one this snapshot lists
        return meta
    with verified_file(fs, uri) as handle:
        actual = handle.size()
        if verifying():
            meta = verified_footer(handle, uri, size=size, seqlake_file=True)
        else:
            check_size(actual, size, uri)
            meta = read_footer(handle)
    footers.put(uri, meta, actual)
    return meta
