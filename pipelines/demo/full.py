"""The main job, end to end: every capability seqlake has, on generated data (`seqlake demo`).

It builds a report (written as `report.json` in the warehouse by the command). The demo owns its
tables and recreates them on every run: it purges them only in a warehouse it created itself (a fresh
location, or one an earlier demo marked), and refuses any other unless `--yes`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from seqlake.core.errors import SeqlakeError

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from seqlake.core.config import Config
    from seqlake.pipelines.demo.generator import GeneratorStats
    from seqlake.pipelines.demo.report import Report
    from seqlake.pipelines.ingest.raw_source import LandingResult

RAW_TABLE = "raw_events"
# The namespace property that marks a warehouse the demo created (and may purge again).
DEMO_PROPERTY = "seqlake.created-by"
DEMO_MARK = "seqlake demo"


def _landing_exists(config: Config) -> bool:
    from pyarrow.fs import FileType

    from seqlake.pipelines.landing.tables import landing_paths
    from seqlake.tableformat.io import resolve_uri

    filesystem, landing = resolve_uri(landing_paths(config).root)
    return filesystem.get_file_info(landing).type != FileType.NotFound


def check_demo_may_reset(config: Config) -> None:
    """A SeqlakeError unless the demo may purge its tables here: the location is new or empty, or an
    earlier demo created it (its namespace carries the demo's mark)."""
    from seqlake.engines.catalog import open_catalog

    if config.warehouse_uri().startswith("file://") and not config.warehouse_path().exists():
        return  # a fresh location
    catalog = open_catalog(config)
    namespace = config.warehouse.namespace
    if catalog.load_namespace_properties(namespace).get(DEMO_PROPERTY) == DEMO_MARK:
        return
    tables = sorted(identifier[-1] for identifier in catalog.list_tables(namespace))
    if not tables and not _landing_exists(config):
        return  # nothing to lose
    held = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "") if tables else "a landing tier"
    raise SeqlakeError(
        f"the warehouse {config.warehouse_uri()} was not created by seqlake demo and holds {held}: the demo "
        "would purge its tables; pass --yes to let it, or choose another warehouse (--config, SEQLAKE_WAREHOUSE)"
    )


def reset_demo_tables(config: Config) -> None:
    """The demo starts from nothing: drop its tables and landing folders, and mark the warehouse as the
    demo's own."""
    from seqlake.engines.catalog import open_catalog, table_identifier
    from seqlake.pipelines.compaction.quarantine import COMPACTION_QUARANTINE
    from seqlake.pipelines.landing.tables import landing_paths
    from seqlake.pipelines.tables import DETAIL, HISTORY
    from seqlake.pipelines.training.sequence import tenants
    from seqlake.pipelines.training.tables import all_table_names
    from seqlake.tableformat.io import resolve_uri

    catalog = open_catalog(config)
    for name in (RAW_TABLE, HISTORY, DETAIL, COMPACTION_QUARANTINE, *all_table_names(tenants(config))):
        identifier = table_identifier(config, name)
        if catalog.table_exists(identifier):
            catalog.purge_table(identifier)
    if _landing_exists(config):
        filesystem, landing = resolve_uri(landing_paths(config).root)
        filesystem.delete_dir(landing)
    catalog.update_namespace_properties(config.warehouse.namespace, updates={DEMO_PROPERTY: DEMO_MARK})


@dataclass(frozen=True)
class Generated:
    """What `generate_and_land` generated, how it landed, and its report section."""

    stats: GeneratorStats
    landing: LandingResult
    facts: dict[str, Any]


def generate_and_land(config: Config, raw_table: Table, report: Report, window_seconds: int) -> Generated:
    """Generate the demo's source stream and land it in `raw_table` as delivered (a commit per
    `window_seconds` of arrival); the report's `generated` section states what was generated."""
    from seqlake.core.progress import Progress
    from seqlake.pipelines.demo.generator import EventGenerator
    from seqlake.pipelines.demo.report import Report, Stopwatch
    from seqlake.pipelines.ingest.raw_source import land_raw_records

    generator = EventGenerator(config)
    generating = Progress("generate", rows_unit="records", show_bytes=True)
    with Stopwatch() as generating_clock:
        landing = land_raw_records(raw_table, generator.batches(), generating, window_seconds=window_seconds)
    generating.done()
    stats = generator.stats
    gen = report.section("generated")
    gen["users"] = stats.users
    gen["events"] = stats.events
    gen["records"] = stats.records
    gen["late_events"] = stats.late
    gen["very_late_events"] = stats.very_late
    gen["duplicate_records"] = stats.duplicates
    gen["malformed_records"] = dict(sorted(stats.malformed.items()))
    gen["max_history_length"] = int(stats.history_lengths.max())
    gen["source_partitions"] = config.generator.source_partitions
    gen["windows"] = config.generator.windows
    Report.throughput(gen, generating_clock.seconds, stats.records, "records")  # generated and landed in raw_events
    return Generated(stats, landing, gen)


