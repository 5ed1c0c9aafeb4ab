"""Measure candidate Parquet layouts of a history file side by side and print a markdown table.

Every metric is also given as a ratio to the default layout (tableformat.layout.DEFAULT_POLICY with
key-only statistics, 64 KiB pages). Bytes are counted exactly; times are medians of interleaved
repeats on a possibly shared machine: compare the ratios, not the absolute times.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.layout import format_table, run_layout_bench
from seqlake.cli_args import ArgumentParser, integer_at_least
from seqlake.config import load_config


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="seqlake bench-layout",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", help="configuration YAML (default: conf/seqlake.yaml)")
    parser.add_argument("--users", type=integer_at_least(1), default=3000, help="users in the file (default: 3000)")
    parser.add_argument(
        "--heavy-users", type=integer_at_least(0), default=3, help="users with exactly --heavy-rows rows (default: 3)"
    )
    parser.add_argument(
        "--heavy-rows", type=integer_at_least(1), default=20_000, help="rows of a heavy user (default: 20000)"
    )
    parser.add_argument("--repeats", type=integer_at_least(1), default=3, help="timing repeats (default: 3)")
    parser.add_argument("--seed", type=integer_at_least(0), default=1, help="data seed (default: 1)")
    parser.add_argument("--out", metavar="FILE.md", help="also write the table to this file")
    args = parser.parse_args(argv)
    if not 0 <= args.heavy_users <= args.users:
        parser.error(f"--heavy-users must be between 0 and --users ({args.users}), got {args.heavy_users}")

    rows = run_layout_bench(
        users=args.users,
        heavy_users=args.heavy_users,
        heavy_rows=args.heavy_rows,
        seed=args.seed,
        repeats=args.repeats,
        config=load_config(args.config),
    )
    table = format_table(rows)
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
