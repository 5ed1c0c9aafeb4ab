"""A partitioned overwrite split by one sort (`seqlake.engines.iceberg_writes.overwrite_by_partition`)
commits what pyiceberg's own `Transaction.overwrite` commits: the same rows in each partition, in the
same order, one file per partition, and the same snapshots."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import In
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from seqlake.engines.iceberg_writes import PARTITIONS_PER_CALL, overwrite_by_partition

SCHEMA = Schema(
    NestedField(1, "window_id", LongType(), required=False),
    NestedField(2, "user_id", LongType(), required=False),
    NestedField(3, "note", StringType(), required=False),
)
SPEC = PartitionSpec(PartitionField(source_id=1, field_id=1000, transform=IdentityTransform(), name="window_id"))


def rows(windows: list[int], per_window: int, note: str) -> pa.Table:
    """Rows of `windows` interleaved (window by window would hide a lost order), user ids descending."""
    window = [w for i in range(per_window) for w in windows]
    return pa.table(
        {
            "window_id": pa.array(window, pa.int64()),
            "user_id": pa.array(range(len(window), 0, -1), pa.int64()),
            "note": pa.array([f"{note}{i}" for i in range(len(window))], pa.string()),
        }
    )


def two_tables(tmp_path: Path) -> tuple[Table, Table]:
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("n")
    ours, theirs = (
        catalog.create_table(f"n.{name}", schema=SCHEMA, partition_spec=SPEC) for name in ("ours", "theirs")
    )
    for table in (ours, theirs):
        table.append(rows([1, 2, 3], 4, "old"))
    return ours, theirs


def operations(table: Table) -> list[tuple[str, str | None]]:
    """Each snapshot's operation and window property."""
    summaries = [snapshot.summary for snapshot in table.snapshots()]
    return [(s.operation.value, s.get("seqlake.window-id")) if s else ("?", None) for s in summaries]


def by_partition(table: Table) -> dict[int, list[tuple]]:
    """Each partition's rows in file order; each partition in one file."""
    out: dict[int, list[tuple]] = {}
    for task in table.scan().plan_files():
        window = task.file.partition[0]
        assert window not in out, f"window {window} in more than one file"
        data = pa.parquet.read_table(task.file.file_path.removeprefix("file://"))
        out[window] = list(zip(*(data[name].to_pylist() for name in ("window_id", "user_id", "note")), strict=True))
    return out


def test_overwrite_by_partition_commits_what_pyiceberg_overwrite_commits(tmp_path: Path) -> None:
    ours, theirs = two_tables(tmp_path)
    windows = list(range(2, 2 + 2 * PARTITIONS_PER_CALL + 3))  # three calls of pyiceberg's writer
    new = rows(windows[::-1], 3, "new")
    properties = {"seqlake.window-id": str(windows[-1])}

    transaction = ours.transaction()
    overwrite_by_partition(transaction, new, "window_id", In("window_id", windows), properties)
    transaction.commit_transaction()
    with theirs.transaction() as transaction:
        transaction.overwrite(new, overwrite_filter=In("window_id", windows), snapshot_properties=properties)

    ours, theirs = ours.refresh(), theirs.refresh()
    assert by_partition(ours) == by_partition(theirs)
    assert set(by_partition(ours)) == {1, *windows}
    # the window outside the filter keeps its old rows (every third of the interleaved first append)
    assert [note for _, _, note in by_partition(ours)[1]] == ["old0", "old3", "old6", "old9"]
    assert ours.scan().to_arrow().num_rows == 4 + 3 * len(windows)
    assert operations(ours) == operations(theirs)
    assert [operation for operation, _ in operations(ours)][-2:] == ["delete", "append"]


def test_an_empty_overwrite_removes_the_partitions(tmp_path: Path) -> None:
    ours, theirs = two_tables(tmp_path)
    transaction = ours.transaction()
    overwrite_by_partition(transaction, rows([], 0, "none"), "window_id", In("window_id", [2, 3]), {})
    transaction.commit_transaction()
    theirs.overwrite(rows([], 0, "none"), overwrite_filter=In("window_id", [2, 3]))
    ours, theirs = ours.refresh(), theirs.refresh()
    assert by_partition(ours) == by_partition(theirs)
    assert set(by_partition(ours)) == {1}
    assert operations(ours) == operations(theirs)
