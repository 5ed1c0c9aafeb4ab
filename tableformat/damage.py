"""Damaged bytes as one clear error: which errors mean a damaged file, the table a file belongs to, what is wrong."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow as pa
import pyarrow.fs

from seqlake.core.errors import CorruptFileError

# Errors pyarrow, the file system and footer parsing raise on damaged bytes (ArrowInvalid is a ValueError).
DAMAGE = (OSError, EOFError, pa.ArrowException, ValueError, KeyError, IndexError, UnicodeDecodeError, struct.error)


def table_of(uri: str) -> str:
    """The table a data file belongs to: the folder above its `data/` folder (Iceberg's layout)."""
    head = uri.rsplit("/data/", 1)[0] if "/data/" in uri else uri.rsplit("/", 1)[0]
    return head.rstrip("/").rsplit("/", 1)[-1] or uri


def describe(error: BaseException) -> str:
    """What is wrong with a file, in words, from the error reading it raised."""
    text = " ".join(str(error).split()) or type(error).__name__
    if isinstance(error, FileNotFoundError):
        return "missing (the file does not exist)"
    if "CRC checksum" in text or "page integrity" in text:
        return f"corrupt page (checksum mismatch): {text}"
    if any(s in text for s in ("end of stream", "end of file", "file size", "PAR1", "magic", "too small")):
        return f"truncated or not a Parquet file: {text}"
    if "thrift" in text.lower() or "metadata" in text.lower():
        return f"corrupt metadata: {text}"
    if isinstance(error, PermissionError):
        return f"unreadable (permission denied): {text}"
    return f"corrupt or unreadable ({type(error).__name__}): {text}"


@contextmanager
def verified_file(fs: pa.fs.FileSystem, path: str, uri: str | None = None) -> Iterator[pa.NativeFile]:
    """Open `path` on `fs`; any damage met while the block reads it is raised as CorruptFileError."""
    uri = uri or path
    try:
        with fs.open_input_file(path) as handle:
            yield handle
    except CorruptFileError:
        raise
    except DAMAGE as error:
        raise CorruptFileError(table_of(uri), uri, describe(error)) from error
