"""Ingest the raw source table into the landing tier (Delta), quarantining malformed records.

Each source commit is one batch; re-running ingests only what is new, and a replayed batch adds
nothing twice. Usable as `seqlake ingest` or `spark-submit jobs/ingest.py`.
"""

from __future__ import annotations

import sys

from pipelines.ingest import ingest_source
from pipelines.landing import landing_paths
from seqlake.cli_args import ArgumentParser, table_name
from seqlake.config import load_config
from seqlake.progress import Progress
from seqlake.spark_session import spark_session


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="seqlake ingest", description=__doc__)
    parser.add_argument("--config", help="configuration YAML (default: conf/seqlake.yaml)")
    parser.add_argument(
        "--source", default="raw_events", type=table_name, help="raw source table (default: raw_events)"
    )
    args = parser.parse_args(argv)
    config = load_config(args.config)
    spark = spark_session(config, "seqlake-ingest")
    progress = Progress("ingest")
    result = ingest_source(spark, config, args.source, landing_paths(config), progress)
    progress.done()
    print(
        f"ingested {result.batches} batches ({result.skipped} already done): {result.records:,} records, "
        f"{result.landed:,} landed, {sum(result.quarantined.values()):,} quarantined "
        f"{dict(sorted(result.quarantined.items()))}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
