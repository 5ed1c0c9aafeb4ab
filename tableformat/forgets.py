"""The forget fence: each table's record of the forgets that reached it, and the one check every
writer makes before it commits.

`seqlake forget` records an epoch (its request id, its users, when, and the table's sequence number
then) in the table property `seqlake.forgets` of every table it cleans, in the same commit as its
delete there, history last: an epoch in history's record means every table is clean of its users.
Table properties live in the table metadata, not in a snapshot, so expiring snapshots loses none; and
every snapshot up to an epoch's sequence number predates the forget (`seqlake.pipelines.maintenance.steps` expires
them whatever `keep_snapshots` says).

A writer that reads and then commits takes a `ReadPoint` (the epochs history records) before its
first read. Before its commit it asks `missed_users`: the users of every epoch its target table
records that the read point does not (a forget that reached the table after the read, or one still
under way). It drops their rows from what it writes (`drop_users`: one Arrow filter) or plans again,
and commits through `fenced_transaction`: the commit fails (CommitFailedException) if the table
changed after the check (every forget advances the table's `main`), and the writer checks again.
So no commit that follows a forget it did not see can bring a forgotten user's rows back.

Bounded: an epoch whose forget finished more than `HORIZON` ago is folded away by the next forget (its
users leave the record; the `forget_audit` table keeps every request), which stamps `folded_at`. A
writer whose read point is older than that plans again (`ForgetCommitted`): it may have read before a
folded epoch.

No id in clear for good: an epoch names its users in clear only while writers may need them (a
finished forget's epoch is sealed by maintenance, `sealed`: its users leave it, their keyed hashes
stay, `folded_at` is stamped as for a fold), and the metadata files from before the seal leave the
metadata log (`TRIMMED_LOG`) and then the disk with the orphans.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, In
from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata, TableMetadataV1
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.update import AssertRefSnapshotId

from seqlake.core.errors import ForgetCommitted
from seqlake.tableformat.io import resolve_uri

FORGETS_PROPERTY = "seqlake.forgets"
# How long a finished forget stays listed; a job whose read began before a fold plans again.
HORIZON = timedelta(days=7)
# Table properties that keep a table's metadata log to the metadata file before the current one, so an
# older one (which may name a sealed forget's users) becomes an orphan file once a newer commit follows.
TRIMMED_LOG = {"write.metadata.previous-versions-max": "1"}
ATTEMPTS = 5  # fenced commits that find a new forget check and commit again this many times


@dataclass(frozen=True)
class Epoch:
    """One forget as a table records it."""

    forget_id: str  # the request's id in the forget_audit table
    users: tuple[int, ...]
    at: str  # when it reached this table (ISO 8601, UTC)
    sequence: int = -1  # the table's last sequence number then: every snapshot up to it predates it
    hashes: tuple[str, ...] = ()  # the users' keyed hashes (`seqlake.core.forget_key`), kept once sealed


@dataclass(frozen=True)
class Forgets:
    """A table's forget record: the epochs that reached it, oldest first."""

    epochs: tuple[Epoch, ...] = ()
    sequence: int = -1  # the highest sequence number of any epoch ever recorded, folded ones included
    folded_at: str | None = None  # when epochs were last folded away

    @property
    def ids(self) -> frozenset[str]:
        return frozenset(e.forget_id for e in self.epochs)

    def recording(self, epoch: Epoch, sequence: int, finished: Mapping[str, datetime], now: datetime) -> Forgets:
        """This record once `epoch` reaches the table at `sequence` (unless it did already), with the
        epochs whose forget finished (`finished`: request id -> when) before `now - HORIZON` folded."""
        epochs = list(self.epochs)
        top = self.sequence
        if epoch.forget_id not in self.ids:
            epochs.append(replace(epoch, sequence=sequence))
            top = max(top, sequence)
        cutoff = now - HORIZON
        kept = [e for e in epochs if not (e.forget_id in finished and finished[e.forget_id] < cutoff)]
        folded = self.folded_at if len(kept) == len(epochs) else now.astimezone(UTC).isoformat()
        return Forgets(tuple(kept), top, folded)

    def sealed(self, finished: frozenset[str], before: datetime, now: datetime) -> Forgets:
        """This record with the users of every epoch of a finished forget (`finished`: request ids)
        that reached the table before `before` left out, their hashes kept; `folded_at` is stamped
        when any went, so a writer that read before then plans again (it may have missed them)."""
        epochs = tuple(
            replace(e, users=()) if e.users and e.forget_id in finished and datetime.fromisoformat(e.at) < before else e
            for e in self.epochs
        )
        if epochs == self.epochs:
            return self
        return Forgets(epochs, self.sequence, now.astimezone(UTC).isoformat())

    def to_json(self) -> str:
        epochs = [
            {"id": e.forget_id, "at": e.at, "sequence": e.sequence, "users": list(e.users), "hashes": list(e.hashes)}
            for e in self.epochs
        ]
        return json.dumps({"sequence": self.sequence, "folded_at": self.folded_at, "epochs": epochs})


