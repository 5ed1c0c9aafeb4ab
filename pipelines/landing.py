"""The landing tier: typed events of open windows in a Delta Lake table, appended blindly.

Nothing here reads a user's history: ingest cost does not depend on how long that history is.
A replayed source batch is skipped by Delta's idempotent writes (txnAppId + txnVersion).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from seqlake.config import Config


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


def delta_exists(spark, path: str) -> bool:
    from delta.tables import DeltaTable

    return DeltaTable.isDeltaTable(spark, path)


def last_applied_version(spark, path: str, app_id: str) -> int:
    """Highest txnVersion committed to the Delta table at `path` by `app_id` (0 if none)."""
    if not delta_exists(spark, path):
        return 0
    versions = [0]
    for row in spark.sql(f"DESCRIBE HISTORY delta.`{path}`").select("userMetadata").collect():
        if row["userMetadata"]:
            meta = json.loads(row["userMetadata"])
            if meta.get("app") == app_id:
                versions.append(int(meta["version"]))
    return max(versions)


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
