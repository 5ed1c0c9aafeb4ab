"""The compaction quarantine: events of groups whose aggregate does not fit the declared column type.

Ingest checks every value against its column's type and range, but a merge can still leave the range
(a `sum` of int32 values beyond int32). Compaction never stops on such a group: the aggregation runs
in a wider type (`seqlake.pipelines.compaction.aggregation.checked_groups_sql`), groups that fit are published, and the
events of the others go to the Iceberg table `compaction_quarantine` with their reason
(`aggregate_out_of_range:<columns>`), by window. They are kept out of the detail table too, so a rebuild
from detail gives the published history. A re-run of a window replaces its quarantine rows; rows of a
window count once the window is published.

Both engines split a batch with the same SQL: Spark over persisted DataFrames, DuckDB over Arrow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
from pyiceberg.exceptions import TableAlreadyExistsError
from pyiceberg.io.pyarrow import pyarrow_to_schema
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform

from seqlake.core.config import Config
from seqlake.engines.catalog import open_catalog, spark_name, table_identifier
from seqlake.engines.catalog_tables import load_table_if_exists
from seqlake.pipelines.compaction.aggregation import checked_groups_sql, fitting_rows_sql, group_events_sql
from seqlake.pipelines.compaction.window_replace import replace_windows
from seqlake.pipelines.landing.schema import landing_schema
from seqlake.tableformat.forgets import ReadPoint, inherited
from seqlake.tableformat.registry import check_matches_config
from seqlake.tableformat.schema import history_arrow_schema, with_field_ids

if TYPE_CHECKING:  # pyspark is an extra: the in-process engines import this module without it
    from pyspark.sql import DataFrame

COMPACTION_QUARANTINE = "compaction_quarantine"
GROUPING = ("window_id",)


def compaction_quarantine_schema(config: Config) -> pa.Schema:
    """The landing columns of the event and the reason its group was not published."""
    return landing_schema(config).append(pa.field("reason", pa.string()))


def compaction_quarantine_table(config: Config) -> Table:
    """The compaction quarantine table (partitioned by window), created on first use."""
    catalog = open_catalog(config)
    identifier = table_identifier(config, COMPACTION_QUARANTINE)
    schema = pyarrow_to_schema(with_field_ids(compaction_quarantine_schema(config)))
    existing = load_table_if_exists(catalog, identifier)
    if existing is not None:
        # Its columns follow the feature groups: a configuration that changed them is migrated first.
        return check_matches_config(existing, config, schema=schema)
    window = schema.find_field("window_id").field_id
    spec = PartitionSpec(
        PartitionField(source_id=window, field_id=1000, transform=IdentityTransform(), name="window_id")
    )
    from seqlake.pipelines.tables import HISTORY

    history_id = table_identifier(config, HISTORY)
    history = load_table_if_exists(catalog, history_id)
    try:
        return catalog.create_table(identifier, schema=schema, partition_spec=spec, properties=inherited(history))
    except TableAlreadyExistsError:
        return catalog.load_table(identifier)


@dataclass
class SparkSplit:
    """A Spark batch split by the aggregate check; `release` frees what it persisted."""

    rows: DataFrame  # history rows of the groups that fit
    kept: DataFrame  # their events (for the detail table)
    events: int  # how many events `kept` holds
    quarantined: int
    _persisted: tuple

    def release(self) -> None:
        for frame in self._persisted:
            frame.unpersist()

    def run_written(self) -> None:
        """The run is written: free the groups, unless `kept` still reads them. A write to a table
        plans again every cached frame that reads it (the events read detail): fewer to plan."""
        if not self.quarantined:
            self.release()


def split_batch_spark(spark, config: Config, events, view: str, windows: list[int]) -> SparkSplit:
    """Aggregate the batch's `events` (a persisted DataFrame) once, with the check; write the events
    of the groups that do not fit to the compaction quarantine (replacing the windows' rows).

    Both counts come from one pass over the (persisted) groups, which it materializes: every event
    is in exactly one group, whose `event_count` counts it. The events of failed groups are read
    only when there are some, by the quarantine write."""
    from pyspark.sql import functions as F

    events.createOrReplaceTempView(view)
    groups = spark.sql(checked_groups_sql(config, view, group_by_extra=GROUPING)).persist()
    groups_view = f"{view}_groups"
    groups.createOrReplaceTempView(groups_view)
    rows = spark.sql(fitting_rows_sql(config, groups_view, group_by_extra=GROUPING))
    rows = rows.select(*history_arrow_schema(config).names)
    tally = spark.sql(
        "SELECT coalesce(sum(CASE WHEN _reason IS NULL THEN event_count END), 0), "
        f"coalesce(sum(CASE WHEN _reason IS NOT NULL THEN event_count END), 0) FROM {groups_view}"
    ).first()
    assert tally is not None  # an aggregate answers one row
    kept_events, quarantined = int(tally[0]), int(tally[1])
    kept = events
    if quarantined:
        compaction_quarantine_table(config)
        failed = spark.sql(group_events_sql(config, view, groups_view, group_by_extra=GROUPING, failed=True))
        failed = failed.select(*compaction_quarantine_schema(config).names)
        failed.writeTo(spark_name(config, COMPACTION_QUARANTINE)).overwrite(F.col("window_id").isin(windows))
        kept = spark.sql(group_events_sql(config, view, groups_view, group_by_extra=GROUPING, failed=False))
    return SparkSplit(rows, kept, kept_events, quarantined, (groups,))


def split_batch_duckdb(
    con, config: Config, events: pa.Table, windows: list[int], point: ReadPoint
) -> tuple[pa.Table, pa.Table, int]:
    """(rows of the groups that fit, their events, the count quarantined) on DuckDB; the events of the
    groups that do not fit are written to the compaction quarantine (replacing the windows' rows;
    fenced on the forgets the batch's read, `point`, saw)."""
    con.register("_events", events)
    con.execute(f"CREATE OR REPLACE TEMP TABLE _groups AS {checked_groups_sql(config, '_events', 'duckdb', GROUPING)}")
    rows = con.execute(fitting_rows_sql(config, "_groups", "duckdb", GROUPING)).to_arrow_table()
    failed = con.execute(group_events_sql(config, "_events", "_groups", "duckdb", GROUPING, failed=True))
    failed = failed.to_arrow_table()
    if not failed.num_rows:
        return rows, events, 0
    schema = compaction_quarantine_table(config).schema().as_arrow()
    replace_windows(compaction_quarantine_table(config), failed.select(schema.names).cast(schema), windows, point)
    kept = con.execute(group_events_sql(config, "_events", "_groups", "duckdb", GROUPING, failed=False))
    return rows, kept.to_arrow_table(), failed.num_rows
