"""The tests' forked commands (tests/forked_commands.py) behave as `subprocess.run` of the same command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import forked_commands
from tests.facade.test_sql import build_small_warehouse

SEQLAKE = [sys.executable, "-m", "seqlake.cli"]


def both(args: list[str], **kwargs) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    return (
        subprocess.run(args, capture_output=True, text=True, **kwargs),
        forked_commands.run(args, capture_output=True, text=True, **kwargs),
    )


def test_the_forking_python_holds_no_thread_so_commands_are_forked():
    assert forked_commands._fork_server().ready


@pytest.mark.parametrize(
    "arguments",
    [["--help"], ["--version"], ["frobnicate"], ["history", "--user", "x"], ["sql", "--query", "SELECT 42 AS n"]],
)
def test_a_forked_command_prints_and_exits_as_a_new_process_does(arguments, tmp_path: Path):
    env = {**os.environ, "SEQLAKE_WAREHOUSE": str(tmp_path / "warehouse")}
    spawned, forked = both([*SEQLAKE, *arguments], env=env)
    assert (forked.returncode, forked.stdout, forked.stderr) == (spawned.returncode, spawned.stdout, spawned.stderr)


def test_a_forked_command_has_its_own_folder_environment_and_stdin(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEQLAKE_")}
    # The default warehouse is ./warehouse, in the command's folder.
    spawned, forked = both([*SEQLAKE, "history", "--user", "1"], env=env, cwd=tmp_path)
    assert forked.returncode == spawned.returncode == 1
    assert forked.stderr == spawned.stderr and str(tmp_path / "warehouse") in forked.stderr
    elsewhere = forked_commands.run(
        [*SEQLAKE, "history", "--user", "1"],
        capture_output=True,
        text=True,
        env={**env, "SEQLAKE_WAREHOUSE": str(tmp_path / "other")},
        cwd=tmp_path,
    )
    assert str(tmp_path / "other") in elsewhere.stderr
    build_small_warehouse(tmp_path / "warehouse")
    query = "SELECT count(*) AS events FROM history;\n"
    spawned, forked = both([*SEQLAKE, "sql", "--quiet"], env=env, cwd=tmp_path, input=query)
    assert forked.returncode == spawned.returncode == 0
    assert forked.stdout == spawned.stdout and "events" in forked.stdout
