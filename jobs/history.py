"""Print one user's history from the history table, with selections pushed down to storage."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime

from pyiceberg.table import Table

from seqlake.catalog import load_existing_table
from seqlake.cli_args import ArgumentParser, integer_at_least, table_name
from seqlake.config import Config, load_config
from seqlake.errors import SchemaError
from tableformat.reader import HistoryReader, Selection
from tableformat.registry import FORMAT_PROPERTY


def _csv(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


def _time(value: str) -> datetime:
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an ISO 8601 time, e.g. 2026-01-05T10:00:00Z") from None
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{value!r} needs a time zone, e.g. 2026-01-05T10:00:00Z")
    return moment


def load_history_table(config: Config, name: str) -> Table:
    """The named table, if it is a seqlake history table; a one-line SchemaError otherwise."""
    table = load_existing_table(config, name)
    if FORMAT_PROPERTY not in table.metadata.properties:
        raise SchemaError(
            f"table {'.'.join(table.name())} is not a seqlake history table (no {FORMAT_PROPERTY} property); "
            "history tables: history, or one written by seqlake compact"
        )
    return table


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="seqlake history", description=__doc__)
    parser.add_argument("--config", help="configuration YAML (default: conf/seqlake.yaml)")
    parser.add_argument("--table", default="history", type=table_name, help="history table name (default: history)")
    parser.add_argument("--user", type=integer_at_least(0), required=True, help="user id")
    parser.add_argument("--fg", type=_csv, help="feature groups, comma-separated (default: all)")
    parser.add_argument("--columns", type=_csv, help="columns, comma-separated (default: all)")
    parser.add_argument("--start", type=_time, help="first event time, inclusive (ISO 8601 with zone)")
    parser.add_argument("--end", type=_time, help="last event time, exclusive (ISO 8601 with zone)")
    parser.add_argument("--as-of-lsn", type=integer_at_least(0), help="only rows known at this LSN")
    parser.add_argument("--top-k", type=integer_at_least(0), help="only the newest K rows")
    parser.add_argument("--newest-first", action="store_true", help="newest row first")
    parser.add_argument("--json", action="store_true", help="one JSON object per line, for machines")
    args = parser.parse_args(argv)

    config = load_config(args.config)
    table = load_history_table(config, args.table)
    selection = Selection(
        feature_groups=args.fg,
        columns=(("feature_group", "event_ts", "lsn") + args.columns) if args.columns else None,
        start=args.start,
        end=args.end,
        as_of_lsn=args.as_of_lsn,
        top_k=args.top_k,
        newest_first=args.newest_first,
    )
    rows = HistoryReader(table).read_user(args.user, selection=selection)
    if args.json:
        for row in rows.to_pylist():
            print(json.dumps(row, default=str))
    else:
        print(rows.to_pandas().to_string(index=False, max_rows=200) if rows.num_rows else "(no rows)")
        print(f"{rows.num_rows:,} rows for user {args.user}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