def forgets_of(metadata: TableMetadata) -> Forgets:
    """The record in a table's metadata (empty when no forget ever reached it)."""
    raw = metadata.properties.get(FORGETS_PROPERTY)
    if not raw:
        return Forgets()
    data = json.loads(raw)
    epochs = tuple(
        Epoch(e["id"], tuple(int(u) for u in e["users"]), e["at"], int(e["sequence"]), tuple(e.get("hashes", ())))
        for e in data["epochs"]
    )
    return Forgets(epochs, int(data["sequence"]), data.get("folded_at"))


def last_sequence_number(table: Table) -> int:
    """The sequence number of the table's newest snapshot (format v2 on: -1 for a v1 table)."""
    metadata = table.metadata
    return -1 if isinstance(metadata, TableMetadataV1) else metadata.last_sequence_number


def inherited(history: Table | None) -> dict[str, str]:
    """The table property a new table of the namespace starts with: history's epochs, so a writer
    that read before a finished forget drops its users there too (none of its snapshots predates
    them: no sequence number)."""
    record = forgets_of(history.metadata) if history is not None else Forgets()
    if not record.epochs and record.folded_at is None:
        return {}
    epochs = tuple(replace(e, sequence=-1) for e in record.epochs)
    return {FORGETS_PROPERTY: Forgets(epochs, -1, record.folded_at).to_json()}


# -- the writers' side ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadPoint:
    """What a writer has seen of the forgets when it starts reading: the epochs history recorded then
    (each finished everywhere before the read) and the time of that history metadata."""

    seen: frozenset[str] = field(default_factory=frozenset)
    at: datetime = field(default_factory=lambda: datetime.now(UTC))


def read_point(history: Table) -> ReadPoint:
    """The read point of a job about to read, from `history` as loaded before its first read (a
    metadata loaded earlier is older: it only makes the job drop more)."""
    metadata = history.metadata
    return ReadPoint(forgets_of(metadata).ids, datetime.fromtimestamp(metadata.last_updated_ms / 1000, UTC))


def missed_users(table: Table, point: ReadPoint, *also: Table) -> pa.Array:
    """The users (int64, sorted) of the epochs `table` (and the tables in `also`) record that `point`
    had not seen: what a commit of a job that read at `point` must not hold. Raises ForgetCommitted
    when epochs were folded away after the read (the job cannot tell which it missed)."""
    users: set[int] = set()
    for metadata in [table.metadata, *(t.metadata for t in also)]:
        record = forgets_of(metadata)
        if record.folded_at and datetime.fromisoformat(record.folded_at) > point.at:
            raise ForgetCommitted(
                f"{'.'.join(table.name())}: forgets were folded after this job read its input; run it again"
            )
        for epoch in record.epochs:
            if epoch.forget_id not in point.seen:
                users.update(epoch.users)
    return pa.array(sorted(users), pa.int64())