def run_demo(config: Config) -> Report:
    from seqlake.core.config import resolve_engine
    from seqlake.core.progress import Progress
    from seqlake.engines.catalog import open_catalog, spark_name, table_identifier
    from seqlake.engines.duckdb_session import connect as duckdb_connect
    from seqlake.engines.spark_session import spark_session
    from seqlake.pipelines.compaction.plan import history_tables
    from seqlake.pipelines.demo.report import Report
    from seqlake.pipelines.demo.verdict import verdict
    from seqlake.pipelines.ingest.raw_source import create_raw_table
    from seqlake.pipelines.landing.tables import landing_paths
    from seqlake.pipelines.training.capture.serving import serve_and_capture
    from seqlake.pipelines.training.sequence import tenants
    from seqlake.tableformat.fsck import fsck_table
    from seqlake.tableformat.registry import live_runs
    from seqlake.tableformat.snapshots import total_records

    report = Report("seqlake demo report")
    started = time.monotonic()
    reset_demo_tables(config)
    catalog = open_catalog(config)
    raw_id = table_identifier(config, RAW_TABLE)

    # 1. Generate the source stream and land it as delivered, one commit per arrival window.
    raw_table = create_raw_table(catalog, raw_id)
    # A commit per capture period: ingest then moves in steps between which requests are captured.
    step_seconds = config.layout.window_seconds // config.training.captures_per_window
    landing = generate_and_land(config, raw_table, report, window_seconds=step_seconds).landing

    # 2. Read the raw table back through every engine: they must agree.
    metadata_location = catalog.load_table(raw_id).metadata_location
    with duckdb_connect() as con:
        counted = con.execute(
            "SELECT count(*), count(DISTINCT source_partition) FROM iceberg_scan(?)", [metadata_location]
        ).fetchone()
    assert counted is not None  # an aggregate answers one row
    duck_rows, duck_partitions = counted
    spark = spark_session(config, "seqlake-demo")
    spark_count = spark.sql(f"SELECT count(*) AS n FROM {spark_name(config, RAW_TABLE)}").first()
    assert spark_count is not None  # an aggregate answers one row
    spark_rows = spark_count["n"]
    # pyiceberg answers from snapshot metadata alone: no data file is read.
    arrow_rows = total_records(catalog.load_table(raw_id).current_snapshot())
    raw = report.section("raw_landing")
    raw["table"] = raw_id
    raw["records"] = landing.records
    raw["commits"] = landing.commits
    raw["rows_pyiceberg"] = arrow_rows
    raw["rows_spark"] = spark_rows
    raw["rows_duckdb"] = duck_rows
    raw["engines_agree"] = landing.records == arrow_rows == spark_rows == duck_rows
    raw["partitions_duckdb"] = duck_partitions

    # 3. Serve: ingest step by step into the landing tier (Delta, malformed records quarantined),
    # capture the requests of active users against the online view after each step, and close
    # windows (compaction, capacity merges) as the watermark passes them.
    paths = landing_paths(config)
    with Progress("serve", rows_unit="records", measure="steps", steps_unit="ingest steps") as serving:
        served = serve_and_capture(spark, config, RAW_TABLE, paths, serving)
    ingested = served.ingest
    ingest = report.section("ingest")
    ingest["engine"] = resolve_engine(config.layout.ingest_engine)
    ingest["batches"] = ingested.batches
    ingest["records"] = ingested.records
    ingest["events_landed"] = ingested.landed
    ingest["quarantined"] = dict(sorted(ingested.quarantined.items()))
    ingest["quarantined_total"] = sum(ingested.quarantined.values())
    Report.throughput(ingest, served.seconds["ingest"], ingested.records, "records")
    published, events, merges = served.windows_published, served.events_compacted, served.merges
    history, detail = history_tables(config)
    history.refresh()
    runs = live_runs(history)
    snapshot = history.current_snapshot()
    compaction = report.section("compaction")
    compaction["engine"] = resolve_engine(config.layout.compaction_engine)
    compaction["windows_published"] = published
    compaction["events_compacted"] = events
    # Events of groups whose aggregate does not fit its column (seqlake.pipelines.compaction.quarantine).
    compaction["events_quarantined"] = served.events_quarantined_at_compaction
    compaction["history_rows"] = total_records(snapshot)
    compaction["runs_per_bucket"] = len(runs)
    compaction["merges"] = merges
    compaction["runs"] = ", ".join(
        f"{r.run_id}[{r.windows[0]}..{r.windows[-1]}: {len(r.windows)}]" for r in runs.values()
    )
    compaction["detail_events"] = total_records(detail.refresh().current_snapshot())
    Report.throughput(compaction, served.seconds["compaction"], events, "events")  # merges included

    # 5. Check every invariant of the history table.
    checked = fsck_table(history)
    check = report.section("fsck")
    check["ok"] = True
    check["files"] = checked.files
    check["rows"] = checked.rows
    check["mib"] = round(checked.bytes / 2**20, 2)

    # 6. Late materialization: rebuild every tenant's samples from pointers, on Arrow and on Spark.
    late_materialization(spark, config, report, served)
    names = [tenant.name for tenant in tenants(config)]
    report.lead("verdict", verdict(report.sections, names, config.layout.detail_retention_windows))

    run = report.section("run")
    run["warehouse"] = config.warehouse_uri()
    run["seconds"] = round(time.monotonic() - started, 1)
    return report


