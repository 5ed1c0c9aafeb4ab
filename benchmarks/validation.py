"""Payload validation, record by record against set-based: the reference (`parse_batch`: Python per
record, what ingest ran before) and the SQL of `seqlake.pipelines.ingest.validation` on DuckDB (one
streaming query, as the in-process engine runs it) and, when asked, on Spark.

The records are the demo generator's (`pipelines/demo/generator.py`), malformed ones included, held in
memory as Arrow batches before the clock starts. Both sides validate the same batches; the DuckDB and
Spark rows must equal the reference's (every column), or the bench fails. Times are wall clock on a
possibly shared machine: compare the ratio, never the absolute seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import pyarrow as pa

from seqlake.core.config import Config
from seqlake.pipelines.demo.generator import EventGenerator
from seqlake.pipelines.ingest.duckdb import BatchValidator
from seqlake.pipelines.ingest.parse import parse_batch
from seqlake.pipelines.landing.schema import parsed_schema

BATCH_ROWS = 128 * 1024


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


def _timed(run: Callable[[], pa.Table]) -> tuple[pa.Table, float]:
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
        from seqlake.pipelines.ingest.spark import duplicate_keys_read, validated_records

        log("validating with the SQL on Spark")
        raw = spark.createDataFrame(pa.Table.from_batches(batches)).cache()
        raw.count()  # the records in Spark's memory before the clock starts, as the reference's are

        def on_spark() -> pa.Table:
            with duplicate_keys_read(spark):
                return validated_records(spark, config, raw).toArrow()

        rows, seconds = _timed(on_spark)
        raw.unpersist()
        order = [("source_partition", "ascending"), ("lsn", "ascending")]
        same = rows.cast(schema).sort_by(order).equals(reference.sort_by(order))
        bench.results.append(EngineTime("spark", seconds, records / seconds, same))

    bench.problems = [f"{r.engine}'s rows differ from the reference's" for r in bench.results if not r.same_rows]
    return bench


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
    lines.extend(f"PROBLEM: {p}" for p in bench.problems)
    return "\n".join(lines)
