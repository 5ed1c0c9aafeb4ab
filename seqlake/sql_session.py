"""The read-only SQL session: DuckDB on the warehouse's tables, with the analyst SQL of sql/ loaded.

`Lake.sql` and `seqlake sql` (seqlake.jobs.sql, where the views, variables and rules are listed) open
it with `open_session`; `run_script` runs a file's or a query's statements through its guard.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from seqlake.core import resources
from seqlake.core.errors import CorruptFileError, ReadOnlyError, SeqlakeError, SqlError
from seqlake.core.windows import window_start_sql
from seqlake.engines.catalog_tables import load_table_if_exists
from seqlake.engines.duckdb_session import (
    SESSION_SETTINGS,
    connect,
    restrict_access,
    sql_literal,
    use_object_storage,
)
from seqlake.sql_guard import Guard, inside, refused_functions, resolve_local

if TYPE_CHECKING:
    from seqlake.core.config import Config
    from seqlake.tableformat.verified_scan import VerifiedScan

log = logging.getLogger(__name__)

SQL_DIR = resources.sql_dir()  # packaged (sql/ of the repository)
# Noted when absent; every Iceberg table of the namespace (training, samples...) gets a verified view too.
ICEBERG_TABLES = ("history", "history_detail", "raw_events")
DELTA_TABLES = ("landing_events", "quarantine")
# Statements that loading runs; every other statement (queries, COPY, INSERT...) runs only with --file.
DEFINITIONS = frozenset(
    {
        duckdb.StatementType.CREATE,
        duckdb.StatementType.CREATE_FUNC,
        duckdb.StatementType.DROP,
        duckdb.StatementType.ALTER,
        duckdb.StatementType.SET,
        duckdb.StatementType.VARIABLE_SET,
    }
)
TENANTS_TYPE = "MAP(VARCHAR, STRUCT(feature_groups VARCHAR[], columns VARCHAR[], max_length BIGINT))"
_CREATED = re.compile(
    r"^\s*CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMP(?:ORARY)?\s+)?(?:VIEW|TABLE|MACRO|FUNCTION)\s+"
    r"(?:IF\s+NOT\s+EXISTS\s+)?(?:\w+\.)?(\w+)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class WarehouseTable:
    name: str
    format: str  # "iceberg" or "delta"
    location: str
    metadata_location: str | None = None


@dataclass(frozen=True)
class Result:
    statement: str
    columns: list[str]
    rows: list[tuple]


@dataclass
class SqlSession:
    """A DuckDB connection with the warehouse's relations and the SQL of sql/ defined."""

    con: duckdb.DuckDBPyConnection
    config: Config
    tables: dict[str, WarehouseTable]
    missing: dict[str, str] = field(default_factory=dict)  # relation or object -> why it is absent
    damaged: dict[str, str] = field(default_factory=dict)  # relation or object -> the damage it would read
    notes: list[str] = field(default_factory=list)
    local_files: list[str] = field(default_factory=list)  # `hadoop_spelled` files of the views' tables
    guard: Guard | None = None  # set once access is restricted: from then on every statement is judged
    scans: dict[str, VerifiedScan] = field(default_factory=dict)  # what each table's verified view reads

    @property
    def read_only(self) -> bool:
        return self.guard is not None

    @property
    def export_dir(self) -> Path | None:
        """The one folder COPY ... TO may write into."""
        return self.guard.export_dir if self.guard is not None else None

    def run(self, text: str, params: dict[str, object] | None = None, source: str = "query") -> list[Result]:
        """Run every statement of `text`; return the results of those that return rows."""
        return run_script(self, text, source, params=params)

    def query(self, text: str, **params: object):
        """The last statement's result as a pandas DataFrame, with `$name` parameters bound (for notebooks)."""
        return self._fetched(text, params, lambda result: result.df())

    def table(self, name: str, columns: list[str] | None = None):
        """Every row of the warehouse table `name` (its verified view) as an Arrow table; SqlError if the
        warehouse has no such table or a file of it is damaged (the message names the file)."""
        if name not in self.tables:
            known = ", ".join(sorted(self.tables)) or "none"
            why = self.missing.get(name, f"no table {name} in this warehouse (tables: {known})")
            raise SqlError(f"table {name}: {why}" if not why.startswith("table ") else why)
        chosen = ", ".join(_quoted(c) for c in columns) if columns is not None else "*"
        return self._fetched(
            f"SELECT {chosen} FROM {_quoted(name)}", {}, lambda result: result.to_arrow_table(), head=f"table {name}"
        )

    def _fetched(self, text: str, params: dict[str, object], fetch, head: str | None = None):
        """`fetch` of the last statement's result: a damaged page can surface only while the rows are
        fetched (DuckDB streams them), and is then the same one line as at execution."""
        result = self._last(text, params)
        try:
            return fetch(result)
        except duckdb.Error as error:
            explained = self._explained(error, text)
            if head is not None and explained.startswith(f"{head}:"):
                raise SqlError(explained) from None  # the damage line names the table already
            raise SqlError(f"{head or _first_line(text)}: {explained}") from None

    def _last(self, text: str, params: dict[str, object]) -> duckdb.DuckDBPyConnection:
        """Run every statement of `text`; the connection holding the last one's result."""
        head = _first_line(text)
        try:
            statements = self.con.extract_statements(text)
            unused = sorted(set(params) - set().union(*(s.named_parameters for s in statements)))
            if unused:
                raise SqlError(f"{head}: parameters {unused} are not used (write $name in the SQL to bind one)")
            self.judge(text, statements)
            relation = None
            for statement in statements:
                self.refuse_damaged(statement, head)
                bound = {k: params[k] for k in statement.named_parameters if k in params}
                relation = self.con.execute(statement, bound or None)
            if relation is None:
                raise SqlError(f"{head}: no statement to run")
            return relation
        except ReadOnlyError as error:
            raise SqlError(f"{head}: {error}") from None
        except duckdb.Error as error:
            raise SqlError(f"{head}: {self._explained(error, text)}") from None

    def _explained(self, error: duckdb.Error, text: str) -> str:
        """What a failed statement of `text` met: the damaged file it read, or the engine's error."""
        damage = self.damage(error, text)
        return damage if damage is not None else engine_error(error, self.config.warehouse_uri())

    def judge(self, text: str, statements: list[duckdb.Statement]) -> None:
        """Refuse the whole text unless every statement may run in a read-only session (writes,
        ATTACH, INSTALL, LOAD...); nothing is judged while the session is being set up."""
        if self.guard is not None:
            self.guard.check_script(text, statements)

    def refuse_damaged(self, statement: duckdb.Statement, source: str) -> None:
        """SqlError naming the damage if `statement` reads a relation built on a damaged file."""
        for name in _needs(self, statement.query):
            if name in self.damaged:
                raise SqlError(f"{source}: {self.damaged[name]}")

    def damage(self, error: duckdb.Error, text: str = "") -> str | None:
        """The damaged file behind a failed scan (DuckDB's error names none), if there is one, with the
        fsck command that says more. The tables `text` names are verified first, then the others."""
        if not self.scans or "arrow_scan" not in str(error):
            return None
        words = set(re.findall(r"[A-Za-z_]\w*", _strip_comments(text)))
        for name in sorted(self.scans, key=lambda n: n not in words):
            found = self.scans[name].find_damage()
            if found is not None:
                return damage_line(name, found)
        return None

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> SqlSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def damage_line(name: str, error: CorruptFileError) -> str:
    """A damaged file of table `name` as one line: the file, what is wrong, and the fsck that says more
    (`seqlake fsck` checks every table's files)."""
    return f"{CorruptFileError(name, error.uri, error.problem)} (`seqlake fsck --repair-plan` says more)"


