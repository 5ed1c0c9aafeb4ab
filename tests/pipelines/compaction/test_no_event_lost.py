"""No event lost, run as a user would: CLI commands in subprocesses on a small warehouse.

Each scenario imports ratings with chosen event times (the MovieTweetings mapping: arrival time is
event time, one source partition, hourly windows), then runs `seqlake ingest`, `seqlake compact` and
`seqlake fsck` in the order the scenario needs. Each ends with every valid event counted exactly once
in history (the sum of `event_count`) and in the detail table, and with `fsck` passing, publication
bookkeeping included. The warehouses ingest and compact in-process by default (no JVM); a scenario
that puts Spark itself under test names `--engine spark`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.compute as pc
import pytest
import yaml

from seqlake.core.config import DEFAULT_CONFIG_PATH, load_config
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.faults import KILL_AT_ENV
from seqlake.tableformat.registry import live_runs
from seqlake.tableformat.schema import STORAGE_ORDER
from tests import forked_commands

HOUR = 3600
H0 = 472_222  # the first window: 2023-11-14 22:00 UTC
USERS = 12
EVENTS_PER_USER_HOUR = 2


def ratings(hours: list[int], salt: int = 0) -> list[str]:
    """MovieTweetings lines (user::movie::rating::seconds), distinct events in each hour of `hours`."""
    lines = []
    for hour in hours:
        for user in range(1, USERS + 1):
            for k in range(EVENTS_PER_USER_HOUR):
                movie = 1_000 * salt + 37 * hour % 997 + 11 * k + user
                lines.append(f"{user}::{movie:07d}::{(user + k) % 11}::{(H0 + hour) * HOUR + 60 * user + k}")
    return lines


def make_warehouse(
    tmp_path: Path, catalog_uri: str | None = None, warehouse: dict | None = None, **layout: int | str
) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    data["warehouse"] = {
        **data["warehouse"],
        "path": str(tmp_path / "warehouse"),
        "catalog_uri": catalog_uri,
        **(warehouse or {}),
    }
    engines = {"ingest_engine": "duckdb", "compaction_engine": "duckdb"}
    data["layout"] = {**data["layout"], "bucket_count": 2, **engines, **layout}
    path = tmp_path / "seqlake.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def seqlake(
    config: Path, *args: str, expect: int = 0, env_extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEQLAKE_")} | (env_extra or {})
    result = forked_commands.run(
        [sys.executable, "-m", "seqlake.cli", args[0], "--config", str(config), *args[1:]],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == expect, f"seqlake {' '.join(args)}: exit {result.returncode}\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    return result


def import_lines(config: Path, tmp_path: Path, name: str, lines: list[str]) -> None:
    source = tmp_path / f"{name}.dat"
    source.write_text("\n".join(lines) + "\n")
    seqlake(config, "import", "--mapping", "movietweetings", "--input", str(source))
    seqlake(config, "ingest")


def assert_every_event_once(config_path: Path, events: int) -> None:
    config = load_config(str(config_path))
    history, detail = history_tables(config)
    rows = history.refresh().scan(selected_fields=("event_count",)).to_arrow()
    assert pc.sum(rows["event_count"]).as_py() == events
    ids = detail.refresh().scan(selected_fields=("event_id",)).to_arrow()["event_id"].to_pylist()
    assert len(ids) == len(set(ids)) == events
    result = seqlake(config_path, "fsck")
    assert ": OK:" in result.stdout


def test_a_window_left_out_of_a_merge_stays_publishable(tmp_path: Path) -> None:
    config = make_warehouse(tmp_path, max_runs=1)
    lines = ratings(list(range(6)))
    import_lines(config, tmp_path, "six_hours", lines)

    # Out of order: window 1 waits while 0 and then 2, 3, 4 (one batch) are published and merged.
    seqlake(config, "compact", "--window", str(H0))
    seqlake(config, "compact", *(f"--window={H0 + h}" for h in (2, 3, 4)))
    runs = live_runs(history_tables(load_config(str(config)))[0].refresh())
    held = sorted(w for r in runs.values() for w in r.windows)
    assert held == [H0, H0 + 2, H0 + 3, H0 + 4] and any(r.kind == "merge" for r in runs.values())

    # fsck says which closed window is still unpublished.
    broken = seqlake(config, "fsck", expect=1)
    assert f"closed landing window(s) not published: {H0 + 1}" in broken.stderr

    # The newest window is open (no later record yet), and an unknown window holds nothing.
    refused = seqlake(config, "compact", "--window", str(H0 + 5), expect=1)
    assert f"window {H0 + 5} is still open" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    empty = seqlake(config, "compact", "--window", "123", expect=1)
    assert "window 123 has no records" in empty.stderr

    seqlake(config, "compact", "--end-of-stream")
    again = seqlake(config, "compact", "--window", str(H0 + 1))
    assert f"window {H0 + 1} already published" in again.stdout
    assert_every_event_once(config, len(lines))

    # A changed bucket count would look for users in the wrong files: refused, naming both values.
    changed = yaml.safe_load(config.read_text())
    changed["layout"]["bucket_count"] = 4
    config.write_text(yaml.safe_dump(changed, sort_keys=False))
    for command in (("history", "--user", "1000000001"), ("compact", "--end-of-stream"), ("fsck",)):
        refused = seqlake(config, *command, expect=1)
        assert "bucket(2, user_id)" in refused.stderr and "layout.bucket_count is 4" in refused.stderr


# On the in-process engine: Spark's compaction publishes the same runs from the same plan
# (test_batch_compaction.py::test_a_spark_batch_publishes_what_duckdb_window_by_window_publishes).
@pytest.mark.parametrize("engine", ["duckdb"])
def test_old_events_imported_after_their_windows_were_published_reach_history(tmp_path: Path, engine: str) -> None:
    config = make_warehouse(tmp_path)
    first = ratings([0, 1, 2])
    import_lines(config, tmp_path, "first", first)
    seqlake(config, "compact", "--end-of-stream", "--engine", engine)

    # A second file: events of hours already published, and one of a new hour.
    second = ratings([0, 1], salt=1) + ratings([3], salt=1)
    import_lines(config, tmp_path, "second", second)
    seqlake(config, "compact", "--end-of-stream", "--engine", engine)
    assert_every_event_once(config, len(first) + len(second))


def history_rows(config_path: Path) -> list[dict]:
    history, _ = history_tables(load_config(str(config_path)))
    rows = history.refresh().scan().to_arrow()
    return rows.sort_by([(name, "ascending") for name in STORAGE_ORDER]).to_pylist()


@pytest.mark.spark  # one of the kills is a Spark compaction's
def test_compactions_killed_inside_batches_rerun_to_the_clean_history(tmp_path: Path) -> None:
    """Real kills (SIGKILL) at every commit point inside a backlog's batches, on both engines, each
    followed by the same command again: the history equals a run never killed, every event once,
    fsck clean."""
    lines = ratings(list(range(8)))
    # Two windows per batch: four batches. The engine comes from the configuration's default.
    config = make_warehouse(tmp_path / "lake", compaction_batch_rows=2 * USERS * EVENTS_PER_USER_HOUR + 1)
    import_lines(config, tmp_path, "eight_hours", lines)
    warehouse, pristine = load_config(str(config)).warehouse_path(), tmp_path / "imported"
    shutil.copytree(warehouse, pristine, symlinks=True)
    done = seqlake(config, "compact", "--end-of-stream")
    assert "8 windows in 4 batch(es), duckdb engine" in done.stdout + done.stderr
    clean = history_rows(config)
    # The imported warehouse again, for the killed runs: copied back at the same path (the catalog
    # and the table metadata hold absolute locations).
    shutil.rmtree(warehouse)
    shutil.copytree(pristine, warehouse, symlinks=True)
    killed = config

    # The first kill lands in the second batch; each later one in the first batch still unpublished.
    kills = [
        ("duckdb", "before_write#2"),
        ("duckdb", "after_write"),
        ("duckdb", "after_detail"),
        ("spark", "after_detail"),
        ("duckdb", "after_commit"),
    ]
    for engine, point in kills:
        seqlake(killed, "compact", "--end-of-stream", "--engine", engine, env_extra={KILL_AT_ENV: point}, expect=-9)
    seqlake(killed, "compact", "--end-of-stream")
    assert history_rows(killed) == clean
    assert_every_event_once(killed, len(lines))


@pytest.mark.parametrize("catalog", ["sqlite", "postgresql", "rest"])
def test_racing_compactions_publish_each_window_once(catalog: str, tmp_path: Path, request) -> None:
    # Two writer processes commit through one catalog: the embedded SQLite file, a shared PostgreSQL
    # database (tests/postgres_server.py), as jobs on a cluster would, or Iceberg's REST catalog server
    # (tests/rest_catalog_server.py). In-process jobs: both engines publish through the same commit
    # (seqlake.pipelines.compaction.plan.publish_batch), whose races on Spark
    # tests/pipelines/compaction/test_publication_races.py runs at the worst moments.
    if catalog == "rest":
        server = request.getfixturevalue("rest_catalog_server")
        config = make_warehouse(tmp_path, server.uri, {"catalog_type": "rest", "namespace": "races"}, max_runs=2)
    else:
        catalog_uri = request.getfixturevalue("postgres_catalog_uri") if catalog == "postgresql" else None
        config = make_warehouse(tmp_path, catalog_uri, max_runs=2)
    lines = ratings(list(range(5)))
    import_lines(config, tmp_path, "five_hours", lines)

    env = {k: v for k, v in os.environ.items() if not k.startswith("SEQLAKE_")}
    command = [sys.executable, "-m", "seqlake.cli", "compact", "--config", str(config), "--end-of-stream"]
    jobs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in "ab"]
    for job in jobs:
        _, err = job.communicate()
        assert job.returncode == 0, err
        assert "Traceback" not in err, err
    assert_every_event_once(config, len(lines))

    # A loser leaves no file behind: every data file on disk belongs to some snapshot.
    history, _ = history_tables(load_config(str(config)))
    history.refresh()
    referenced = {  # a REST server may give locations as plain paths
        task.file.file_path.removeprefix("file://")
        for s in history.snapshots()
        for task in history.scan(snapshot_id=s.snapshot_id).plan_files()
    }
    on_disk = {str(p) for p in Path(history.location().removeprefix("file://"), "data").rglob("*.parquet")}
    assert on_disk <= referenced
