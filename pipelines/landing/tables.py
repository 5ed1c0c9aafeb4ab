"""The landing tier: typed events of open windows in a Delta Lake table, appended blindly.

Nothing here reads a user's history: ingest cost does not depend on how long that history is.
A replayed source batch is skipped by Delta's idempotent writes (txnAppId + txnVersion).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from seqlake.core.config import Config
from seqlake.engines.duckdb_session import sql_literal
from seqlake.pipelines.landing.delta_writer import delta_uri, storage_options
from seqlake.tableformat.io import engine_location

if TYPE_CHECKING:
    import duckdb
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class LandingPaths:
    events: str
    quarantine: str

    @property
    def root(self) -> str:
        return self.events.rsplit("/", 1)[0]


@dataclass(frozen=True)
class LandingTier:
    """The landing tier's tables and the engine that changes them (forget, vacuum): a Spark session
    (Delta's own writer), or None for the in-process engine (DuckDB reads, delta-rs commits)."""

    paths: LandingPaths
    spark: SparkSession | None = None

    @property
    def engine(self) -> str:
        return "duckdb" if self.spark is None else "spark"


def landing_paths(config: Config) -> LandingPaths:
    """The landing tier of the configured namespace: two namespaces of one warehouse never share one (a
    compaction would publish the other's events)."""
    root = f"{config.warehouse_uri()}/landing/{config.warehouse.namespace}"
    return LandingPaths(events=f"{root}/events", quarantine=f"{root}/quarantine")


def landing_tier(config: Config, engine: str, app_name: str) -> LandingTier:
    """The configured landing tier on `engine` (spark: a session named `app_name`; duckdb: no JVM)."""
    if engine != "spark":
        return LandingTier(landing_paths(config))
    from seqlake.engines.spark_session import spark_session

    return LandingTier(landing_paths(config), spark_session(config, app_name))


def is_delta_table(uri: str) -> bool:
    """Whether a Delta table exists at `uri`: its log holds a commit (or a checkpoint). Read by
    delta-rs, without a JVM, for every engine; a folder whose `_delta_log` holds no commit yet (a first
    commit killed half-way) is no table, as for Spark's Delta."""
    from deltalake import DeltaTable

    return DeltaTable.is_deltatable(delta_uri(uri), storage_options(uri))


LandingQuery = Callable[[str], str]  # a relation (a table name or a scan) -> SQL over it
LandingScan = Callable[[str, LandingQuery], list[tuple]]  # (a Delta table's URI, a query) -> its rows


def duckdb_scan(con: duckdb.DuckDBPyConnection) -> LandingScan:
    """Queries of the landing tier's Delta tables on a DuckDB connection (with the delta extension); a
    table not created yet holds no rows."""

    def scan(uri: str, query: LandingQuery) -> list[tuple]:
        if not is_delta_table(uri):
            return []
        return con.execute(query(f"delta_scan({sql_literal(engine_location(uri))})")).fetchall()

    return scan


def spark_scan(spark: SparkSession, read: dict[str, DataFrame] | None = None) -> LandingScan:
    """The same queries on Spark; `read`: the rows of some of the tables (by URI) as the caller holds
    them already, queried instead of the table (they hold every row the query selects)."""

    def scan(uri: str, query: LandingQuery) -> list[tuple]:
        if read and uri in read:
            rows = read[uri]
        elif is_delta_table(uri):
            rows = spark.read.format("delta").load(uri)
        else:
            return []
        # A name of its own: scans of parallel threads of one session stay apart.
        view = f"_seqlake_scan_{uuid.uuid4().hex}"
        rows.createOrReplaceTempView(view)
        try:
            return [tuple(row) for row in spark.sql(query(view)).collect()]
        finally:
            spark.catalog.dropTempView(view)

    return scan


def last_applied_version(spark, path: str, app_id: str) -> int:
    """Highest txnVersion committed to the Delta table at `path` by `app_id` (0 if none).

    The table's Delta `txn` action, which Spark's idempotent writes and the in-process engine's commits
    both record (and checkpoints keep, unlike the commit history), read by delta-rs without a JVM. A
    table delta-rs cannot read (a feature only Spark's Delta knows) is asked through `spark`."""
    from seqlake.pipelines.landing.delta_writer import SparkOnlyTable, applied_version

    try:
        return applied_version(path, app_id)
    except SparkOnlyTable:
        if spark is None:
            raise
        return _spark_transaction_version(spark, path, app_id)


def _spark_transaction_version(spark, path: str, app_id: str) -> int:
    """The same `txn` record as Spark's Delta snapshot of the table holds it."""
    jvm = spark._jvm
    log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
    none = jvm.scala.Option.empty()
    version = log.update(False, none, none).transactions().get(app_id)
    return int(version.get()) if version.isDefined() else 0


def append_idempotent(df, path: str, app_id: str, version: int, partition_by: str = "window_id") -> None:
    """Append `df` once: a second append with the same (app_id, version) is a no-op in Delta."""
    (
        df.write.format("delta")
        .mode("append")
        .option("txnAppId", app_id)
        .option("txnVersion", version)
        .option("userMetadata", json.dumps({"app": app_id, "version": version}))
        .partitionBy(partition_by)
        .save(path)
    )
