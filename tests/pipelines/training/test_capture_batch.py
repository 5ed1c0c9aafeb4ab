"""Capture of a batch of requests: one plan for the batch, and each request captured exactly as if
it were alone (same pointer, fragment, checksum and fat row)."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pytest

from benchmarks.samples import HOUR_US, Scale, bench_config, history_rows, publish
from seqlake.core.config import load_config
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.landing.tables import landing_paths
from seqlake.pipelines.training.capture.online_view import ViewSnapshot
from seqlake.pipelines.training.capture.pointers import (
    Request,
    capture_batch,
    capture_requests,
    fat_rows,
    training_rows,
)
from seqlake.pipelines.training.sequence import Tenant, sequence_checksum
from seqlake.tableformat.reader import HistoryReader

SCALE = Scale(users=6, min_events=50, max_events=400, history_days=3, requests_per_user=1, spark=False)


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    config = bench_config(load_config(None), tmp_path_factory.mktemp("capture") / "warehouse", SCALE)
    day_start = int(config.generator.start_ts.timestamp()) * 1_000_000 + SCALE.history_days * 24 * HOUR_US
    rows = history_rows(config, SCALE, day_start, seed=3)
    history, _ = history_tables(config)
    window = rows["window_id"].to_numpy()
    publish(history, config, rows, "all", [int(window.min()), int(window.max())])
    users = np.unique(rows["user_id"].to_numpy()).tolist()
    return config, users


def requests_of(users: list[int]) -> list[Request]:
    """Requests of some users, some users several times, one user without any history."""
    now = datetime(2026, 3, 1, tzinfo=UTC)
    chosen = [users[0], users[1], users[0], 7, users[2], users[1], users[0]]
    return [Request(f"r{n}", u, now, n % 2 == 0, 10 * n, "feed", 3) for n, u in enumerate(chosen)]


@pytest.mark.parametrize("tenant_name,fragment", [("ranking", 8), ("retrieval", 3), ("retrieval", 0)])
def test_a_batch_captures_each_request_as_if_it_were_alone(lake, tenant_name, fragment):
    config, users = lake
    tenant = Tenant(config, tenant_name)
    requests = requests_of(users)
    history, detail = history_tables(config)
    with ViewSnapshot(config, history, detail, landing_paths(config)) as view:
        batch = capture_batch(view, HistoryReader(history), tenant, requests, fragment)
        alone = [capture_requests(view, HistoryReader(history), tenant, [r], fragment)[0] for r in requests]
    assert batch.training.to_pylist() == training_rows(alone, tenant).to_pylist()
    assert batch.fat_rows.to_pylist() == fat_rows(alone, tenant).to_pylist()
    for capture in alone:
        assert capture.pointer["checksum"] == sequence_checksum(capture.sequence, tenant)
        assert capture.pointer["length"] == capture.sequence.num_rows <= tenant.max_length
        assert capture.fragment.equals(capture.sequence.slice(max(0, capture.sequence.num_rows - fragment)))
    lengths = [c.sequence.num_rows for c in alone]
    assert lengths[3] == 0 and max(lengths) > fragment  # a user without history, users with long ones


def test_one_batch_reads_published_history_once_however_many_requests(lake, monkeypatch):
    config, users = lake
    tenant = Tenant(config, "retrieval")
    history, detail = history_tables(config)
    reader = HistoryReader(history)
    reads: list[tuple] = []
    original = reader.read_users

    def counted(*args, **kwargs):
        reads.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(reader, "read_users", counted)
    with ViewSnapshot(config, history, detail, landing_paths(config)) as view:
        for size in (1, 20, 200):
            requests = [requests_of(users)[n % 7] for n in range(size)]
            batch = capture_batch(view, reader, tenant, requests, 4)
            assert batch.training.num_rows == size
    assert len(reads) == 3  # one multi-user read per batch, not one per request or user
    assert pa.types.is_binary(batch.training.schema.field("checksum").type)
