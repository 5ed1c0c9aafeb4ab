"""`forget` removes every row of some users from every table that holds them, in one commit per
table, keeps the history's format invariants, and, after `maintain`, leaves none of their bytes in
any data file on disk. Run again it is a no-op; killed half way and run again it ends in the same state."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml

import seqlake
from seqlake.cli import main as cli_main
from seqlake.core.config import DEFAULT_CONFIG_PATH, load_config
from seqlake.core.errors import SeqlakeError, SetupError
from seqlake.core.events import RAW_SCHEMA
from seqlake.core.forget_key import FORGET_KEY_ENV
from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.engines.duckdb_session import lake_cursor
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.compaction.quarantine import compaction_quarantine_schema, compaction_quarantine_table
from seqlake.pipelines.demo.full import RAW_TABLE
from seqlake.pipelines.faults import KILL_AT_ENV
from seqlake.pipelines.forget.landing import forget_landing, landing_rows
from seqlake.pipelines.forget.remove import forget_users, tables_with_users, user_rows
from seqlake.pipelines.ingest.raw_source import land_raw_records
from seqlake.pipelines.landing.tables import LandingPaths, LandingTier
from seqlake.pipelines.maintenance.steps import run_maintenance, vacuum_landing
from seqlake.pipelines.training.capture.online_view import ViewSnapshot
from seqlake.pipelines.training.capture.pointers import Request, capture_requests, fat_rows, training_rows
from seqlake.pipelines.training.rebuild.samples import write_arrow_samples
from seqlake.pipelines.training.sequence import tenants
from seqlake.pipelines.training.tables import (
    QUARANTINE,
    QUARANTINE_SCHEMA,
    create_bucketed_table,
    fatrow_table_name,
    sequence_table_schema,
    training_schema,
    training_table_name,
)
from seqlake.tableformat.fsck import fsck_table
from seqlake.tableformat.reader import HistoryReader
from seqlake.tableformat.registry import live_runs, published_windows
from tests import forked_commands
from tests.conftest import make_config
from tests.pipelines.compaction.test_publication_races import deliver, new_lake
from tests.tableformat.test_durable_state import compact_closed

pytestmark = pytest.mark.spark


def build(spark, lake_config):
    """A small lake with every kind of table: landing and its quarantine, history runs (merged and
    not), detail, a compaction quarantine, both tenants' training and fat-row tables (real captures),
    their samples tables and the samples quarantine. Returns (lake, the users to forget)."""
    lake = new_lake(lake_config, max_runs=2)
    lake.chunks = [pa.concat_tables(lake.chunks)]  # one source commit, one ingest step: faster
    deliver(lake)
    compact_closed(lake, end_of_stream=True)
    config = lake.config
    history, detail = history_tables(config)
    users = sorted(set(history.refresh().scan(selected_fields=("user_id",)).to_arrow()["user_id"].to_pylist()))
    doomed = users[:2]
    now = datetime.now(UTC)
    requests = [Request(f"r{u}-{k}", u, now, k == 0, 5, "feed", now.hour) for u in users[:5] for k in range(2)]
    with ViewSnapshot(config, history, detail, lake.paths) as view:
        reader = HistoryReader(history)
        for tenant in tenants(config):
            captures = capture_requests(view, reader, tenant, requests, config.training.fragment_events)
            create_bucketed_table(config, training_table_name(tenant), training_schema(tenant)).append(
                training_rows(captures, tenant)
            )
            create_bucketed_table(config, fatrow_table_name(tenant), sequence_table_schema(tenant)).append(
                fat_rows(captures, tenant)
            )
    for tenant in tenants(config):
        assert write_arrow_samples(config, tenant, "lsn", compare=False).samples > 0
    # Quarantines hold rows of the users too: a checksum mismatch, an aggregate that did not fit.
    mismatch: dict[str, str | int] = {
        "tenant": "ranking",
        "engine": "duckdb/lsn",
        "reason": "checksum",
        "expected_checksum": "a",
    }
    mismatch |= {"actual_checksum": "b", "expected_length": 3, "actual_length": 2}
    quarantined = [{**mismatch, "request_id": f"q{u}", "user_id": u} for u in (doomed[0], users[3])]
    create_bucketed_table(config, QUARANTINE, QUARANTINE_SCHEMA).append(
        pa.Table.from_pylist(quarantined, schema=QUARANTINE_SCHEMA)
    )
    events = detail.refresh().scan().to_arrow()
    overflow = events.filter(pc.is_in(events["user_id"], pa.array([doomed[1], users[4]])))
    overflow = overflow.append_column("reason", pa.array(["aggregate_out_of_range:x"] * overflow.num_rows))
    schema = compaction_quarantine_schema(config)
    compaction_quarantine_table(config).append(overflow.select(schema.names).cast(schema))
    return lake, doomed


def table_contents(lake, leaving_out: Sequence[int] = ()) -> dict[str, str]:
    """A digest of the rows (in any order) of every table holding users, history included; with
    `leaving_out`, of what each must hold once those users are forgotten."""
    history, _ = history_tables(lake.config)
    found = {}
    for table in [history.refresh(), *tables_with_users(lake.config)]:
        rows = table.scan().to_arrow()
        rows = rows.filter(pc.invert(pc.is_in(rows["user_id"], pa.array(leaving_out, pa.int64()))))
        text = "\n".join(sorted(repr(row) for row in rows.to_pylist()))
        found[table.name()[-1]] = hashlib.sha256(text.encode()).hexdigest()
    return found


def parquet_files(root: Path, leaving_out: tuple[str, ...] = ()) -> list[Path]:
    """Every Parquet data file under `root`, live or not (Iceberg data folders, Delta tables), but the
    Delta logs' checkpoints and the folders named in `leaving_out`."""
    return [p for p in root.rglob("*.parquet") if "_delta_log" not in p.parts and not set(leaving_out) & set(p.parts)]


