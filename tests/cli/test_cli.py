"""The command line as a user meets it: help texts, errors without tracebacks, generated files."""

from __future__ import annotations

import re
import subprocess
import sys

import pyarrow.parquet as pq

from seqlake.cli import commands, main
from seqlake.core.events import RAW_SCHEMA
from tests import forked_commands


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return forked_commands.run([sys.executable, "-m", "seqlake.cli", *args], capture_output=True, text=True, env=env)


def test_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command, (_, summary) in commands().items():
        assert f"  {command}" in out and summary in out


def test_unknown_command_is_a_usage_error():
    result = run_cli("frobnicate")
    assert result.returncode == 2
    assert "unknown command 'frobnicate'" in result.stderr


def test_bad_config_is_reported_without_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("feature_groups: {}\nlayout: {bucket_count: -1}\n")
    result = run_cli("generate", "--config", str(bad), "--out", str(tmp_path / "x.parquet"))
    assert result.returncode == 1
    assert "layout.bucket_count = -1" in result.stderr
    assert "Traceback" not in result.stderr


def test_generate_writes_the_same_parquet_for_the_same_seed(tmp_path):
    paths = [tmp_path / "a.parquet", tmp_path / "b.parquet"]
    for path in paths:
        result = run_cli("generate", "--out", str(path), "--users", "40", "--windows", "2")
        assert result.returncode == 0, result.stderr
        assert re.search(r"^[\d,]+ records: [\d,]+ events of 40 users", result.stdout, re.M), result.stdout
    first, second = (pq.read_table(p) for p in paths)
    assert first.schema.equals(RAW_SCHEMA)
    assert first.num_rows > 0 and first.equals(second)


def test_generate_jsonl_has_one_record_per_line(tmp_path):
    out = tmp_path / "raw.jsonl"
    result = run_cli("generate", "--out", str(out), "--users", "20", "--windows", "1")
    assert result.returncode == 0, result.stderr
    lines = out.read_text().splitlines()
    assert lines and all(line.startswith('{"source_partition":') for line in lines)


def test_history_prints_a_users_selected_rows(tmp_path):
    import json
    import os

    from tests.conftest import make_config
    from tests.history_data import history_table, publish_run, synthetic_history

    warehouse = tmp_path / "wh"
    config = make_config(warehouse)
    publish_run(history_table(config), config, synthetic_history(config, {7: 40, 8: 5}), "w1")
    env = {**os.environ, "SEQLAKE_WAREHOUSE": str(warehouse)}
    result = run_cli("history", "--user", "7", "--columns", "item_id", "--top-k", "3", "--output", "json", env=env)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["rows"]
    assert len(rows) == 3 and set(rows[0]) == {"user_id", "feature_group", "event_ts", "lsn", "item_id"}
    assert [r["event_ts"] for r in rows] == sorted(r["event_ts"] for r in rows)

    # By default the text leaves out the groups' columns that no printed row fills, and says so.
    every = json.loads(run_cli("history", "--user", "7", "--max-rows", "5", "--output", "json", env=env).stdout)
    empty = [c for c in every["columns"] if all(r[c] is None for r in every["rows"][:5])]
    assert empty  # the test could fail: each row fills only its own group's columns
    text = run_cli("history", "--user", "7", "--max-rows", "5", env=env)
    header = text.stdout.splitlines()[0].split()
    assert header[:3] == ["feature_group", "event_ts", "lsn"] and not set(empty) & set(header)
    assert set(every["columns"]) - set(empty) <= set(header)
    assert f"{len(empty)} empty columns not shown (--columns)" in text.stderr

    bad = run_cli("history", "--user", "7", "--fg", "clicks", env=env)
    assert bad.returncode == 1 and "unknown feature groups ['clicks']" in bad.stderr
