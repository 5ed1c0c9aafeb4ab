"""The batches a Kafka ingest takes, from what the landing tier records (each partition's Delta txn
versions) and what the topic holds: where each partition goes on, the batch a killed run left half
committed, a backlog split, and the one-line refusals."""

from __future__ import annotations

import pytest

from seqlake.core.errors import SourceError
from seqlake.core.sources import KafkaTopic
from seqlake.pipelines.ingest.kafka.plan import Batch, PartitionOffsets, partition_app_id, plan_batches
from seqlake.pipelines.landing.tables import LandingPaths

TOPIC = KafkaTopic("127.0.0.1:9092", "events")
PATHS = LandingPaths(events="file:///lake/landing/events", quarantine="file:///lake/landing/quarantine")


def recorded(events: dict[int, int], quarantine: dict[int, int]):
    """The txn versions the two landing tables hold, by partition (none: 0)."""
    tables = {PATHS.events: events, PATHS.quarantine: quarantine}

    def version(uri: str, app_id: str) -> int:
        partition = next(p for p in range(16) if partition_app_id(TOPIC, p) == app_id)
        return tables[uri].get(partition, 0)

    return version


def test_each_partition_goes_on_from_its_record_or_the_topics_first_offset_in_rounds():
    offsets = [PartitionOffsets(0, 0, 25), PartitionOffsets(1, 40, 45), PartitionOffsets(2, 0, 7)]
    plan = plan_batches(TOPIC, offsets, recorded({0: 3, 2: 7}, {0: 3, 2: 7}), PATHS, max_batch_records=10)
    # Partition 0 from its record in three batches, partition 1 (never landed) from its first offset, 2 done.
    assert plan.batches == [Batch(0, 3, 13), Batch(1, 40, 45), Batch(0, 13, 23), Batch(0, 23, 25)]
    assert plan.caught_up == 1
    assert str(plan.batches[0]) == "partition 0 offsets 3..12"


def test_a_batch_killed_between_its_two_commits_is_taken_again_with_the_same_end():
    # Partition 0's quarantine commit recorded 20, its events commit did not: the batch [5, 20) again, then
    # what arrived since; partition 1 was killed in its first batch.
    offsets = [PartitionOffsets(0, 0, 90), PartitionOffsets(1, 2, 50)]
    plan = plan_batches(TOPIC, offsets, recorded({0: 5}, {0: 20, 1: 30}), PATHS, max_batch_records=100)
    assert plan.batches == [Batch(0, 5, 20), Batch(1, 2, 30), Batch(0, 20, 90), Batch(1, 30, 50)]


def test_offsets_the_topic_dropped_before_the_lake_landed_them_are_refused_naming_each_partition():
    offsets = [PartitionOffsets(0, 10, 90), PartitionOffsets(1, 9, 50), PartitionOffsets(2, 60, 80)]
    with pytest.raises(SourceError) as refused:
        plan_batches(TOPIC, offsets, recorded({0: 10, 1: 5, 2: 41}, {}), PATHS)
    message = str(refused.value)
    assert message.startswith("the Kafka topic kafka://127.0.0.1:9092/events no longer holds messages the lake")
    assert "partition 1 offsets 5..8; partition 2 offsets 41..59 (" in message and "partition 0" not in message
    assert "\n" not in message


def test_a_topic_that_ends_before_what_the_lake_landed_from_it_is_refused():
    with pytest.raises(SourceError, match="ends at offset 4 in partition 0, before the 7 messages the lake has"):
        plan_batches(TOPIC, [PartitionOffsets(0, 0, 4)], recorded({0: 7}, {0: 7}), PATHS)