def late_materialization(spark, config: Config, report: Report, served) -> None:
    from seqlake.core.progress import Progress
    from seqlake.engines.catalog import open_catalog, table_identifier
    from seqlake.pipelines.compaction.plan import history_tables
    from seqlake.pipelines.demo.report import Stopwatch
    from seqlake.pipelines.training.rebuild.samples import fatrow_match, read_fatrows_pyarrow, write_arrow_samples
    from seqlake.pipelines.training.rebuild.spark import write_spark_samples
    from seqlake.pipelines.training.sequence import tenants
    from seqlake.pipelines.training.tables import (
        fatrow_table_name,
        samples_table_name,
        table_bytes,
        training_table_name,
    )

    section = report.section("late_materialization")
    section["capture_points"] = served.capture_points
    section["requests"] = served.requests
    section["requests_per_active_user_per_day"] = config.training.requests_per_active_user_per_day
    section["fragment_events"] = config.training.fragment_events
    # Online view, pointers, fragments and fat rows of every tenant, written to their tables.
    section["capture_seconds"] = round(served.seconds["capture"], 2)
    section["requests_captured_per_second"] = (
        round(served.requests / served.seconds["capture"]) if served.seconds["capture"] else None
    )
    history, detail = history_tables(config)
    catalog = open_catalog(config)
    profiles = tenants(config)
    normalized = {
        t.name: table_bytes(catalog.load_table(table_identifier(config, training_table_name(t)))) for t in profiles
    }
    fat = {t.name: table_bytes(catalog.load_table(table_identifier(config, fatrow_table_name(t)))) for t in profiles}
    storage = report.section("storage")
    storage["history_mib"] = _mib(table_bytes(history))
    storage["detail_mib"] = _mib(table_bytes(detail))
    storage["normalized_training_mib"] = _mib(sum(normalized.values()))
    storage["fat_row_mib"] = _mib(sum(fat.values()))
    ratio = (sum(normalized.values()) + table_bytes(history)) / max(sum(fat.values()), 1)
    storage["normalized_plus_history_vs_fat_row"] = round(ratio, 3)
    # Rebuilding values changed after a capture also needs the detail table (kept for retention).
    with_detail = ratio + table_bytes(detail) / max(sum(fat.values()), 1)
    storage["normalized_plus_history_and_detail_vs_fat_row"] = round(with_detail, 3)
    progress = Progress("samples", total=3 * len(profiles), measure="steps", rows_unit="samples", steps_unit="rebuilds")
    for tenant in profiles:
        with Stopwatch() as samples_clock:
            exact = write_arrow_samples(config, tenant, "lsn", compare=False)
        exact = replace(exact, matched=fatrow_match(config, tenant, samples_table=samples_table_name(tenant)))
        fatrow_seconds, _ = read_fatrows_pyarrow(config, tenant)
        progress.add(rows=exact.samples, steps=1, note=f"{tenant.name}: arrow, LSN-bounded")
        time_only = write_arrow_samples(config, tenant, "time")
        progress.add(rows=time_only.requests, steps=1, note=f"{tenant.name}: arrow, time only")
        spark_samples, spark_failures = write_spark_samples(spark, config, tenant)
        spark_matched = fatrow_match(config, tenant, samples_table=samples_table_name(tenant))
        progress.add(rows=spark_samples, steps=1, note=f"{tenant.name}: spark, LSN-bounded")
        facts = report.section(f"tenant_{tenant.name}")
        facts["feature_groups"] = ", ".join(tenant.feature_groups)
        facts["columns"] = len(tenant.columns)
        facts["max_length"] = tenant.max_length
        facts["normalized_training_mib"] = _mib(normalized[tenant.name])
        facts["fat_row_mib"] = _mib(fat[tenant.name])
        facts["samples"] = exact.samples
        facts["samples_per_second"] = round(exact.samples / max(samples_clock.seconds, 1e-9))
        # The samples job (rebuild, verify, write) against a scan of the fat rows holding the same samples.
        facts["samples_time_vs_fat_row_read"] = round(samples_clock.seconds / max(fatrow_seconds, 1e-9), 2)
        facts["exact_match_lsn"] = round(exact.match_rate, 4)
        facts["exact_match_time_only"] = round(time_only.match_rate, 4)
        facts["checksum_failures_lsn"] = exact.quarantined
        facts["checksum_failures_time_only"] = time_only.quarantined
        facts["spark_samples"] = spark_samples
        facts["spark_exact_match_lsn"] = round(spark_matched / max(exact.requests, 1), 4)
        facts["spark_checksum_failures"] = spark_failures
        facts["bytes_read_mib"] = _mib(exact.bytes_read)
    progress.done()


def _mib(n: int) -> float:
    return round(n / 2**20, 2)
