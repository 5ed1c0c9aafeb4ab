"""Ingest from a Kafka topic, what both engines share: where the lake stands in each partition, the
batches still to land, and the one-line refusal when the topic no longer holds what the lake needs.

Each Kafka partition is a source partition and each offset its LSN; a message's timestamp is its arrival
time and its value the raw payload. A batch is a range of offsets of one partition, [start, end). It
lands as the raw table's snapshots do (validation, then the quarantine commit, then the events commit),
under its partition's app id (`partition_app_id`) with `end` as the Delta txn version: the offsets a
batch consumed are recorded by the very commit that lands its rows, in the `txn` record both engines
already read and write. Nothing else commits offsets (no consumer group), so a run killed anywhere is
taken up by the next from what the landing tier records:

- a partition goes on from the events table's record, or from the topic's first offset when the
  landing tier holds none (the topic's first ingest);
- a batch whose quarantine commit went through and whose events commit did not is taken again with
  the same end (the quarantine commit skips it, the events commit lands it);
- a partition whose record is below the first offset the topic still holds is refused, before anything
  lands: its retention dropped messages the lake never landed.
"""

from __future__ import annotations

import itertools
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from seqlake.core.config import Config
from seqlake.core.errors import SourceError
from seqlake.core.progress import Progress
from seqlake.core.sources import KafkaTopic
from seqlake.pipelines.ingest.plan import IngestResult, land_batches
from seqlake.pipelines.landing.tables import LandingPaths

# Offsets one batch takes from a partition at most: a backlog lands in several batches (Spark persists
# one batch's validated rows; the in-process engine streams it).
MAX_BATCH_RECORDS = 500_000
# How long a question to the brokers may wait before ingest gives up with one line.
REQUEST_SECONDS = 30.0

Recorded = Callable[[str, str], int]  # (a landing table's URI, an app id) -> its txn version there, 0 if none
# Lands one batch with the home windows of the moment: (rows landed, quarantine reasons).
LandBatch = Callable[["Batch", dict[int, int]], tuple[int, Counter]]


@dataclass(frozen=True)
class PartitionOffsets:
    """What a partition of the topic holds now."""

    partition: int
    earliest: int  # the first offset it still holds
    end: int  # one past the last offset a reader may take (read_committed: the last stable offset)


@dataclass(frozen=True)
class Batch:
    partition: int
    start: int
    end: int  # exclusive: the next offset to read after this batch, and the txn version of its commits

    def __str__(self) -> str:
        return f"partition {self.partition} offsets {self.start}..{self.end - 1}"


@dataclass(frozen=True)
class Plan:
    batches: list[Batch]  # in landing order: each partition's first batch, then each one's second, ...
    caught_up: int  # partitions with nothing to land


def partition_app_id(topic: KafkaTopic, partition: int) -> str:
    """The Delta txn app id of a partition's batches: its version is the partition's next offset to land."""
    return f"seqlake-ingest:kafka:{topic.topic}:{partition}"


class _ClientLog(logging.LoggerAdapter):
    """librdkafka's own log lines (a broker refusing a connection, retries), at info: as Spark's, they
    are not a user's to act on unless asked for (--log-level info); what fails is one SourceError."""

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        self.logger.info(msg, *args, **kwargs)


def client_settings(topic: KafkaTopic) -> dict[str, Any]:
    """What every librdkafka client of seqlake is given."""
    return {
        "bootstrap.servers": topic.bootstrap_servers,
        "client.id": "seqlake-ingest",
        "logger": _ClientLog(logging.getLogger(__name__), {}),
    }


