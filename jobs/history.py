"""Print one user's history from a history table, with the selection pushed down to storage.

Only the selected feature groups' columns are shown (all groups by default), after the key
(feature_group, event_ts, lsn); `--columns` picks exactly which. Integers print exactly (64-bit ids
included) and times as ISO 8601 UTC. `--output json` gives every selected row as an object.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import click

from seqlake.cli import job_main, script_main
from seqlake.cli.options import common_options, load_cli_config, settings
from seqlake.cli.types import COMMA_LIST, ISO_TIME, TABLE_NAME, IntegerAtLeast
from seqlake.core.output import emit, print_table

if TYPE_CHECKING:
    import pyarrow as pa

    from seqlake.core.config import Config

SHOWN_KEY = ("feature_group", "event_ts", "lsn")


def shown_columns(config: Config, table_columns: list[str], groups: tuple[str, ...] | None) -> tuple[str, ...]:
    """The key, then every column of the chosen feature groups (all groups when None), in table order."""
    chosen = list(config.feature_groups) if groups is None else list(groups)
    wanted = {
        name for group in chosen if group in config.feature_groups for name in config.feature_groups[group].columns
    }
    return SHOWN_KEY + tuple(name for name in table_columns if name in wanted and name not in SHOWN_KEY)


@click.command("history", help=__doc__)
@click.option("--user", type=IntegerAtLeast(0), required=True, help="The user id.")
@click.option("--table", default="history", show_default=True, type=TABLE_NAME, help="History table name.")
@click.option("--fg", type=COMMA_LIST, help="Feature groups, comma-separated (default: all).")
@click.option("--columns", type=COMMA_LIST, help="Columns, comma-separated (default: the feature groups' columns).")
@click.option("--start", type=ISO_TIME, help="First event time, inclusive (ISO 8601 with a zone).")
@click.option("--end", type=ISO_TIME, help="Last event time, exclusive (ISO 8601 with a zone).")
@click.option("--as-of-lsn", type=IntegerAtLeast(0), help="Only rows known at this LSN.")
@click.option("--top-k", type=IntegerAtLeast(0), help="Only the newest K rows.")
@click.option("--newest-first", is_flag=True, help="Newest row first.")
@click.option("--max-rows", type=IntegerAtLeast(0), default=200, show_default=True, help="Rows printed (0: all; text).")
@common_options
def command(
    user: int,
    table: str,
    fg: tuple[str, ...] | None,
    columns: tuple[str, ...] | None,
    start: datetime | None,
    end: datetime | None,
    as_of_lsn: int | None,
    top_k: int | None,
    newest_first: bool,
    max_rows: int,
) -> None:
    from seqlake.pipelines.tables import load_history_table
    from seqlake.tableformat.reader import HistoryReader, Selection

    config = load_cli_config()
    history = load_history_table(config, table)
    reader = HistoryReader(history)
    shown = SHOWN_KEY + tuple(c for c in columns if c not in SHOWN_KEY) if columns else None
    if shown is None:
        reader.check(Selection(feature_groups=fg))  # an unknown group is an error, not an empty list
        shown = shown_columns(config, reader.columns, fg)
    selection = Selection(
        feature_groups=fg,
        columns=shown,
        start=start,
        end=end,
        as_of_lsn=as_of_lsn,
        top_k=top_k,
        newest_first=newest_first,
    )
    rows = reader.read_user(user, selection=selection).select(list(shown))
    document = {
        "table": ".".join(history.name()),
        "user_id": user,
        "columns": list(shown),
        "rows": [{"user_id": user, **row} for row in rows.to_pylist()],
    }
    emit(document, lambda: _print_rows(rows, user, max_rows))


def _print_rows(rows: pa.Table, user: int, max_rows: int) -> None:
    import sys

    shown = rows if max_rows == 0 else rows.slice(0, max_rows)
    if shown.num_rows:
        print_table(shown.column_names, (tuple(r.values()) for r in shown.to_pylist()))
    more = f", {rows.num_rows - shown.num_rows:,} not shown (--max-rows)" if shown.num_rows < rows.num_rows else ""
    if not settings().json:
        print(f"{rows.num_rows:,} row{'' if rows.num_rows == 1 else 's'} for user {user}{more}", file=sys.stderr)


main = job_main(command)

if __name__ == "__main__":
    script_main("history")
