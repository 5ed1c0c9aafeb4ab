"""The built wheel on its own: installed into a fresh virtual environment outside the checkout, it
writes a starter configuration, runs the small demo and reads a history, with no file of the checkout
on its path and without the extras: the small demo needs no JVM.

The fresh environment gets seqlake from the wheel only; its dependencies come from this test's
environment through a .pth line naming that site-packages folder (the .pth files in that folder are
not processed, so an editable install of the checkout there stays invisible), with pyspark and
delta-spark made unimportable, as in a base install (`pip install seqlake`). Nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT

REPO = REPO_ROOT
# What a build does not need (and what a developer's checkout may hold besides the sources).
NOT_SOURCES = shutil.ignore_patterns(
    ".git", ".venv", ".jars", "warehouse", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"
)


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(map(str, args))} exited {done.returncode}:\n{done.stderr[-4000:]}"
    return done


def _clean_env() -> dict[str, str]:
    # No path to the checkout and no interpreter of this environment may leak into the fresh one.
    drop = ("PYTHONPATH", "PYTHONHOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")
    return {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("SEQLAKE_")}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """seqlake's wheel, built offline with this environment's setuptools from a copy of the sources."""
    root = tmp_path_factory.mktemp("wheel")
    sources = root / "src"
    shutil.copytree(REPO, sources, symlinks=True, ignore=NOT_SOURCES)
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"]
    _run([*build, "--wheel-dir", str(root / "dist"), str(sources)], root, _clean_env())
    (built,) = (root / "dist").glob("seqlake-*.whl")
    return built


@pytest.fixture(scope="module")
def fresh_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtual environment holding the wheel; its dependencies are this environment's."""
    venv = tmp_path_factory.mktemp("venv") / "fresh"
    env = _clean_env()
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], venv.parent, env)
    python = venv / "bin" / "python"
    site = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], venv.parent, env)
    shared = sysconfig.get_paths()["purelib"]
    (Path(site.stdout.strip()) / "shared_dependencies.pth").write_text(shared + "\n")
    # The base install: the extras' Spark packages are there for this environment, not for the fresh one.
    blocked = "import sys; sys.modules.update(pyspark=None, delta=None)\n"
    (Path(site.stdout.strip()) / "no_extras.pth").write_text(blocked)
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index"]
    _run([*install, str(wheel)], venv.parent, env)
    return venv


def test_the_wheel_installs_only_seqlake_ships_its_data_and_sees_no_checkout(fresh_venv: Path, tmp_path: Path):
    python = str(fresh_venv / "bin" / "python")
    site = Path(
        _run(
            [python, "-c", "import seqlake, os; print(os.path.dirname(os.path.dirname(seqlake.__file__)))"],
            tmp_path,
            _clean_env(),
        ).stdout.strip()
    )
    # One namespace: nothing in site-packages but seqlake and its .dist-info (and this test's two .pth lines).
    installed = sorted(p.name for p in site.iterdir() if p.suffix != ".pth" and p.name != "__pycache__")
    assert installed == ["seqlake", "seqlake-0.1.0.dist-info"], installed
    probe = (
        "import importlib.util, json, os, sys, seqlake, seqlake.tableformat, seqlake.pipelines, seqlake.jobs; "
        "from seqlake.core import resources; "
        "print(json.dumps({'modules': [m.__file__ for m in (seqlake, seqlake.tableformat, seqlake.pipelines, "
        "seqlake.jobs)], 'path': [os.path.realpath(p) for p in sys.path], "
        "'top_level': {name: importlib.util.find_spec(name) is not None "
        "for name in ('tableformat', 'pipelines', 'jobs', 'benchmarks')}, "
        "'spec': len(resources.spec().read_text()), "
        "'sql': sorted(p.name for p in resources.sql_dir().iterdir())}))"
    )
    facts = json.loads(_run([python, "-c", probe], tmp_path, _clean_env()).stdout)
    for module in facts["modules"]:
        assert module.startswith(str(fresh_venv)), module
    # No generic top-level package: a user's own pipelines/ or jobs/ folder cannot collide with seqlake's.
    assert facts["top_level"] == {"tableformat": False, "pipelines": False, "jobs": False, "benchmarks": False}
    # The shared dependencies may live in the checkout's .venv; the checkout itself is not on the path.
    assert str(REPO.resolve()) not in facts["path"]
    assert facts["spec"] == len((REPO / "tableformat" / "SPEC.md").read_text())
    assert "history.sql" in facts["sql"]
    # The benchmarks are not in the wheel: no bench-* command.
    listed = _run([str(fresh_venv / "bin" / "seqlake"), "--help"], tmp_path, _clean_env()).stdout
    assert "history" in listed and "bench-" not in listed


def test_init_demo_and_history_from_the_installed_wheel(fresh_venv: Path, tmp_path: Path):
    seqlake = str(fresh_venv / "bin" / "seqlake")
    env = _clean_env()
    work = tmp_path / "project"
    work.mkdir()

    _run([seqlake, "init"], work, env)
    assert (work / "seqlake.yaml").is_file() and (work / "mappings" / "otto.yaml").is_file()

    printed = json.loads(_run([seqlake, "demo", "--small", "--output", "json"], work, env).stdout)
    report = json.loads((work / "warehouse" / "report.json").read_text())  # ./seqlake.yaml's warehouse
    assert printed == {**report, "report_path": f"file://{work / 'warehouse'}/report.json"}
    assert report["fsck"]["ok"] is True
    assert report["compaction"]["events_compacted"] == report["generated"]["events"] > 0
    # Each step says how fast it went: its seconds and count give back its rate.
    for step, unit, count in (
        ("generated", "records", "records"),
        ("ingest", "records", "records"),
        ("compaction", "events", "events_compacted"),
    ):
        # The rate comes from the unrounded seconds; the report rounds seconds to 0.01.
        seconds, done = report[step]["seconds"], report[step][count]
        assert done / (seconds + 0.005) - 1 <= report[step][f"{unit}_per_second"] <= done / (seconds - 0.005) + 1, step
    # The heaviest user's history holds each of their events once.
    assert report["read"]["events"] == report["generated"]["max_history_length"]

    user = report["read"]["user"]
    rows = json.loads(_run([seqlake, "history", "--user", str(user), "--output", "json"], work, env).stdout)["rows"]
    assert len(rows) == report["read"]["rows"] > 0
    assert {row["user_id"] for row in rows} == {user}

    # The packaged SQL loads against the demo's warehouse.
    query = "SELECT count(*) AS n FROM history"
    counted = _run([seqlake, "sql", "--quiet", "--output", "json", "--query", query], work, env).stdout
    assert json.loads(counted)["results"][0]["rows"] == [{"n": report["compaction"]["history_rows"]}]
