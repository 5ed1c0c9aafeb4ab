"""Every job killed (SIGKILL, a real process kill) at each of its commit points, then run again, ends
where a run never killed ends: every table's content (Iceberg and the Delta landing tier) equals the
fault-free run's, the history passes fsck, and `maintain` then leaves no file that nothing references
(what the killed attempt left is removed).

One small warehouse is built once (an import; `seqlake ingest`, Spark-only, killed between its two
appends and run again; some windows published on DuckDB; two capture steps; the samples of one
tenant) and copied back before each case. Jobs run as a user runs them, in subprocesses on the
in-process engine: compaction with merges (and once on Spark, whose files the maintenance that
follows must keep), samples, maintain, forget, a capture step, migrate and import. A soak then
interleaves them with kills (`SEQLAKE_SOAK_STEPS` steps, 10 by default).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.compute as pc
import pytest
import yaml

from seqlake.core.config import Config, load_config
from seqlake.core.forget_key import FORGET_KEY_ENV, forget_key, user_hash
from seqlake.core.payload import named_user_ids
from seqlake.engines.catalog import open_catalog
from seqlake.engines.duckdb_session import lake_cursor
from seqlake.pipelines.compaction.duckdb import compact_batch_duckdb
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.faults import KILL_AT_ENV
from seqlake.pipelines.landing.tables import landing_paths
from seqlake.pipelines.maintenance.steps import maintained_tables, referenced_files, run_maintenance
from seqlake.pipelines.training.rebuild.samples import write_arrow_samples
from seqlake.pipelines.training.sequence import Tenant
from seqlake.tableformat.fsck import fsck_table
from seqlake.tableformat.reader import HistoryReader
from tests import forked_commands
from tests.capture_step import capture_step
from tests.pipelines.compaction.test_no_event_lost import H0, make_warehouse, ratings, seqlake

pytestmark = pytest.mark.spark  # building the warehouse ingests once (the landing tier is Delta)

VOLATILE = ("forget_id", "recorded_at")  # an audit record's id and time differ from run to run
HOURS = 6
PUBLISHED = 3  # windows published when the warehouse is built; the rest wait for `compact`


class Warehouse:
    """A built warehouse and its pristine copy; `reset` puts the copy back (same paths: the catalog
    and the table metadata hold absolute locations)."""

    def __init__(self, root: Path, config_path: Path) -> None:
        self.root, self.config_path = root, config_path
        self.folder = load_config(str(config_path)).warehouse_path()
        self.pristine = root / "pristine"
        shutil.copytree(self.folder, self.pristine, symlinks=True)
        self.clean: dict[str, dict[str, str]] = {}
        self.landed: tuple[int, int] = (0, 0)  # landing rows and distinct event ids after the built ingest
        self.before = contents(self.config)

    @property
    def config(self) -> Config:
        return load_config(str(self.config_path))

    def reset(self) -> None:
        shutil.rmtree(self.folder)
        shutil.copytree(self.pristine, self.folder, symlinks=True)


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Warehouse:
    root = tmp_path_factory.mktemp("faults")
    config_path = make_warehouse(root, max_runs=2, compaction_engine="duckdb", detail_retention_windows=2)
    first = root / "first.dat"
    first.write_text("\n".join(ratings(list(range(HOURS)))) + "\n")
    seqlake(config_path, "import", "--mapping", "movietweetings", "--input", str(first))
    # Ingest is Spark's: killed between its two appends (quarantine, then events), then run again.
    seqlake(config_path, "ingest", expect=-9, env_extra={KILL_AT_ENV: "ingest_quarantined"})
    seqlake(config_path, "ingest")
    config = load_config(str(config_path))
    paths = landing_paths(config)
    with lake_cursor() as con:
        landed = con.execute(
            "SELECT count(*), count(DISTINCT event_id) FROM delta_scan(?)", [paths.events.removeprefix("file://")]
        ).fetchone()
    assert landed is not None  # an aggregate answers one row
    for hour in range(PUBLISHED):  # one run each, not merged yet: the next compaction merges
        compact_batch_duckdb(config, paths, [H0 + hour])
    for step in (1, 2):  # two capture steps: small training files for maintain to rewrite
        assert capture_step(str(config_path), step) > 0
    write_arrow_samples(config, Tenant(config, "retrieval"), compare=False)
    # Another file, for the import case.
    (root / "third.dat").write_text("\n".join(ratings([HOURS + 1], salt=2)) + "\n")
    built = Warehouse(root, config_path)
    built.landed = tuple(landed)
    return built


def contents(config: Config) -> dict[str, str]:
    """A digest of every table's rows, in any order: each Iceberg table of the namespace, and the
    landing tier's events and quarantine."""
    found = {}
    catalog = open_catalog(config)
    for identifier in sorted(catalog.list_tables(config.warehouse.namespace)):
        rows = catalog.load_table(identifier).scan().to_arrow()
        rows = rows.drop_columns([c for c in VOLATILE if c in rows.column_names])
        found[identifier[-1]] = hashlib.sha256("\n".join(sorted(map(repr, rows.to_pylist()))).encode()).hexdigest()
    paths = landing_paths(config)
    with lake_cursor() as con:
        for name, uri in (("landing/events", paths.events), ("landing/quarantine", paths.quarantine)):
            rows = con.execute("SELECT * FROM delta_scan(?)", [uri.removeprefix("file://")]).to_arrow_table()
            found[name] = hashlib.sha256("\n".join(sorted(map(repr, rows.to_pylist()))).encode()).hexdigest()
    return found