def users_on_disk(roots: list[Path], users: list[int], leaving_out: tuple[str, ...] = ()) -> dict[str, int]:
    """Rows of the users in every Parquet data file under the roots, live or not: by `user_id`, or by a
    raw payload naming them (`"user_id": U` in its JSON, spaced or not, quoted or not)."""
    found = {}
    wanted = pa.array(users, pa.int64())
    named = "|".join(str(int(u)) for u in users)
    pattern = rf'"user_id"\s*:\s*"?({named})"?\s*[,}}]'
    for root in roots:
        for path in parquet_files(root, leaving_out):
            rows = pq.read_table(path)
            hits = 0
            if "user_id" in rows.schema.names:
                hits += pc.sum(pc.is_in(rows["user_id"], value_set=wanted)).as_py() or 0
            if "payload" in rows.schema.names:
                # delta-rs's rewrites (an in-process forget) store strings as Arrow string views
                payloads = rows["payload"].cast(pa.string())
                hits += pc.sum(pc.match_substring_regex(payloads, pattern)).as_py() or 0
            if hits:
                found[str(path)] = hits
    return found


def landing_contents(paths: LandingPaths) -> dict[str, str]:
    """A digest of each landing table's rows, in any order."""
    found = {}
    with lake_cursor() as con:
        for name, uri in (("events", paths.events), ("quarantine", paths.quarantine)):
            rows = con.execute("SELECT * FROM delta_scan(?)", [uri.removeprefix("file://")]).to_arrow_table()
            text = "\n".join(sorted(repr(row) for row in rows.to_pylist()))
            found[name] = hashlib.sha256(text.encode()).hexdigest()
    return found


def commits(tables) -> dict[str, int]:
    """Commits per table: each writes one metadata file (a commit may hold several snapshots)."""
    return {t.name()[-1]: len(t.refresh().metadata.metadata_log) for t in tables}


