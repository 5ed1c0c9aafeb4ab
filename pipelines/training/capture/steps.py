"""Capture steps that a killed job repeats without writing anything twice.

A capture step appends each tenant's training rows and fat rows: two tables per tenant, and Iceberg
commits one table at a time. Each append therefore records the step in the same commit, in the table
property `seqlake.capture-state` (the step id, the capture points done, the online view's time): a
step is appended to a table only if that table does not hold it yet. A job killed between two
appends, run again, repeats the step (the same requests from the same view) and appends it only where
it is missing, so every table ends holding every step once. Table properties outlive snapshot
expiry, so the state survives `seqlake maintain`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table

from seqlake.core.errors import ForgetCommitted
from seqlake.pipelines.faults import kill_point
from seqlake.tableformat.forgets import ATTEMPTS, ReadPoint, drop_users, fenced_transaction

CAPTURE_STATE = "seqlake.capture-state"


@dataclass(frozen=True)
class CaptureState:
    step: int  # the last capture step the table holds (steps increase; -1: none)
    points: int = 0  # capture points done up to and including it
    since: str | None = None  # the online view's time at that step (ISO 8601): the next step's active users

    @property
    def since_time(self) -> datetime | None:
        return datetime.fromisoformat(self.since) if self.since else None

    def next(self, step: int, now: datetime | None) -> CaptureState:
        """The state once `step` is captured at a view of time `now`."""
        return CaptureState(step, self.points + 1, now.isoformat() if now is not None else self.since)


def capture_state(table: Table) -> CaptureState | None:
    """The capture state a table records (None: no step was ever appended to it)."""
    raw = table.metadata.properties.get(CAPTURE_STATE)
    return CaptureState(**json.loads(raw)) if raw else None


def start_state(tables: list[Table], step: int) -> CaptureState:
    """Where a capture job resumes: the last step every table holds. Tables that never held a step
    start at `step` (what was ingested before capturing began), recorded so that a kill before their
    first append is seen as a step to repeat."""
    states = []
    for table in tables:
        state = capture_state(table)
        if state is None:
            state = CaptureState(step)
            table.transaction().set_properties({CAPTURE_STATE: json.dumps(asdict(state))}).commit_transaction()
        states.append(state)
    return min(states, key=lambda s: s.step)


def append_step(table: Table, rows: pa.Table | None, state: CaptureState, point: ReadPoint) -> bool:
    """Append the rows of capture step `state.step` and record the step, in one commit; a table that
    holds the step already is left as it is (False). `rows` None: the step captured nothing.

    `point` is where the step's reads began (`ViewSnapshot.read_point`): rows of users a forget
    removed after it are left out, and the commit is fenced on that check (`seqlake.tableformat.forgets`)."""
    for _ in range(ATTEMPTS):
        done = capture_state(table.refresh())
        if done is not None and done.step >= state.step:
            return False
        transaction, missed = fenced_transaction(table, point)
        kept = drop_users(rows, missed) if rows is not None else None
        try:
            with transaction as tx:
                if kept is not None and kept.num_rows:
                    tx.append(kept)
                tx.set_properties({CAPTURE_STATE: json.dumps(asdict(state))})
        except CommitFailedException:
            continue  # a forget reached the table meanwhile: check again
        kill_point("capture_appended")
        return True
    raise ForgetCommitted(f"{'.'.join(table.name())}: forgets kept committing during the capture step; run it again")
