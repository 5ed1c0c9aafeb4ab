"""What the samples jobs are weighed against: the same samples kept as fat rows, read or copied.

A trainer's read of the samples (the stream) is weighed against a scan of the fat rows
(`read_fatrows_pyarrow`, in `samples`); the samples job, which writes `samples_<tenant>`, against
the fat rows read and written again by the same writer (`copy_fatrows`): a pipeline of fat rows
pays that copy to hand a trainer its table.
"""

from __future__ import annotations

import time

import pyarrow as pa
from pyiceberg.expressions import AlwaysTrue

from seqlake.core.config import Config
from seqlake.engines.catalog import purge_tables, spark_name
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.tables import load_existing_table
from seqlake.pipelines.training.rebuild.bucket_files import BucketFiles
from seqlake.pipelines.training.sequence import Tenant
from seqlake.pipelines.training.tables import create_bucketed_table, fatrow_table_name
from seqlake.tableformat.forgets import read_point


def copy_fatrows(config: Config, tenant: Tenant) -> float:
    """Seconds to read the tenant's fat rows and write them again as a bucketed Iceberg table, batch
    by batch with the samples job's own writer and one commit. The copy is dropped afterwards."""
    table = load_existing_table(config, fatrow_table_name(tenant))
    name = f"{fatrow_table_name(tenant)}_copy"
    started = time.perf_counter()
    copy = create_bucketed_table(config, name, table.schema().as_arrow())
    with BucketFiles(copy, config.layout.bucket_count) as out:
        for batch in table.scan().to_arrow_batch_reader():
            out.write(pa.Table.from_batches([batch]))
        out.commit(read_point(history_tables(config)[0]), replacing=AlwaysTrue())
    seconds = time.perf_counter() - started
    purge_tables(config, (name,))
    return seconds


def spark_copy_fatrows(spark, config: Config, tenant: Tenant) -> float:
    """Seconds for Spark to read the tenant's fat-row table and write it out as a new Iceberg table:
    what a Spark samples job is weighed against. The copy is dropped afterwards."""
    name = f"{fatrow_table_name(tenant)}_spark_copy"
    started = time.perf_counter()
    spark.table(spark_name(config, fatrow_table_name(tenant))).writeTo(spark_name(config, name)).using(
        "iceberg"
    ).createOrReplace()
    seconds = time.perf_counter() - started
    purge_tables(config, (name,))
    return seconds
