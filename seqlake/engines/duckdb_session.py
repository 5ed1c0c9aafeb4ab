"""DuckDB connections with extensions loaded from the installed `duckdb-extension-*` wheels.

Auto-install and auto-load are switched off: DuckDB never downloads an extension at run time. DuckDB
checks each file's signature the first time this process loads it, not in every new database.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import threading
import weakref
from pathlib import Path

import duckdb

from seqlake.core.errors import SetupError

# Load order matters: iceberg reads Avro manifests through the avro extension.
DEFAULT_EXTENSIONS = ("avro", "iceberg", "delta")
# Follows the warehouse of the catalog this process opened last (seqlake.engines.catalog): on object storage,
# every connection that loads the lake extensions can read s3:// URIs too. A process works on one
# warehouse at a time, so this spares every pipeline step from passing the warehouse along.
_object_storage = False

# Every connection this process opened and has not dropped. They are closed before the interpreter
# finalizes: a connection destroyed during finalization releases the GIL in its destructor, and a
# thread that takes it then (an Arrow pool thread, say) is ended by Python inside DuckDB's C++
# frames, which aborts the process ("terminate called without an active exception", exit -6) after a
# command that had done all its work (duckdb/duckdb#13904).
_open: weakref.WeakSet[duckdb.DuckDBPyConnection] = weakref.WeakSet()


@atexit.register
def _close_open_connections() -> None:
    for con in list(_open):
        with contextlib.suppress(duckdb.Error):
            con.close()


def object_storage_for(enabled: bool) -> None:
    """Give later lake connections of this process S3 access, or not (see `use_object_storage`)."""
    global _object_storage
    _object_storage = enabled


def extension_path(name: str) -> Path:
    """Path of `<name>.duckdb_extension` shipped by the PyPI wheel `duckdb-extension-<name>`."""
    spec = importlib.util.find_spec(f"duckdb_extension_{name}")
    if spec is None or spec.origin is None:
        raise SetupError(f"DuckDB extension {name!r} is not installed: pip install duckdb-extension-{name}")
    folder = Path(spec.origin).parent / "extensions" / f"v{duckdb.__version__}"
    path = folder / f"{name}.duckdb_extension"
    if not path.exists():
        raise SetupError(
            f"duckdb-extension-{name} does not ship a build for duckdb {duckdb.__version__} "
            f"(looked for {path}); pin both to the same version"
        )
    return path


def sql_literal(text: str) -> str:
    """`text` as a SQL string literal (for statements that take no parameters, e.g. LOAD, SET)."""
    return "'" + text.replace("'", "''") + "'"


# The extension files whose signature DuckDB checked in this process (by size and modification
# time). DuckDB checks it on every LOAD, which for avro, iceberg and delta costs about 0.5 s of CPU
# per new database, so a database that loads only checked files starts without checking them again.
_checked: dict[Path, tuple[int, int]] = {}


def _identity(path: Path) -> tuple[int, int]:
    found = path.stat()
    return found.st_size, found.st_mtime_ns


def _was_checked(path: Path) -> bool:
    return _checked.get(path) == _identity(path)


def connect(
    database: str = ":memory:",
    extensions: tuple[str, ...] = DEFAULT_EXTENSIONS,
    read_only: bool = False,
    object_storage: bool | None = None,
    settings: dict[str, str | int | float | list[str]] | None = None,
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the given extensions loaded from local files; with `object_storage`
    (default: if this process works on a warehouse on object storage) it reads and writes s3:// too.
    `settings` are DuckDB settings fixed when the database starts."""
    storage = bool(extensions) and (_object_storage if object_storage is None else object_storage)
    paths = [extension_path(name) for name in (*extensions, *(("httpfs",) if storage else ()))]
    checked = bool(paths) and all(_was_checked(path) for path in paths)
    con = duckdb.connect(
        database,
        read_only=read_only,
        config={
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
            # Only files whose signature DuckDB checked earlier in this process: see _was_checked.
            "allow_unsigned_extensions": checked,
            **(settings or {}),
        },
    )
    _open.add(con)
    quiet(con)
    for path in paths[: len(extensions)]:
        con.execute(f"LOAD {sql_literal(str(path))}")
    if storage:
        use_object_storage(con)
    for path in paths:
        _checked[path] = _identity(path)
    return con


