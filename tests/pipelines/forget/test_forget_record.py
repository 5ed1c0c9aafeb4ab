"""The forget record of a table (`seqlake.tableformat.forgets`): what it keeps, how it stays bounded, and the
fenced commit that fails when a forget reaches the table between a writer's check and its commit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException

from seqlake.core.errors import ForgetCommitted
from seqlake.tableformat.forgets import (
    FORGETS_PROPERTY,
    HORIZON,
    Epoch,
    Forgets,
    ReadPoint,
    drop_users,
    fenced_transaction,
    forgets_of,
    inherited,
    missed_users,
    read_point,
    record_forget,
)

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def test_a_record_lists_each_forget_once_and_folds_the_ones_finished_long_ago():
    first, second = Epoch("a", (1, 2), NOW.isoformat()), Epoch("b", (3,), NOW.isoformat())
    record = Forgets().recording(first, 7, {}, NOW)
    assert record.recording(first, 9, {}, NOW) == record  # a forget run again records nothing new
    record = record.recording(second, 9, {}, NOW)
    assert [(e.forget_id, e.sequence) for e in record.epochs] == [("a", 7), ("b", 9)] and record.sequence == 9
    # A week after `a` finished, the next forget folds it away; `b`, unfinished, stays whatever its age.
    later = NOW + HORIZON + timedelta(hours=1)
    third = Epoch("c", (4,), later.isoformat())
    folded = record.recording(third, 12, {"a": NOW}, later)
    assert [e.forget_id for e in folded.epochs] == ["b", "c"]
    assert folded.folded_at == later.isoformat() and folded.sequence == 12
    # One finished less than the horizon ago stays.
    assert [e.forget_id for e in record.recording(third, 12, {"a": later - timedelta(hours=2)}, later).epochs] == [
        "a",
        "b",
        "c",
    ]


def _table(tmp_path: Path, name: str = "t"):
    tmp_path.mkdir(parents=True, exist_ok=True)
    catalog = SqlCatalog("c", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace_if_not_exists("n")
    schema = pa.schema([pa.field("user_id", pa.int64(), nullable=False), pa.field("x", pa.int32())])
    return catalog, catalog.create_table(f"n.{name}", schema=schema)


def _record(table, epochs: list[Epoch], folded_at: str | None = None) -> None:
    with table.transaction() as transaction:
        forgets = Forgets(tuple(epochs), max((e.sequence for e in epochs), default=-1), folded_at)
        record_forget(transaction, forgets, snapshot_staged=False)


def test_a_writer_misses_the_forgets_its_read_did_not_see_and_replans_after_a_fold(tmp_path: Path):
    _, table = _table(tmp_path)
    _record(table, [Epoch("a", (1,), NOW.isoformat(), 0)])
    point = read_point(table)
    assert point.seen == {"a"} and len(missed_users(table, point)) == 0
    _record(table, [Epoch("a", (1,), NOW.isoformat(), 0), Epoch("b", (5, 3), NOW.isoformat(), 1)])
    assert missed_users(table, point).to_pylist() == [3, 5]
    rows = pa.table({"user_id": pa.array([1, 3, 4, 5], pa.int64()), "x": pa.array([0, 1, 2, 3], pa.int32())})
    assert drop_users(rows, missed_users(table, point))["user_id"].to_pylist() == [1, 4]
    # Epochs folded after the read: the writer cannot tell what it missed, and plans again.
    _record(
        table,
        [Epoch("b", (5, 3), NOW.isoformat(), 1)],
        folded_at=(datetime.now(UTC) + timedelta(seconds=1)).isoformat(),
    )
    with pytest.raises(ForgetCommitted, match="folded"):
        missed_users(table, point)


def test_a_forget_between_the_check_and_the_commit_fails_the_commit(tmp_path: Path):
    catalog, table = _table(tmp_path)
    point = ReadPoint()
    transaction, missed = fenced_transaction(table, point)
    assert len(missed) == 0
    schema = table.schema().as_arrow()
    transaction.append(pa.table({"user_id": pa.array([7], pa.int64()), "x": pa.array([1], pa.int32())}, schema=schema))
    # Another process (its own table object) records a forget of user 7 on the table meanwhile.
    _record(catalog.load_table("n.t"), [Epoch("f", (7,), NOW.isoformat(), 0)])
    with pytest.raises(CommitFailedException):
        transaction.commit_transaction()
    assert table.refresh().scan().to_arrow().num_rows == 0  # nothing was appended
    # Checked again, the writer leaves user 7 out.
    transaction, missed = fenced_transaction(table, point)
    assert missed.to_pylist() == [7]


def test_a_new_table_starts_with_historys_epochs_and_no_snapshot_before_them(tmp_path: Path):
    _, history = _table(tmp_path, "history")
    _record(history, [Epoch("a", (1,), NOW.isoformat(), 12)])
    properties = inherited(history)
    _, new = _table(tmp_path / "other", "new")
    with new.transaction() as transaction:
        transaction.set_properties(properties)
    record = forgets_of(new.metadata)
    assert [(e.forget_id, e.users, e.sequence) for e in record.epochs] == [("a", (1,), -1)] and record.sequence == -1
    assert inherited(None) == {} and FORGETS_PROPERTY in properties
