"""Compact the same events spread over N closed windows (N = 1 .. 200) and print the cost curve.

Each N gets a namespace of its own in the configured warehouse (`<namespace>_n<N>`, recreated on
every run; nothing else is touched). Reports seconds per N, the ratio to N = 1 (target: <= 2x at the
largest N) and, for small N, the time of compacting one window per pass. Exit status 1 if any run
did not publish every event exactly once; times are reported, never checked.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.compaction import SCALES, format_report, run_compaction_bench
from seqlake.cli_args import ArgumentParser, integer_at_least, namespace_name
from seqlake.config import load_config
from seqlake.spark_session import spark_session


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="seqlake bench-compact", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", help="configuration YAML (default: conf/seqlake.yaml)")
    parser.add_argument(
        "--scale",
        choices=sorted(SCALES),
        default="medium",
        help="small: 4K events, N = 1, 5, 20; medium: 100K events, N = 1, 10, 50, 200 (default)",
    )
    parser.add_argument("--events", type=integer_at_least(100), help="override the scale's event count")
    parser.add_argument(
        "--namespace",
        type=namespace_name,
        default="bench_compact",
        help="catalog namespace prefix (default: bench_compact)",
    )
    parser.add_argument("--seed", type=integer_at_least(0), default=7, help="data seed (default: 7)")
    parser.add_argument("--json", metavar="FILE", help="also write the facts as JSON to this file")
    args = parser.parse_args(argv)

    config = load_config(args.config)
    events, windows = SCALES[args.scale]
    spark = spark_session(config, "seqlake-bench-compact")
    bench = run_compaction_bench(
        spark,
        config,
        events=args.events or events,
        window_counts=windows,
        namespace=args.namespace,
        seed=args.seed,
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(format_report(bench))
    if args.json:
        Path(args.json).write_text(json.dumps(bench.to_dict(), indent=2) + "\n")
    return 0 if bench.ok else 1


if __name__ == "__main__":
    sys.exit(main())