def quiet(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """No DuckDB progress bar on this connection: it draws on stdout once a query runs 2 s, which
    would break `--output json` (seqlake reports progress itself, on stderr)."""
    # In Jupyter without ipywidgets DuckDB draws no bar, and refuses to be told so.
    with contextlib.suppress(duckdb.InvalidInputException):
        con.execute("SET enable_progress_bar = false")
    return con


_shared: duckdb.DuckDBPyConnection | None = None
_shared_lock = threading.Lock()


def lake_cursor() -> duckdb.DuckDBPyConnection:
    """A new connection to the process's one in-memory lake database (extensions loaded once): for the
    pipeline's reads of the lake (a batch's landing rows, the landed windows, fresh reads, a capture's
    online view), where loading the extensions into a new database (about 0.3 s of CPU for delta alone)
    would cost more than the queries. Its temporary tables, views and registered Arrow tables are its
    own; it must not change the database's settings (a job that needs its own opens `connect`). On
    object storage every call connects afresh, with the secret of the current AWS settings."""
    global _shared
    if _object_storage:
        return connect()
    with _shared_lock:
        if _shared is None:
            _shared = connect()
        cursor = _shared.cursor()
        _open.add(cursor)
        return quiet(cursor)


def use_object_storage(con: duckdb.DuckDBPyConnection) -> None:
    """Let `con` read and write s3:// URIs: httpfs from its wheel, a secret from the AWS settings.

    The same settings as pyiceberg's FileIO and pyarrow's S3 filesystem (`seqlake.engines.storage`).
    """
    from seqlake.engines.storage import S3Settings

    path = extension_path("httpfs")
    unchecked_allowed = con.execute("SELECT current_setting('allow_unsigned_extensions')").fetchone()
    if not _was_checked(path) and unchecked_allowed and unchecked_allowed[0]:
        # A database opened without signature checks (see connect) must not load an unchecked file.
        with duckdb.connect(
            config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
        ) as probe:
            probe.execute(f"LOAD {sql_literal(str(path))}")
        _checked[path] = _identity(path)
    con.execute(f"LOAD {sql_literal(str(path))}")
    con.execute(S3Settings.from_env().duckdb_secret(sql_literal))


# What a confined session fixes when its database starts (the secret manager's settings cannot change later).
SESSION_SETTINGS: dict[str, str | int | float | list[str]] = {
    "allow_persistent_secrets": False,
    "allow_community_extensions": False,
}


def restrict_access(
    con: duckdb.DuckDBPyConnection,
    readable: list[str],
    export_dir: Path | None = None,
    local_files: list[str] = (),  # type: ignore[assignment]  # a tuple default
    object_storage: bool = False,
) -> None:
    """Confine `con` for good to the `readable` folders (URIs, which a registered read-only file
    system serves: `seqlake.engines.read_only_fs`), `export_dir` and the `local_files` (which its own local
    file system opens): no network, no extension loading, its configuration locked (and, opened with
    `SESSION_SETTINGS`, no persistent secrets). With `object_storage`, httpfs's S3 file system is
    switched off, so s3:// is read only through the read-only file system.

    Load extensions and define views first: afterwards no statement can switch any of this back on.
    DuckDB lets a statement write wherever its own file systems may open files: `export_dir` (and the
    `local_files`) only.
    """
    folders = sorted({folder.rstrip("/") + "/" for folder in readable})
    if export_dir is not None:
        folders.append(str(export_dir).rstrip("/") + "/")
    con.execute(f"SET allowed_directories = [{', '.join(sql_literal(f) for f in folders)}]")
    if local_files:
        con.execute(f"SET allowed_paths = [{', '.join(sql_literal(f) for f in sorted(set(local_files)))}]")
    if object_storage:
        con.execute("SET disabled_filesystems = 'S3FileSystem'")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
