"""`seqlake maintain`'s steps on real tables: each removes only what nothing needs, says how much, and
leaves every live row readable."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import yaml
from pyiceberg.expressions import In

from benchmarks.compaction import landing_events
from benchmarks.merge import BASE_WINDOW, publish_window, window_rows
from seqlake.core.config import Config, load_config
from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.pipelines.compaction.duckdb import merge_runs_if_needed_duckdb
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.landing.tables import LandingTier
from seqlake.pipelines.maintenance.steps import (
    detail_keep_from,
    drop_detail_windows,
    expire_snapshots,
    referenced_files,
    remove_orphan_files,
    run_maintenance,
    vacuum_landing,
)
from seqlake.tableformat.checksum import table_checksum
from seqlake.tableformat.fsck import fsck_table
from seqlake.tableformat.registry import live_runs, published_windows
from seqlake.tableformat.schema import KEY_COLUMNS, history_arrow_schema
from tests.conftest import make_config

WINDOWS = 8
RETENTION = 3


def small_lake(tmp_path: Path) -> Config:
    config = make_config(tmp_path / "warehouse")
    layout = config.layout.model_copy(update={"bucket_count": 2, "max_runs": 2, "detail_retention_windows": RETENTION})
    return config.model_copy(update={"layout": layout})


def history_content(config: Config) -> str:
    history, _ = history_tables(config)
    schema = history_arrow_schema(config)
    rows = history.refresh().scan().to_arrow().select(schema.names).cast(schema)
    return table_checksum(rows.sort_by([(k, "ascending") for k in KEY_COLUMNS]), schema)


def files_under(table) -> dict[str, int]:
    root = Path(table.location().removeprefix("file://"))
    return {str(p): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def age(path: Path, hours: float) -> None:
    then = time.time() - hours * 3600
    os.utime(path, (then, then))


@pytest.fixture
def lake(tmp_path: Path) -> Config:
    """WINDOWS published windows with merges (dead files behind them) and their detail rows."""
    config = small_lake(tmp_path)
    history, detail = history_tables(config)
    rng = np.random.default_rng(5)
    events = landing_events(config, 800, WINDOWS, seed=5)
    for window in range(WINDOWS):
        publish_window(history.refresh(), config, BASE_WINDOW + window, window_rows(config, window, 150, 40, rng))
        merge_runs_if_needed_duckdb(config)
        rows = events.filter(pc.equal(events["window_id"], window))
        rows = rows.set_column(
            rows.schema.get_field_index("window_id"), "window_id", pc.add(rows["window_id"], BASE_WINDOW)
        )
        detail.refresh().overwrite(
            rows.cast(detail.schema().as_arrow()), overwrite_filter=In("window_id", [BASE_WINDOW + window])
        )
    return config


def test_expiry_then_orphan_removal_frees_dead_files_and_keeps_every_live_row(lake: Config) -> None:
    history, _ = history_tables(lake)
    before = history_content(lake)
    runs, windows = live_runs(history.refresh()), published_windows(history)
    data = Path(history.location().removeprefix("file://")) / "data" / "user_id_bucket=0"
    stale = data / "rw999-b0000-killed.parquet"  # a killed job's leftover, written two days ago
    stale.write_bytes(b"x" * 1234)
    age(stale, 48)
    fresh = data / "rw998-b0000-running.parquet"  # a running job's file, not committed yet
    fresh.write_bytes(b"y" * 99)

    # Files only expired snapshots hold are not orphans before the expiry.
    first = remove_orphan_files(history, timedelta(hours=1))
    assert (first.removed, first.bytes) == (1, 1234) and not stale.exists() and fresh.exists()

    snapshots = len(history.refresh().snapshots())
    expired = expire_snapshots(history, datetime.now(UTC) + timedelta(seconds=1), keep_last=1)
    assert expired.removed == snapshots - 1 and len(history.refresh().snapshots()) == 1
    assert (live_runs(history), published_windows(history)) == (runs, windows)

    on_disk = files_under(history)
    live = referenced_files(history)
    dead = {p: size for p, size in on_disk.items() if p not in live}
    assert str(fresh) in dead and len(dead) > 1  # merged-away runs' files and old metadata
    # Two hours later (the files are then older than the safety interval), everything dead goes.
    later = remove_orphan_files(history, timedelta(hours=1), now=datetime.now(UTC) + timedelta(hours=2))
    assert later.removed == len(dead) and later.bytes == sum(dead.values())
    assert set(files_under(history)) == {p for p in on_disk if p in live}
    assert history_content(lake) == before
    fsck_table(history_tables(lake)[0])


def test_detail_past_retention_is_dropped_unless_a_pointer_needs_it(lake: Config) -> None:
    history, detail = history_tables(lake)
    newest = BASE_WINDOW + WINDOWS - 1
    assert detail_keep_from(lake, history) == newest + 1 - RETENTION
    # A training table whose oldest pointer saw window BASE+3 open keeps RETENTION windows before it.
    catalog = open_catalog(lake)
    pointers = pa.table({"request_id": ["a", "b"], "open_window": pa.array([BASE_WINDOW + 6, BASE_WINDOW + 3])})
    training = catalog.create_table(table_identifier(lake, "training_probe"), schema=pointers.schema)
    training.append(pointers)
    assert detail_keep_from(lake, history, [training]) == BASE_WINDOW + 3 - RETENTION

    keep_from = detail_keep_from(lake, history)
    rows = detail.refresh().scan().to_arrow()
    doomed = rows.filter(pc.less(rows["window_id"], keep_from))
    files = [t.file for t in detail.scan().plan_files()]
    report = drop_detail_windows(detail, keep_from)
    assert report.removed == doomed.num_rows > 0
    assert report.bytes == sum(f.file_size_in_bytes for f in files) - sum(
        t.file.file_size_in_bytes for t in detail.refresh().scan().plan_files()
    )
    left = detail.scan().to_arrow()
    assert left.num_rows == rows.num_rows - doomed.num_rows
    assert pc.min(left["window_id"]).as_py() == keep_from
    assert drop_detail_windows(detail, keep_from).removed == 0  # nothing left to drop: a no-op


def test_run_maintenance_reports_each_step_and_is_idempotent(lake: Config) -> None:
    before = history_content(lake)
    spec = lake.maintenance.model_copy(update={"snapshot_retention_hours": 0, "keep_snapshots": 1})
    config = lake.model_copy(update={"maintenance": spec})
    later = datetime.now(UTC) + timedelta(days=2)
    reports = run_maintenance(config, now=later)
    steps = [(r.step, r.target) for r in reports]
    assert steps == [
        ("drop-detail", "history_detail"),
        ("expire-snapshots", "history"),
        ("expire-snapshots", "history_detail"),
        ("remove-orphans", "history"),
        ("remove-orphans", "history_detail"),
    ]
    by_step = {(r.step, r.target): r for r in reports}
    assert by_step[("drop-detail", "history_detail")].removed > 0
    assert by_step[("remove-orphans", "history")].bytes > 0
    assert by_step[("remove-orphans", "history_detail")].bytes > 0  # the dropped detail files
    assert all(r.line().startswith(f"{r.step}: {r.target}: removed ") for r in reports)
    assert history_content(lake) == before
    again = run_maintenance(config, now=later + timedelta(seconds=1))
    assert all(r.removed == 0 for r in again if r.step != "expire-snapshots")


@pytest.mark.spark
@pytest.mark.parametrize("engine", ["spark", "duckdb"])
def test_vacuum_removes_old_leftovers_of_the_landing_tier_only(spark, lake_config, engine) -> None:
    from tests.pipelines.compaction.test_publication_races import deliver, new_lake

    lake = new_lake(lake_config)
    deliver(lake, 2)
    root = Path(lake.paths.events.removeprefix("file://"))
    count = spark.read.format("delta").load(lake.paths.events).count()
    tier = LandingTier(lake.paths, spark if engine == "spark" else None)
    stale = root / "part-killed-writer.snappy.parquet"
    stale.write_bytes(b"z" * 4321)
    age(stale, 48)
    fresh = root / "part-running-writer.snappy.parquet"
    fresh.write_bytes(b"w" * 10)
    events, quarantine = vacuum_landing(tier, timedelta(hours=1))
    assert (events.removed, events.bytes) == (1, 4321)
    assert not stale.exists() and fresh.exists()
    assert quarantine.target == "quarantine"
    assert spark.read.format("delta").load(lake.paths.events).count() == count


def test_seqlake_maintain_prints_each_step(lake: Config, tmp_path: Path, capsys) -> None:
    from seqlake.jobs.maintain import main

    path = tmp_path / "lake.yaml"
    path.write_text(yaml.safe_dump(lake.model_dump(mode="json"), sort_keys=False))
    history, _ = history_tables(lake)
    leftover = Path(history.location().removeprefix("file://")) / "data" / "user_id_bucket=1" / "rw9-b0001-x.parquet"
    leftover.write_bytes(b"q" * 77)
    flags = ["--skip-landing", "--snapshot-retention-hours", "0", "--orphan-safety-hours", "0"]
    assert main(["--config", str(path), *flags]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("drop-detail: history_detail: removed ") and " rows, " in out[0]
    assert any(line.startswith("expire-snapshots: history: removed ") for line in out)
    assert any(line.startswith("remove-orphans: history: removed ") for line in out)
    assert out[-1].startswith("maintain: ") and out[-1].endswith(" bytes removed from storage")
    assert not leftover.exists()


def test_seqlake_gc_drops_only_the_detail_no_pointer_needs_in_one_commit(lake: Config, tmp_path: Path, capsys) -> None:
    from seqlake.jobs.detail_gc import main

    path = tmp_path / "lake.yaml"
    path.write_text(yaml.safe_dump(lake.model_dump(mode="json"), sort_keys=False))
    history, detail = history_tables(lake)
    keep_from = detail_keep_from(lake, history)
    before = detail.scan().to_arrow()
    snapshots = len(detail.snapshots())
    assert main(["--config", str(path), "--output", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    after = detail.refresh().scan().to_arrow()
    assert document["keep_from_window"] == keep_from
    assert document["step"]["removed"] == pc.sum(pc.less(before["window_id"], keep_from)).as_py() > 0
    assert after.num_rows == before.num_rows - document["step"]["removed"]
    assert pc.min(after["window_id"]).as_py() >= keep_from
    assert len(detail.snapshots()) == snapshots + 1  # one commit
    assert main(["--config", str(path), "--output", "json"]) == 0  # again: nothing left to drop
    assert json.loads(capsys.readouterr().out)["step"]["removed"] == 0


def test_compact_with_maintain_publishes_then_cleans(tmp_path: Path) -> None:
    from tests.pipelines.compaction.test_no_event_lost import (
        assert_every_event_once,
        import_lines,
        make_warehouse,
        ratings,
        seqlake,
    )

    config = make_warehouse(tmp_path, max_runs=1)
    lines = ratings(list(range(4)))
    import_lines(config, tmp_path, "four_hours", lines)
    settings = yaml.safe_load(config.read_text())
    settings["maintenance"] = {"snapshot_retention_hours": 0, "keep_snapshots": 1, "orphan_safety_hours": 0}
    config.write_text(yaml.safe_dump(settings, sort_keys=False))
    result = seqlake(config, "compact", "--end-of-stream", "--engine", "duckdb", "--maintain")
    assert "expire-snapshots: history: removed " in result.stdout
    assert "remove-orphans: history: removed " in result.stdout
    history, _ = history_tables(load_config(str(config)))
    assert len(history.refresh().snapshots()) == 1  # the merges' earlier snapshots expired
    assert set(files_under(history)) <= referenced_files(history)  # merged-away files removed
    assert_every_event_once(config, len(lines))


def test_small_training_files_are_rewritten_one_per_bucket_with_every_row(tmp_path: Path, monkeypatch) -> None:
    from seqlake.pipelines.maintenance.steps import rewrite_small_files
    from seqlake.pipelines.training.sequence import Tenant
    from seqlake.pipelines.training.tables import create_bucketed_table, training_schema
    from tests.pipelines.maintenance.test_schema_evolution import dummy_row

    config = small_lake(tmp_path)
    tenant = Tenant(config, "retrieval")
    schema = training_schema(tenant)
    table = create_bucketed_table(config, "training_retrieval", schema)
    for step in range(5):  # one small append per capture step, each touching both buckets
        rows = [dummy_row(schema) | {"request_id": f"r{step}-{u}", "user_id": u} for u in range(10)]
        table.append(pa.Table.from_pylist(rows, schema=schema))
    before = sorted(table.refresh().scan().to_arrow().to_pylist(), key=lambda r: r["request_id"])
    files = list(table.scan().plan_files())
    assert len(files) == 10

    report = rewrite_small_files(table, small_bytes=1 << 20)
    assert report.removed == 10 and report.bytes == sum(t.file.file_size_in_bytes for t in files)
    after = list(table.refresh().scan().plan_files())
    # pyiceberg's Record iterates by index only (no __iter__), so its values are taken by index.
    partitions = [tuple(t.file.partition[i] for i in range(len(t.file.partition))) for t in after]
    assert sorted(partitions) == [(0,), (1,)]  # one file per bucket
    assert sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["request_id"]) == before
    assert rewrite_small_files(table, small_bytes=1 << 20).removed == 0  # nothing small left to merge

    # A rewrite planned on files another commit removes meanwhile (a forget, between the plan and the
    # commit) fails; it never brings their rows back.
    import seqlake.pipelines.maintenance.steps as maintenance

    table.append(pa.Table.from_pylist([dummy_row(schema) | {"request_id": "late", "user_id": 0}], schema=schema))
    other = open_catalog(config).load_table(table_identifier(config, "training_retrieval"))
    planned = maintenance.projection

    def racing(*args, **kwargs):
        if other.refresh().scan(row_filter=In("user_id", [0])).to_arrow().num_rows:
            other.delete(In("user_id", [0]))
        return planned(*args, **kwargs)

    monkeypatch.setattr(maintenance, "projection", racing)
    raced = rewrite_small_files(table, small_bytes=1 << 20)
    assert "changed while rewriting" in raced.notes[0]
    assert not [r for r in other.refresh().scan().to_arrow().to_pylist() if r["user_id"] == 0]
    assert other.scan().to_arrow().num_rows == len(before) - 5
