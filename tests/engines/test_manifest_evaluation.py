"""A commit that replaces files finds them in its parent's manifests on pyiceberg's thread pool, every
thread sharing one partition evaluator (`seqlake.engines.iceberg_writes.serialize_manifest_evaluation`).

Without the lock, a thread that stops half way through evaluating its manifest reads the next thread's
partition bounds: a forget's rewrite then failed with "Missing required files to delete". The test
stops the first evaluation inside its own visit until the second has run, or for a second when the
second cannot start (the lock holds it), and checks each manifest's answer."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import And, EqualTo
from pyiceberg.expressions.visitors import manifest_evaluator
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField

from seqlake.engines.iceberg_writes import serialize_manifest_evaluation

SCHEMA = Schema(NestedField(1, "a", LongType(), required=False), NestedField(2, "b", LongType(), required=False))
SPEC = PartitionSpec(
    PartitionField(source_id=1, field_id=1000, transform=IdentityTransform(), name="a"),
    PartitionField(source_id=2, field_id=1001, transform=IdentityTransform(), name="b"),
)


class PausingBounds(list):
    """A manifest's partition bounds whose first read waits until the other evaluation ran (or a
    second passed: the other one is held back)."""

    def __init__(self, bounds, inside: threading.Event, other_done: threading.Event) -> None:
        super().__init__(bounds)
        self.inside, self.other_done = inside, other_done

    def __getitem__(self, position):
        if not self.inside.is_set():
            self.inside.set()
            self.other_done.wait(timeout=1)
        return super().__getitem__(position)


def test_evaluations_of_two_manifests_on_two_threads_each_read_their_own_bounds(tmp_path: Path) -> None:
    serialize_manifest_evaluation()
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("n")
    table = catalog.create_table("n.t", schema=SCHEMA, partition_spec=SPEC)
    for b in (1, 2):  # one manifest each: (a=1, b=1) and (a=1, b=2)
        table.append(pa.table({"a": pa.array([1], pa.int64()), "b": pa.array([b], pa.int64())}))
    snapshot = table.current_snapshot()
    assert snapshot is not None
    first, second = sorted(snapshot.manifests(table.io), key=lambda m: m.sequence_number)
    evaluate = manifest_evaluator(SPEC, SCHEMA, And(EqualTo("a", 1), EqualTo("b", 1)))
    assert (evaluate(first), evaluate(second)) == (True, False)  # one thread: the manifest holding b=1

    inside, second_done = threading.Event(), threading.Event()
    pausing = SimpleNamespace(partitions=PausingBounds(first.partitions, inside, second_done))
    answers: dict[str, bool] = {}

    def run_second() -> None:
        inside.wait()
        answers["second"] = evaluate(second)
        second_done.set()

    thread = threading.Thread(target=run_second)
    thread.start()
    answers["first"] = evaluate(pausing)
    thread.join()
    assert answers == {"first": True, "second": False}
