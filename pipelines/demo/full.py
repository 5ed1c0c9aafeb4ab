"""The main job, end to end: every capability seqlake has, on generated data (`seqlake demo`).

It builds a report (written as `report.json` in the warehouse by the command). The demo owns its
tables and recreates them on every run: it purges them only in a warehouse it created itself (a fresh
location, or one an earlier demo marked), and refuses any other unless `--yes`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
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


def demo_engines(config: Config) -> Config:
    """The demo's configuration: the main job on the in-process engines (`auto` is duckdb here, whatever
    is installed), or on Spark where the configuration names it; Spark runs the cross-checks."""
    layout = config.layout
    chosen = {key: "duckdb" for key in ("ingest_engine", "compaction_engine") if getattr(layout, key) == "auto"}
    return config.model_copy(update={"layout": layout.model_copy(update=chosen)}) if chosen else config


class SparkCrossCheck:
    """Spark beside the in-process job, on a thread of its own: the session starts (and the JVM warms
    up on the raw table's count) while the serving loop runs; each tenant's Spark samples are rebuilt
    while the in-process time-only replays run. Its answers are awaited where the report needs them."""

    def __init__(self, config: Config) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.config = config
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="seqlake-spark")
        self._session = self._thread.submit(self._start)

    def _start(self):
        from seqlake.engines.spark_session import driver_java_options, spark_session

        # In local mode the JVM lives as long as the demo: a short job's JVM settings.
        quick = self.config.spark.master.startswith("local")
        return spark_session(
            self.config, "seqlake-demo", **{"spark.driver.extraJavaOptions": driver_java_options(quick=quick)}
        )

    def session(self):
        return self._session.result()

    def submit(self, work, *args):
        """`work(session, *args)` on Spark's thread, after what was submitted before: its future."""
        return self._thread.submit(lambda: work(self.session(), *args))

    def close(self) -> None:
        """Wait for the work that runs; drop what has not started (after a failure elsewhere)."""
        self._thread.shutdown(wait=True, cancel_futures=True)


def _spark_count(spark, config: Config) -> int:
    from seqlake.engines.catalog import spark_name

    counted = spark.sql(f"SELECT count(*) AS n FROM {spark_name(config, RAW_TABLE)}").first()
    assert counted is not None  # an aggregate answers one row
    return int(counted["n"])


def run_demo(config: Config) -> Report:
    from seqlake.core.config import resolve_engine
    from seqlake.core.progress import Progress
    from seqlake.engines.catalog import open_catalog, table_identifier
    from seqlake.engines.duckdb_session import connect as duckdb_connect
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

    config = demo_engines(config)
    report = Report("seqlake demo report")
    started = time.monotonic()
    reset_demo_tables(config)
    catalog = open_catalog(config)
    raw_id = table_identifier(config, RAW_TABLE)

    # 1. Generate the source stream and land it as delivered, one commit per capture period: ingest
    # then moves in steps between which requests are captured.
    raw_table = create_raw_table(catalog, raw_id)
    step_seconds = config.layout.window_seconds // config.training.captures_per_window
    landing = generate_and_land(config, raw_table, report, window_seconds=step_seconds).landing

    # 2. Read the raw table back through every engine: they must agree. Spark counts it on its own
    # thread, starting while the serving loop runs.
    spark = SparkCrossCheck(config)
    try:
        spark_rows = spark.submit(_spark_count, config)
        metadata_location = raw_table.refresh().metadata_location
        with duckdb_connect() as con:
            counted = con.execute(
                "SELECT count(*), count(DISTINCT source_partition) FROM iceberg_scan(?)", [metadata_location]
            ).fetchone()
        assert counted is not None  # an aggregate answers one row
        duck_rows, duck_partitions = counted
        # pyiceberg answers from snapshot metadata alone: no data file is read.
        arrow_rows = total_records(raw_table.current_snapshot())
        raw = report.section("raw_landing")
        raw["table"] = raw_id
        raw["records"] = landing.records
        raw["commits"] = landing.commits
        raw["rows_pyiceberg"] = arrow_rows
        raw["rows_spark"] = None  # Spark's answer, below
        raw["rows_duckdb"] = duck_rows
        raw["engines_agree"] = None
        raw["partitions_duckdb"] = duck_partitions

        # 3. Serve: ingest step by step into the landing tier (Delta, malformed records quarantined),
        # capture the requests of active users against the online view after each step, and close
        # windows (compaction, capacity merges) as the watermark passes them.
        paths = landing_paths(config)
        on_spark = "spark" in (
            resolve_engine(config.layout.ingest_engine),
            resolve_engine(config.layout.compaction_engine),
        )
        with Progress("serve", rows_unit="records", measure="steps", steps_unit="ingest steps") as serving:
            served = serve_and_capture(spark.session() if on_spark else None, config, RAW_TABLE, paths, serving)
        raw["rows_spark"] = spark_rows.result()
        raw["engines_agree"] = landing.records == arrow_rows == raw["rows_spark"] == duck_rows
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

        # 4. The small files the capture steps appended (a file per bucket and step) are rewritten into
        # one per bucket, as `seqlake maintain` does.
        rewrite_small_files(config, report)

        # 5. Check every invariant of the history table.
        checked = fsck_table(history)
        check = report.section("fsck")
        check["ok"] = True
        check["files"] = checked.files
        check["rows"] = checked.rows
        check["mib"] = round(checked.bytes / 2**20, 2)

        # 6. Late materialization: rebuild every tenant's samples from pointers, in-process and on Spark.
        late_materialization(spark, config, report, served)
    finally:
        spark.close()
    names = [tenant.name for tenant in tenants(config)]
    report.lead("verdict", verdict(report.sections, names, config.layout.detail_retention_windows))

    run = report.section("run")
    run["warehouse"] = config.warehouse_uri()
    run["seconds"] = round(time.monotonic() - started, 1)
    return report


def rewrite_small_files(config: Config, report: Report) -> None:
    """Rewrite the training and fat-row tables' small files into one per bucket (`seqlake maintain`'s
    step), so that reading them costs what a maintained table's read does."""
    from seqlake.engines.catalog import open_catalog, table_identifier
    from seqlake.pipelines.demo.report import Report, Stopwatch
    from seqlake.pipelines.maintenance.steps import rewrite_small_files as rewrite
    from seqlake.pipelines.training.sequence import tenants
    from seqlake.pipelines.training.tables import fatrow_table_name, training_table_name

    catalog = open_catalog(config)
    names = [name for t in tenants(config) for name in (training_table_name(t), fatrow_table_name(t))]
    removed = 0
    with Stopwatch() as clock:
        for name in names:
            table = catalog.load_table(table_identifier(config, name))
            removed += rewrite(table, config.maintenance.small_file_bytes).removed
    section = report.section("small_files")
    section["tables"] = ", ".join(names)
    section["files_rewritten"] = removed
    Report.throughput(section, clock.seconds, removed, "files")


def late_materialization(spark: SparkCrossCheck, config: Config, report: Report, served) -> None:
    from seqlake.core.progress import Progress
    from seqlake.engines.catalog import open_catalog, table_identifier
    from seqlake.pipelines.compaction.plan import history_tables
    from seqlake.pipelines.demo.report import Stopwatch
    from seqlake.pipelines.tables import load_existing_table
    from seqlake.pipelines.training.rebuild.baselines import copy_fatrows
    from seqlake.pipelines.training.rebuild.samples import fatrow_match, read_fatrows_pyarrow, write_arrow_samples
    from seqlake.pipelines.training.rebuild.stream import SampleStream
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
    facts = {}
    written = {}
    # The in-process samples job and the fat-row scan it is measured against run alone: Spark has
    # nothing to do meanwhile (its count of the raw table was awaited above).
    for tenant in profiles:
        with Stopwatch() as samples_clock:
            exact = write_arrow_samples(config, tenant, "lsn", compare=False)
        with Stopwatch() as stream_clock, SampleStream(config, tenant) as stream:
            streamed = sum(batch.num_rows for batch in stream)
        fatrow_seconds, _ = read_fatrows_pyarrow(config, tenant)
        copy_seconds = copy_fatrows(config, tenant)
        # These samples, as Spark's will replace them below.
        written[tenant.name] = (exact, load_existing_table(config, samples_table_name(tenant)).metadata_location)
        progress.add(rows=exact.samples, steps=1, note=f"{tenant.name}: duckdb, LSN-bounded")
        tenant_facts = facts[tenant.name] = report.section(f"tenant_{tenant.name}")
        tenant_facts["feature_groups"] = ", ".join(tenant.feature_groups)
        tenant_facts["columns"] = len(tenant.columns)
        tenant_facts["max_length"] = tenant.max_length
        tenant_facts["normalized_training_mib"] = _mib(normalized[tenant.name])
        tenant_facts["fat_row_mib"] = _mib(fat[tenant.name])
        tenant_facts["samples"] = exact.samples
        tenant_facts["samples_per_second"] = round(exact.samples / max(samples_clock.seconds, 1e-9))
        tenant_facts["streamed_samples"] = streamed
        # What a trainer reads (the verified stream) against a scan of the fat rows holding the same
        # samples; the samples job (rebuild, verify, write a table) against the fat rows read and
        # written again, what a fat-row pipeline pays to hand a trainer its table.
        tenant_facts["samples_time_vs_fat_row_read"] = round(stream_clock.seconds / max(fatrow_seconds, 1e-9), 2)
        tenant_facts["samples_job_vs_fat_row_copy"] = round(samples_clock.seconds / max(copy_seconds, 1e-9), 2)
        tenant_facts["exact_match_lsn"] = None  # compared below, while Spark works
        tenant_facts["exact_match_time_only"] = None
        tenant_facts["checksum_failures_lsn"] = exact.quarantined
        tenant_facts["checksum_failures_time_only"] = None
        tenant_facts.update(spark_samples=None, spark_exact_match_lsn=None, spark_checksum_failures=None)
        tenant_facts["bytes_read_mib"] = _mib(exact.bytes_read)
    # Spark rebuilds every tenant's samples again (replacing samples_<tenant>) and each is compared with
    # the fat rows, while here the in-process samples are compared with them and the time-only
    # replays (which write no table) run.
    on_spark = {tenant.name: spark.submit(_spark_samples, config, tenant) for tenant in profiles}
    for tenant in profiles:
        exact, as_of = written[tenant.name]
        matched = fatrow_match(config, tenant, samples_table=samples_table_name(tenant), as_of=as_of)
        facts[tenant.name]["exact_match_lsn"] = round(matched / max(exact.requests, 1), 4)
        time_only = write_arrow_samples(config, tenant, "time")
        progress.add(rows=time_only.requests, steps=1, note=f"{tenant.name}: duckdb, time only")
        facts[tenant.name]["exact_match_time_only"] = round(time_only.match_rate, 4)
        facts[tenant.name]["checksum_failures_time_only"] = time_only.quarantined
    for tenant in profiles:
        spark_samples, spark_failures, spark_matched = on_spark[tenant.name].result()
        progress.add(rows=spark_samples, steps=1, note=f"{tenant.name}: spark, LSN-bounded")
        tenant_facts = facts[tenant.name]
        tenant_facts["spark_samples"] = spark_samples
        tenant_facts["spark_exact_match_lsn"] = round(spark_matched / max(spark_samples + spark_failures, 1), 4)
        tenant_facts["spark_checksum_failures"] = spark_failures
    progress.done()


def _spark_samples(spark, config: Config, tenant) -> tuple[int, int, int]:
    """Spark's samples job for `tenant`, then its samples compared with the fat rows: (samples,
    failures, equal to their fat row)."""
    from seqlake.pipelines.training.rebuild.samples import fatrow_match
    from seqlake.pipelines.training.rebuild.spark import write_spark_samples
    from seqlake.pipelines.training.tables import samples_table_name

    samples, failures = write_spark_samples(spark, config, tenant)
    return samples, failures, fatrow_match(config, tenant, samples_table=samples_table_name(tenant))


def _mib(n: int) -> float:
    return round(n / 2**20, 2)
