"""Measure seqlake's point lookups against RocksDB, DuckDB over Iceberg and a memory-mapped Arrow
IPC copy, side by side on one data set; print QPS, CPU time, bytes read, on-disk size and each
target's ratio (met or not met).

Builds every system in a temporary folder (removed afterwards; the configured warehouse is not
touched). Every answer is compared across systems first; exit status 1 if any differs. Times are
wall clock on a possibly shared machine: compare the ratios, not the absolute times.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.peers import SCALES, format_report, plot, run_peers_bench
from seqlake.cli_args import ArgumentParser
from seqlake.config import load_config


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="seqlake bench-peers", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", help="configuration YAML (default: conf/seqlake.yaml)")
    parser.add_argument("--scale", choices=sorted(SCALES), default="small", help="data set size (default: small)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON to this file")
    parser.add_argument("--plots", type=Path, help="write PNG plots (QPS by history length and by columns) here")
    args = parser.parse_args(argv)
    bench = run_peers_bench(args.scale, load_config(args.config), progress=lambda line: print(line, file=sys.stderr))
    print(format_report(bench))
    if args.json:
        args.json.write_text(json.dumps(bench.to_dict(), indent=2, default=str))
    if args.plots:
        for path in plot(bench, args.plots):
            print(f"plot: {path}")
    return 0 if bench.ok else 1