_REFUSED_PATH = re.compile(r'Cannot access file "([^"]+)"')


def engine_error(error: duckdb.Error, warehouse: str | None = None) -> str:
    """DuckDB's message without the Python stack it appends when the read-only file system refused;
    a plain path inside the `warehouse` that DuckDB refused gets a hint to name it by its URI."""
    message = str(error).split("\n\nAt:\n", 1)[0].strip()
    refused = _REFUSED_PATH.search(message)
    root = resolve_local(warehouse) if warehouse is not None else None
    if refused and root is not None and "://" not in refused.group(1):
        path = resolve_local(refused.group(1))
        if path is not None and inside(path, root):
            first, _, rest = message.partition("\n")
            message = f"{first} (the warehouse is read by URI: file://{path})" + (f"\n{rest}" if rest else "")
    return message


def _first_line(text: str) -> str:
    lines = [line.strip() for line in _strip_comments(text).splitlines() if line.strip()]
    head = lines[0] if lines else text.strip()
    return head if len(head) <= 80 else head[:77] + "..."


def _strip_comments(text: str) -> str:
    return re.sub(r"--[^\n]*", "", text)


def _note(session: SqlSession, message: str, quiet: bool) -> None:
    session.notes.append(message)
    log.log(logging.DEBUG if quiet else logging.WARNING, message)