def landing_count(lake, users: list[int]) -> int:
    with lake_cursor() as con:
        found = con.execute(
            "SELECT count(*) FROM delta_scan(?) WHERE list_contains(?, user_id)",
            [lake.paths.events.removeprefix("file://"), users],
        ).fetchone()
    assert found is not None  # an aggregate answers one row
    return found[0]


def forget_command(lake, tmp_path: Path, users: list[int]) -> tuple[list[str], dict[str, str]]:
    """`seqlake forget` of the users on the lake's Iceberg tables (its landing tier is elsewhere)."""
    config_file = tmp_path / "seqlake.yaml"
    config_file.write_text(yaml.safe_dump(lake.config.model_dump(mode="json"), sort_keys=False))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEQLAKE_") or k == FORGET_KEY_ENV}
    chosen = [arg for u in users for arg in ("--user", str(u))]
    return [sys.executable, "-m", "seqlake.cli", "forget", "--config", str(config_file), "--skip-landing", *chosen], env


def test_forget_removes_the_users_everywhere_even_when_killed_then_maintain_removes_their_bytes(
    spark, lake_config, tmp_path: Path
) -> None:
    lake, doomed = build(spark, lake_config)
    config = lake.config
    history, _ = history_tables(config)
    runs, windows = live_runs(history.refresh()), published_windows(history)
    expected = table_contents(lake, doomed)
    tables = [history, *tables_with_users(config)]
    held = {t.name()[-1]: user_rows(t, doomed) for t in tables}
    landed = landing_count(lake, doomed)
    # The generated stream quarantines some records, and some of them may name the users: forget removes those too.
    quarantined = landing_rows(LandingTier(lake.paths, spark), doomed) - landed
    in_landing = {"landing/events": landed} | ({"landing/quarantine": quarantined} if quarantined else {})
    # Every kind of table holds the users before: the test could fail.
    assert landed > 0 and all(held.values()), held
    assert {"history", "history_detail", "compaction_quarantine", QUARANTINE} <= held.keys()
    assert {f"{kind}_{t.name}" for t in tenants(config) for kind in ("training", "fatrow", "samples")} <= held.keys()
    before = commits(tables)

    # Killed (SIGKILL) after writing the new history files (nothing committed), then after two tables'
    # commits; then run to the end.
    command, env = forget_command(lake, tmp_path, [doomed[1], doomed[0], doomed[0]])
    for point in ("forget_written", "forget_committed#2"):
        killed = forked_commands.run(command, capture_output=True, text=True, env=env | {KILL_AT_ENV: point})
        assert killed.returncode == -9, killed.stderr
    assert 0 < sum(user_rows(t, doomed) for t in tables) < sum(held.values())  # half done
    done = forked_commands.run(command, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    printed = {line.split(": ")[1] for line in done.stdout.splitlines() if ": removed " in line}
    assert printed == set(held) | {"forget_audit"} and "none left in the tables searched" in done.stdout

    # Every table holds what it held without the users' rows, in one commit per table, killed or not;
    # the runs keep their windows and the history stays a valid seqlake table.
    assert table_contents(lake) == expected
    assert commits(tables) == {name: count + 1 for name, count in before.items()}
    assert list(live_runs(history.refresh())) == list(runs) and published_windows(history) == windows
    fsck_table(history)
    for user in doomed:
        assert HistoryReader(history).read_user(user).num_rows == 0

    # With the landing tier, in-process: only the landing tier still holds them; every table records
    # the request (a job that read the landing rows meanwhile must drop them): one commit each. Delta's
    # own DELETE on Spark, on a copy of the landing tier, leaves the same rows.
    copy = tmp_path / "landing-copy"
    shutil.copytree(Path(lake.paths.root.removeprefix("file://")), copy)
    on_spark = LandingPaths(events=f"{copy.as_uri()}/events", quarantine=f"{copy.as_uri()}/quarantine")
    spark_reports = forget_landing(LandingTier(on_spark, spark), doomed)
    in_process = LandingTier(lake.paths)
    reports = forget_users(config, doomed, landing=in_process)
    assert {r.target: r.removed for r in reports if r.removed} == in_landing
    assert {r.target: r.removed for r in spark_reports if r.removed} == in_landing
    assert landing_rows(in_process, doomed) == landing_rows(LandingTier(on_spark, spark), doomed) == 0
    assert landing_contents(lake.paths) == landing_contents(on_spark)
    assert commits(tables) == {name: count + 2 for name, count in before.items()}
    # Again: nothing to remove, nothing to record (a finished forget lists them), no commit anywhere.
    assert sum(r.removed for r in forget_users(config, doomed, landing=in_process)) == 0
    assert commits(tables) == {name: count + 2 for name, count in before.items()}

    # Still on disk: old snapshots reference the replaced files. `maintain` then removes them, whatever
    # maintenance.keep_snapshots keeps: no snapshot from before the forget stays.
    roots = [Path(t.location().removeprefix("file://")) for t in tables]
    roots.append(Path(lake.paths.events.removeprefix("file://")).parent)
    assert users_on_disk(roots, doomed)
    assert config.maintenance.keep_snapshots > 1
    spec = config.maintenance.model_copy(update={"snapshot_retention_hours": 0})
    run_maintenance(config.model_copy(update={"maintenance": spec}), now=datetime.now(UTC) + timedelta(days=2))
    vacuum_landing(in_process, timedelta(0))
    assert users_on_disk(roots, doomed) == {}
    assert table_contents(lake) == expected
    fsck_table(history_tables(config)[0])


@pytest.fixture(scope="module")
def small_demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """`seqlake demo --small` on the packaged configuration, run once for the module: its configuration
    file and a pristine copy of its warehouse."""
    root = tmp_path_factory.mktemp("small_demo")
    config = root / "seqlake.yaml"
    packaged = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())  # the small demo's own data, as a user runs it
    packaged["warehouse"] = {**packaged["warehouse"], "path": str(root / "warehouse")}
    # The base install's engines, as `seqlake init` writes them without pyspark: forget and maintain
    # change the landing tier in-process (Spark's DELETE: test_forget_removes_the_users_everywhere...).
    packaged["layout"] |= {"ingest_engine": "duckdb", "compaction_engine": "duckdb"}
    config.write_text(yaml.safe_dump(packaged, sort_keys=False))
    assert cli_main(["demo", "--config", str(config), "--small"]) == 0
    shutil.copytree(root / "warehouse", root / "pristine", symlinks=True)
    return config, root / "pristine"


