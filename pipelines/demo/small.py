"""`seqlake demo --small`: the pipeline end to end on a tiny generated data set, in-process where it can be.

Generate and land the raw stream (pyiceberg), ingest it into the landing tier (in-process: pyarrow and
delta-rs), publish every window and merge runs on the DuckDB engine, check the history table's
invariants and read one user's history back through the reader. No JVM starts. No late
materialization: that is the full demo's part.
"""

from __future__ import annotations

import time

from seqlake.core.config import Config
from seqlake.core.progress import Progress
from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.pipelines.compaction.batches import compact_in_batches
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.demo.full import RAW_TABLE, generate_and_land, reset_demo_tables
from seqlake.pipelines.demo.generator import user_id_of
from seqlake.pipelines.demo.report import Report, Stopwatch
from seqlake.pipelines.ingest.duckdb import ingest_source_in_process
from seqlake.pipelines.ingest.raw_source import create_raw_table
from seqlake.pipelines.landing.tables import landing_paths
from seqlake.pipelines.landing.windows import landed_windows
from seqlake.tableformat.fsck import fsck_table
from seqlake.tableformat.reader import HistoryReader
from seqlake.tableformat.registry import live_runs
from seqlake.tableformat.snapshots import total_records

# Small enough to run in well under a minute; large enough for late, duplicate
# and malformed records, a heavy user and a capacity merge (more windows than layout.max_runs).
SMALL_GENERATOR = {"users": 40, "heavy_users": 1, "max_events": 2_000, "windows": 6, "items": 1_000}


def small_config(config: Config) -> Config:
    """`config` with the small generator (everything else, the warehouse included, as configured)."""
    return config.model_copy(update={"generator": config.generator.model_copy(update=SMALL_GENERATOR)})


def run_small_demo(config: Config) -> Report:
    config = small_config(config)
    report = Report("seqlake demo report (small)")
    started = time.monotonic()
    reset_demo_tables(config)
    catalog = open_catalog(config)
    raw_table = create_raw_table(catalog, table_identifier(config, RAW_TABLE))
    generated = generate_and_land(config, raw_table, report, window_seconds=config.layout.window_seconds)
    stats = generated.stats
    generated.facts["raw_commits"] = generated.landing.commits

    paths = landing_paths(config)
    ingesting = Progress("ingest", measure="steps", rows_unit="records", steps_unit="source commits")
    with Stopwatch() as ingest_clock:
        ingested = ingest_source_in_process(config, RAW_TABLE, paths, ingesting)
    ingesting.done()
    ingest = report.section("ingest")
    ingest["engine"] = "duckdb"
    ingest["records"] = ingested.records
    ingest["events_landed"] = ingested.landed
    ingest["quarantined"] = dict(sorted(ingested.quarantined.items()))
    Report.throughput(ingest, ingest_clock.seconds, ingested.records, "records")

    # The stream has ended: every landed window is closed. Published on DuckDB, in-process.
    with Stopwatch() as compaction_clock:
        state = landed_windows(paths)
        todo = {w: state.rows.get(w, 0) for w in state.closed(end_of_stream=True)}
        events = merges = 0
        for batch in compact_in_batches(config, paths, todo, "duckdb"):
            events += batch.result.events
            merges += batch.merged_into is not None
    history, _ = history_tables(config)
    history.refresh()
    snapshot = history.current_snapshot()
    compaction = report.section("compaction")
    compaction["engine"] = "duckdb"
    compaction["windows_published"] = len(todo)
    compaction["events_compacted"] = events
    compaction["history_rows"] = total_records(snapshot)
    compaction["merges"] = merges
    compaction["runs"] = len(live_runs(history))
    Report.throughput(compaction, compaction_clock.seconds, events, "events")  # merges included

    checked = fsck_table(history)
    report.section("fsck").update(ok=True, files=checked.files, rows=checked.rows)

    heaviest = int(user_id_of(int(stats.history_lengths.argmax())))
    rows = HistoryReader(history).read_user(heaviest)
    read = report.section("read")
    read["user"] = heaviest
    read["rows"] = rows.num_rows
    read["events"] = int(sum(rows["event_count"].to_pylist())) if rows.num_rows else 0

    run = report.section("run")
    run["warehouse"] = config.warehouse_uri()
    run["seconds"] = round(time.monotonic() - started, 1)
    return report
