"""Rebuild training samples from the normalized training tables (versioned late materialization).

For each tenant, every pointer in `training_<tenant>` is joined with history under its LSN bound,
the window open at capture is rebuilt from the detail table, the fragment is appended and the
sequence is verified against the captured checksum. Verified samples replace `samples_<tenant>`;
failures go to `samples_quarantine` with their reason. `--mode time` replays by event time only and
writes nothing: it reports how often that would have been wrong. Usable as `seqlake samples` or
`spark-submit jobs/samples.py`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import click

from seqlake.cli import job_main, script_main
from seqlake.cli.options import common_options, load_cli_config
from seqlake.cli.types import EngineChoice
from seqlake.core.errors import ConfigError
from seqlake.core.output import emit

if TYPE_CHECKING:
    from seqlake.core.config import Engine

# `arrow`, the in-process engine's former name, is taken as duckdb for one more release.
ENGINE = EngineChoice(aliases={"arrow": "duckdb"})
MODES = ("lsn", "time")


@click.command("samples", help=__doc__)
@click.option("--tenant", "tenants", multiple=True, help="Tenant to rebuild (repeatable; default: every tenant).")
@click.option(
    "--engine",
    type=ENGINE,
    default="duckdb",
    show_default=True,
    help="Where to rebuild: duckdb (in-process, no JVM) or spark. arrow, its former name for duckdb, is deprecated.",
)
@click.option(
    "--mode",
    type=click.Choice(MODES),
    default="lsn",
    show_default=True,
    help="lsn: versioned replay; time: event time only (no writes).",
)
@common_options
def command(tenants: tuple[str, ...], engine: Engine, mode: Literal["lsn", "time"]) -> None:
    from seqlake.core.progress import Progress
    from seqlake.engines.catalog import open_catalog, table_identifier
    from seqlake.pipelines.training.rebuild.samples import fatrow_match, write_arrow_samples
    from seqlake.pipelines.training.sequence import Tenant
    from seqlake.pipelines.training.tables import fatrow_table_name, samples_table_name

    if engine == "spark" and mode == "time":
        raise click.UsageError("--mode time runs on the duckdb engine only")
    config = load_cli_config()
    names = list(tenants) or list(config.tenants)
    if not names:
        raise ConfigError("the configuration declares no tenants")
    chosen = [Tenant(config, name) for name in names]  # an unknown tenant fails before any work
    spark = None
    results, lines = [], []
    progress = Progress("samples", total=len(chosen), measure="steps", rows_unit="samples", steps_unit="tenants")
    catalog = open_catalog(config)
    for tenant in chosen:
        bytes_read = None
        # Captures of your own requests have no fat rows: their samples are verified by checksum alone.
        reference = catalog.table_exists(table_identifier(config, fatrow_table_name(tenant)))
        if engine == "duckdb":
            result = write_arrow_samples(config, tenant, mode, compare=reference)
            requests, samples, failures, matched = result.requests, result.samples, result.quarantined, result.matched
            bytes_read = result.bytes_read
        else:
            from seqlake.engines.spark_session import spark_session
            from seqlake.pipelines.training.rebuild.spark import write_spark_samples

            spark = spark or spark_session(config, "seqlake-samples")
            samples, failures = write_spark_samples(spark, config, tenant)
            requests = samples + failures
            matched = fatrow_match(config, tenant, samples_table=samples_table_name(tenant)) if reference else 0
        rate = (matched / requests if requests else 1.0) if reference else None
        progress.add(rows=samples, steps=1, note=tenant.name)
        extra = f", {bytes_read / 2**20:.1f} MiB of history and detail read" if bytes_read is not None else ""
        lines.append(
            f"{tenant.name}: {requests:,} requests, {samples:,} verified samples, {failures:,} quarantined, "
            + (f"{rate:.2%} equal to the fat-row reference" if rate is not None else "no fat-row table to compare with")
            + f" ({engine}, {mode}){extra}"
        )
        results.append(
            {
                "tenant": tenant.name,
                "requests": requests,
                "samples": samples,
                "quarantined": failures,
                "matched": matched if reference else None,
                "match_rate": rate,
                "bytes_read": bytes_read,
            }
        )
    progress.done()
    emit({"engine": engine, "mode": mode, "tenants": results}, "\n".join(lines))


main = job_main(command)

if __name__ == "__main__":
    script_main("samples")
