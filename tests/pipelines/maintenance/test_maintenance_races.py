"""`maintain` racing the readers and the samples job (in-process, no JVM): a reader planned on a snapshot
before maintenance reads the same complete rows after it, and a samples job with maintenance run in
the middle of it (between its batches: small training files rewritten, snapshots expired, orphans
removed) writes the same verified samples as one run alone. What maintenance leaves behind for them
(files younger than `maintenance.orphan_safety_hours`) goes in a later run, and then nothing
unreferenced is left."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from benchmarks.merge import BASE_WINDOW, HOUR_US, window_rows
from seqlake.core.config import Config
from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.pipelines.compaction.duckdb import merge_runs_if_needed_duckdb, write_history_run
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.landing.tables import landing_paths
from seqlake.pipelines.maintenance.steps import maintained_tables, referenced_files, run_maintenance
from seqlake.pipelines.training.capture.online_view import ViewSnapshot
from seqlake.pipelines.training.capture.pointers import Request, capture_requests, fat_rows, training_rows
from seqlake.pipelines.training.capture.steps import CaptureState, append_step
from seqlake.pipelines.training.rebuild import duckdb as arrow_reconstruct
from seqlake.pipelines.training.rebuild.samples import write_arrow_samples
from seqlake.pipelines.training.sequence import Tenant
from seqlake.pipelines.training.tables import (
    create_bucketed_table,
    fatrow_table_name,
    samples_table_name,
    sequence_table_schema,
    training_schema,
    training_table_name,
)
from seqlake.tableformat.reader import HistoryReader
from seqlake.tableformat.registry import FRONTIER_PROPERTY, RunRecord, commit_runs
from tests.conftest import make_config

WINDOWS = 6


def build(tmp_path: Path) -> tuple[Config, list[int]]:
    """Published windows with merges (dead files behind them) and three capture steps per tenant
    (small training and fat-row files)."""
    config = make_config(tmp_path / "warehouse")
    config = config.model_copy(update={"layout": config.layout.model_copy(update={"bucket_count": 2, "max_runs": 2})})
    history, detail = history_tables(config)
    rng = np.random.default_rng(11)
    frontier: dict[str, int] = {}
    for window in range(WINDOWS):
        rows = window_rows(config, window, 200, 30, rng)
        highest = rows.group_by("source_partition").aggregate([("lsn", "max")]).to_pylist()
        frontier |= {str(r["source_partition"]): r["lsn_max"] for r in highest}  # LSNs grow with windows
        run_id, files = f"w{BASE_WINDOW + window}", None
        files = write_history_run(history.refresh(), config, run_id, rows)
        record = RunRecord(run_id, "window", [BASE_WINDOW + window], len(files), rows.num_rows)
        commit_runs(history, [(record, files)], snapshot_properties={FRONTIER_PROPERTY: json.dumps(frontier)})
        merge_runs_if_needed_duckdb(config)
    users = sorted(set(history.refresh().scan(selected_fields=("user_id",)).to_arrow()["user_id"].to_pylist()))
    at = datetime.fromtimestamp((BASE_WINDOW + WINDOWS) * HOUR_US / 1e6, UTC)
    for step in (1, 2, 3):
        requests = [Request(f"r{step}-{u}", u, at, False, 0, "feed", at.hour) for u in users[step::3]]
        with ViewSnapshot(config, history.refresh(), detail, landing_paths(config)) as view:
            reader = HistoryReader(history)
            for name in ("retrieval", "ranking"):
                tenant = Tenant(config, name)
                captures = capture_requests(view, reader, tenant, requests, config.training.fragment_events)
                state = CaptureState(step, step)
                training = create_bucketed_table(config, training_table_name(tenant), training_schema(tenant))
                append_step(training, training_rows(captures, tenant), state, view.read_point)
                fatrow = create_bucketed_table(config, fatrow_table_name(tenant), sequence_table_schema(tenant))
                append_step(fatrow, fat_rows(captures, tenant), state, view.read_point)
    return config, users


def samples_of(config: Config, tenant: Tenant) -> list[dict]:
    table = open_catalog(config).load_table(table_identifier(config, samples_table_name(tenant)))
    return sorted(table.refresh().scan().to_arrow().to_pylist(), key=lambda r: r["request_id"])


def aggressive(config: Config) -> Config:
    """Every snapshot but the newest expires; unreferenced files go once an hour old."""
    spec = config.maintenance.model_copy(
        update={"snapshot_retention_hours": 0, "keep_snapshots": 1, "orphan_safety_hours": 1}
    )
    return config.model_copy(update={"maintenance": spec})


def test_maintenance_in_the_middle_of_reads_and_of_the_samples_job_loses_nothing(tmp_path: Path, monkeypatch) -> None:
    config, users = build(tmp_path)
    ranking = Tenant(config, "ranking")
    alone = write_arrow_samples(config, ranking, compare=True)
    assert alone.samples == alone.requests > 0 and alone.quarantined == 0 and alone.matched == alone.requests
    expected = samples_of(config, ranking)

    # A reader planned on the current snapshot, before maintenance.
    history, _ = history_tables(config)
    reader = HistoryReader(history.refresh())
    before = reader.read_users(users)

    # The samples job again, maintenance run between its first and second batch.
    batches = arrow_reconstruct.Reconstruction.batches
    ran: list[list] = []

    def with_maintenance(self):
        for n, batch in enumerate(batches(self)):
            if n == 1:
                ran.append(run_maintenance(aggressive(config)))
            yield batch

    monkeypatch.setattr(arrow_reconstruct.Reconstruction, "batches", with_maintenance)
    raced = write_arrow_samples(config, ranking, compare=True)
    monkeypatch.undo()
    assert ran, "maintenance ran inside the samples job"
    done = {(r.step, r.target): r for r in ran[0]}
    assert done[("rewrite-small-files", training_table_name(ranking))].removed > 0
    assert done[("expire-snapshots", "history")].removed > 0
    assert (raced.samples, raced.quarantined, raced.matched) == (alone.samples, 0, alone.requests)
    assert samples_of(config, ranking) == expected

    # The reader planned before maintenance reads the same complete rows after it.
    after = reader.read_users(users)
    assert all(after[u].equals(before[u]) for u in users)
    assert sum(t.num_rows for t in after.values()) == history.refresh().scan().to_arrow().num_rows

    # Two hours later what was kept for them goes, and nothing unreferenced is left.
    run_maintenance(aggressive(config), now=datetime.now(UTC) + timedelta(hours=2))
    for table in maintained_tables(config):
        root = Path(table.location().removeprefix("file://"))
        keep = referenced_files(table)
        assert [p for p in root.rglob("*") if p.is_file() and str(p) not in keep] == []
    fresh = HistoryReader(history_tables(config)[0].refresh()).read_users(users)
    assert all(fresh[u].equals(before[u]) for u in users)
    assert write_arrow_samples(config, ranking, compare=True).matched == alone.requests
    assert pc.sum(pa.array([len(r["seq_item_id"]) for r in samples_of(config, ranking)])).as_py() > 0
