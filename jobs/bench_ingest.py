"""Ingest the same batch for users with 0 and with 10^5 prior events; report the time ratio (target <= 1.2).

Builds two setups in the configured warehouse (catalog namespaces <namespace>_a and <namespace>_b,
recreated on every run; nothing else in the warehouse is touched), then ingests the identical raw
batch into each through the real ingest path, interleaved. Prints median times and their ratio B/A,
the bytes written to landing (must be equal), and every access to history files during ingest, seen
by the kernel (must be none). Exit status 1 if a deterministic check fails; the ratio is reported,
never checked: times are wall clock on a possibly shared machine.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.ingest import format_report, run_ingest_bench
from seqlake.cli_args import ArgumentParser, integer_at_least, namespace_name
from seqlake.config import load_config
from seqlake.spark_session import spark_session


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="seqlake bench-ingest",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", help="configuration YAML (default: conf/seqlake.yaml)")
    parser.add_argument("--users", type=integer_at_least(1), default=20, help="users in the batch (default: 20)")
    parser.add_argument(
        "--records-per-user",
        type=integer_at_least(1),
        default=1000,
        help="events per user in the batch (default: 1000)",
    )
    parser.add_argument(
        "--prior-events",
        type=integer_at_least(0),
        default=100_000,
        help="prior events per user in setup B (default: 100000)",
    )
    parser.add_argument(
        "--landing-prior",
        type=integer_at_least(0),
        default=1000,
        help="of those, events still in landing (an open window); the rest is published history (default: 1000)",
    )
    parser.add_argument(
        "--history-runs", type=integer_at_least(1), default=4, help="published runs of history (default: 4)"
    )
    parser.add_argument("--repeats", type=integer_at_least(1), default=5, help="timed ingests per setup (default: 5)")
    parser.add_argument(
        "--warmup", type=integer_at_least(0), default=1, help="untimed ingests per setup first (default: 1)"
    )
    parser.add_argument(
        "--namespace",
        type=namespace_name,
        default="bench_ingest",
        help="catalog namespace prefix (default: bench_ingest)",
    )
    parser.add_argument("--seed", type=integer_at_least(0), default=7, help="data seed (default: 7)")
    parser.add_argument("--json", metavar="FILE", help="also write the facts as JSON to this file")
    args = parser.parse_args(argv)
    if args.landing_prior > args.prior_events:
        parser.error(f"--landing-prior ({args.landing_prior}) exceeds --prior-events ({args.prior_events})")

    config = load_config(args.config)
    spark = spark_session(config, "seqlake-bench-ingest")
    bench = run_ingest_bench(
        spark,
        config,
        namespace=args.namespace,
        users=args.users,
        records_per_user=args.records_per_user,
        prior_events=args.prior_events,
        landing_prior=args.landing_prior,
        history_runs=args.history_runs,
        repeats=args.repeats,
        warmup=args.warmup,
        seed=args.seed,
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(format_report(bench))
    if args.json:
        Path(args.json).write_text(json.dumps(bench.to_dict(), indent=2) + "\n")
    return 0 if bench.ok else 1


if __name__ == "__main__":
    sys.exit(main())