def unreferenced(config: Config) -> list[str]:
    """Files under the maintained tables' locations that no snapshot or metadata file references."""
    left = []
    for table in maintained_tables(config):
        root = Path(table.location().removeprefix("file://"))
        keep = referenced_files(table)
        left += [str(p) for p in root.rglob("*") if p.is_file() and str(p) not in keep]
    return left


def migrated_config(warehouse: Warehouse) -> Path:
    """The warehouse's configuration with a column added to a feature group (for `migrate`)."""
    data = yaml.safe_load(warehouse.config_path.read_text())
    data["feature_groups"]["engagement"]["columns"]["rating"] = {"type": "int32", "merge": "max"}
    data["tenants"]["ranking"]["columns"] = list(Tenant(warehouse.config, "ranking").columns)
    path = warehouse.root / "migrated.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


JOBS = {
    "compact and merge": ["compact", "--end-of-stream", "--engine", "duckdb"],
    "compact and merge on spark": ["compact", "--end-of-stream", "--engine", "spark"],
    "samples": ["samples", "--tenant", "ranking"],
    "maintain": ["maintain", "--skip-landing", "--snapshot-retention-hours", "0", "--orphan-safety-hours", "0"],
    "forget": ["forget", "--skip-landing", "--user", "1000000001", "--user", "1000000002", "--by", "dpo"],
    "capture": None,  # python -m tests.capture_step CONFIG 3
    "migrate": ["migrate", "--skip-landing"],
    "import": ["import", "--mapping", "movietweetings", "--input", "{root}/third.dat"],
}
# Compaction's own points are killed in tests/pipelines/compaction/test_no_event_lost.py; here the merge
# that follows it.
CASES = [
    ("compact and merge", "merge_written"),
    # Spark writes the detail table (its metadata spelled file:/...) and the merge run, then is killed.
    ("compact and merge on spark", "merge_written"),
    ("samples", "samples_committed"),  # between the samples table's commit and the quarantine's
    ("maintain", "maintain_rewrote"),
    ("forget", "forget_committed#3"),
    ("capture", "capture_appended"),  # the first tenant's training rows committed, its fat rows not
    ("migrate", "migrate_committed"),
    ("import", "raw_appended"),  # after its one commit: run again, it finds the import done
]


def run(warehouse: Warehouse, job: str, expect: int = 0, kill_at: str | None = None) -> subprocess.CompletedProcess:
    env = {KILL_AT_ENV: kill_at} if kill_at else {}
    if job == "capture":
        command = [sys.executable, "-m", "tests.capture_step", str(warehouse.config_path), "3"]
        base = {k: v for k, v in os.environ.items() if not k.startswith("SEQLAKE_") or k == FORGET_KEY_ENV}
        done = forked_commands.run(command, capture_output=True, text=True, env=base | env)
        assert done.returncode == expect, done.stderr
        return done
    config = migrated_config(warehouse) if job == "migrate" else warehouse.config_path
    arguments = JOBS[job]
    assert arguments is not None  # only capture has no command line
    env[FORGET_KEY_ENV] = os.environ[FORGET_KEY_ENV]  # `seqlake` keeps no SEQLAKE_ variable of its own
    return seqlake(config, *(a.replace("{root}", str(warehouse.root)) for a in arguments), expect=expect, env_extra=env)


# Jobs whose fault-free run leaves what another job's does: compaction on either engine leaves the same
# rows in every table, so Spark's killed run is held to DuckDB's clean one (one Spark process fewer).
SAME_CONTENT_AS = {"compact and merge on spark": "compact and merge"}


