"""Ingest from a Kafka topic on Spark (`seqlake ingest --engine spark --source kafka://...`).

Each batch is one bounded read of Spark's Kafka source (`spark-sql-kafka-0-10`, loaded from the jar
folder like Spark's other jars): `startingOffsets` and `endingOffsets` of one partition, read_committed.
Spark's source neither joins a consumer group nor commits offsets. Its rows become raw records
(`payload_sql` reads a value as the in-process reader does) and are validated and appended as a raw
table's snapshot is (`seqlake.pipelines.ingest.spark.land_records`).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING

from seqlake.core.config import Config
from seqlake.core.errors import SetupError
from seqlake.core.payload import UNREADABLE_LINE_KEY
from seqlake.core.progress import Progress
from seqlake.core.sources import KafkaTopic
from seqlake.pipelines.ingest.kafka.plan import MAX_BATCH_RECORDS, Batch, ingest_topic, partition_app_id
from seqlake.pipelines.ingest.plan import IngestResult
from seqlake.pipelines.ingest.spark import check_landing_tier, land_records
from seqlake.pipelines.landing.tables import LandingPaths, last_applied_version

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# A value that is UTF-8 text is the payload; any other, or none, an unreadable line of its bytes in
# hexadecimal: the text `seqlake.core.payload.unreadable_line_payload` makes of them in-process.
payload_sql = (
    "CASE WHEN is_valid_utf8(CAST(value AS STRING)) THEN CAST(value AS STRING) "
    f"""ELSE concat('{{"{UNREADABLE_LINE_KEY}": "', coalesce(hex(value), ''), '"}}') END"""
)


def batch_records(spark: SparkSession, topic: KafkaTopic, batch: Batch) -> DataFrame:
    """The messages of `batch` as raw records (RAW_SCHEMA's columns)."""
    from pyspark.errors import AnalysisException

    partition = str(batch.partition)
    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", topic.bootstrap_servers)
        .option("kafka.isolation.level", "read_committed")
        .option("assign", json.dumps({topic.topic: [batch.partition]}))
        .option("startingOffsets", json.dumps({topic.topic: {partition: batch.start}}))
        .option("endingOffsets", json.dumps({topic.topic: {partition: batch.end}}))
        # A batch is one Kafka partition's offsets: split them, so every core reads and validates a share.
        .option("minPartitions", str(spark.sparkContext.defaultParallelism))
    )
    try:
        messages = reader.load()
    except AnalysisException as error:
        if "kafka" not in str(error).lower():
            raise
        raise SetupError(
            "Spark has no Kafka source: its jars (spark-sql-kafka-0-10, kafka-clients) come with `make jars` "
            "(jvm/pom.xml); a spark-submit passes them with --jars"
        ) from None
    return messages.selectExpr(
        "CAST(partition AS INT) AS source_partition",
        "offset AS lsn",
        "timestamp AS arrival_ts",
        f"{payload_sql} AS payload",
    )


def ingest_topic_spark(
    spark: SparkSession,
    config: Config,
    topic: KafkaTopic,
    paths: LandingPaths,
    progress: Progress | None = None,
    max_batch_records: int = MAX_BATCH_RECORDS,
) -> IngestResult:
    """Land every message of `topic` the landing tier does not hold yet, batch by batch, on Spark."""

    def recorded(uri: str, app_id: str) -> int:
        return last_applied_version(spark, uri, app_id)

    def land(batch: Batch, homes: dict[int, int]) -> tuple[int, Counter]:
        app_id = partition_app_id(topic, batch.partition)
        return land_records(spark, config, batch_records(spark, topic, batch), paths, app_id, batch.end, homes)

    def check() -> None:
        check_landing_tier(spark, config, paths)

    return ingest_topic(config, topic, paths, recorded, land, progress, max_batch_records, check)