def _local_path(uri: str) -> Path | None:
    if uri.startswith("file://"):
        return Path(uri[len("file://") :])
    if "://" not in uri:
        return Path(uri)
    return None


def engine_uri(uri: str) -> str:
    """A location as the session's DuckDB names it: file:///path for a local one (read through the
    read-only file system, `seqlake.engines.read_only_fs`), any other URI unchanged."""
    local = resolve_local(uri)
    return f"file://{local}" if local is not None else uri


def define_relations(session: SqlSession, quiet: bool = False) -> None:
    """Views and variables for the warehouse's tables (only those that exist)."""
    con, config = session.con, session.config
    from seqlake.engines.catalog import check_warehouse, open_catalog, table_identifier
    from seqlake.pipelines.landing.tables import is_delta_table, landing_paths

    check_warehouse(config)

    catalog = open_catalog(config)
    loaded = {}
    for name in [*ICEBERG_TABLES, *(n for n in namespace_tables(catalog, config) if n not in ICEBERG_TABLES)]:
        identifier = table_identifier(config, name)
        found = load_table_if_exists(catalog, identifier)
        if found is None:
            session.missing[name] = f"no Iceberg table {identifier} in the catalog"
            continue
        table = loaded[name] = found
        session.tables[name] = WarehouseTable(
            name, "iceberg", engine_uri(table.location()), engine_uri(table.metadata_location)
        )
    paths = landing_paths(config)
    for name, location in zip(DELTA_TABLES, (paths.events, paths.quarantine), strict=True):
        if _local_path(location) is not None and not is_delta_table(location):
            session.missing[name] = f"no Delta table at {location}"
            continue
        session.tables[name] = WarehouseTable(name, "delta", engine_uri(location))

    for defined in list(session.tables.values()):
        try:
            con.execute(f"SET VARIABLE {defined.name}_location = ?", [defined.location])
            if defined.format == "iceberg":
                con.execute(f"SET VARIABLE {defined.name}_metadata = ?", [defined.metadata_location])
            if defined.format == "iceberg":
                scan = _iceberg_view(session, defined.name, loaded[defined.name])
                session.local_files += hadoop_spelled(loaded[defined.name])
            else:
                scan = _delta_view(session, defined)
            con.execute(f"CREATE OR REPLACE VIEW {_quoted(defined.name)} AS {scan}")
        except CorruptFileError as error:  # the table's files are not what its metadata lists
            del session.tables[defined.name]
            session.missing[defined.name] = session.damaged[defined.name] = damage_line(defined.name, error)
        except (duckdb.Error, SeqlakeError) as error:
            del session.tables[defined.name]
            session.missing[defined.name] = f"{defined.format} table at {defined.location} is unreadable: {error}"
    for name, why in session.missing.items():
        _note(session, f"{name} is not defined: {why}", quiet)

    delta = [t.location for t in session.tables.values() if t.format == "delta"]
    con.execute("SET VARIABLE delta_locations = CAST(? AS VARCHAR[])", [delta])
    formats = [t.format for t in session.tables.values()]
    con.execute(
        "SET VARIABLE seqlake_tables = CAST(MAP(?, ?) AS MAP(VARCHAR, VARCHAR))", [list(session.tables), formats]
    )
    con.execute("SET VARIABLE window_seconds = ?", [config.layout.window_seconds])
    start = window_start_sql("window_id", "getvariable('window_seconds')")
    con.execute(f"CREATE OR REPLACE MACRO window_start(window_id) AS {start}")
    names = list(config.tenants)
    specs = [
        {
            "feature_groups": list(config.tenants[t].feature_groups),
            "columns": config.tenant_columns(t),
            "max_length": config.tenants[t].max_length,
        }
        for t in names
    ]
    con.execute(f"SET VARIABLE tenants = CAST(MAP(?, ?) AS {TENANTS_TYPE})", [names, specs])


