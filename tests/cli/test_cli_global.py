"""Options before the command (`seqlake --config FILE COMMAND`), `python -m seqlake` and typo suggestions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from seqlake import __version__
from tests import forked_commands
from tests.facade.test_sql import USER_ROWS, build_small_warehouse
from tests.paths import REPO_ROOT

REPO = REPO_ROOT
COUNT = "SELECT count(*) AS n FROM history"


def seqlake(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`python -m seqlake ARGS` in `cwd`, with this checkout's code and no SEQLAKE_* variable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEQLAKE_")}
    env["PYTHONPATH"] = str(REPO)
    return forked_commands.run(
        [sys.executable, "-m", "seqlake", *args], capture_output=True, text=True, cwd=cwd, env=env
    )


@pytest.fixture(scope="module")
def config_file(tmp_path_factory) -> Path:
    small = build_small_warehouse(tmp_path_factory.mktemp("global") / "warehouse")
    path = small.config.warehouse_path().parent / "lake.yaml"
    path.write_text(yaml.safe_dump(small.config.model_dump(mode="json"), sort_keys=False))
    return path


def test_python_dash_m_seqlake_is_the_command(tmp_path):
    done = seqlake("--version", cwd=tmp_path)
    assert (done.returncode, done.stdout.strip()) == (0, f"seqlake {__version__}")
    assert "history" in seqlake("--help", cwd=tmp_path).stdout


def test_config_before_the_command_reaches_the_job(config_file, tmp_path):
    done = seqlake("--config", str(config_file), "sql", "--quiet", "--output", "json", "--query", COUNT, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["results"][0]["rows"] == [{"n": sum(USER_ROWS.values())}]
    done = seqlake(f"--config={config_file}", "history", "--user", "33", "--output", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["rows"]) == USER_ROWS[33]
    # Without it, the packaged default's warehouse (here: none) is used: the option did the work.
    bare = seqlake("sql", "--quiet", "--query", COUNT, cwd=tmp_path)
    assert bare.returncode == 1 and f"no warehouse at {tmp_path / 'warehouse'}" in bare.stderr
    assert not (tmp_path / "warehouse").exists()


def test_the_commands_own_config_wins_and_a_missing_file_is_one_line(config_file, tmp_path):
    missing = tmp_path / "missing.yaml"
    done = seqlake(
        "--config", str(missing), "sql", "--config", str(config_file), "--quiet", "--query", COUNT, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    failed = seqlake("--config", "missing.yaml", "history", "--user", "1", cwd=tmp_path)
    assert failed.returncode == 2
    assert failed.stderr.splitlines() == [
        f"seqlake history: error: cannot read configuration {missing}: No such file or directory"
    ]


def test_usage_errors_suggest_and_exit_2(tmp_path):
    typo = seqlake("histroy", cwd=tmp_path)
    assert typo.returncode == 2 and "unknown command 'histroy' (did you mean 'history'?)" in typo.stderr
    assert "Traceback" not in typo.stderr
    dangling = seqlake("--config", cwd=tmp_path)
    assert dangling.returncode == 2 and "Option '--config' requires an argument" in dangling.stderr


def test_a_profile_says_where_every_job_runs(config_file, tmp_path):
    # `local` lays nothing over the configuration: the job reads the configured warehouse.
    local = seqlake(
        "--config",
        str(config_file),
        "--profile",
        "local",
        "sql",
        "--quiet",
        "--output",
        "json",
        "--query",
        COUNT,
        cwd=tmp_path,
    )
    assert local.returncode == 0, local.stderr
    assert json.loads(local.stdout)["results"][0]["rows"] == [{"n": sum(USER_ROWS.values())}]
    done = seqlake("--profile=nowhere", "--config", str(config_file), "history", "--user", "1", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "seqlake history: error: unknown profile 'nowhere' ($SEQLAKE_PROFILE); "
        "profiles: cluster, kafka, local, rest, s3"
    ]
