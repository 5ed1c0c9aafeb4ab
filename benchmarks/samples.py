"""Benchmark: training samples rebuilt from pointers against reading fat rows, at a realistic shape.

Builds a lake in a temporary warehouse (the configured one is not touched): users with histories
log-uniform between a minimum and a maximum length spread over `history_days` days, published as
history; then one day of requests (K per user, at random hours), each hour's events published before
that hour's requests are captured against the online view, a share of the day's events arriving one
to three hours late (so a replay by event time alone goes wrong where a versioned one does not).
The day's runs are then merged into one, as the capacity merge would overnight. In one run it then
measures, per tenant: the samples job (in-process, and on Spark unless skipped), a pyarrow scan and
a DuckDB scan of the fat-row table holding the same samples, bytes read, storage, capture rate, and
exactness (every sample equal to its fat row, no checksum failure; Spark's samples equal to the
in-process ones). Times are wall clock on a possibly shared machine: compare the ratios.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.shapes import RealisticValues, bursty_offsets
from benchmarks.synthetic import pick_groups, synthetic_rows
from seqlake.core.config import Config
from seqlake.engines.duckdb_session import connect, sql_literal
from seqlake.pipelines.compaction.duckdb import write_history_run
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.landing.tables import landing_paths
from seqlake.pipelines.tables import load_existing_table
from seqlake.pipelines.training.capture.online_view import ViewSnapshot
from seqlake.pipelines.training.capture.pointers import Request, capture_batch, request_table
from seqlake.pipelines.training.rebuild.baselines import copy_fatrows, spark_copy_fatrows
from seqlake.pipelines.training.rebuild.duckdb import Reconstruction, sample_batches
from seqlake.pipelines.training.rebuild.samples import fatrow_match, read_fatrows_pyarrow, write_arrow_samples
from seqlake.pipelines.training.sequence import Tenant, tenants
from seqlake.pipelines.training.tables import (
    create_bucketed_table,
    fatrow_table_name,
    samples_table_name,
    sequence_table_schema,
    table_bytes,
    training_schema,
    training_table_name,
)
from seqlake.tableformat.bucketing import bucket_of
from seqlake.tableformat.frontier import FRONTIER_PROPERTY, published_frontier
from seqlake.tableformat.reader import HistoryReader
from seqlake.tableformat.registry import RunRecord, commit_runs, live_runs

HOUR_US = 3_600_000_000
LATE_SHARE = 0.02  # of the request day's events: published one to three hours after their event time


@dataclass(frozen=True)
class Scale:
    users: int
    min_events: int
    max_events: int
    history_days: int
    requests_per_user: int  # K: requests per active user over the request day
    spark: bool  # measure the Spark path too


SCALES = {
    # The fewest users and requests on which every answer is still checked: late events reach some
    # requests of each tenant (the time-only replay differs), and Spark rebuilds them too.
    "tiny": Scale(users=8, min_events=50, max_events=800, history_days=2, requests_per_user=10, spark=True),
    "small": Scale(users=24, min_events=100, max_events=2_000, history_days=5, requests_per_user=10, spark=True),
    "medium": Scale(users=300, min_events=1_000, max_events=20_000, history_days=30, requests_per_user=10, spark=False),
}


@dataclass
class TenantResult:
    tenant: str
    requests: int
    capture_seconds: float
    samples_seconds: float  # the samples job: rebuilt, verified and written to samples_<tenant>
    stream_seconds: float  # what a trainer reads: rebuilt, verified Arrow batches, nothing written
    stream_samples: int
    samples: int
    checksum_failures: int
    matched: int
    samples_bytes_read: int  # pointers, history and detail
    fatrow_pyarrow_seconds: float
    fatrow_duckdb_seconds: float
    fatrow_rows: int
    fatrow_bytes: int
    training_bytes: int
    time_only_matched: int
    fatrow_copy_seconds: float  # the fat rows read and written again, by the samples job's own writer
    backfill_seconds: float | None = None  # the requests as label rows, event-time backfill, streamed
    backfill_rows: int | None = None
    spark_seconds: float | None = None
    spark_samples: int | None = None
    spark_checksum_failures: int | None = None
    spark_differences: int | None = None  # samples that differ from the in-process ones
    spark_fatrow_copy_seconds: float | None = None  # Spark reading the fat-row table and writing it out

    @property
    def exact(self) -> bool:
        spark_ok = self.spark_samples is None or (
            self.spark_samples == self.samples and self.spark_differences == 0 and self.spark_checksum_failures == 0
        )
        counts = self.matched == self.requests == self.samples == self.stream_samples == self.fatrow_rows
        return counts and spark_ok


@dataclass
class SamplesBench:
    scale: str
    data: str  # the data's shape (benchmarks.shapes)
    users: int
    history_rows: int
    history_bytes: int
    detail_bytes: int
    tenants: list[TenantResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(t.exact for t in self.tenants)

    def to_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}


def bench_config(config: Config, warehouse: Path, scale: Scale) -> Config:
    """`config` on `warehouse` with the scale's K; its own catalog file in the warehouse."""
    warehouse_spec = config.warehouse.model_copy(update={"path": str(warehouse), "catalog_uri": None})
    training = config.training.model_copy(update={"requests_per_active_user_per_day": scale.requests_per_user})
    return config.model_copy(update={"warehouse": warehouse_spec, "training": training})