def drop_users(rows: pa.Table, users: pa.Array) -> pa.Table:
    """`rows` without those of `users` (one vectorised membership test)."""
    if not len(users) or not rows.num_rows:
        return rows
    return rows.filter(pc.invert(pc.is_in(rows["user_id"], value_set=users)))


def files_holding(uris: Iterable[str], users: pa.Array) -> list[str]:
    """The data files among `uris` with a row of one of `users` (each file's user_id column read once)."""
    if not len(users):
        return []
    found = []
    for uri in uris:
        fs, path = resolve_uri(uri)
        with fs.open_input_file(path) as handle:
            ids = pq.read_table(handle, columns=["user_id"])["user_id"]
        if pc.any(pc.is_in(ids, value_set=users)).as_py():
            found.append(uri)
    return found


def guard(transaction: Transaction) -> Transaction:
    """Make `transaction` commit only while its table's `main` is the snapshot it began on. Every
    forget that reaches a table advances `main` (`record_forget`), so a forget recorded between a
    writer's check and its commit fails the commit, through the one requirement every catalog
    validates inside its atomic commit (`assert-ref-snapshot-id`; a REST catalog knows no other). The
    writer then checks again. pyiceberg has no public hook for a requirement: `_stage` is its own."""
    current = transaction.table_metadata.current_snapshot_id
    requirement = AssertRefSnapshotId(ref=MAIN_BRANCH, snapshot_id=current)  # type: ignore[call-arg]  # an alias
    # pyiceberg retries a commit that lost a race by re-basing its snapshots on the new `main`, which
    # drops every assert-ref-snapshot-id: a guarded commit fails instead, and its writer checks again.
    transaction._rebuild_snapshot_updates = _refuse_rebase  # type: ignore[method-assign]
    return transaction._stage((), (requirement,))


def _refuse_rebase() -> None:
    raise CommitFailedException("the table changed after this commit's forget check: check again")


def fenced_transaction(table: Table, point: ReadPoint) -> tuple[Transaction, pa.Array]:
    """A guarded transaction on `table` as it is now, and the users its writes must leave out."""
    users = missed_users(table, point)
    return guard(table.transaction()), users


def remove_missed(table: Table, point: ReadPoint, scope: BooleanExpression | None = None, *also: Table) -> int:
    """After a commit that could not be fenced (Spark's own), delete the rows in `scope` (what the
    writer wrote) of the users `missed_users` names, in one guarded copy-on-write delete; the rows
    deleted. `also`: tables whose record counts too (history, for a table Spark created)."""
    where = scope if scope is not None else AlwaysTrue()
    for _ in range(ATTEMPTS):
        for extra in also:
            extra.refresh()
        users = missed_users(table.refresh(), point, *also)
        if not len(users) or table.current_snapshot() is None:
            return 0
        condition = And(where, In("user_id", users.to_pylist()))
        held = sum(
            b.num_rows for b in table.scan(row_filter=condition, selected_fields=("user_id",)).to_arrow_batch_reader()
        )
        if not held:
            return 0
        try:
            with guard(table.transaction()) as transaction:
                transaction.delete(condition, snapshot_properties={"seqlake.operation": "drop-forgotten"})
        except CommitFailedException:
            continue  # another commit (a forget) came first: check again
        return held
    raise ForgetCommitted(f"{'.'.join(table.name())}: forgets kept committing; run the job again")


def record_forget(transaction: Transaction, updated: Forgets, *, snapshot_staged: bool) -> None:
    """Set the forget record in a (guarded) transaction: a forget's own commit on a table. Unless the
    transaction stages a snapshot already (`snapshot_staged`: its delete or rewrite), an empty append
    advances `main`, which is what fences every writer that read before the forget (`guard`)."""
    guard(transaction).set_properties({FORGETS_PROPERTY: updated.to_json()})
    if not snapshot_staged:
        with transaction.update_snapshot(snapshot_properties={"seqlake.operation": "forget-record"}).fast_append():
            pass  # no file: the snapshot is the fence
