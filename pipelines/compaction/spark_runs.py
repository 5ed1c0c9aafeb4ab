"""Write a sorted run from a Spark DataFrame with seqlake's own file writer.

Spark does the distributed part: one task per bucket group, rows sorted within the task by
(bucket, user_id, feature_group, event_ts, lsn). Each task streams its rows as Arrow batches into
tableformat's writer (`mapInArrow`), so files written by Spark and by Python are the same layout,
byte for byte in policy, and pass the same fsck. Only one small row per file returns to the driver,
which commits the run to Iceberg.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator

import pyarrow as pa
from pyiceberg.table import Table
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from seqlake.core.config import Config
from seqlake.tableformat.footer import FileFacts
from seqlake.tableformat.layout import DEFAULT_POLICY, LayoutPolicy
from seqlake.tableformat.registry import history_file_uri
from seqlake.tableformat.run_writer import check_run_id, write_run
from seqlake.tableformat.schema import STORAGE_ORDER, history_arrow_schema
from seqlake.tableformat.writer import WrittenFile

FILE_ROW_SCHEMA = "uri string, bucket int, file_size long, row_groups int, facts string"
FILE_ROW_ARROW = pa.schema(
    [
        ("uri", pa.string()),
        ("bucket", pa.int32()),
        ("file_size", pa.int64()),
        ("row_groups", pa.int32()),
        ("facts", pa.string()),
    ]
)
BUCKET = "_seqlake_bucket"


def with_bucket(df: DataFrame, config: Config) -> DataFrame:
    """Add Iceberg's bucket(N, user_id), computed by Iceberg's own Spark function."""
    catalog = config.warehouse.catalog_name
    return df.withColumn(BUCKET, F.expr(f"{catalog}.system.bucket({config.layout.bucket_count}, user_id)"))


def write_run_with_spark(
    df: DataFrame,
    table: Table,
    config: Config,
    run_id: str,
    policy: LayoutPolicy = DEFAULT_POLICY,
) -> list[WrittenFile]:
    """Write `df` (history columns) as sorted run `run_id` of `table`; return the files, uncommitted."""
    check_run_id(run_id)
    schema = history_arrow_schema(config, table.schema())
    location = table.location()
    attempt = uuid.uuid4().hex[:12]
    bucket_count = config.layout.bucket_count
    groups = list(config.feature_groups)
    names = schema.names

    def write_partition(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        stripped = (b.select(names) for b in batches)  # drop the bucket column, keep storage order
        written = write_run(
            stripped,
            file_uri=lambda b: history_file_uri(location, run_id, b, attempt),
            schema=schema,
            run_id=run_id,
            bucket_count=bucket_count,
            group_order=groups,
            policy=policy,
        )
        for item in written:
            yield pa.RecordBatch.from_pylist(
                [
                    {
                        "uri": item.uri,
                        "bucket": item.facts.bucket,
                        "file_size": item.file_size,
                        "row_groups": item.row_groups,
                        "facts": json.dumps(item.facts.__dict__),
                    }
                ],
                schema=FILE_ROW_ARROW,
            )

    staged = (
        with_bucket(df.select(*names), config)
        .repartition(bucket_count, BUCKET)
        .sortWithinPartitions(BUCKET, *STORAGE_ORDER)
    )
    rows = staged.mapInArrow(write_partition, FILE_ROW_SCHEMA).collect()
    return [
        WrittenFile(r["uri"], FileFacts(**json.loads(r["facts"])), r["file_size"], r["row_groups"])
        for r in sorted(rows, key=lambda r: r["bucket"])
    ]
