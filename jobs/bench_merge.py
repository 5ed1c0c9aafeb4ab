"""Publish N windows as sorted runs and merge them with the DuckDB engine, once with the configured
size-tiered policy and once with the old capacity merge, and print the write amplification.

Each policy gets a namespace of its own in the configured warehouse (`<namespace>_<policy>`,
recreated on every run; nothing else is touched). Reports rows rewritten per row ingested (target:
<= 4 with the default policy over >= 100 windows) and the files a lookup opens. Exit status 1 if a
policy lost, duplicated or misplaced a row or a window.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.merge import format_report, run_merge_bench
from seqlake.cli_args import ArgumentParser, integer_at_least
from seqlake.config import load_config


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="seqlake bench-merge", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", help="configuration YAML (default: conf/seqlake.yaml)")
    parser.add_argument("--windows", type=integer_at_least(2), default=120, help="windows published (default: 120)")
    parser.add_argument(
        "--rows-per-window", type=integer_at_least(1), default=2_000, help="history rows per window (default: 2000)"
    )
    parser.add_argument("--users", type=integer_at_least(1), default=500, help="distinct users (default: 500)")
    parser.add_argument("--namespace", default="bench_merge", help="catalog namespace prefix (default: bench_merge)")
    parser.add_argument("--seed", type=int, default=7, help="data seed (default: 7)")
    parser.add_argument("--json", metavar="FILE", help="also write the facts as JSON to this file")
    args = parser.parse_args(argv)

    config = load_config(args.config)
    bench = run_merge_bench(
        config,
        windows=args.windows,
        rows_per_window=args.rows_per_window,
        users=args.users,
        namespace=args.namespace,
        seed=args.seed,
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(format_report(bench, config))
    if args.json:
        Path(args.json).write_text(json.dumps(bench.to_dict(), indent=2) + "\n")
    return 0 if bench.ok else 1


if __name__ == "__main__":
    sys.exit(main())