def history_rows(config: Config, scale: Scale, day_start_us: int, seed: int, shape: str = "realistic") -> pa.Table:
    """Every user's history up to the end of the request day, LSNs in publication order per source
    partition. Histories are log-uniform in length over `history_days` days, their event times in
    bursty sessions (realistic) or uniform (small-ids); LATE_SHARE of the request day's events are
    published in a window one to three hours late. `shape` names the values' shape (benchmarks.shapes)."""
    rng = np.random.default_rng(seed)
    users = 1_000_000 + np.arange(scale.users, dtype=np.int64) * 7
    lengths = np.exp(rng.uniform(np.log(scale.min_events), np.log(scale.max_events), scale.users)).astype(np.int64)
    n = int(lengths.sum())
    user = np.repeat(users, lengths)
    start = day_start_us - (scale.history_days - 1) * 24 * HOUR_US
    span = day_start_us + 24 * HOUR_US - start
    realistic = shape == "realistic"
    if realistic:  # sessions ending at the request day's end, squeezed into the span when longer
        offsets = bursty_offsets(lengths, rng)
        longest = np.repeat(np.maximum.reduceat(offsets, np.concatenate([[0], np.cumsum(lengths)[:-1]])), lengths)
        squeeze = np.minimum(1.0, (span - 1) / np.maximum(longest, 1))
        ts = start + span - 1 - ((longest - offsets) * squeeze).astype(np.int64)
    else:
        ts = rng.integers(start, start + span, n)
    window = ts // HOUR_US
    late = (ts >= day_start_us) & (rng.random(n) < LATE_SHARE)
    window = window + late * rng.integers(1, 4, n)  # the processing window of arrival
    partitions = config.generator.source_partitions
    partition = (user % partitions).astype(np.int32)
    lsn = np.empty(n, np.int64)
    arrival = np.lexsort((ts, window, partition))  # per partition, in arrival order
    lsn[arrival] = np.arange(n) - np.searchsorted(partition[arrival], partition[arrival]) + 1
    return synthetic_rows(
        config,
        user_id=user,
        feature_group=pick_groups(config, n, rng),
        event_ts_us=ts,
        lsn=lsn,
        source_partition=partition,
        window_id=window,
        rng=rng,
        values=RealisticValues(user, rng) if realistic else None,
    )