@pytest.fixture
def demo_config(small_demo: tuple[Path, Path]) -> Path:
    """The small demo's configuration, its warehouse as the demo left it (copied back at the same path:
    the catalog holds absolute locations)."""
    config, pristine = small_demo
    warehouse = config.parent / "warehouse"
    shutil.rmtree(warehouse)
    shutil.copytree(pristine, warehouse, symlinks=True)
    return config


def seqlake_process(config: Path, *args: str) -> str:
    """A seqlake command in its own process, as a user runs it; stdout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEQLAKE_") or k == FORGET_KEY_ENV}
    done = forked_commands.run(
        [sys.executable, "-m", "seqlake.cli", args[0], "--config", str(config), *args[1:]],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, f"seqlake {' '.join(args)}: {done.stderr}"
    return done.stdout


def test_after_forget_and_the_documented_maintain_no_parquet_file_on_disk_holds_the_users(demo_config: Path) -> None:
    """The commands a user runs on the small demo's warehouse: every Parquet file left under it (Iceberg
    data folders and the landing tier's Delta tables, live or not) is read; none holds a row of the
    forgotten user. The raw source table, a message log's stand-in, forgets by its own retention."""
    warehouse = demo_config.parent / "warehouse"
    user = [1_000_000]
    raw = ("raw_events",)
    on_disk = users_on_disk([warehouse], user, leaving_out=raw)
    assert on_disk and any("landing" in path for path in on_disk)  # the test could fail
    assert users_on_disk([warehouse / "seqlake" / raw[0]], user)  # the log keeps them, and the scan sees them
    seqlake_process(demo_config, "forget", "--user", str(user[0]))
    assert users_on_disk([warehouse], user, leaving_out=raw)  # old snapshots still reference the files
    hours = ("--snapshot-retention-hours", "--orphan-safety-hours", "--landing-retention-hours")
    seqlake_process(demo_config, "maintain", *(arg for option in hours for arg in (option, "0")))
    assert users_on_disk([warehouse], user, leaving_out=raw) == {}
    checked = seqlake_process(demo_config, "fsck")
    assert "OK" in checked


