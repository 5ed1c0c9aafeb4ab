"""One capture step on a warehouse, as the serving loop makes it, for the tests that kill it:
`python -m tests.capture_step CONFIG STEP` captures the requests of the users active since the last
step, for every tenant, and appends them idempotently by step id (seqlake.pipelines.training.capture.steps)."""

from __future__ import annotations

import sys

from seqlake.core.config import load_config
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.landing.tables import landing_paths
from seqlake.pipelines.training.capture.online_view import ViewSnapshot
from seqlake.pipelines.training.capture.pointers import capture_batch, request_table
from seqlake.pipelines.training.capture.requests import RequestSimulator
from seqlake.pipelines.training.capture.steps import append_step, start_state
from seqlake.pipelines.training.sequence import tenants
from seqlake.pipelines.training.tables import (
    create_bucketed_table,
    fatrow_table_name,
    sequence_table_schema,
    training_schema,
    training_table_name,
)
from seqlake.tableformat.reader import HistoryReader


def capture_step(config_path: str, step: int) -> int:
    config = load_config(config_path)
    profiles = tenants(config)
    tables = {}
    for tenant in profiles:
        tables[tenant.name] = (
            create_bucketed_table(config, training_table_name(tenant), training_schema(tenant)),
            create_bucketed_table(config, fatrow_table_name(tenant), sequence_table_schema(tenant)),
        )
    state = start_state([t for pair in tables.values() for t in pair], 0)
    if state.step >= step:
        return 0
    history, detail = history_tables(config)
    with ViewSnapshot(config, history, detail, landing_paths(config)) as view:
        users = view.active_users(None)  # every user with rows above the frontier: each step has requests
        assert view.now is not None  # rows above the frontier give the view a time
        requests = RequestSimulator(config).requests(users, view.now, state.points)
        done = state.next(step, view.now)
        reader = HistoryReader(history)
        batch = request_table(requests)
        for tenant in profiles:
            captured = capture_batch(view, reader, tenant, batch, config.training.fragment_events)
            training, fatrow = tables[tenant.name]
            append_step(training, captured.training, done, view.read_point)
            append_step(fatrow, captured.fat_rows, done, view.read_point)
    return len(requests)


if __name__ == "__main__":
    print(capture_step(sys.argv[1], int(sys.argv[2])))
