"""fsck lists every broken file as a finding and keeps checking; the command exits 1 without a traceback.

A small history table of two runs is damaged in several files at once (a flipped byte in a data page,
a truncated file, a deleted file, a flipped footer statistic), then its catalog and metadata are
damaged: `seqlake fsck` names each broken file with its invariant, checks the rest, and `--repair-plan`
names the runs and windows to rebuild.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from seqlake.tableformat.fsck import FsckError, check_table, fsck_table
from tests import forked_commands
from tests.conftest import make_config
from tests.history_data import history_table, publish_run, synthetic_history

LENGTHS = {1_000_000 + i: 30 + 17 * i for i in range(40)}


@pytest.fixture
def table(tmp_path):
    config = make_config(tmp_path / "warehouse")
    table = history_table(config)
    publish_run(table, config, synthetic_history(config, LENGTHS, seed=3), "w1")
    publish_run(table, config, synthetic_history(config, {u: 20 for u in LENGTHS}, seed=4), "w2")
    return table


def files_of(table) -> list[Path]:
    return sorted(Path(t.file.file_path.removeprefix("file://")) for t in table.scan().plan_files())


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x5A
    path.write_bytes(bytes(data))


def damage(table) -> dict[Path, str]:
    """Four files of both runs damaged four ways; file -> the invariant fsck must report."""
    w1 = [p for p in files_of(table) if "/rw1-" in str(p)]
    w2 = [p for p in files_of(table) if "/rw2-" in str(p)]
    page, truncated, deleted, footer = w1[0], w1[1], w2[0], w2[1]
    chunk = pq.read_metadata(page).row_group(0).column(4)
    flip(page, chunk.data_page_offset + chunk.total_compressed_size // 2)
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 2])
    deleted.unlink()
    meta = pq.read_metadata(footer)
    stats_at = footer.read_bytes().rfind(meta.row_group(0).column(0).statistics.max_raw.to_bytes(8, "little"))
    flip(footer, stats_at)
    return {page: "readable", truncated: "size", deleted: "file-exists", footer: "footer-digest"}


def test_every_broken_file_is_a_finding_and_the_rest_is_checked(table):
    broken = damage(table)
    report = check_table(table)
    by_file = {Path(f.path.removeprefix("file://")): f for f in report.findings if f.path.startswith("file://")}
    for path, invariant in broken.items():
        assert invariant in {f.invariant for f in report.findings if f.path.endswith(str(path))}, path
    assert set(by_file) == set(broken)  # healthy files have no finding
    assert report.files == len(files_of(table))
    page = next(f for f in report.findings if f.invariant == "readable" and "corrupt page" in f.message)
    assert page.run_id == "w1"
    truncated = [f for f in report.findings if f.invariant == "readable" and "truncated" in f.message]
    assert truncated
    with pytest.raises(FsckError) as error:
        fsck_table(table)
    assert len(str(error.value).splitlines()) == len(report.findings)


def fsck_command(warehouse: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SEQLAKE_WAREHOUSE": str(warehouse)}
    return forked_commands.run(
        [sys.executable, "-m", "seqlake.cli", "fsck", *args], capture_output=True, text=True, env=env
    )


def test_the_command_lists_findings_and_a_repair_plan(table, tmp_path):
    warehouse = tmp_path / "warehouse"
    healthy = fsck_command(warehouse)
    assert healthy.returncode == 0, healthy.stderr
    broken = damage(table)
    done = fsck_command(warehouse, "--repair-plan")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert all(line.startswith("seqlake fsck: ") for line in lines)
    for path, invariant in broken.items():
        assert any(str(path) in line and f"[{invariant}]" in line for line in lines), (path, lines)
    plan = done.stdout
    assert "repair plan: rebuild 2 run(s)" in plan
    assert "run w1 (window" in plan and "run w2 (window" in plan


def test_an_unreadable_catalog_or_metadata_is_a_finding(table, tmp_path):
    warehouse = tmp_path / "warehouse"
    metadata = Path(table.metadata_location.removeprefix("file://"))
    metadata.write_text("{ not json")
    done = fsck_command(warehouse)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) == 1 and "[catalog] cannot load the table" in done.stderr
    for name in ("catalog.db-wal", "catalog.db-shm"):
        (warehouse / name).unlink(missing_ok=True)
    (warehouse / "catalog.db").write_text("gone")
    done = fsck_command(warehouse)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) == 1 and "[catalog]" in done.stderr
