"""The landing tier: typed events of open windows in a Delta Lake table, appended blindly.

Nothing here reads a user's history: ingest cost does not depend on how long that history is.
A replayed source batch is skipped by Delta's idempotent writes (txnAppId + txnVersion).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow.fs as pafs

from seqlake.core.config import Config


@dataclass(frozen=True)
class LandingPaths:
    events: str
    quarantine: str

    @property
    def root(self) -> str:
        return self.events.rsplit("/", 1)[0]


def landing_paths(config: Config) -> LandingPaths:
    """The landing tier of the configured namespace: two namespaces of one warehouse never share one (a
    compaction would publish the other's events)."""
    root = f"{config.warehouse_uri()}/landing/{config.warehouse.namespace}"
    return LandingPaths(events=f"{root}/events", quarantine=f"{root}/quarantine")


def is_delta_table(uri: str) -> bool:
    """Whether a Delta table exists at `uri` (without a JVM)."""
    fs, path = pafs.FileSystem.from_uri(uri)
    return fs.get_file_info(f"{path}/_delta_log").type == pafs.FileType.Directory


def delta_exists(spark, path: str) -> bool:
    from delta.tables import DeltaTable

    return DeltaTable.isDeltaTable(spark, path)


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