def clean_contents(warehouse: Warehouse, job: str) -> dict[str, str]:
    """What the job leaves when nothing kills it (once per job)."""
    job = SAME_CONTENT_AS.get(job, job)
    if job not in warehouse.clean:
        warehouse.reset()
        run(warehouse, job)
        warehouse.clean[job] = contents(warehouse.config)
    return warehouse.clean[job]


@pytest.mark.parametrize(("job", "point"), CASES, ids=[f"{job}@{point}" for job, point in CASES])
def test_a_job_killed_at_a_commit_point_reruns_to_the_fault_free_content(warehouse, job, point) -> None:
    expected = clean_contents(warehouse, job)
    warehouse.reset()
    run(warehouse, job, expect=-9, kill_at=point)
    rerun = run(warehouse, job)
    # Spark's own log lines (its start-up, its WARNs) are not a user's to act on: the default hides them.
    assert "log4j" not in rerun.stderr and not re.search(r"^\S+ \S+ WARN ", rerun.stderr, re.M), rerun.stderr
    config = load_config(str(migrated_config(warehouse) if job == "migrate" else warehouse.config_path))
    assert contents(config) == expected
    assert expected != warehouse.before or job == "maintain"  # the job changed something: the test could fail
    history, _ = history_tables(config)
    fsck_table(history.refresh())
    # Then maintenance, with every snapshot but the newest expired (detail rows kept: here it only
    # removes files): no file that nothing references is left, and every row is.
    spec = config.maintenance.model_copy(update={"snapshot_retention_hours": 0, "orphan_safety_hours": 0})
    layout = config.layout.model_copy(update={"detail_retention_windows": 10**6})
    raw_before = raw_records(config)
    run_maintenance(config.model_copy(update={"maintenance": spec, "layout": layout}))
    assert unreferenced(config) == []
    after = contents(config)
    if job == "forget":  # maintenance rewrites the raw source without the forgotten users' records
        forgotten = {int(a) for a in JOBS["forget"] or () if a.isdigit()}
        kept = [r for r in raw_before if not named_user_ids(r["payload"]) & forgotten]
        assert len(kept) < len(raw_before) and sorted(map(repr, raw_records(config))) == sorted(map(repr, kept))
        after, expected = ({k: v for k, v in d.items() if k != "raw_events"} for d in (after, expected))
    assert after == expected


def raw_records(config: Config) -> list[dict]:
    return open_catalog(config).load_table(f"{config.warehouse.namespace}.raw_events").scan().to_arrow().to_pylist()


def test_ingest_killed_between_its_two_appends_lands_each_record_once(warehouse) -> None:
    # The warehouse's own ingest was killed after its quarantine append and run again (the fixture).
    assert warehouse.landed == (len(ratings(list(range(HOURS)))),) * 2


def test_forget_is_audited_once_with_who_what_when_and_the_rows_of_each_table_even_when_killed(warehouse) -> None:
    from seqlake.pipelines.forget.audit import AUDIT
    from seqlake.pipelines.forget.remove import tables_with_users, user_rows

    warehouse.reset()
    config = warehouse.config
    users = [1000000001, 1000000002]
    history, _ = history_tables(config)
    held = {t.name()[-1]: user_rows(t, users) for t in [history, *tables_with_users(config)]}
    held = {name: rows for name, rows in held.items() if rows}
    assert len(held) >= 4  # history, detail, training and fat-row tables hold them
    run(warehouse, "forget", expect=-9, kill_at="forget_committed#2")
    run(warehouse, "forget")
    audit = open_catalog(config).load_table(f"{config.warehouse.namespace}.{AUDIT}").scan().to_arrow().to_pylist()
    assert {r["forget_id"] for r in audit} == {audit[0]["forget_id"]}  # one request, resumed, not two
    started = {r["table_name"]: r["rows_removed"] for r in audit if r["status"] == "started"}
    [done] = [r for r in audit if r["status"] == "done"]
    assert started == held and done["rows_removed"] == sum(held.values())
    # The users by keyed hash only: the audit names nobody in clear (issue 44).
    hashes = [user_hash(forget_key() or b"", u) for u in users]
    assert all(r["requested_by"] == "dpo" and r["users"] == [] and r["user_hashes"] == hashes for r in audit)
    assert done["recorded_at"] >= max(r["recorded_at"] for r in audit if r["status"] == "started")
    # A second request for the same users finds nothing left, and is recorded as such.
    run(warehouse, "forget")
    audit = open_catalog(config).load_table(f"{config.warehouse.namespace}.{AUDIT}").scan().to_arrow().to_pylist()
    assert len({r["forget_id"] for r in audit}) == 2
    assert sum(r["rows_removed"] for r in audit if r["status"] == "done") == sum(held.values())


# -- soak -------------------------------------------------------------------------------------------

