"""What commands print: one JSON document (`--output json`) or text, tables through rich.

Values keep their exact meaning in both: integers as integers (64-bit ids exact), times as ISO 8601
UTC (`2026-01-05T10:00:00.123000Z`), missing values as null (JSON) or blank (text), never NaN.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from pathlib import PurePath
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

# Wide enough that a table piped to a file is never wrapped; a terminal uses its own width.
PIPE_WIDTH = 10_000


def iso_time(value: datetime) -> str:
    """A time as ISO 8601 in UTC with a `Z` (naive times are taken as UTC, as Arrow stores them)."""
    moment = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return moment.isoformat().replace("+00:00", "Z")


def jsonable(value: Any) -> Any:
    """`value` as JSON-ready Python: ints stay ints, times ISO 8601 UTC, NaN and infinities None."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=str) if isinstance(value, set | frozenset) else value
        return [jsonable(v) for v in items]
    if isinstance(value, datetime):
        return iso_time(value)
    if isinstance(value, date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, PurePath):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return jsonable(value.item())
    if hasattr(value, "tolist") and callable(value.tolist):  # numpy arrays
        return jsonable(value.tolist())
    return str(value)


def dumps(document: Any) -> str:
    return json.dumps(jsonable(document), allow_nan=False)


def print_json(document: Any) -> None:
    """The one JSON document of a command, on stdout."""
    print(dumps(document), flush=True)


def cell(value: Any) -> str:
    """One value as table text: exact integers, ISO 8601 UTC times, blank for missing."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.6g}"
    if isinstance(value, datetime):
        return iso_time(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(cell(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {cell(v)}" for k, v in value.items()) + "}"
    return str(value).replace("\n", " ")


def console(stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr): the terminal's width, or no wrapping when piped."""
    stream = sys.stderr if stderr else sys.stdout
    terminal = stream.isatty() and os.environ.get("TERM") != "dumb"
    return Console(
        file=stream,
        width=None if terminal else PIPE_WIDTH,
        force_terminal=terminal,
        no_color=not terminal,
        highlight=False,
        emoji=False,
        soft_wrap=not terminal,
    )


def table(
    columns: Sequence[str], rows: Iterable[Sequence[Any]], *, title: str | None = None, numeric: Sequence[bool] = ()
) -> Table:
    """A rich table of values (text taken literally, never as markup); numeric columns right-aligned."""
    rows = [list(row) for row in rows]
    if not numeric:
        numeric = [
            bool(rows)
            and all(isinstance(r[i], int | float) and not isinstance(r[i], bool) or r[i] is None for r in rows)
            for i in range(len(columns))
        ]
    grid = Table(
        title=Text(title) if title is not None else None,
        title_justify="left",
        box=_box(),
        show_edge=False,
        pad_edge=False,
        header_style="bold",
    )
    for name, right in zip(columns, numeric, strict=True):
        grid.add_column(Text(name), justify="right" if right else "left", overflow="fold")
    for row in rows:
        grid.add_row(*(Text(cell(v)) for v in row))
    return grid


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool)


def _box():
    from rich import box

    return box.SIMPLE_HEAD


def print_table(
    columns: Sequence[str], rows: Iterable[Sequence[Any]], *, title: str | None = None, numeric: Sequence[bool] = ()
) -> None:
    console().print(table(columns, rows, title=title, numeric=numeric))


def facts_table(facts: Mapping[str, Any], *, title: str | None = None) -> Table:
    """Key/value facts as a two-column grid (a report section)."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold" if title is None else None)
    grid.add_column()
    if title is not None:
        grid.title, grid.title_justify = Text(title), "left"
    for key, value in facts.items():
        grid.add_row(Text(str(key)), Text(fact(value)))
    return grid


def fact(value: Any) -> str:
    """A report value for people: thousands separators, yes/NO for checks, dicts inline."""
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.3f}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={fact(v)}" for k, v in value.items()) or "-"
    if isinstance(value, datetime):
        return iso_time(value)
    return str(value)


def emit(document: Mapping[str, Any], text: str | Callable[[], None] | None = None) -> None:
    """Print a command's result: the JSON document with `--output json`, else `text` (a string, or a
    function that prints), else the document's facts."""
    from seqlake.core.invocation import settings

    if settings().json:
        print_json(document)
    elif callable(text):
        text()
    elif text is not None:
        print(text, flush=True)
    else:
        console().print(facts_table(document))