def publish(history, config: Config, rows: pa.Table, run_id: str, windows: list[int], replaces=()) -> None:
    """Write `rows` (bucket-ordered) as one sorted run and commit it with the LSN frontier."""
    files = write_history_run(history, config, run_id, rows)
    highest = rows.group_by("source_partition").aggregate([("lsn", "max")])
    own = dict(zip(highest["source_partition"].to_pylist(), highest["lsn_max"].to_pylist(), strict=True))
    record = RunRecord(run_id, "merge" if replaces else "window", windows, len(files), rows.num_rows)
    properties = {FRONTIER_PROPERTY: published_frontier(history).advanced(own).to_json()}
    commit_runs(history, [(record, files)], replaces=replaces, snapshot_properties=properties)
    history.refresh()


def request_hours(users: np.ndarray, k: int, seed: int) -> dict[int, list[int]]:
    """Hour of the day -> users sending a request then (K requests per user, hours at random)."""
    rng = np.random.default_rng([seed, 1])
    hours: dict[int, list[int]] = {}
    for user in users.tolist():
        for hour in rng.integers(0, 24, k).tolist():
            hours.setdefault(hour, []).append(user)
    return hours


def serve_day(config: Config, rows: pa.Table, day_start_us: int, scale: Scale, seed: int, staging: Path) -> dict:
    """Publish the history before the day, then hour by hour publish the hour and capture its requests
    for every tenant from one snapshot of the online view (a serving process keeps its history reader
    between snapshots); training and fat rows are staged per bucket and written once per tenant.
    Returns the capture seconds per tenant (opening the hour's snapshot counted for each tenant)."""
    history, detail = history_tables(config)
    day_window = day_start_us // HOUR_US
    window = rows["window_id"].to_numpy()
    publish(history, config, rows.filter(pa.array(window < day_window)), "base", [int(window.min()), day_window - 1])
    hours = request_hours(np.unique(rows["user_id"].to_numpy()), scale.requests_per_user, seed)
    profiles = tenants(config)
    seconds = dict.fromkeys((t.name for t in profiles), 0.0)
    reader = HistoryReader(history)
    for hour in range(24):
        current = day_window + hour
        published = rows.filter(pa.array(window == current))
        if published.num_rows:
            publish(history, config, published, f"w{current}", [current, current])
        users = hours.get(hour, [])
        if not users:
            continue
        at = _timestamp(day_start_us + (hour + 1) * HOUR_US - 1)
        requests = request_table(
            [Request(f"{u}-{hour}-{n}", u, at, n % 10 == 0, 0, "feed", hour) for n, u in enumerate(users)]
        )
        started = time.perf_counter()
        with ViewSnapshot(config, history, detail, landing_paths(config)) as view:
            landing = view.landing_rows(sorted(set(users)))
            opened = time.perf_counter() - started
            for tenant in profiles:
                started = time.perf_counter()
                batch = capture_batch(view, reader, tenant, requests, config.training.fragment_events, landing)
                seconds[tenant.name] += opened + time.perf_counter() - started
                _stage(staging, tenant, "training", hour, batch.training, config)
                _stage(staging, tenant, "fatrow", hour, batch.fat_rows, config)
    # Late rows of the day's last hours, then one run of everything (the overnight capacity merge).
    rest = rows.filter(pa.array(window >= day_window + 24))
    if rest.num_rows:
        publish(history, config, rest, "late", [day_window + 24, int(window.max())])
    history.refresh()
    publish(history, config, rows, "merged", [int(window.min()), int(window.max())], replaces=list(live_runs(history)))
    for tenant in profiles:
        _write_staged(config, staging, tenant, "training", training_table_name(tenant), training_schema(tenant))
        _write_staged(config, staging, tenant, "fatrow", fatrow_table_name(tenant), sequence_table_schema(tenant))
    return seconds


def _timestamp(micros: int):
    return pa.scalar(micros, pa.timestamp("us", tz="UTC")).as_py()


