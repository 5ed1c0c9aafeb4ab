"""Payload validation, record by record against set-based: the reference (`parse_batch`: Python per
record, what ingest ran before) and the SQL of `seqlake.pipelines.ingest.validation` on DuckDB (one
streaming query, as the in-process engine runs it) and, when asked, on Spark: the SQL, and beside it the
reference in `mapInArrow` (what the Spark ingest engine ran before the SQL), both written to Spark's
`noop` sink from the same cached records, so that only validation is timed.

The records are the demo generator's (`pipelines/demo/generator.py`), malformed ones included, held in
memory as Arrow batches before the clock starts. Both sides validate the same batches; the DuckDB and
Spark rows must equal the reference's (every column), or the bench fails. Times are wall clock on a
possibly shared machine: compare the ratio, never the absolute seconds.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TypeVar

import pyarrow as pa

from seqlake.core.config import Config
from seqlake.pipelines.demo.generator import EventGenerator
from seqlake.pipelines.ingest.duckdb import BatchValidator
from seqlake.pipelines.ingest.parse import parse_batch
from seqlake.pipelines.landing.schema import parsed_schema

BATCH_ROWS = 128 * 1024
WARM_UP_ROWS = 2_000  # each Spark path runs once on this many records first: the JVM's warm-up is not timed
T = TypeVar("T")


@dataclass
class EngineTime:
    engine: str
    seconds: float
    records_per_second: float
    same_rows: bool


@dataclass
class ValidationBench:
    records: int
    malformed: int
    results: list[EngineTime] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # Spark's SQL in records per second against the reference in mapInArrow on Spark (--spark only).
    spark_sql_over_map_in_arrow: float | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict:
        return asdict(self)


def demo_records(config: Config, records: int, seed: int) -> list[pa.RecordBatch]:
    """The first `records` raw records of one demo stream (1% malformed), with as many users as it takes."""
    users = max(1, records // 20)
    while True:
        spec = config.generator.model_copy(
            update={"users": users, "heavy_users": 0, "seed": seed, "malformed_share": 0.01}
        )
        batches, count = [], 0
        for batch in EventGenerator(config, spec).batches(BATCH_ROWS):
            batches.append(batch.slice(0, records - count))
            count += batches[-1].num_rows
            if count >= records:
                return batches
        users *= 2


def _timed(run: Callable[[], T]) -> tuple[T, float]:
    start = time.perf_counter()
    rows = run()
    return rows, time.perf_counter() - start


def run_validation_bench(
    config: Config,
    records: int,
    seed: int,
    spark=None,
    log: Callable[[str], None] = lambda line: None,
) -> ValidationBench:
    """Validate `records` demo records with the reference and the SQL (DuckDB; Spark when given)."""
    log(f"generating {records:,} demo records")
    batches = demo_records(config, records, seed)
    schema = parsed_schema(config)

    log("validating record by record (the reference)")
    reference, seconds = _timed(lambda: pa.Table.from_batches([parse_batch(b, config) for b in batches], schema))
    bench = ValidationBench(records=records, malformed=records - reference["reason"].null_count)
    bench.results.append(EngineTime("reference", seconds, records / seconds, True))

    log("validating with the SQL on DuckDB")
    validate = BatchValidator(config)
    try:
        duck, seconds = _timed(lambda: pa.Table.from_batches(list(validate.stream(iter(batches))), schema))
    finally:
        validate.close()
    bench.results.append(EngineTime("duckdb", seconds, records / seconds, duck.equals(reference)))

    if spark is not None:
        bench.results.extend(_on_spark(spark, config, batches, reference, log))
        sql, arrow = bench.results[-2:]
        bench.spark_sql_over_map_in_arrow = sql.records_per_second / arrow.records_per_second

    bench.problems = [f"{r.engine}'s rows differ from the reference's" for r in bench.results if not r.same_rows]
    return bench


def _on_spark(spark, config: Config, batches: list[pa.RecordBatch], reference: pa.Table, log) -> list[EngineTime]:
    """The SQL and the reference in mapInArrow on Spark, each timed into the `noop` sink (nothing
    collected); the SQL's rows are then collected, untimed, and compared with the reference's."""
    from pyspark.sql import DataFrame
    from pyspark.sql.pandas.types import from_arrow_schema

    from seqlake.pipelines.ingest.spark import validated_records, validation_settings

    def parse(chunks):
        for chunk in chunks:
            yield parse_batch(chunk, config)

    def paths(table: pa.Table) -> tuple[DataFrame, list[tuple[str, DataFrame]]]:
        raw = spark.createDataFrame(table).cache()
        raw.count()  # the records in Spark's memory before the clock starts, as the reference's are
        by_record = raw.mapInArrow(parse, from_arrow_schema(parsed_schema(config)))
        return raw, [("spark-sql", validated_records(spark, config, raw)), ("spark-arrow", by_record)]

    def write(rows: DataFrame) -> None:
        rows.write.format("noop").mode("overwrite").save()

    records = sum(b.num_rows for b in batches)
    table = pa.Table.from_batches(batches)
    results = []
    with validation_settings(spark):
        log("warming Spark up")
        warm, warm_paths = paths(table.slice(0, WARM_UP_ROWS))
        for _, rows in warm_paths:
            write(rows)
        warm.unpersist()
        raw, timed_paths = paths(table)
        try:
            for engine, rows in timed_paths:
                log(f"validating on Spark: {engine}")
                _, seconds = _timed(functools.partial(write, rows))
                results.append(EngineTime(engine, seconds, records / seconds, True))
            sql = timed_paths[0][1]
            log("comparing Spark's SQL rows with the reference's")
            order = [("source_partition", "ascending"), ("lsn", "ascending")]
            got = sql.toArrow().cast(parsed_schema(config)).sort_by(order)
            results[0].same_rows = got.equals(reference.sort_by(order))
        finally:
            raw.unpersist()
    # spark-arrow runs `parse_batch` itself, the reference: its rows are the reference's by construction.
    return results


def format_report(bench: ValidationBench) -> str:
    reference = bench.results[0]
    lines = [
        f"payload validation of {bench.records:,} demo records ({bench.malformed:,} malformed)",
        f"{'engine':>10} {'seconds':>9} {'records/s':>12} {'x reference':>12} {'same rows':>10}",
    ]
    for r in bench.results:
        speedup = r.records_per_second / reference.records_per_second
        lines.append(
            f"{r.engine:>10} {r.seconds:>9.2f} {r.records_per_second:>12,.0f} {speedup:>12.1f} {str(r.same_rows):>10}"
        )
    if bench.spark_sql_over_map_in_arrow is not None:
        lines.append(
            f"spark-sql / spark-arrow (mapInArrow): {bench.spark_sql_over_map_in_arrow:.2f}x the records per second"
        )
    lines.extend(f"PROBLEM: {p}" for p in bench.problems)
    return "\n".join(lines)
