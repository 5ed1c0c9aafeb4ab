"""The class-data archive of Spark's driver JVM: the classes a seqlake job loads, parsed and verified once.

A Spark driver with Iceberg and Delta loads thousands of classes before its first query; reading them from
jars, verifying and linking them is much of its start-up CPU. Java's application class-data sharing
(AppCDS) maps them instead from an archive written once at set-up (`make setup` runs
`python -m seqlake.engines.spark_classes`) by a driver that ran a warm-up: Iceberg and Delta tables
written, merged, read and deleted from, and Python code run on Arrow batches. Every later driver that
starts with seqlake's options maps it (`seqlake.engines.spark_session.driver_java_options`).

The JVM checks the archive against its own build and the class path's jars, and starts without it when
they differ (another JDK, another Spark): a stale archive costs its speed, never a wrong class.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from seqlake.core.config import DEFAULT_CONFIG_PATH, load_config
from seqlake.core.errors import SetupError
from seqlake.engines.spark_session import class_archive_path

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

WARM_UP_ROWS = 20_000


def warm_up(spark: SparkSession, folder: Path, catalog: str) -> None:
    """Load what seqlake's Spark jobs load: Iceberg and Delta tables written, merged, read, deleted from;
    a window function, a grouped aggregation and Python code over Arrow batches."""
    from pyspark.sql import functions as F

    table = f"{catalog}.warm_up.events"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.warm_up")
    spark.sql(
        f"CREATE TABLE {table} (user_id BIGINT, feature_group STRING, event_ts TIMESTAMP, item BIGINT, "
        "weight DOUBLE, tags ARRAY<STRING>, lsns MAP<INT, BIGINT>) USING iceberg "
        "PARTITIONED BY (feature_group, bucket(4, user_id)) "
        "TBLPROPERTIES ('format-version'='2', 'write.distribution-mode'='hash')"
    )
    spark.sql(f"ALTER TABLE {table} WRITE ORDERED BY user_id, feature_group, event_ts")
    events = spark.range(WARM_UP_ROWS).selectExpr(
        "id % 97 AS user_id",
        "IF(id % 2 = 0, 'engagement', 'purchase') AS feature_group",
        "timestamp_millis(1767571200000 + id * 1000) AS event_ts",
        "id % 31 AS item",
        "CAST(id AS DOUBLE) / 7 AS weight",
        "array(CAST(id % 5 AS STRING)) AS tags",
        "map(CAST(id % 4 AS INT), id) AS lsns",
    )
    events.writeTo(table).append()
    spark.sql(
        f"MERGE INTO {table} t USING (SELECT * FROM {table} WHERE user_id < 3) s "
        "ON t.user_id = s.user_id AND t.event_ts = s.event_ts "
        "WHEN MATCHED THEN UPDATE SET t.weight = s.weight + 1 WHEN NOT MATCHED THEN INSERT *"
    )
    spark.sql(f"DELETE FROM {table} WHERE user_id = 5")
    read = spark.table(table).where("user_id IN (1, 2, 3) AND event_ts >= timestamp'2026-01-05'")
    ranked = read.selectExpr("*", "row_number() OVER (PARTITION BY user_id ORDER BY event_ts DESC) AS n")
    ranked.where("n <= 10").groupBy("user_id", "feature_group").agg(
        F.count("*"), F.max("weight"), F.collect_list("item"), F.sum(F.element_at("lsns", 1))
    ).collect()
    spark.sql(f"SELECT * FROM {table}.snapshots").collect()

    delta = str(folder / "delta")
    landed = events.withColumn("payload", F.to_json(F.struct("user_id", "item")))
    landed.write.format("delta").mode("append").option("txnAppId", "warm-up").option("txnVersion", 1).save(delta)
    parsed = (
        spark.read.format("delta")
        .load(delta)
        .selectExpr("from_json(payload, 'user_id BIGINT, item BIGINT') AS p", "event_ts")
    )
    parsed.where("p.user_id = 4").orderBy("event_ts").collect()

    def same(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
        yield from batches

    read.mapInArrow(same, read.schema).count()


def _run_warm_up(archive: Path) -> None:
    """In a process of its own: a driver that writes `archive` when its JVM exits."""
    from seqlake.engines.spark_session import driver_java_options, spark_session

    with tempfile.TemporaryDirectory(prefix="seqlake-warm-up-") as folder:
        config = load_config(str(DEFAULT_CONFIG_PATH))
        warehouse = config.warehouse.model_copy(update={"path": str(Path(folder) / "warehouse"), "catalog_uri": None})
        config = config.model_copy(update={"warehouse": warehouse})
        # Its own options, with the archive written at exit instead of read.
        options = driver_java_options(archive=False) + f" -XX:ArchiveClassesAtExit={archive} -Xlog:cds*=off"
        spark = spark_session(config, "seqlake-class-archive", "local[2]", **{"spark.driver.extraJavaOptions": options})
        warm_up(spark, Path(folder), config.warehouse.catalog_name)
        gateway = spark.sparkContext._gateway
        assert gateway is not None  # the session above started it
        spark.stop()
        # The JVM writes the archive as it exits, which it does when its stdin closes.
        gateway.proc.stdin.close()
        gateway.proc.wait()


def build_class_archive() -> Path:
    """Write the archive beside the jars (replacing one there); a SetupError when the JVM wrote none."""
    target = class_archive_path()
    partial = target.with_name(target.name + ".partial")
    partial.unlink(missing_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "seqlake.engines.spark_classes", "--warm-up", str(partial)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0 or not partial.is_file():
        lines = (done.stderr or done.stdout).strip().splitlines()
        raise SetupError(f"the Spark class archive was not written: {lines[-1] if lines else done.returncode}")
    partial.replace(target)  # a driver never maps a half-written archive
    return target


def main(argv: list[str] | None = None) -> None:
    """`python -m seqlake.engines.spark_classes` writes the archive beside the jars."""
    arguments = sys.argv[1:] if argv is None else argv
    if arguments[:1] == ["--warm-up"]:
        _run_warm_up(Path(arguments[1]))
        return
    if arguments:
        sys.exit("usage: python -m seqlake.engines.spark_classes  (writes the Spark class archive beside the jars)")
    try:
        print(build_class_archive())
    except SetupError as error:
        sys.exit(f"seqlake: {error}")


if __name__ == "__main__":
    main()