def namespace_tables(catalog, config: Config) -> list[str]:
    """Every Iceberg table of the configured namespace (training, samples, backfills, quarantines...)."""
    from pyiceberg.exceptions import NoSuchNamespaceError

    try:
        return sorted(identifier[-1] for identifier in catalog.list_tables(config.warehouse.namespace))
    except NoSuchNamespaceError:
        return []


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _sql_types(session: SqlSession, target) -> dict:
    """Each Arrow type of `target` as DuckDB spells it (the casts of columns a file predates)."""
    empty = session.con.from_arrow(target.empty_table())
    return {f.type: str(kind) for f, kind in zip(target, empty.types, strict=True)}


def _register(session: SqlSession, name: str, scan: VerifiedScan) -> str:
    for part in scan.parts:
        session.con.register(part.name, part.data)
    session.scans[name] = scan
    return scan.view_sql()


def _iceberg_view(session: SqlSession, name: str, table) -> str:
    """The verified scan of an Iceberg table registered with the session; the SELECT its view runs.
    History files are seqlake's (footer digest, declared column types); every table's file sizes and
    row counts are its manifests', and every page's CRC is checked as it is decoded."""
    from seqlake.tableformat.registry import FORMAT_PROPERTY
    from seqlake.tableformat.schema import history_read_schema, table_arrow_schema
    from seqlake.tableformat.verified_scan import table_scan

    history = name == "history" or FORMAT_PROPERTY in table.metadata.properties
    target, loose = history_read_schema(table) if history else table_arrow_schema(table.schema())
    prefix = "seqlake_history" if name == "history" else f"seqlake_{name}"
    scan = table_scan(table, _sql_types(session, target), target, loose, prefix, seqlake_files=history)
    return _register(session, name, scan)


def _delta_view(session: SqlSession, defined: WarehouseTable) -> str:
    """The Delta table's current version as a verified Arrow dataset registered with the session: each
    file's size and row count are the Delta log's, every page's CRC checked as it is decoded. DuckDB's
    delta_scan names the data files by plain paths, which only DuckDB's own local file system opens,
    and that one reaches no warehouse folder (`restrict_access`)."""
    from seqlake.pipelines.landing.live_files import delta_live_files
    from seqlake.tableformat.verified_scan import files_scan

    found = delta_live_files(defined.location)
    if found is None:
        raise SeqlakeError(f"no Delta table at {defined.location}")
    schema, files = found
    scan = files_scan(files, schema, {}, f"seqlake_{defined.name}", name=defined.name, project=False)
    return _register(session, defined.name, scan)


