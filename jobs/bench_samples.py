"""Measure training samples rebuilt from pointers against reading fat rows; print the ratios.

Builds a lake at a realistic shape in a temporary warehouse (the configured one is not touched):
histories log-uniform in length, one day of requests captured hour by hour while the day's events
are published, some of them late. Then, in one run and per tenant: the samples job in-process (and
on Spark at the small scale), a pyarrow and a DuckDB scan of the fat-row table holding the same
samples, bytes read, storage, capture rate and exactness. Exit status 1 if any sample differs from
its fat row or between engines. Times are wall clock on a possibly shared machine: compare ratios.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.samples import SCALES, format_report, run_samples_bench
from seqlake.cli_args import ArgumentParser, integer_at_least
from seqlake.config import load_config


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="seqlake bench-samples", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", help="configuration YAML (default: conf/seqlake.yaml)")
    parser.add_argument(
        "--scale",
        choices=sorted(SCALES),
        default="small",
        help="small: a minute-long check; medium: about 300 users, histories of 10^3 to 2*10^4 events",
    )
    parser.add_argument("--seed", type=integer_at_least(0), default=1, help="data seed (default: 1)")
    parser.add_argument("--json", metavar="FILE", help="also write the measurements as JSON to this file")
    args = parser.parse_args(argv)
    bench = run_samples_bench(
        load_config(args.config), args.scale, args.seed, log=lambda line: print(line, file=sys.stderr, flush=True)
    )
    print(format_report(bench))
    if args.json:
        Path(args.json).write_text(json.dumps(bench.to_dict(), indent=2) + "\n")
    return 0 if bench.ok else 1


if __name__ == "__main__":
    sys.exit(main())
