"""Which analyst statements may run: nothing that writes outside one export folder, attaches or loads code.

DuckDB's own settings (see `seqlake.duckdb_session.restrict_access`) confine every file access to the
warehouse and the export folder, but they do not tell reading from writing: a folder DuckDB may read
it may also overwrite. This guard closes that gap before a statement runs: statements that write files
(COPY ... TO, EXPORT DATABASE) run only with an export folder and only into it, and statements that
attach databases, install or load extensions, or switch on file logging never run.
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb

from seqlake.errors import ReadOnlyError

_Type = duckdb.StatementType
# Statement kinds that act on the session's own in-memory objects only (or are refused by DuckDB's
# locked configuration, e.g. SET of a setting).
SAFE = frozenset(
    {
        _Type.SELECT,
        _Type.EXPLAIN,
        _Type.CREATE,
        _Type.CREATE_FUNC,
        _Type.DROP,
        _Type.ALTER,
        _Type.SET,
        _Type.VARIABLE_SET,
        _Type.INSERT,
        _Type.UPDATE,
        _Type.MERGE_INTO,
        _Type.DELETE,
        _Type.PREPARE,
        _Type.EXECUTE,
        _Type.TRANSACTION,
        _Type.PRAGMA,
        _Type.CALL,
        _Type.VACUUM,
        _Type.ANALYZE,
        _Type.RELATION,
    }
)
WRITES_FILES = frozenset({_Type.COPY, _Type.EXPORT})
# Functions that write files wherever DuckDB may read (file logging takes a storage path).
WRITING_FUNCTIONS = frozenset({"enable_logging"})


def _tokens(query: str) -> list[tuple[str, duckdb.token_type]]:
    spans = duckdb.tokenize(query)
    if not spans:
        return []
    ends = [start for start, _ in spans[1:]] + [len(query)]
    return [(query[start:end].strip(), kind) for (start, kind), end in zip(spans, ends, strict=True)]


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


def _top_level(tokens: list[tuple[str, duckdb.token_type]]):
    """Tokens outside parentheses (a COPY's query may say TO or hold strings of its own)."""
    depth = 0
    for text, kind in tokens:
        if kind == duckdb.token_type.operator:
            depth += text.count("(") - text.count(")")
            continue
        if depth == 0:
            yield text, kind


def write_target(statement: duckdb.Statement) -> str | None:
    """The file or folder a COPY ... TO or EXPORT DATABASE writes; None for COPY ... FROM (a read)."""
    top = list(_top_level(_tokens(statement.query)))
    if statement.type == _Type.COPY:
        words = [text.upper() if kind == duckdb.token_type.keyword else "" for text, kind in top]
        if "FROM" in words and ("TO" not in words or words.index("FROM") < words.index("TO")):
            return None
        if "TO" not in words:
            raise ReadOnlyError(f"cannot tell where {_head(statement.query)} writes")
        position = words.index("TO") + 1
        following = top[position : position + 1]
    else:
        following = [t for t in top if t[1] == duckdb.token_type.string_const][:1]
    if not following or following[0][1] != duckdb.token_type.string_const:
        raise ReadOnlyError(f"{_head(statement.query)}: write the target as a quoted path inside the export folder")
    return _literal(following[0][0])


def _head(query: str) -> str:
    line = " ".join(query.split())
    return line if len(line) <= 60 else line[:57] + "..."


def resolve_local(path: str) -> Path | None:
    """A local path as DuckDB would open it (relative to the working folder, ~ expanded); None if remote."""
    if path.startswith("file://"):
        path = path[len("file://") :]
    elif "://" in path:
        return None
    return Path(os.path.realpath(os.path.expanduser(path)))


def inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_statement(statement: duckdb.Statement, export_dir: Path | None) -> None:
    """Raise ReadOnlyError unless `statement` may run in a read-only session exporting to `export_dir`."""
    called = {
        text.strip('"').lower()
        for text, kind in _tokens(statement.query)
        if kind in (duckdb.token_type.identifier, duckdb.token_type.keyword)
    }
    forbidden = sorted(called & WRITING_FUNCTIONS)
    if forbidden:
        raise ReadOnlyError(f"{_head(statement.query)}: {forbidden[0]} is not allowed in a read-only session")
    if statement.type in SAFE:
        return
    if statement.type not in WRITES_FILES:
        kind = statement.type.name.replace("_", " ")
        raise ReadOnlyError(f"{_head(statement.query)}: {kind} is not allowed (the session is read-only)")
    target = write_target(statement)
    if target is None:
        return
    if export_dir is None:
        raise ReadOnlyError(
            f"{_head(statement.query)}: the session is read-only; pass --allow-writes DIR to export into DIR"
        )
    local = resolve_local(target)
    if local is None or not inside(local, export_dir):
        raise ReadOnlyError(f"{_head(statement.query)}: writes only go into the export folder {export_dir}")