def topic_offsets(topic: KafkaTopic) -> list[PartitionOffsets]:
    """Each partition's first and end offsets, as the brokers answer now (read_committed: a transaction
    still open ends the range at its first message); one line if they cannot answer."""
    import confluent_kafka as kafka  # the kafka extra
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient(client_settings(topic))
    try:
        metadata = admin.list_topics(topic.topic, timeout=REQUEST_SECONDS)
    except kafka.KafkaException as error:
        raise SourceError(f"cannot reach the Kafka brokers of {topic}: {_reason(error)}") from None
    listed = metadata.topics.get(topic.topic)
    if listed is None or listed.error is not None or not listed.partitions:
        why = _reason(listed.error) if listed is not None and listed.error is not None else "no partitions"
        raise SourceError(f"the Kafka topic {topic} cannot be read: {why}")
    partitions = sorted(listed.partitions)
    found: dict[str, dict[int, int]] = {}
    for name, spec in (("earliest", OffsetSpec.earliest()), ("end", OffsetSpec.latest())):
        asked = {kafka.TopicPartition(topic.topic, p): spec for p in partitions}
        answers = admin.list_offsets(
            asked, isolation_level=kafka.IsolationLevel.READ_COMMITTED, request_timeout=REQUEST_SECONDS
        )
        try:
            found[name] = {tp.partition: future.result().offset for tp, future in answers.items()}
        except kafka.KafkaException as error:
            raise SourceError(f"cannot list the offsets of the Kafka topic {topic}: {_reason(error)}") from None
    return [PartitionOffsets(p, found["earliest"][p], found["end"][p]) for p in partitions]


def _reason(error: object) -> str:
    """A Kafka error as one line: librdkafka's own description."""
    inner = error.args[0] if isinstance(error, Exception) and error.args else error
    text = inner.str() if hasattr(inner, "str") else str(inner)
    return " ".join(str(text).split())


def plan_batches(
    topic: KafkaTopic,
    offsets: list[PartitionOffsets],
    recorded: Recorded,
    paths: LandingPaths,
    max_batch_records: int = MAX_BATCH_RECORDS,
) -> Plan:
    """The batches that land every message the topic holds and the landing tier does not, from what the
    landing tier records (`recorded`); a SourceError naming each partition whose retention dropped
    offsets the lake still needs."""
    lost = []
    pending: list[list[Batch]] = []
    for part in offsets:
        app_id = partition_app_id(topic, part.partition)
        landed, quarantined = recorded(paths.events, app_id), recorded(paths.quarantine, app_id)
        if max(landed, quarantined) > part.end:
            raise SourceError(
                f"the Kafka topic {topic} ends at offset {part.end} in partition {part.partition}, before the "
                f"{max(landed, quarantined)} messages the lake has landed from it: is it a new topic of the same name?"
            )
        if landed and landed < part.earliest:
            lost.append(f"partition {part.partition} offsets {landed}..{part.earliest - 1}")
            continue
        start = landed or part.earliest
        batches = []
        if quarantined > start:  # killed between the two commits of the batch that ends there
            batches.append(Batch(part.partition, start, quarantined))
            start = quarantined
        for first in range(start, part.end, max(max_batch_records, 1)):
            batches.append(Batch(part.partition, first, min(first + max_batch_records, part.end)))
        pending.append(batches)
    if lost:
        raise SourceError(
            f"the Kafka topic {topic} no longer holds messages the lake has not landed: {'; '.join(lost)} "
            "(its retention dropped them; a topic's retention must cover the time between two ingests)"
        )
    ordered = [b for batches in itertools.zip_longest(*pending) for b in batches if b is not None]
    return Plan(ordered, sum(1 for batches in pending if not batches))


def ingest_topic(
    config: Config,
    topic: KafkaTopic,
    paths: LandingPaths,
    recorded: Recorded,
    land: LandBatch,
    progress: Progress | None = None,
    max_batch_records: int = MAX_BATCH_RECORDS,
    check: Callable[[], None] | None = None,
) -> IngestResult:
    """Land every message of `topic` the landing tier does not hold, batch by batch (`plan_batches`):
    `land` validates and appends each. `check` runs once before the first, when there is one."""
    plan = plan_batches(topic, topic_offsets(topic), recorded, paths, max_batch_records)
    result = IngestResult(skipped=plan.caught_up)
    if plan.batches and check is not None:
        check()
    return land_batches(config, plan.batches, land, str, result, progress)
