"""Capture a table of requests now and append their training rows to `training_<tenant>`, once.

What a serving system does at inference time, for requests it logged elsewhere: each request gets the
pointer (range, LSN frontier, open window, length, checksum) and the fragment of the online view as
it is now, so `samples` rebuilds exactly what a model reading the view now would see. Requests are
keyed by `request_id`: those the table already holds are left out, so a run killed after its commit
and run again appends nothing twice; a run killed before it appended nothing. One commit, fenced on
the forgets that reach history meanwhile (`seqlake.tableformat.forgets`).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import In
from pyiceberg.table import Table

from seqlake.core.config import Config
from seqlake.core.errors import ForgetCommitted
from seqlake.pipelines.landing.tables import landing_paths
from seqlake.pipelines.tables import DETAIL, HISTORY, load_existing_table
from seqlake.pipelines.training.capture.online_view import ViewSnapshot
from seqlake.pipelines.training.capture.past import REPLAYED, capture_now
from seqlake.pipelines.training.sequence import Tenant
from seqlake.pipelines.training.tables import (
    REQUEST_FIELDS,
    create_bucketed_table,
    training_schema,
    training_table_name,
)
from seqlake.tableformat.forgets import ATTEMPTS, drop_users, fenced_transaction
from seqlake.tableformat.reader import HistoryReader

REQUEST_SCHEMA = pa.schema(REQUEST_FIELDS)
# Snapshot summary key of an append that captured past requests on purpose (`replay`): how many.
REPLAYED_PROPERTY = "seqlake.replayed-requests"


@dataclass(frozen=True)
class CapturesWritten:
    table: str  # training_<tenant>
    requests: int  # requests given
    appended: int  # training rows appended by this run
    already_held: int  # requests the table held already (by request_id)
    left_out: int  # rows of users a forget removed meanwhile
    replayed: int = 0  # past requests captured on purpose (`replay`): rows with `replayed` true

    def summary(self) -> str:
        held = f", {self.already_held:,} already held" if self.already_held else ""
        forgot = f", {self.left_out:,} of forgotten users left out" if self.left_out else ""
        replayed = f", {self.replayed:,} of them past requests replayed" if self.replayed else ""
        return f"{self.appended:,} of {self.requests:,} requests captured into {self.table}{held}{forgot}{replayed}"


def write_captures(
    config: Config, tenant: Tenant, requests: pa.Table, fragment_events: int | None = None, replay: bool = False
) -> CapturesWritten:
    """Capture `requests` (REQUEST_FIELDS columns) against the online view now and append their
    training rows to `training_<tenant>` (created when needed), leaving out request ids it holds.
    Requests in the past are refused (`capture.past`) unless `replay`; their training rows then
    record `replayed`, and the append's snapshot how many (`seqlake.replayed-requests`)."""
    requests = requests.select(REQUEST_SCHEMA.names).cast(REQUEST_SCHEMA)
    name = training_table_name(tenant)
    table = create_bucketed_table(config, name, training_schema(tenant))
    width = config.training.fragment_events if fragment_events is None else fragment_events
    history = load_existing_table(config, HISTORY)
    detail = load_existing_table(config, DETAIL)
    for _ in range(ATTEMPTS):
        held = _held_ids(table.refresh(), requests["request_id"])
        todo = requests.filter(pc.invert(pc.is_in(requests["request_id"], value_set=held)))
        if not todo.num_rows:
            return CapturesWritten(name, requests.num_rows, 0, requests.num_rows, 0)
        with ViewSnapshot(config, history.refresh(), detail.refresh(), landing_paths(config)) as view:
            tolerance = config.training.capture_tolerance_seconds
            rows = capture_now(view, HistoryReader(history), tenant, todo, width, tolerance, replay).training
            point = view.read_point
        transaction, missed = fenced_transaction(table, point)
        kept = drop_users(rows, missed)
        replayed = int(pc.sum(kept[REPLAYED].cast(pa.int64())).as_py() or 0)
        try:
            with transaction as tx:
                tx.append(kept, snapshot_properties={REPLAYED_PROPERTY: str(replayed)} if replayed else {})
        except CommitFailedException:
            continue  # a forget reached the table meanwhile: capture again, without its users
        held_before = requests.num_rows - todo.num_rows
        left_out = rows.num_rows - kept.num_rows
        return CapturesWritten(name, requests.num_rows, kept.num_rows, held_before, left_out, replayed)
    raise ForgetCommitted(f"{name}: forgets kept committing during the capture; run it again")


def _held_ids(table: Table, ids: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The request ids among `ids` that `table` holds."""
    if table.current_snapshot() is None:
        return pa.array([], pa.string())
    wanted = pc.unique(ids).to_pylist()
    found = table.scan(row_filter=In("request_id", wanted), selected_fields=("request_id",)).to_arrow()
    return found["request_id"].combine_chunks() if found.num_rows else pa.array([], pa.string())