def test_fsck_reports_rows_a_forget_left_with_the_command_that_removes_them(demo_config: Path, capsys) -> None:
    """A forget that leaves the landing tier (`--skip-landing`), then a rebuild of history from the
    landing tier, brings the user's old events back: fsck names each table holding them and the
    command that removes them; run, fsck is clean. Events of the user that arrive after the forget are
    new data, and fsck leaves them alone."""
    config = demo_config

    def run(*args: str, expect: int = 0) -> subprocess.CompletedProcess:
        """In this process: none of these commands starts Spark."""
        status = cli_main([args[0], "--config", str(config), *args[1:]])
        printed = capsys.readouterr()
        assert status == expect, f"seqlake {' '.join(args)}: {printed.err}"
        return subprocess.CompletedProcess(args, status, printed.out, printed.err)

    user = 1_000_000
    run("forget", "--skip-landing", "--user", str(user))

    def found() -> tuple[set[str], list[str]]:
        lines = [line for line in run("fsck", expect=1).stderr.splitlines() if "[forgotten-user]" in line]
        return {line.split(": ")[2] for line in lines}, lines

    assert found()[0] <= {"landing/events", "landing/quarantine"}  # what --skip-landing left
    history, _ = history_tables(load_config(str(config)))
    for run_id in live_runs(history):
        run("drop-run", "--run", run_id)
    run("compact", "--end-of-stream", "--engine", "duckdb")
    tables, broken = found()
    assert {"seqlake.history", "seqlake.history_detail", "landing/events"} <= tables, broken
    assert tables <= {"seqlake.history", "seqlake.history_detail", "landing/events", "landing/quarantine"}
    command = broken[0].split("remove them: ")[1]
    assert command == f"seqlake forget --config {config} --user {user}"
    seqlake_process(config, *command.split()[1:])  # the landing tier too
    assert "OK" in run("fsck").stdout
    assert user_rows(history_tables(load_config(str(config)))[0], [user]) == 0

    # New events of the user, after the forget: new data, not a finding.
    events = [
        {
            "source_partition": 9,
            "lsn": n,
            "arrival_ts": datetime.now(UTC),
            "payload": json.dumps(
                {
                    "event_id": f"late-{n}",
                    "user_id": user,
                    "feature_group": "engagement",
                    "event_ts": int(datetime.now(UTC).timestamp() * 1000),
                    "item_id": n,
                    "action_flags": 1,
                }
            ),
        }
        for n in range(3)
    ]
    loaded = load_config(str(config))
    raw = open_catalog(loaded).load_table(table_identifier(loaded, RAW_TABLE))
    land_raw_records(raw, pa.Table.from_pylist(events, schema=RAW_SCHEMA).to_batches())
    run("ingest", "--engine", "duckdb")
    run("compact", "--end-of-stream", "--engine", "duckdb")
    assert user_rows(history_tables(loaded)[0], [user]) > 0
    assert "OK" in run("fsck").stdout


def test_forget_needs_a_user_and_a_warehouse(tmp_path: Path) -> None:
    config = make_config(tmp_path / "nowhere")
    with pytest.raises(SetupError, match="no warehouse at"):
        seqlake.open(config).forget([1])
    with pytest.raises(SeqlakeError, match="at least one user id"):
        forget_users(config, [])
    assert not (tmp_path / "nowhere").exists()
