"""Rebuild training samples from the normalized training tables (versioned late materialization).

For each tenant, every pointer in `training_<tenant>` is joined with history under its LSN bound,
the window open at capture is rebuilt from the detail table, the fragment is appended and the
sequence is verified against the captured checksum. Verified samples replace `samples_<tenant>`;
failures go to `samples_quarantine` with their reason. `--mode time` replays by event time only and
writes nothing: it reports how often that would have been wrong. Usable as `seqlake samples` or
`spark-submit jobs/samples.py`.
"""

from __future__ import annotations

import sys

from pipelines.training.materialize import fatrow_match, write_arrow_samples
from pipelines.training.sequence import Tenant
from pipelines.training.tables import samples_table_name
from seqlake.cli_args import ArgumentParser
from seqlake.config import load_config
from seqlake.errors import ConfigError


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="seqlake samples", description=__doc__)
    parser.add_argument("--config", help="configuration YAML (default: conf/seqlake.yaml)")
    parser.add_argument("--tenant", action="append", help="tenant to rebuild (repeatable; default: every tenant)")
    parser.add_argument(
        "--engine", choices=("arrow", "spark"), default="arrow", help="where to rebuild (default: arrow)"
    )
    parser.add_argument(
        "--mode",
        choices=("lsn", "time"),
        default="lsn",
        help="lsn: versioned replay; time: event time only (no writes)",
    )
    args = parser.parse_args(argv)
    config = load_config(args.config)
    names = args.tenant or list(config.tenants)
    if not names:
        raise ConfigError("the configuration declares no tenants")
    if args.engine == "spark" and args.mode == "time":
        parser.error("--mode time runs on the arrow engine only")
    spark = None
    for name in names:
        tenant = Tenant(config, name)
        if args.engine == "arrow":
            result = write_arrow_samples(config, tenant, args.mode)
            requests, samples, failures, matched = result.requests, result.samples, result.quarantined, result.matched
            extra = f", {result.bytes_read / 2**20:.1f} MiB of history and detail read"
        else:
            from pipelines.training.spark_reconstruct import write_spark_samples
            from seqlake.spark_session import spark_session

            spark = spark or spark_session(config, "seqlake-samples")
            samples, failures = write_spark_samples(spark, config, tenant)
            requests = samples + failures
            matched = fatrow_match(config, tenant, samples_table=samples_table_name(tenant))
            extra = ""
        rate = matched / requests if requests else 1.0
        print(
            f"{name}: {requests:,} requests, {samples:,} verified samples, {failures:,} quarantined, "
            f"{rate:.2%} equal to the fat-row reference ({args.engine}, {args.mode}){extra}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
