"""Print one user's history from a history table, with the selection pushed down to storage.

Only the selected feature groups' columns are shown (all groups by default), after the key
(feature_group, event_ts, lsn); `--columns` picks exactly which. Integers print exactly (64-bit ids
included) and times as ISO 8601 UTC. `--output json` gives every selected row as an object.

`--start`/`--end` select by event time. Rows are stamped with their earliest event; with `--end`,
a row that also merged events from `--end` on is shown rebuilt from the detail events before
`--end`, or, once that window's detail has expired, left out (a line on stderr says how many).

`--as-of` travels in time: a snapshot id shows the rows under the frontier the table had at that
snapshot, an ISO 8601 arrival time those under the frontier of the publications current then;
`--as-of-frontier 0:120,1:98` gives the frontier itself (highest LSN per source partition).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import click

from seqlake.cli import job_main, script_main
from seqlake.cli.options import common_options, load_cli_config, settings
from seqlake.cli.types import COMMA_LIST, FRONTIER, ISO_TIME, SNAPSHOT_OR_TIME, TABLE_NAME, IntegerAtLeast
from seqlake.core.output import emit, print_table

if TYPE_CHECKING:
    import pyarrow as pa

    from seqlake.core.config import Config
    from seqlake.tableformat.frontier import Frontier

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
@click.option(
    "--as-of",
    type=SNAPSHOT_OR_TIME,
    help="Only what was known then: a snapshot id, or an ISO 8601 arrival time with a zone.",
)
@click.option(
    "--as-of-frontier",
    type=FRONTIER,
    help="Only rows at or below their source partition's LSN, e.g. 0:120,1:98 (other partitions: none).",
)
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
    as_of: int | datetime | None,
    as_of_frontier: Frontier | None,
    top_k: int | None,
    newest_first: bool,
    max_rows: int,
) -> None:
    from seqlake.pipelines.tables import load_history_table
    from seqlake.tableformat.reader import HistoryReader, Selection
    from seqlake.tableformat.time_travel import frontier_as_of

    if as_of is not None and as_of_frontier is not None:
        raise click.UsageError("give --as-of or --as-of-frontier, not both")
    config = load_cli_config()
    history = load_history_table(config, table)
    reader = HistoryReader(history)
    shown = SHOWN_KEY + tuple(c for c in columns if c not in SHOWN_KEY) if columns else None
    if shown is None:
        reader.check(Selection(feature_groups=fg))  # an unknown group is an error, not an empty list
        shown = shown_columns(config, reader.columns, fg)
    point = as_of_frontier if as_of_frontier is not None else as_of
    frontier = None if point is None else frontier_as_of(history, point, config.layout.window_seconds)
    selection = Selection(
        feature_groups=fg,
        columns=shown,
        start=start,
        end=end,
        as_of=frontier,
        top_k=top_k,
        newest_first=newest_first,
    )
    withheld = 0
    if end is None:
        rows = reader.read_user(user, selection=selection)
    else:
        from seqlake.pipelines.reads.bounded import bounded_read, lake_detail

        found = bounded_read(config, reader, [user], selection, lake_detail(config, reader))
        rows, withheld = found.rows[user], found.total_withheld
    rows = rows.select(list(shown))
    document: dict[str, object] = {
        "table": ".".join(history.name()),
        "user_id": user,
        "columns": list(shown),
        "rows": [{"user_id": user, **row} for row in rows.to_pylist()],
    }
    if frontier is not None:  # what the read was bounded by: {source partition: LSN}
        document["as_of"] = {str(p): lsn for p, lsn in frontier.items()}
    if end is not None:  # rows left out: they merged events from --end on, their detail expired
        document["withheld"] = withheld
    emit(document, lambda: _print_rows(rows, user, max_rows, frontier, hide_empty=not columns, withheld=withheld))


def _print_rows(
    rows: pa.Table,
    user: int,
    max_rows: int,
    frontier: Frontier | None = None,
    hide_empty: bool = False,
    withheld: int = 0,
) -> None:
    """The rows as a table on stdout, a summary line on stderr. With `hide_empty` (columns not chosen
    with --columns), a column null in every printed row is left out: the groups' columns are many, and
    each row fills only its own group's."""
    import sys

    shown = rows if max_rows == 0 else rows.slice(0, max_rows)
    empty = [c for c in shown.column_names[len(SHOWN_KEY) :] if shown[c].null_count == shown.num_rows]
    if hide_empty and shown.num_rows and empty:
        shown = shown.drop_columns(empty)
    if shown.num_rows:
        print_table(shown.column_names, (tuple(r.values()) for r in shown.to_pylist()))
    more = f", {rows.num_rows - shown.num_rows:,} not shown (--max-rows)" if shown.num_rows < rows.num_rows else ""
    if hide_empty and shown.num_rows and empty:
        more += f"; {len(empty)} empty column{'' if len(empty) == 1 else 's'} not shown (--columns)"
    bound = "" if frontier is None else f" as of frontier {frontier or '(empty)'}"
    if withheld:
        from seqlake.pipelines.reads.bounded import withheld_message

        more += f"; {withheld_message(withheld)}"
    if not settings().json:
        print(f"{rows.num_rows:,} row{'' if rows.num_rows == 1 else 's'} for user {user}{bound}{more}", file=sys.stderr)


main = job_main(command)

if __name__ == "__main__":
    script_main("history")