def define_file_views(session: SqlSession) -> None:
    """`files_<table>` for the tables sql/storage.sql does not name (training, samples...), as soon as
    sql/catalog.sql has defined `iceberg_files`: storage_files reads one such view per table."""
    con = session.con
    defined = {name for (name,) in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    macro = con.execute("SELECT count(*) FROM duckdb_functions() WHERE function_name = 'iceberg_files'").fetchone()
    if not macro or not macro[0]:
        return
    for table in session.tables.values():
        view = f"files_{table.name}"
        if table.format != "iceberg" or table.name in ICEBERG_TABLES or view in defined:
            continue
        name, metadata, location = (sql_literal(table.name + suffix) for suffix in ("", "_metadata", "_location"))
        con.execute(
            f"CREATE OR REPLACE VIEW {_quoted(view)} AS SELECT {name} AS table_name, 'iceberg' AS format, * "
            f"FROM iceberg_files(getvariable({metadata}), getvariable({location}))"
        )


def sql_files(folder: Path | Traversable = SQL_DIR) -> list[Path | Traversable]:
    """The SQL files loaded into every session, in the order they load (by name)."""
    return sorted((p for p in folder.iterdir() if p.name.endswith(".sql")), key=lambda p: p.name)


def _needs(session: SqlSession, text: str) -> list[str]:
    """Absent relations or skipped objects that a statement refers to."""
    words = set(re.findall(r"[A-Za-z_]\w*", _strip_comments(text)))
    return [
        name for name in session.missing if name in words or f"{name}_metadata" in words or f"{name}_location" in words
    ]


def run_script(
    session: SqlSession,
    text: str,
    source: str,
    *,
    params: dict[str, object] | None = None,
    definitions_only: bool = False,
    quiet: bool = False,
    on_result: Callable[[Result], None] | None = None,
) -> list[Result]:
    """Run the statements of `text` in order; a failed statement raises SqlError (nothing after it runs).

    A definition that fails because it needs an absent table is skipped with a note, and the object it
    would have created counts as absent for the statements after it.
    """
    con = session.con
    params = dict(params or {})
    try:
        statements = con.extract_statements(text)
    except duckdb.Error as error:
        raise SqlError(f"{source}: {error}") from None
    used = set().union(*(s.named_parameters for s in statements)) if statements else set()
    unused = sorted(set(params) - used)
    if unused:
        raise SqlError(f"{source}: parameters {unused} are not used (write $name in the SQL to bind one)")
    try:  # every statement first: a script with one refused statement runs none
        session.judge(text, statements)
    except ReadOnlyError as error:
        raise SqlError(f"{source}: {error}") from None
    results = []
    for statement in statements:
        definition = statement.type in DEFINITIONS
        if definitions_only and not definition:
            continue
        if not definitions_only:
            session.refuse_damaged(statement, source)
        bound = {k: params[k] for k in statement.named_parameters if k in params}
        try:
            cursor = con.execute(statement, bound or None)  # the statement judged, not its text parsed again
            rows = cursor.fetchall() if not definition and cursor is not None and cursor.description else None
        except (duckdb.Error, RuntimeError) as error:
            if interrupted(error):  # Ctrl-C stopped the statement: the caller decides what goes on
                raise KeyboardInterrupt from None
            if not isinstance(error, duckdb.Error):
                raise
            needed = _needs(session, statement.query)
            if needed and definition:
                created = _CREATED.match(_strip_comments(statement.query))
                what = created.group(1) if created else _first_line(statement.query)
                if created:
                    session.missing[what] = f"needs {', '.join(needed)}"
                    damaged = [session.damaged[n] for n in needed if n in session.damaged]
                    if damaged:
                        session.damaged[what] = damaged[0]
                _note(session, f"{source}: skipped {what}: needs {', '.join(needed)}, not in this warehouse", quiet)
                continue
            damage = session.damage(error, statement.query)
            if damage is not None:
                raise SqlError(f"{source}: {damage}") from None
            absent = "; ".join(f"{name}: {session.missing[name]}" for name in needed)
            hint = f" (not in this warehouse: {absent})" if needed else ""
            explained = engine_error(error, session.config.warehouse_uri())
            raise SqlError(f"{source}: {_first_line(statement.query)}{hint}\n{explained}") from None
        if rows is not None:
            result = Result(statement.query.strip(), [d[0] for d in cursor.description], rows)
            results.append(result)
            if on_result is not None:
                on_result(result)
    return results


def interrupted(error: BaseException) -> bool:
    """Whether `error` is how DuckDB stops a statement on Ctrl-C (SIGINT while it runs): its
    InterruptException, or the RuntimeError its Python client raises when the signal arrives."""
    if isinstance(error, duckdb.InterruptException):
        return True
    return type(error) is RuntimeError and str(error) == "Query interrupted"


def readable_folders(session: SqlSession) -> list[str]:
    """The folders a session may read, as its DuckDB names them: the warehouse and every table's root
    (a local one also as the folder it leads to, when a symbolic link is on the way)."""
    folders = [session.config.warehouse_uri()] + [t.location for t in session.tables.values()]
    return list(dict.fromkeys(uri for folder in folders for uri in _spellings(folder)))


def _spellings(uri: str) -> list[str]:
    local = resolve_local(uri)
    if local is None:
        return [uri]
    given = Path(os.path.abspath(os.path.expanduser(uri.removeprefix("file://").removeprefix("file:"))))
    return [f"file://{given}", f"file://{local}"]


def sealed_folders(session: SqlSession) -> list[str]:
    """Folders whose files DuckDB may list but not open: every Iceberg table's data files, which only
    its verified view reads."""
    return [t.location.rstrip("/") + "/data" for t in session.tables.values() if t.format == "iceberg"]


def export_folder(allow_writes: str | Path, readable: list[str]) -> Path:
    """The export folder (created if needed); an error if it overlaps anything the session reads."""
    folder = resolve_local(str(allow_writes))
    if folder is None:
        raise SqlError(f"--allow-writes {allow_writes}: exports go to a local folder")
    for other in readable:
        local = resolve_local(other)
        if local is not None and (inside(folder, local) or inside(local, folder)):
            raise SqlError(f"--allow-writes {allow_writes}: the export folder overlaps the warehouse ({local})")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise SqlError(f"--allow-writes {allow_writes}: {error.strerror or error}") from None
    return folder


def open_session(
    config: Config | None = None,
    sql_dir: Path | Traversable = SQL_DIR,
    quiet: bool = False,
    allow_writes: str | Path | None = None,
) -> SqlSession:
    """A read-only DuckDB session on the configured warehouse with every file of `sql_dir` loaded.

    The session reads files only inside the warehouse and writes only into `allow_writes` (a folder
    outside the warehouse; no writes at all without it), and no statement can change that.
    """
    from seqlake.core.config import load_config
    from seqlake.engines.storage import is_s3

    config = config or load_config()
    session = SqlSession(connect(object_storage=False, settings=SESSION_SETTINGS), config, {})
    try:
        # From the start, DuckDB reaches the warehouse only through the read-only file system; on
        # object storage httpfs is loaded for its S3 secret (Delta metadata), not to read or write.
        files = read_only_files(config)
        if is_s3(config.warehouse_uri()):
            use_object_storage(session.con)
        session.con.register_filesystem(files)
        define_relations(session, quiet=quiet)
        trusted: set[str] = set()  # sql/'s definitions, which the session may run again as they are
        for path in sql_files(sql_dir):
            text = path.read_text()
            run_script(session, text, path.name, definitions_only=True, quiet=quiet)
            define_file_views(session)
            trusted |= {s.query.strip() for s in session.con.extract_statements(text) if s.type in DEFINITIONS}
        readable = readable_folders(session)
        files.confine(readable, sealed_folders(session))
        export_dir = export_folder(allow_writes, readable) if allow_writes is not None else None
        restrict_access(
            session.con, readable, export_dir, session.local_files, object_storage=is_s3(config.warehouse_uri())
        )
        session.guard = Guard(session.con, refused_functions(session.con), export_dir, trusted=frozenset(trusted))
    except BaseException:
        session.close()
        raise
    return session


def read_only_files(config: Config):
    """The file system the session's DuckDB reaches the warehouse through (`seqlake.engines.read_only_fs`),
    reading anything while seqlake's own definitions load, until `confine` narrows it."""
    import pyarrow.fs as pafs

    from seqlake.engines.read_only_fs import ReadOnlyFileSystem
    from seqlake.engines.storage import is_s3, s3_filesystem

    why = "data files are read through the history view and the other tables' views, which verify them"
    if is_s3(config.warehouse_uri()):
        return ReadOnlyFileSystem(s3_filesystem(), ("s3", "s3a"), why_sealed=why)
    return ReadOnlyFileSystem(pafs.LocalFileSystem(), ("file",), why_sealed=why)


def hadoop_spelled(table) -> list[str]:
    """Metadata files of the table's current snapshot (manifest lists, manifests) that its metadata
    spells file:/path, Hadoop's spelling in tables Spark committed: DuckDB opens those with its own
    local file system (`iceberg_metadata`), which may therefore open exactly these files and no others.
    Data files are not among them: only the table's verified view reads those."""
    from seqlake.tableformat.io import is_local

    snapshot = table.current_snapshot()
    if snapshot is None:
        return []
    paths = [snapshot.manifest_list, *(m.manifest_path for m in snapshot.manifests(table.io))]
    return [
        str(resolve_local(p)) for p in paths if is_local(p) and p.startswith("file:") and not p.startswith("file://")
    ]


def resolve_file(name: str, sql_dir: Path | Traversable = SQL_DIR) -> Path | Traversable:
    """A path, or the name of a file in sql/ (with or without `.sql`)."""
    candidates = [Path(name), sql_dir / name, sql_dir / f"{name}.sql"]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    known = ", ".join(p.name for p in sql_files(sql_dir)) or "none"
    raise SqlError(f"no SQL file {name!r} (a path, or one of sql/: {known})")


def read_sql_file(path: Path | Traversable, shown: str) -> str:
    """The text of a `--file`: UTF-8 text that DuckDB's parser reads as SQL. Anything else (a binary, a
    notes file given by mistake) is one line naming the file (`shown`) and never quoting it: it may
    hold anything, secrets included."""
    data = path.read_bytes()
    if b"\x00" in data:
        raise SqlError(f"--file {shown}: not a SQL file (binary content); its content is not shown")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SqlError(f"--file {shown}: not a SQL file (not UTF-8 text); its content is not shown") from None
    try:
        duckdb.extract_statements(text)
    except duckdb.Error as error:
        # DuckDB's message quotes the text near the error: keep only where it is.
        line = re.search(r"\bLINE (\d+):", str(error))
        where = f" at line {line.group(1)}" if line else ""
        raise SqlError(
            f"--file {shown}: not SQL that DuckDB parses (a syntax error{where}); its content is not shown"
        ) from None
    return text