def _stage(staging: Path, tenant: Tenant, kind: str, hour: int, rows: pa.Table, config: Config) -> None:
    buckets = bucket_of(rows["user_id"], config.layout.bucket_count)
    for bucket in np.unique(buckets).tolist():
        folder = staging / tenant.name / kind / f"b{bucket:04d}"
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(rows.filter(pa.array(buckets == bucket)), folder / f"h{hour:02d}.parquet")


def _write_staged(config: Config, staging: Path, tenant: Tenant, kind: str, name: str, schema: pa.Schema) -> None:
    """One append per bucket: one file per bucket, as a bin-packing rewrite would leave them."""
    table = create_bucketed_table(config, name, schema)
    for folder in sorted((staging / tenant.name / kind).glob("b*")):
        table.append(pq.read_table(folder).cast(schema))
        shutil.rmtree(folder)


def read_fatrows_duckdb(config: Config, tenant: Tenant) -> tuple[float, int]:
    """Seconds to stream every fat row of the tenant through DuckDB's iceberg_scan into Arrow."""
    table = load_existing_table(config, fatrow_table_name(tenant))
    with connect() as con:
        started = time.perf_counter()
        reader = con.execute(f"SELECT * FROM iceberg_scan({sql_literal(table.metadata_location)})").to_arrow_reader()
        rows = sum(batch.num_rows for batch in reader)
        return time.perf_counter() - started, rows


def samples_differences(config: Config, tenant: Tenant, first: str, second: str) -> int:
    """Requests whose samples differ (or exist in one only) between two versions of samples_<tenant>."""
    columns = [f.name for f in sequence_table_schema(tenant)]
    same = " AND ".join(f"a.{c} IS NOT DISTINCT FROM b.{c}" for c in columns)
    with connect() as con:
        counted = con.execute(
            f"SELECT count(*) FROM iceberg_scan({sql_literal(first)}) AS a "
            f"FULL OUTER JOIN iceberg_scan({sql_literal(second)}) AS b USING (request_id) "
            f"WHERE NOT ({same}) OR a.request_id IS NULL OR b.request_id IS NULL"
        ).fetchone()
    assert counted is not None  # an aggregate answers one row
    return int(counted[0])


def run_samples_bench(
    config: Config,
    scale_name: str,
    seed: int = 1,
    log: Callable[[str], None] = print,
    spark_master: str = "local[2]",
    shape: str = "realistic",
    with_spark: bool | None = None,
) -> SamplesBench:
    """The bench at `scale_name`; `with_spark` measures the Spark path too (None: as the scale says)."""
    scale = SCALES[scale_name]
    with_spark = scale.spark if with_spark is None else with_spark
    with tempfile.TemporaryDirectory(prefix="seqlake-bench-samples-") as scratch:
        config = bench_config(config, Path(scratch) / "warehouse", scale)
        day_start_us = int(config.generator.start_ts.timestamp()) * 1_000_000 + scale.history_days * 24 * HOUR_US
        rows = history_rows(config, scale, day_start_us, seed, shape)
        log(f"history ({shape} data): {scale.users} users, {rows.num_rows:,} rows; serving one day of requests")
        capture_seconds = serve_day(config, rows, day_start_us, scale, seed, Path(scratch) / "staging")
        history, detail = history_tables(config)
        bench = SamplesBench(scale_name, shape, scale.users, rows.num_rows, table_bytes(history), table_bytes(detail))
        del rows
        spark = None
        if with_spark:
            from seqlake.engines.spark_session import spark_session

            spark = spark_session(config, "seqlake-bench-samples", spark_master)
        try:
            for tenant in tenants(config):
                bench.tenants.append(_measure_tenant(config, tenant, capture_seconds[tenant.name], spark, log))
        finally:
            if spark is not None:
                spark.stop()
    return bench


