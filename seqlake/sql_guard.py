"""Which analyst statements may run: only those known to read, judged by DuckDB's own parser.

Every statement a script holds is judged before any of them runs, by the type DuckDB's parser gives it
(`duckdb.StatementType`): a type not known to be read-only (ATTACH, DETACH, LOAD and INSTALL, PRAGMA,
VACUUM, COPY FROM DATABASE, a type a later DuckDB adds...) is refused. Statements that wrap others are
judged by what they wrap: a PREPARE by its body, an EXECUTE by the body of the statement it runs (only
statements prepared in this session, and judged then, can run), an EXPLAIN (ANALYZE runs its statement)
by its statement. Function calls anywhere in a statement's text, a macro's body or a view's included,
are judged by name: table functions only from a list known to read (DuckDB's catalog tells which
functions are table functions, so one a later version adds is refused), no function DuckDB marks as
having side effects unless it is harmless, no dynamic SQL (`query`, whose text would escape
judging), and not Delta's own reader, which opens files without DuckDB's access checks. COPY ... TO
and EXPORT DATABASE write files: they run only with an export folder, only into it, and never from a
prepared statement. The definitions of sql/, which the session ran when it opened, may run again as
they are (`--file catalog.sql`).

This is the first of two walls. The second is DuckDB's own configuration (`seqlake.engines.duckdb_session.
restrict_access`): the session reaches the warehouse only through a file system that cannot write
(`seqlake.engines.read_only_fs`), its local file system reaches the export folder alone, and the configuration
is locked; so a statement this guard misjudged still cannot change a warehouse file.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from seqlake.core.errors import ReadOnlyError

_Type = duckdb.StatementType
_Token = duckdb.token_type

# Statement types that read, or change only the session's own in-memory objects (tables, views,
# macros, variables). SET is here because DuckDB's locked configuration refuses every setting change;
# CALL because the function it calls is judged like any other. (DuckDB's parser gives CREATE for
# CREATE MACRO and SET for SET VARIABLE: CREATE_FUNC and VARIABLE_SET, never produced, stay refused.)
READ_ONLY = frozenset(
    {
        _Type.SELECT,
        _Type.CREATE,
        _Type.DROP,
        _Type.ALTER,
        _Type.SET,
        _Type.INSERT,
        _Type.UPDATE,
        _Type.DELETE,
        _Type.MERGE_INTO,
        _Type.TRANSACTION,
        _Type.CALL,
    }
)
WRAPPERS = frozenset({_Type.EXPLAIN, _Type.PREPARE, _Type.EXECUTE})  # judged by what they wrap
WRITES_FILES = frozenset({_Type.COPY, _Type.EXPORT})  # COPY ... FROM reads; COPY ... TO and EXPORT write
ALLOWED = READ_ONLY | WRAPPERS | WRITES_FILES

# DuckDB's table functions (and built-in table macros) that only read: files (inside the folders the
# session may read), the catalog, metadata. Every other table function is refused.
READING_TABLE_FUNCTIONS = frozenset(
    {
        *("read_csv", "read_csv_auto", "read_json", "read_json_auto", "read_json_objects"),
        *("read_json_objects_auto", "read_ndjson", "read_ndjson_auto", "read_ndjson_objects"),
        *("read_parquet", "parquet_scan", "read_text", "read_blob", "read_avro", "sniff_csv", "glob"),
        *("parquet_metadata", "parquet_file_metadata", "parquet_full_metadata", "parquet_kv_metadata"),
        *("parquet_schema", "parquet_bloom_probe"),
        *("iceberg_scan", "iceberg_metadata", "iceberg_snapshots", "iceberg_column_stats"),
        *("iceberg_partition_stats", "iceberg_table_properties", "iceberg_schema_properties"),
        *("range", "generate_series", "unnest", "repeat", "repeat_row", "json_each", "json_tree"),
        *("summary", "query_table", "test_all_types", "test_vector_types"),
        *("duckdb_columns", "duckdb_constraints", "duckdb_databases", "duckdb_dependencies"),
        *("duckdb_extensions", "duckdb_functions", "duckdb_indexes", "duckdb_keywords", "duckdb_memory"),
        *("duckdb_optimizers", "duckdb_prepared_statements", "duckdb_schemas", "duckdb_secret_types"),
        *("duckdb_secrets", "duckdb_sequences", "duckdb_settings", "duckdb_tables", "duckdb_temporary_files"),
        *("duckdb_types", "duckdb_variables", "duckdb_views", "duckdb_table_sample", "duckdb_logs"),
        *("duckdb_log_contexts", "duckdb_approx_database_count", "duckdb_connection_count"),
        *("duckdb_coordinate_systems", "duckdb_external_file_cache", "which_secret"),
        *("pragma_version", "pragma_platform", "pragma_user_agent", "pragma_collations", "pragma_show"),
        *("pragma_table_info", "pragma_storage_info", "pragma_database_size", "pragma_metadata_info"),
        *("pg_timezone_names", "icu_calendar_names"),
        *("histogram", "histogram_values", "duckdb_logs_parsed", "duckdb_profiling_settings"),
    }
)
# Functions DuckDB marks as having side effects that change nothing outside the query.
HARMLESS_SIDE_EFFECTS = frozenset(
    {
        *("random", "setseed", "uuid", "uuidv4", "uuidv7", "gen_random_uuid", "nextval", "currval"),
        *("error", "sleep_ms", "current_query", "current_query_id", "current_connection_id"),
        *("current_transaction_id", "stats"),
    }
)


# Why some functions are refused, besides not being known to be read-only.
WHY_REFUSED = {
    "query": "it runs SQL that is not judged",
    "delta_scan": "Delta's reader opens files past the session's folders; query the landing views",
    "delta_list_files": "Delta's reader opens files past the session's folders; use delta_files",
}


def refused_functions(con: duckdb.DuckDBPyConnection) -> frozenset[str]:
    """The functions of `con`'s catalog a read-only statement may not call: DuckDB's own table
    functions and table macros that are not known to read, and functions with side effects that are
    not harmless. Macros defined by SQL (seqlake's, and an analyst's, whose body was judged) stay callable."""
    rows = con.execute(
        "SELECT DISTINCT lower(function_name) FROM duckdb_functions() "
        "WHERE (function_type IN ('table', 'table_macro') AND internal) OR has_side_effects"
    ).fetchall()
    names = {name for (name,) in rows}
    return frozenset(names - READING_TABLE_FUNCTIONS - HARMLESS_SIDE_EFFECTS) | set(WHY_REFUSED)


# -- tokens ------------------------------------------------------------------------------------------

_NAME = re.compile(r'"((?:[^"]|"")*)"|([^\s"(),;.:\[\]{}]+)')


@dataclass(frozen=True)
class Token:
    start: int  # offset in the statement's text
    kind: duckdb.token_type
    text: str  # the token alone (a comment after it cut off); a quoted name without its quotes

    def word(self) -> str:
        return self.text.lower() if self.kind in (_Token.identifier, _Token.keyword) else ""


def tokens(query: str) -> list[Token]:
    """The statement's tokens (DuckDB's tokenizer), comments left out."""
    spans = duckdb.tokenize(query)
    if not spans:
        return []
    ends = [start for start, _ in spans[1:]] + [len(query)]
    out = []
    for (start, kind), end in zip(spans, ends, strict=True):
        raw = query[start:end]
        if kind == _Token.comment:
            continue
        if kind in (_Token.identifier, _Token.keyword):
            found = _NAME.match(raw)
            text = (
                (found.group(1).replace('""', '"') if found.group(1) is not None else found.group(2)) if found else raw
            )
        elif kind == _Token.string_const:
            text = _literal(raw)
        elif kind == _Token.operator:
            text = raw.strip()[:1] if raw.strip()[:1] in "()[]{},;" else raw.split()[0] if raw.split() else raw
        else:
            text = raw.split()[0] if raw.split() else raw
        out.append(Token(start, kind, text))
    return out


def _literal(token: str) -> str:
    """The value of a quoted string token (the token may run on into a comment)."""
    value, i = [], 1
    while i < len(token):
        if token[i] == "'":
            if token[i + 1 : i + 2] != "'":
                break
            i += 1
        value.append(token[i])
        i += 1
    return "".join(value)


def _top_level(found: list[Token]):
    """Tokens outside parentheses (a COPY's query may say TO or hold strings of its own)."""
    depth = 0
    for token in found:
        if token.kind == _Token.operator and token.text in ("(", ")"):
            depth += 1 if token.text == "(" else -1
            continue
        if depth == 0:
            yield token


def called_functions(found: list[Token]) -> list[str]:
    """Names written as calls (a name right before an opening parenthesis), qualified names by their last part."""
    return [a.text.lower() for a, b in zip(found, found[1:], strict=False) if a.word() and b.text == "("]


def _head(query: str) -> str:
    line = " ".join(query.split())
    return line if len(line) <= 60 else line[:57] + "..."


def _kind(statement: duckdb.Statement) -> str:
    """The statement's type in words (a type DuckDB's enumeration does not name: its first word)."""
    name = statement.type.name if statement.type in _Type.__members__.values() else ""
    if not name or name == "???":
        words = statement.query.split()
        name = words[0].upper() if words else "this statement"
    return name.replace("_", " ")


# -- paths -------------------------------------------------------------------------------------------


def resolve_local(path: str) -> Path | None:
    """A local path as DuckDB would open it (relative to the working folder, ~ expanded); None if remote."""
    if path.startswith("file://"):
        path = path[len("file://") :]
    elif path.startswith("file:"):
        path = path[len("file:") :]
    elif "://" in path:
        return None
    return Path(os.path.realpath(os.path.expanduser(path)))


def inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def write_target(statement: duckdb.Statement) -> str | None:
    """The file or folder a COPY ... TO or EXPORT DATABASE writes; None for COPY ... FROM (a read)."""
    top = list(_top_level(tokens(statement.query)))
    if statement.type == _Type.COPY:
        words = [t.text.upper() if t.kind == _Token.keyword else "" for t in top]
        if "FROM" in words and ("TO" not in words or words.index("FROM") < words.index("TO")):
            return None
        if "TO" not in words:
            raise ReadOnlyError(f"cannot tell where {_head(statement.query)} writes")
        position = words.index("TO") + 1
        following = top[position : position + 1]
    else:
        following = [t for t in top if t.kind == _Token.string_const][:1]
    if not following or following[0].kind != _Token.string_const:
        raise ReadOnlyError(f"{_head(statement.query)}: write the target as a quoted path inside the export folder")
    return following[0].text


# -- the guard ---------------------------------------------------------------------------------------


@dataclass
class Guard:
    """Judges the statements of one read-only session (`check_script`)."""

    con: duckdb.DuckDBPyConnection  # parses what statements wrap (with the session's file access)
    refused: frozenset[str]  # `refused_functions` of the session's connection
    export_dir: Path | None = None  # the one folder COPY ... TO and EXPORT DATABASE may write into
    prepared: dict[str, list[duckdb.Statement]] = field(default_factory=dict)  # judged PREPARE bodies
    trusted: frozenset[str] = frozenset()  # the texts of the definitions the session ran when it opened

    def check_script(self, text: str, statements: list[duckdb.Statement]) -> None:
        """Raise ReadOnlyError unless every statement may run. DuckDB expands some statements (PIVOT)
        into parts without text: then the whole text's function calls are judged too."""
        if any(not s.query.strip() for s in statements):
            self._check_tokens(_head(text), tokens(text))
        for statement in statements:
            if statement.query.strip() not in self.trusted:
                self.check(statement)

    def check(self, statement: duckdb.Statement, prepared: bool = False, within: str | None = None) -> None:
        """Raise ReadOnlyError unless `statement` may run (`prepared`: as the body of a PREPARE;
        `within`: the text of the statement that wraps it, which refusals quote)."""
        head = _head(within or statement.query)
        found = tokens(statement.query)
        self._check_tokens(head, found)
        kind = statement.type
        if kind not in ALLOWED:
            raise ReadOnlyError(f"{head}: {_kind(statement)} is not allowed (the session is read-only)")
        if kind in (_Type.CREATE, _Type.DROP) and "secret" in [t.word() for t in found[:5]]:
            # CREATE [OR REPLACE] [PERSISTENT | TEMPORARY] SECRET, DROP [PERSISTENT | TEMPORARY] SECRET
            raise ReadOnlyError(f"{head}: secrets cannot be created or dropped in a read-only session")
        if kind == _Type.PREPARE:
            name, body = _prepared_body(statement.query, found)
            inner = self._parse(body, head)
            for part in inner:
                self.check(part, prepared=True, within=within or statement.query)
            self.prepared[name] = inner
        elif kind == _Type.EXECUTE:
            name = _name_after(found, "execute")
            if name not in self.prepared:
                raise ReadOnlyError(f"{head}: no statement {name!r} was prepared in this session")
            for part in self.prepared[name]:
                self.check(part, prepared=True, within=within or statement.query)
        elif kind == _Type.EXPLAIN:
            for part in self._parse(_explained(statement.query, found), head):
                self.check(part, prepared=prepared, within=within or statement.query)
        elif kind == _Type.CALL and (not found or found[0].word() != "call"):  # CHECKPOINT, FORCE CHECKPOINT
            words = " ".join(t.text.upper() for t in found if t.kind == _Token.keyword) or _kind(statement)
            raise ReadOnlyError(f"{head}: {words} is not allowed (the session is read-only)")
        elif kind in WRITES_FILES:
            self._check_write(statement, prepared, head)

    def _parse(self, body: str, head: str) -> list[duckdb.Statement]:
        """The statements of a wrapped text (a PREPARE's body, an EXPLAIN's statement)."""
        try:
            inner = self.con.extract_statements(body)
        except duckdb.Error as error:
            raise ReadOnlyError(f"{head}: cannot judge what it runs: {str(error).splitlines()[0]}") from None
        if not inner:
            raise ReadOnlyError(f"{head}: cannot judge what it runs")
        return inner

    def _check_tokens(self, head: str, found: list[Token]) -> None:
        calls = [name for name in called_functions(found) if name in self.refused]
        if calls:
            why = WHY_REFUSED.get(calls[0], "it is not known to be read-only")
            raise ReadOnlyError(f"{head}: {calls[0]} is not allowed in a read-only session ({why})")

    def _check_write(self, statement: duckdb.Statement, prepared: bool, head: str) -> None:
        target = write_target(statement)
        if target is None:
            return  # COPY ... FROM: a read into a table of the session
        if prepared:
            raise ReadOnlyError(f"{head}: a prepared statement cannot write (run COPY ... TO itself)")
        if self.export_dir is None:
            raise ReadOnlyError(f"{head}: the session is read-only; pass --allow-writes DIR to export into DIR")
        local = resolve_local(target)
        if local is None or not inside(local, self.export_dir):
            raise ReadOnlyError(f"{head}: writes only go into the export folder {self.export_dir}")


def _name_after(found: list[Token], keyword: str) -> str:
    """The (lower-case) name right after the statement's first keyword, e.g. the p of EXECUTE p."""
    if len(found) < 2 or found[0].word() != keyword or not found[1].word():
        raise ReadOnlyError(f"cannot tell which statement {keyword.upper()} names")
    return found[1].text.lower()


def _prepared_body(query: str, found: list[Token]) -> tuple[str, str]:
    """(name, body) of PREPARE name AS body."""
    name = _name_after(found, "prepare")
    for token in list(_top_level(found))[2:]:
        if token.word() == "as":
            return name, query[token.start + len(token.text) :]
    raise ReadOnlyError(f"{_head(query)}: cannot tell what it prepares")


def _explained(query: str, found: list[Token]) -> str:
    """The statement of EXPLAIN [ANALYZE] [(options)] statement."""
    position = 1
    if len(found) > position and found[position].word() in ("analyze", "analyse"):
        position += 1
    if len(found) > position and found[position].text == "(":
        depth = 0
        for i in range(position, len(found)):
            depth += {"(": 1, ")": -1}.get(found[i].text, 0)
            if depth == 0:
                position = i + 1
                break
    if position >= len(found):
        raise ReadOnlyError(f"{_head(query)}: cannot tell what it explains")
    return query[found[position].start :]
