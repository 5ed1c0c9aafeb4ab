"""DuckDB on the warehouse's tables, with the analyst SQL of sql/ loaded: run a file, a query, or a prompt.

Before sql/ is loaded, `seqlake sql` defines, for the tables this warehouse has:

\b
  history                        view: the current snapshot, every page's checksum and every file's
                                 size and footer verified (seqlake.tableformat.verified_scan)
  history_detail, raw_events,    views: every other Iceberg table of the namespace (training_<tenant>,
  training_<tenant>, ...         samples_<tenant>, backfill_<tenant>, the quarantines...), the current
                                 snapshot, every page's checksum and every file's size and row count
                                 (its manifest's) verified
  landing_events, quarantine     views: the landing tier's current version, verified the same way
                                 against the Delta log (seqlake.pipelines.landing.live_files)

A damaged or replaced file is one line naming the table, the file and `seqlake fsck --repair-plan`.

and the variables the SQL files read with getvariable():

\b
  <table>_metadata     the Iceberg table's current metadata file (pinned when the session opens)
  <table>_location     the table's root folder (Iceberg and Delta)
  seqlake_tables       MAP name -> format (iceberg, delta) of the tables defined above
  delta_locations      the Delta tables' locations (the only ones delta_files lists)
  window_seconds       layout.window_seconds
  tenants              MAP tenant -> {feature_groups, columns, max_length} from the configuration

and the macro window_start(window_id): the first instant of a processing window (a TIMESTAMPTZ).

Then every sql/*.sql file runs in name order, so a file may use what an earlier one defines. Loading
runs only definitions (CREATE, SET, DROP, ALTER); a file's queries run with `--file`. A definition
that needs a table this warehouse lacks (or an object skipped for that reason) is skipped with a note.

Values never go into SQL text: `--param uid=1000000` binds `$uid` in the query, typed by its
look: an integer, a number, true/false, an ISO 8601 time (`2026-01-05T10:00:00Z`), else text.
Name the type to be explicit: `--param uid:int=5`, `--param name:text=007`, `--param
day:date=2026-01-05` (types: int, float, bool, timestamp, date, text).

At the prompt, statements end with `;` and may span lines; `.tables` lists the tables and `.schema
NAME` gives one's columns; on a terminal lines are edited and recalled as in a shell (readline, kept
in ~/.seqlake_sql_history), and Ctrl-C cancels the statement being typed or run, not the session.

With `--output json` the results come as one JSON document (each result's statement, columns and
rows); at the prompt (no --file or --query), one JSON document per result and line.

The session is read-only: only statements known to read run (seqlake.sql_guard); DuckDB reaches
the warehouse only through a file system that cannot write, reads files only inside the warehouse,
never reads a table's data files itself (its view verifies them), cannot attach databases,
install or load extensions, and cannot change these settings. `--allow-writes DIR` lets COPY ... TO
and EXPORT DATABASE write into DIR (a folder outside the warehouse), and nowhere else.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import click

from seqlake.cli import job_main, script_main
from seqlake.cli.options import common_options, load_cli_config, settings
from seqlake.cli.types import SQL_PARAM, IntegerAtLeast
from seqlake.core.errors import SqlError
from seqlake.sql_session import Result, SqlSession, open_session, read_sql_file, resolve_file, run_script

# -- output ---------------------------------------------------------------------------------------


def result_document(result: Result) -> dict[str, object]:
    """A result as JSON-ready data: its statement, columns and rows (one object per row)."""
    return {
        "statement": result.statement,
        "columns": result.columns,
        "rows": [dict(zip(result.columns, row, strict=True)) for row in result.rows],
    }


def print_result(result: Result, max_rows: int = 100) -> None:
    """A result as a table (at most `max_rows` rows; 0: all), then its row count."""
    from seqlake.core.output import console, table

    shown = result.rows if max_rows <= 0 else result.rows[:max_rows]
    console().print(table(result.columns, shown))
    count = len(result.rows)
    more = f", {count - len(shown)} not shown (--max-rows)" if len(shown) < count else ""
    print(f"({count} row{'s' if count != 1 else ''}{more})\n", flush=True)


def printer(as_json: bool, max_rows: int) -> Callable[[Result], None]:
    """Print each result as it comes: a table, or (the prompt with --output json) a JSON line."""
    from seqlake.core.output import print_json

    if as_json:
        return lambda result: print_json(result_document(result))
    return lambda result: print_result(result, max_rows)


# -- the prompt -----------------------------------------------------------------------------------


HISTORY_FILE = Path("~/.seqlake_sql_history")  # the prompt's statements, kept between sessions
DOT_COMMANDS = ".tables  .schema NAME  .quit"


def _reader(stream: TextIO) -> Callable[[str], str | None]:
    """A line reader: on a terminal, a prompt with line editing and history (readline); plain lines
    otherwise; None at the end. Ctrl-C at the prompt raises KeyboardInterrupt."""
    if stream.isatty():
        _line_editing()

        def read(prompt: str) -> str | None:
            try:
                return input(prompt)
            except EOFError:
                print(file=sys.stderr)
                return None

        return read

    def read_plain(prompt: str) -> str | None:
        line = stream.readline()
        return None if line == "" else line.rstrip("\n")

    return read_plain


def _line_editing() -> None:
    """readline behind input(): arrows, search and history, saved in HISTORY_FILE at the end."""
    try:
        import readline
    except ImportError:  # a Python built without it: plain input() still works
        return
    import atexit
    import contextlib

    history = HISTORY_FILE.expanduser()
    with contextlib.suppress(OSError):  # none yet
        readline.read_history_file(history)
    readline.set_history_length(1000)
    atexit.register(_save_history, readline, history)


def _save_history(readline, history: Path) -> None:
    import contextlib

    with contextlib.suppress(OSError):  # a read-only home: history is a convenience, not data
        readline.write_history_file(history)


def _dot_command(session: SqlSession, line: str, show: Callable[[Result], None]) -> bool:
    """Run a prompt command (`.tables`, `.schema NAME`); whether `line` was one."""
    word, _, rest = line.strip().partition(" ")
    if word == ".tables":
        for name, defined in session.tables.items():
            print(f"{name}  ({defined.format})")
        return True
    if word == ".schema":
        name = rest.strip().rstrip(";")
        if name not in session.tables:
            known = ", ".join(session.tables) or "none"
            print(f"error: .schema NAME: {name or 'no name'} is not a table here (tables: {known})", file=sys.stderr)
        else:
            _run_interactive(session, f'DESCRIBE "{name}";', show)
        return True
    if word.startswith("."):  # no SQL statement starts with a dot
        print(f"error: unknown command {word} (commands: {DOT_COMMANDS})", file=sys.stderr)
        return True
    return False


def interactive(session: SqlSession, show: Callable[[Result], None], stream: TextIO | None = None) -> int:
    """Read statements ending in `;`, run each, print its result; `.tables` and `.schema NAME` describe
    the warehouse; `.quit`, `.exit` or end of input stop. Ctrl-C cancels the statement being typed or
    run, not the session."""
    stream = stream or sys.stdin
    if stream.isatty():
        macros = session.con.execute(
            "SELECT DISTINCT function_name FROM duckdb_functions() "
            "WHERE function_type IN ('macro', 'table_macro') AND NOT internal ORDER BY 1"
        ).fetchall()
        print(f"tables: {', '.join(session.tables) or 'none'}", file=sys.stderr)
        print(f"macros: {', '.join(m[0] for m in macros)}", file=sys.stderr)
        print(f"End statements with ';'. {DOT_COMMANDS}; Ctrl-C cancels a statement.", file=sys.stderr)
    read = _reader(stream)
    buffer: list[str] = []
    while True:
        try:
            line = read("     ..> " if buffer else "seqlake> ")
        except KeyboardInterrupt:  # as in psql: drop what was typed, keep the session
            print("^C", file=sys.stderr)
            buffer = []
            continue
        if line is None:
            break
        if not buffer and line.strip() in (".quit", ".exit", ".q"):
            break
        if not buffer and _dot_command(session, line, show):
            continue
        buffer.append(line)
        if line.rstrip().endswith(";"):
            _run_interactive(session, "\n".join(buffer), show)
            buffer = []
    if "".join(buffer).strip():
        _run_interactive(session, "\n".join(buffer), show)
    return 0


def _run_interactive(session: SqlSession, text: str, show: Callable[[Result], None]) -> None:
    try:
        run_script(session, text, "prompt", on_result=show)
    except SqlError as error:
        print(f"error: {error}", file=sys.stderr)
    except KeyboardInterrupt:  # the statement stops; the session goes on
        session.con.interrupt()
        print("cancelled", file=sys.stderr)


# -- the command ----------------------------------------------------------------------------------


@click.command("sql", help=__doc__)
@click.option("--file", "-f", "file_name", metavar="FILE", help="Run a SQL file: a path, or a name in sql/ (storage).")
@click.option("--query", "-q", metavar="SQL", help="Run these statements.")
@click.option(
    "--param",
    "-p",
    "params",
    type=SQL_PARAM,
    multiple=True,
    help="Bind $NAME to VALUE, typed by its look or by :TYPE (int, float, bool, timestamp, date, text); repeatable.",
)
@click.option(
    "--max-rows", type=IntegerAtLeast(0), default=100, show_default=True, help="Rows printed per result (0: all)."
)
@click.option("--quiet", is_flag=True, help="No notes about tables this warehouse lacks.")
@click.option(
    "--allow-writes",
    metavar="DIR",
    help="Let COPY ... TO and EXPORT DATABASE write into DIR, a folder outside the warehouse (default: nowhere).",
)
@common_options
def command(
    file_name: str | None,
    query: str | None,
    params: tuple[tuple[str, object], ...],
    max_rows: int,
    quiet: bool,
    allow_writes: str | None,
) -> int:
    """Without --file or --query: a prompt (with --output json, one JSON document per result and line)."""
    from seqlake.core.output import print_json

    if file_name is not None and query is not None:
        raise click.UsageError("--file and --query exclude each other: give one")
    config = load_cli_config()
    path = resolve_file(file_name) if file_name is not None else None
    as_json = settings().json
    bound = dict(params)
    session = open_session(config, quiet=quiet, allow_writes=allow_writes)
    with session:
        if path is None and query is None:
            if bound:
                raise SqlError("--param needs --file or --query")
            return interactive(session, printer(as_json, max_rows))
        if path is not None:
            assert file_name is not None  # the path came from it
            text, source = read_sql_file(path, file_name), path.name
        else:
            assert query is not None  # neither --file nor --query returned above
            text, source = query, "query"
        show = None if as_json else printer(False, max_rows)
        results = run_script(session, text, source, params=bound, quiet=quiet, on_result=show)
        if as_json:
            print_json({"results": [result_document(r) for r in results], "notes": session.notes})
    return 0


main = job_main(command)

if __name__ == "__main__":
    script_main("sql")
