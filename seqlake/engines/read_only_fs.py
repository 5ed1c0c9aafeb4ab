"""The only way analyst SQL reaches the warehouse: a file system DuckDB reads through that cannot write.

`seqlake sql` registers a `ReadOnlyFileSystem` with its DuckDB connection for the warehouse's URI
scheme (`file://`, or `s3://` and `s3a://` on object storage). It opens files for reading only, and
only under the folders it is given; writing, creating, deleting, moving and copying raise
PermissionError whatever the statement. Folders given as `sealed` can be listed (file names and
sizes) but their files not opened: the history table's data files are read by the verified scan
(`seqlake.tableformat.verified_scan`), never by DuckDB's own Parquet reader, which checks no page checksums.
"""

from __future__ import annotations

import os
from typing import Any, NoReturn

import pyarrow as pa
import pyarrow.fs as pafs
from fsspec.spec import AbstractFileSystem

SCHEMES = ("file", "s3", "s3a")  # the URI schemes a warehouse lives under


class ReadOnlyFileSystem(AbstractFileSystem):
    """An fsspec file system over a pyarrow one: reads under `readable` (until `confine`: anywhere),
    nothing else."""

    cachable = False  # fsspec would otherwise hand the same instance to another set of folders

    def __init__(
        self,
        inner: pafs.FileSystem,
        protocols: tuple[str, ...],
        readable: list[str] | None = None,
        sealed: list[str] = (),  # type: ignore[assignment]  # a tuple default, as fsspec forbids mutable ones
        why_sealed: str = "",
    ) -> None:
        super().__init__()
        self.inner = inner
        self.protocol = protocols
        self.readable: list[str] | None = None if readable is None else [self._folder(p) for p in readable]
        self.sealed = [self._folder(p) for p in sealed]
        self.why_sealed = why_sealed

    def confine(self, readable: list[str], sealed: list[str]) -> None:
        """From now on read only under `readable`, and open no file under `sealed`."""
        self.readable = [self._folder(p) for p in readable]
        self.sealed = [self._folder(p) for p in sealed]

    # -- paths ----------------------------------------------------------------------------------

    @classmethod
    def _strip_protocol(cls, path: str) -> str:  # fsspec's glob and find spell paths without a scheme
        for scheme in SCHEMES:
            if path.startswith(scheme + "://"):
                path = path[len(scheme) + 3 :]
                break
        return path.rstrip("/") or "/"

    def _strip(self, path: str) -> str:
        return self._strip_protocol(path)

    def _real(self, path: str) -> str:
        """Where a path leads (symbolic links followed) on a local file system; itself elsewhere."""
        return os.path.realpath(path) if isinstance(self.inner, pafs.LocalFileSystem) else path

    def _folder(self, path: str) -> str:
        return self._real(self._strip(path)).rstrip("/") + "/"

    def _within(self, path: str, folders: list[str]) -> bool:
        return any((path + "/").startswith(folder) for folder in folders)

    def _listable(self, path: str) -> str:
        stripped = self._strip(path)
        outside = self.readable is not None and not self._within(self._real(stripped), self.readable)
        if ".." in stripped.split("/") or outside:
            raise PermissionError(f"{path}: outside the folders this session reads")
        return stripped

    def _sealed(self, stripped: str) -> bool:
        return self._within(self._real(stripped), self.sealed)

    def _entry(self, info: pafs.FileInfo) -> dict[str, Any]:
        kind = "directory" if info.type == pafs.FileType.Directory else "file"
        return {"name": info.path, "size": info.size or 0, "type": kind, "mtime": info.mtime}

    # -- reading --------------------------------------------------------------------------------

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> pa.NativeFile | SealedFile:
        if mode != "rb":
            self._refuse(path)
        stripped = self._listable(path)
        if self._sealed(stripped):  # its size may be asked (a listing), not its bytes
            return SealedFile(path, self.info(path)["size"], self.why_sealed)
        return self.inner.open_input_file(stripped)

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        found = self.inner.get_file_info(self._listable(path))
        if found.type == pafs.FileType.NotFound:
            raise FileNotFoundError(path)
        return self._entry(found)

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list:
        stripped = self._listable(path)
        found = self.inner.get_file_info(pafs.FileSelector(stripped, allow_not_found=True))
        entries = [self._entry(f) for f in found]
        return entries if detail else [e["name"] for e in entries]

    def modified(self, path: str):
        return self.info(path)["mtime"]

    # -- everything that would change storage ----------------------------------------------------

    def _refuse(self, path: object = "", *args: Any, **kwargs: Any) -> NoReturn:
        raise PermissionError(f"{path}: the session is read-only")

    mkdir = makedirs = rmdir = rm = rm_file = _rm = mv = cp_file = copy = _refuse
    touch = put = put_file = pipe = pipe_file = link = symlink = _refuse


class SealedFile:
    """An open file of a sealed folder: its size can be read, its bytes cannot."""

    def __init__(self, path: str, size: int, why: str) -> None:
        self.path, self._size, self.why = path, size, why or "not readable in this session"
        self.closed = False
        self._position = 0

    def size(self) -> int:
        return self._size

    def seek(self, position: int, whence: int = 0) -> int:
        self._position = (
            position if whence == 0 else (self._size + position if whence == 2 else self._position + position)
        )
        return self._position

    def tell(self) -> int:
        return self._position

    def read(self, *args: Any) -> NoReturn:
        raise PermissionError(f"{self.path}: {self.why}")

    readinto = read_at = read

    def close(self) -> None:
        self.closed = True
