"""Measure multi-user reads (`histories`) and the history cache side by side; print the ratios.

Builds a history table in a temporary warehouse (removed afterwards; the configured warehouse is not
touched): a few thousand users with heavy-tailed history lengths in several sorted runs. Then, in one
run: N users through `histories` against N x `read_user` (time ratio; opens, reads and bytes counted),
and a Zipf-skewed lookup workload through `HistoryReader` and `CachedHistoryReader` (hit rate,
speed-up). Every fast-path result is compared with the plain one; exit status 1 if any differs.
Times are wall clock on a possibly shared machine: compare the ratios, not the absolute times.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.reads import format_report, run_read_bench
from seqlake.cli_args import ArgumentParser, integer_at_least, number_above
from seqlake.config import load_config


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="seqlake bench-reads",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", help="configuration YAML (default: conf/seqlake.yaml)")
    parser.add_argument("--users", type=integer_at_least(1), default=3000, help="users in the table (default: 3000)")
    parser.add_argument("--heavy-users", type=integer_at_least(0), default=3, help="users at --heavy-rows (default: 3)")
    parser.add_argument(
        "--heavy-rows", type=integer_at_least(1), default=20_000, help="longest history (default: 20000)"
    )
    parser.add_argument("--runs", type=integer_at_least(1), default=3, help="sorted runs (default: 3)")
    parser.add_argument(
        "--multi-users", type=integer_at_least(1), default=256, help="users per histories() call (default: 256)"
    )
    parser.add_argument(
        "--lookups", type=integer_at_least(1), default=2000, help="lookups in the cache workload (default: 2000)"
    )
    parser.add_argument(
        "--zipf", type=number_above(0, strict=True), default=1.1, help="Zipf exponent of the lookups (default: 1.1)"
    )
    parser.add_argument(
        "--cache-mib",
        type=number_above(0, strict=False),
        nargs="+",
        default=[64.0, 4.0, 0.0],
        help="cache bounds to measure, MiB; 0 caches nothing and shows what the file index alone gives "
        "(default: 64 4 0)",
    )
    parser.add_argument(
        "--repeats", type=integer_at_least(1), default=3, help="timed repeats of the multi-user part (default: 3)"
    )
    parser.add_argument("--workers", type=integer_at_least(1), default=4, help="histories() threads (default: 4)")
    parser.add_argument("--seed", type=integer_at_least(0), default=1, help="data seed (default: 1)")
    parser.add_argument("--out", metavar="FILE.md", help="also write the report to this file")
    parser.add_argument("--json", metavar="FILE", help="also write the measurements as JSON to this file")
    args = parser.parse_args(argv)
    if args.heavy_users > args.users:
        parser.error(f"--heavy-users ({args.heavy_users}) exceeds --users ({args.users})")
    if args.multi_users > args.users:
        parser.error(f"--multi-users ({args.multi_users}) exceeds --users ({args.users})")

    bench = run_read_bench(
        load_config(args.config),
        users=args.users,
        heavy_users=args.heavy_users,
        heavy_rows=args.heavy_rows,
        runs=args.runs,
        multi_users=args.multi_users,
        lookups=args.lookups,
        zipf_s=args.zipf,
        cache_bytes=[int(mib * 2**20) for mib in args.cache_mib],
        repeats=args.repeats,
        max_workers=args.workers,
        seed=args.seed,
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )
    report = format_report(bench)
    print(report)
    if args.out:
        Path(args.out).write_text(report + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(bench.to_dict(), indent=2) + "\n")
    return 0 if bench.ok else 1


if __name__ == "__main__":
    sys.exit(main())