def _measure_tenant(config: Config, tenant: Tenant, capture_seconds: float, spark, log) -> TenantResult:
    training_bytes = table_bytes(load_existing_table(config, training_table_name(tenant)))
    log(f"{tenant.name}: samples job (in-process)")
    started = time.perf_counter()
    result = write_arrow_samples(config, tenant, "lsn", compare=False)
    samples_seconds = time.perf_counter() - started
    matched = fatrow_match(config, tenant, samples_table=samples_table_name(tenant))
    stream_seconds, stream_samples = _stream(config, tenant)
    time_only = write_arrow_samples(config, tenant, "time")
    log(f"{tenant.name}: fat-row reads")
    pyarrow_seconds, fat_rows_read = read_fatrows_pyarrow(config, tenant)
    duckdb_seconds, _ = read_fatrows_duckdb(config, tenant)
    copy_seconds = copy_fatrows(config, tenant)
    log(f"{tenant.name}: backfill of the requests as label rows (event time, in-process stream)")
    backfill_seconds, backfill_rows = _backfill_stream(config, tenant)
    measured = TenantResult(
        tenant=tenant.name,
        requests=result.requests,
        capture_seconds=round(capture_seconds, 3),
        samples_seconds=round(samples_seconds, 3),
        stream_seconds=round(stream_seconds, 3),
        stream_samples=stream_samples,
        samples=result.samples,
        checksum_failures=result.quarantined,
        matched=matched,
        samples_bytes_read=result.bytes_read + training_bytes,
        fatrow_pyarrow_seconds=round(pyarrow_seconds, 3),
        fatrow_duckdb_seconds=round(duckdb_seconds, 3),
        fatrow_rows=fat_rows_read,
        fatrow_bytes=table_bytes(load_existing_table(config, fatrow_table_name(tenant))),
        training_bytes=training_bytes,
        time_only_matched=time_only.matched,
        fatrow_copy_seconds=round(copy_seconds, 3),
        backfill_seconds=round(backfill_seconds, 3),
        backfill_rows=backfill_rows,
    )
    if spark is None:
        return measured
    from seqlake.pipelines.training.rebuild.spark import write_spark_samples

    log(f"{tenant.name}: samples job (Spark)")
    in_process = load_existing_table(config, samples_table_name(tenant)).metadata_location
    spark.sql("SELECT 1").collect()  # the JVM is up before the clock starts
    started = time.perf_counter()
    spark_samples, spark_failures = write_spark_samples(spark, config, tenant)
    spark_seconds = time.perf_counter() - started
    on_spark = load_existing_table(config, samples_table_name(tenant)).metadata_location
    spark_copy_seconds = spark_copy_fatrows(spark, config, tenant)
    return replace(
        measured,
        spark_seconds=round(spark_seconds, 3),
        spark_samples=spark_samples,
        spark_checksum_failures=spark_failures,
        spark_differences=samples_differences(config, tenant, in_process, on_spark),
        spark_fatrow_copy_seconds=round(spark_copy_seconds, 3),
    )


def _stream(config: Config, tenant: Tenant) -> tuple[float, int]:
    """Seconds to consume the tenant's verified samples as Arrow batches (a trainer's read), and how many."""
    history, detail = history_tables(config)
    training = load_existing_table(config, training_table_name(tenant))
    started = time.perf_counter()
    with sample_batches(Reconstruction(config, tenant, training, history, detail)) as batches:
        samples = sum(batch.num_rows for batch in batches)
    return time.perf_counter() - started, samples


def _backfill_stream(config: Config, tenant: Tenant) -> tuple[float, int]:
    """Seconds to stream an event-time backfill of the tenant's requests (the training table as the
    label table, request time as ts), and the label rows it gave."""
    from seqlake.pipelines.training.backfill.plan import Backfill

    started = time.perf_counter()
    job = Backfill(config, training_table_name(tenant), tenant, "event-time", ts_column="request_ts")
    try:
        rows = sum(batch.num_rows for batch in job.batches())
    finally:
        job.close()
    return time.perf_counter() - started, rows


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}"


