"""Publish windows in batches on one engine: the loop `seqlake compact` and the serving loop share.

Each batch (`plan_batches`: at most `layout.compaction_batch_rows` landing rows) is one pass and one
commit; runs merge after each batch when the merge policy asks for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from seqlake.core.config import Config
from seqlake.pipelines.compaction.plan import CompactionResult, plan_batches
from seqlake.pipelines.landing.tables import LandingPaths

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class BatchOutcome:
    windows: list[int]
    result: CompactionResult
    merged_into: str | None  # the run the merge after this batch wrote, if one ran


def compact_in_batches(
    config: Config, paths: LandingPaths, window_rows: dict[int, int], engine: str, spark: SparkSession | None = None
) -> Iterator[BatchOutcome]:
    """Publish the windows of `window_rows` (window id -> landing rows) in batches on `engine`
    ("duckdb", or "spark" on `spark`), yielding each batch's outcome as it commits."""
    for batch in plan_batches(window_rows, config.layout.compaction_batch_rows):
        if engine == "duckdb":
            from seqlake.pipelines.compaction.duckdb import compact_batch_duckdb, merge_runs_if_needed_duckdb

            result = compact_batch_duckdb(config, paths, batch)
            merged = merge_runs_if_needed_duckdb(config)
        else:
            from seqlake.pipelines.compaction.spark import compact_batch, merge_runs_if_needed

            if spark is None:
                raise ValueError("the spark engine needs a Spark session")
            result = compact_batch(spark, config, paths, batch)
            merged = merge_runs_if_needed(spark, config)
        yield BatchOutcome(batch, result, merged)