SOAK_STEPS = int(os.environ.get("SEQLAKE_SOAK_STEPS", "10"))  # set higher for the long soak
OPERATIONS = {
    "compact": ("before_write", "after_write", "after_detail", "after_commit", "merge_written", "merge_committed"),
    "capture": ("capture_appended", "capture_appended#2", "capture_appended#4"),
    "samples": ("samples_written", "samples_committed"),
    "maintain": ("maintain_step", "maintain_rewrote", "maintain_step#6"),
    "forget": ("forget_audited", "forget_written", "forget_committed#2"),
}


def _operate(config_path: str, operation: str, argument: int, kill_at: str | None) -> None:
    """One job of the soak, in a forked process (what a SIGKILL there kills)."""
    if kill_at:
        os.environ[KILL_AT_ENV] = kill_at
    config = load_config(config_path)
    if operation == "compact":  # window `argument` (a no-op once published), then the merge policy
        from seqlake.pipelines.compaction.duckdb import merge_runs_if_needed_duckdb

        compact_batch_duckdb(config, landing_paths(config), [argument])
        merge_runs_if_needed_duckdb(config)
    elif operation == "capture":
        capture_step(config_path, argument)
    elif operation == "samples":
        write_arrow_samples(config, Tenant(config, ("retrieval", "ranking")[argument % 2]), compare=False)
    elif operation == "maintain":
        spec = config.maintenance.model_copy(update={"snapshot_retention_hours": 0, "orphan_safety_hours": 0})
        run_maintenance(config.model_copy(update={"maintenance": spec}))
    elif operation == "forget":
        from seqlake.pipelines.forget.remove import forget_users

        forget_users(config, [1_000_000_000 + argument])


def soak_plan(seed: int, steps: int) -> list[tuple[str, int, str | None]]:
    """(operation, argument, kill point or None) for each step: every job once per round of five, in a
    random order, every other step killed at one of the job's commit points and run again."""
    import random

    rng = random.Random(seed)
    plan: list[tuple[str, int, str | None]] = []
    capture, window = 2, H0 + PUBLISHED - 1
    operations: list[str] = []
    while len(operations) < steps:
        operations += rng.sample(sorted(OPERATIONS), len(OPERATIONS))
    for step, operation in enumerate(operations[:steps]):
        if operation == "capture":
            capture += 1
        if operation == "compact":
            window = min(window + 1, H0 + HOURS - 1)  # the windows left to publish, in order
        argument = {"capture": capture, "compact": window}.get(operation, rng.randint(1, 12))
        kill = rng.choice(OPERATIONS[operation]) if step % 2 == 0 else None
        plan.append((operation, argument, kill))
    return plan


def test_soak_interleaving_every_job_with_kills_ends_as_a_run_without_them(warehouse) -> None:
    """Compaction and merges, captures, samples, maintenance and forget in a random order, some killed
    at a commit point and run again, the history read back after each step: at the end every table
    holds what the same steps without kills leave, and storage holds live files only."""
    import multiprocessing

    from seqlake.pipelines.forget.remove import tables_with_users

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["tests.end_to_end.test_faults_in_every_job"])
    plan = soak_plan(seed=13, steps=SOAK_STEPS)
    assert any(kill for _, _, kill in plan) and {op for op, _, _ in plan} == set(OPERATIONS)

    def execute(kills: bool) -> dict[str, str]:
        warehouse.reset()
        for operation, argument, kill in plan:
            for kill_at in ([kill] if kills and kill else []) + [None]:
                child = context.Process(
                    target=_operate, args=(str(warehouse.config_path), operation, argument, kill_at)
                )
                child.start()
                child.join()
                assert child.exitcode in ((-9, 0) if kill_at else (0,)), (operation, kill_at, child.exitcode)
            # Readers see complete snapshots: every live row once, through seqlake's reader.
            config = warehouse.config
            history, _ = history_tables(config)
            stored = history.refresh().scan().to_arrow()
            users = pc.unique(stored["user_id"]).to_pylist()
            read = sum(t.num_rows for t in HistoryReader(history).read_users(users).values())
            assert read == stored.num_rows
        config = warehouse.config
        fsck_table(history_tables(config)[0].refresh())
        spec = config.maintenance.model_copy(update={"snapshot_retention_hours": 0, "orphan_safety_hours": 0})
        layout = config.layout.model_copy(update={"detail_retention_windows": 10**6})
        run_maintenance(config.model_copy(update={"maintenance": spec, "layout": layout}))
        assert unreferenced(config) == []  # storage: live files only
        assert tables_with_users(config)
        return contents(config)

    assert execute(kills=True) == execute(kills=False)