def format_report(bench: SamplesBench) -> str:
    fat_total = sum(t.fatrow_bytes for t in bench.tenants)
    lines = [
        f"bench-samples --scale {bench.scale} --data {bench.data}: {bench.users} users, "
        f"{bench.history_rows:,} history rows, "
        f"history {bench.history_bytes / 2**20:.1f} MiB, live detail {bench.detail_bytes / 2**20:.1f} MiB",
        "",
        "| tenant | engine | samples | samples/s | time / fat-row read (pyarrow) | time / fat-row read (DuckDB) "
        "| bytes read / fat rows | storage / fat rows | capture requests/s | exact | checksum failures |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in bench.tenants:
        storage = (t.training_bytes + bench.history_bytes + bench.detail_bytes) / max(t.fatrow_bytes, 1)
        rows = [
            ("in-process", t.samples_seconds, t.samples, t.matched, t.checksum_failures),
            ("in-process stream", t.stream_seconds, t.stream_samples, t.matched, t.checksum_failures),
        ]
        if t.spark_seconds is not None:
            # set together with spark_seconds
            assert t.spark_samples is not None and t.spark_checksum_failures is not None
            same = t.spark_samples - (t.spark_differences or 0)
            rows.append(("spark", t.spark_seconds, t.spark_samples, same, t.spark_checksum_failures))
        for engine, seconds, samples, exact, failures in rows:
            lines.append(
                f"| {t.tenant} | {engine} | {samples:,} | {samples / seconds:,.0f} | "
                f"{_ratio(seconds, t.fatrow_pyarrow_seconds)} | {_ratio(seconds, t.fatrow_duckdb_seconds)} | "
                f"{_ratio(t.samples_bytes_read, t.fatrow_bytes)} | {storage:.3f} | "
                f"{t.requests / max(t.capture_seconds, 1e-9):,.0f} | {exact / max(t.requests, 1):.2%} | {failures} |"
            )
    lines.append("")
    for t in bench.tenants:
        spark_copy = (
            f", Spark job / Spark fat-row copy {_ratio(t.spark_seconds, t.spark_fatrow_copy_seconds)}"
            if t.spark_fatrow_copy_seconds
            else ""
        )
        lines.append(
            f"{t.tenant}: samples job / fat-row copy (read and written again) "
            f"{_ratio(t.samples_seconds, t.fatrow_copy_seconds)} ({t.fatrow_copy_seconds:.2f} s){spark_copy}"
        )
    for t in bench.tenants:
        spark = f", Spark / in-process {_ratio(t.spark_seconds, t.samples_seconds)}" if t.spark_seconds else ""
        lines.append(
            f"{t.tenant}: samples job {t.samples_seconds:.2f} s, stream {t.stream_seconds:.2f} s, "
            f"fat rows {t.fatrow_pyarrow_seconds:.2f} s (pyarrow) "
            f"{t.fatrow_duckdb_seconds:.2f} s (DuckDB){spark}; time-only replay equal to the fat row for "
            f"{t.time_only_matched / max(t.requests, 1):.2%}"
        )
    for t in bench.tenants:
        if t.backfill_seconds is not None:
            assert t.backfill_rows is not None  # set together with backfill_seconds
            lines.append(
                f"{t.tenant}: backfill (event time, stream) {t.backfill_rows:,} label rows, "
                f"{t.backfill_rows / max(t.backfill_seconds, 1e-9):,.0f} label rows/s; time / fat-row read "
                f"{_ratio(t.backfill_seconds, t.fatrow_pyarrow_seconds)} (pyarrow) "
                f"{_ratio(t.backfill_seconds, t.fatrow_duckdb_seconds)} (DuckDB)"
            )
    normalized = sum(t.training_bytes for t in bench.tenants) + bench.history_bytes + bench.detail_bytes
    lines.append(
        f"storage, all tenants: (training + history + live detail) / fat rows = {normalized / max(fat_total, 1):.3f}"
    )
    lines.append("answers: " + ("every sample equal to its fat row on every engine" if bench.ok else "MISMATCH"))
    return "\n".join(lines)
