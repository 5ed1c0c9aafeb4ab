"""Catch-up compaction cost against the number of windows: the same E events spread over N closed
windows, compacted by the batched path (`seqlake compact`), side by side in one Spark session.

For each N, a namespace of its own (`<namespace>_n<N>`, recreated) gets a landing tier holding the
same generated events, their arrival windows mapped onto N windows; then every closed window is
compacted as the job does (batches bounded by `layout.compaction_batch_rows`, capacity merges) and
timed. For small N the old way, one window per pass, is timed too. Every run must publish every
event once (checked); times are reported as ratios to N = 1, never checked.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from seqlake.core.config import Config, GeneratorSpec
from seqlake.engines.catalog import purge_tables
from seqlake.pipelines.compaction.duckdb import compact_batch_duckdb, merge_runs_if_needed_duckdb
from seqlake.pipelines.compaction.plan import history_tables, plan_batches
from seqlake.pipelines.compaction.spark import compact_batch, compact_window, merge_runs_if_needed
from seqlake.pipelines.demo.generator import EventGenerator
from seqlake.pipelines.ingest.duckdb import BatchValidator
from seqlake.pipelines.landing.schema import landing_schema
from seqlake.pipelines.landing.tables import LandingPaths
from seqlake.pipelines.tables import DETAIL, HISTORY

SCALES = {"small": (4_000, (1, 5, 20)), "medium": (100_000, (1, 10, 50, 200))}
ONE_BY_ONE_UP_TO = 10  # windows: the per-window path is timed only this far (it grows with N)


@dataclass
class CurvePoint:
    windows: int
    events: int
    batches: int
    seconds: float
    one_by_one_seconds: float | None = None
    duckdb_seconds: float = 0.0  # the same backlog on the in-process DuckDB engine
    ratio_to_one_window: float = 0.0


@dataclass
class CompactionBench:
    events: int
    points: list[CurvePoint] = field(default_factory=list)
    ok: bool = True
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def landing_events(config: Config, events: int, max_windows: int, seed: int) -> pa.Table:
    """About `events` valid landing rows, from the one generator, spread over `max_windows` arrival
    windows (the generator's own window index, 0-based, in `window_id`)."""
    users = max(1, events // 40)
    spec = GeneratorSpec.model_validate(
        {
            **config.generator.model_dump(),
            "users": users,
            "heavy_users": 0,
            "min_events": 20,
            "max_events": 60,
            "windows": max_windows,
            "malformed_share": 0.0,
            "seed": seed,
        }
    )
    generator = EventGenerator(config.model_copy(update={"generator": spec}))
    validate = BatchValidator(config)
    try:
        parsed = pa.Table.from_batches(list(validate.stream(generator.batches())), validate.schema)
    finally:
        validate.close()
    rows = parsed.filter(pc.is_null(parsed["reason"]))
    first = pc.min(rows["window_id"]).as_py()
    rows = rows.set_column(rows.schema.get_field_index("window_id"), "window_id", pc.subtract(rows["window_id"], first))
    return rows.select(landing_schema(config).names).cast(landing_schema(config))


def _lake(spark: SparkSession, config: Config, namespace: str, rows: pa.Table) -> tuple[Config, LandingPaths]:
    warehouse = config.warehouse.model_copy(update={"namespace": namespace})
    lake = config.model_copy(update={"warehouse": warehouse})
    purge_tables(lake, (HISTORY, DETAIL))
    root = lake.warehouse_path() / f"{namespace}_landing"
    shutil.rmtree(root, ignore_errors=True)
    paths = LandingPaths(events=f"{root.as_uri()}/events", quarantine=f"{root.as_uri()}/quarantine")
    spark.createDataFrame(rows, schema=spark_schema(rows.schema)).write.format("delta").partitionBy("window_id").save(
        paths.events
    )
    history_tables(lake)  # created before the clock starts
    return lake, paths


def spark_schema(schema: pa.Schema):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def _published_events(config: Config) -> int:
    history, _ = history_tables(config)
    rows = history.refresh().scan(selected_fields=("event_count",)).to_arrow()
    return int(pc.sum(rows["event_count"]).as_py() or 0)


def compact_backlog(spark: SparkSession, config: Config, paths: LandingPaths, windows: dict[int, int]) -> int:
    """What `seqlake compact --end-of-stream` does with a backlog: batches, then merges. Returns the
    number of batches."""
    batches = plan_batches(windows, config.layout.compaction_batch_rows)
    for batch in batches:
        compact_batch(spark, config, paths, batch)
        merge_runs_if_needed(spark, config)
    return len(batches)


def run_compaction_bench(
    spark: SparkSession,
    config: Config,
    *,
    events: int,
    window_counts: tuple[int, ...],
    namespace: str = "bench_compact",
    seed: int = 7,
    log: Callable[[str], None] = lambda line: None,
) -> CompactionBench:
    base = landing_events(config, events, max(window_counts), seed)
    bench = CompactionBench(events=base.num_rows)
    distinct = pc.count_distinct(base["event_id"]).as_py()
    # Untimed warm-up: the JVM compiles the query paths once, so N = 1 is not charged for it.
    warm = base.set_column(base.schema.get_field_index("window_id"), "window_id", pc.multiply(base["window_id"], 0))
    lake, paths = _lake(spark, config, f"{namespace}_warmup", warm)
    compact_backlog(spark, lake, paths, {0: warm.num_rows})
    for n in window_counts:
        mapped = pc.divide(pc.multiply(base["window_id"], n), max(window_counts))
        rows = base.set_column(base.schema.get_field_index("window_id"), "window_id", mapped.cast(pa.int64()))
        counts = {int(c["values"]): int(c["counts"]) for c in pc.value_counts(rows["window_id"]).to_pylist()}
        lake, paths = _lake(spark, config, f"{namespace}_n{n}", rows)
        started = time.perf_counter()
        batches = compact_backlog(spark, lake, paths, counts)
        point = CurvePoint(n, rows.num_rows, batches, time.perf_counter() - started)
        if _published_events(lake) != distinct:
            bench.ok = False
            bench.problems.append(f"N={n}: {_published_events(lake)} events published, {distinct} expected")
        lake, paths = _lake(spark, config, f"{namespace}_n{n}_duckdb", rows)
        started = time.perf_counter()
        for batch in plan_batches(counts, config.layout.compaction_batch_rows):
            compact_batch_duckdb(lake, paths, batch)
            merge_runs_if_needed_duckdb(lake)
        point.duckdb_seconds = time.perf_counter() - started
        if _published_events(lake) != distinct:
            bench.ok = False
            bench.problems.append(f"N={n} (DuckDB): {_published_events(lake)} events published, {distinct} expected")
        if n <= ONE_BY_ONE_UP_TO:
            lake, paths = _lake(spark, config, f"{namespace}_n{n}_single", rows)
            started = time.perf_counter()
            for window in sorted(counts):
                compact_window(spark, lake, paths, window)
                merge_runs_if_needed(spark, lake)
            point.one_by_one_seconds = time.perf_counter() - started
        bench.points.append(point)
        log(f"N={n}: {point.seconds:.1f}s in {batches} batch(es)")
    one = bench.points[0].seconds
    for point in bench.points:
        point.ratio_to_one_window = point.seconds / one
    return bench


def format_report(bench: CompactionBench) -> str:
    lines = [
        f"catch-up compaction of {bench.events:,} events over N closed windows (one Spark session)",
        f"{'N':>5} {'batches':>8} {'seconds':>9} {'vs N=1':>8} {'events/s':>10} {'one window per pass':>20} "
        f"{'DuckDB engine':>14} {'Spark/DuckDB':>13}",
    ]
    for p in bench.points:
        single = f"{p.one_by_one_seconds:.1f}s" if p.one_by_one_seconds is not None else "-"
        lines.append(
            f"{p.windows:>5} {p.batches:>8} {p.seconds:>9.1f} {p.ratio_to_one_window:>7.2f}x "
            f"{p.events / p.seconds:>10,.0f} {single:>20} {p.duckdb_seconds:>13.1f}s "
            f"{p.seconds / p.duckdb_seconds:>12.1f}x"
        )
    largest = bench.points[-1]
    verdict = "met" if largest.ratio_to_one_window <= 2 else "not met"
    lines.append(f"target N={largest.windows} <= 2x N=1: {largest.ratio_to_one_window:.2f}x ({verdict})")
    speedup = min(p.seconds / p.duckdb_seconds for p in bench.points)
    verdict = "met" if speedup >= 5 else "not met"
    lines.append(f"target DuckDB engine >= 5x Spark (JVM start excluded), smallest ratio: {speedup:.1f}x ({verdict})")
    lines.extend(f"PROBLEM: {p}" for p in bench.problems)
    return "\n".join(lines)
