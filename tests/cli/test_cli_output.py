"""Every command as a script reads it: `--output json` (after the command's name) makes stdout exactly one
JSON document, whether the command succeeds or fails; `--help` of every command lists its options and
loads no engine; exit statuses are 0, 1 (a failure) and 2 (a usage error).

Each command runs here where a successful run is cheap (on a copy of a small warehouse); a command
that needs Spark or builds a large data set runs its quickest failing path here, and its successful
JSON output is checked where it already runs (`demo --small` in test_wheel, `ingest` in
test_repair_plan, `samples` in test_demo, `storage` in test_s3_warehouse; the other benches end through
the same `benchmarks.commands.common.finish` as bench-reads and bench-merge here).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from seqlake.cli import commands, main
from tests import forked_commands
from tests.facade.test_sql import USER_ROWS, build_small_warehouse
from tests.paths import REPO_ROOT

REPO = REPO_ROOT
OTTO = REPO / "tests" / "data" / "otto" / "sessions-sample.jsonl"

# command -> (arguments after the command name, expected exit status). {tmp}: a fresh folder.
RUNS: dict[str, tuple[list[str], int]] = {
    "init": (["{tmp}/starter"], 0),
    "demo": (["--small"], 1),  # refused: the small warehouse was not created by the demo
    "generate": (["--out", "{tmp}/raw.parquet", "--users", "2", "--windows", "1"], 0),
    "import": (["--mapping", "otto", "--input", str(OTTO), "--table", "raw_otto"], 0),
    "ingest": (["--source", "nope"], 1),
    "compact": (["--engine", "duckdb", "--end-of-stream"], 0),
    "history": (["--user", "33", "--top-k", "5"], 0),
    "sql": (["--quiet", "--query", "SELECT 1 AS one; SELECT count(*) AS n FROM history"], 0),
    "connect": (["duckdb"], 0),
    "capture": (["--requests", "{tmp}/none.csv", "--tenant", "ranking"], 2),  # no such file: a usage error
    "tables": ([], 0),
    "describe": (["history"], 0),
    "runs": ([], 0),
    "files": ([], 0),
    "maintain": (["--skip-landing"], 0),
    "forget": (["--skip-landing", "--user", "11"], 0),
    "gc": ([], 0),
    "migrate": (["--skip-landing", "--dry-run"], 0),
    "fsck": (["--quick"], 0),
    "drop-run": (["--run", "w490994"], 0),
    "samples": (["--tenant", "ranking"], 1),  # no capture was recorded in this warehouse
    "backfill": (["--labels", "{tmp}/labels.csv", "--tenant", "retrieval"], 0),
    "export-sst": (["--out", "{tmp}/sst"], 0),
    "storage": (["list", "no-such-bucket"], 1),  # no S3 server at the endpoint
    "bench-layout": (
        ["--users", "20", "--heavy-users", "1", "--heavy-rows", "300", "--repeats", "1", "--lookups", "10"],
        0,
    ),
    "bench-ingest": (["--prior-events", "10", "--landing-prior", "20"], 2),
    "bench-reads": (
        ["--users", "40", "--heavy-users", "1", "--heavy-rows", "400", "--runs", "2", "--multi-users", "8"]
        + ["--lookups", "40", "--cache-mib", "1", "--repeats", "1", "--workers", "2"],
        0,
    ),
    "bench-compact": (["--scale", "huge"], 2),
    "bench-merge": (["--windows", "4", "--rows-per-window", "50", "--users", "10"], 0),
    "bench-peers": (["--scale", "huge"], 2),
    "bench-samples": (["--scale", "huge"], 2),
    "bench-pipeline": (["--scale", "huge"], 2),
    "bench-validate": (["--records", "3000"], 0),
}


# Commands that change the warehouse get one of their own; the others share one.
CHANGES_THE_WAREHOUSE = {"compact", "maintain", "forget", "gc", "drop-run", "import", "backfill"}


@pytest.fixture(scope="module")
def shared_warehouse(tmp_path_factory) -> Path:
    return build_small_warehouse(tmp_path_factory.mktemp("output") / "warehouse").config.warehouse_path()


def own_warehouse(tmp_path: Path) -> Path:
    return build_small_warehouse(tmp_path / "warehouse").config.warehouse_path()


def seqlake(*args: str, warehouse: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environment = {**os.environ, "SEQLAKE_WAREHOUSE": str(warehouse), **(env or {})}
    return forked_commands.run(
        [sys.executable, "-m", "seqlake", *args], capture_output=True, text=True, env=environment
    )


def test_every_command_has_a_json_run():
    assert set(RUNS) == set(commands())


@pytest.mark.parametrize("command", sorted(commands()))
def test_output_json_is_one_document_on_stdout(command, shared_warehouse, tmp_path):
    args, status = RUNS[command]
    warehouse = own_warehouse(tmp_path) if command in CHANGES_THE_WAREHOUSE else shared_warehouse
    (tmp_path / "labels.csv").write_text("user_id,ts,clicked\n33,2026-01-05T12:00:00Z,1\n44,2026-01-05T12:00:00Z,0\n")
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_MAX_ATTEMPTS": "1", "AWS_ACCESS_KEY_ID": "x"}
    env["AWS_SECRET_ACCESS_KEY"] = "y"
    expanded = [arg.replace("{tmp}", str(tmp_path)) for arg in args]
    done = seqlake(command, *expanded, "--output", "json", warehouse=warehouse, env=env)
    assert done.returncode == status, done.stderr[-2000:]
    document = json.loads(done.stdout)  # exactly one JSON value: anything else on stdout fails here
    assert isinstance(document, dict)
    if status == 0:
        assert "error" not in document and document, done.stdout
    else:
        assert document["ok"] is False and document["error"]["message"] in done.stderr
        assert len(done.stderr.splitlines()) == 1


def test_json_documents_hold_what_the_text_says(shared_warehouse):
    warehouse = shared_warehouse
    history = json.loads(seqlake("history", "--user", "33", "--output", "json", warehouse=warehouse).stdout)
    assert len(history["rows"]) == USER_ROWS[33]
    sql = seqlake("--output", "json", "sql", "--quiet", "-q", "SELECT count(*) AS n FROM history", warehouse=warehouse)
    assert json.loads(sql.stdout)["results"][0]["rows"] == [{"n": sum(USER_ROWS.values())}]
    runs = json.loads(seqlake("runs", "--output", "json", warehouse=warehouse).stdout)["runs"]
    fsck = json.loads(seqlake("fsck", "--output", "json", warehouse=warehouse).stdout)
    assert fsck["ok"] is True and fsck["runs"] == len(runs) and fsck["rows"] == sum(USER_ROWS.values())
    # Text mode prints something else than JSON: the option is what changes the output.
    text = seqlake("fsck", warehouse=warehouse)
    assert text.returncode == 0 and text.stdout.startswith("seqlake.history: OK: 2 runs")


def test_help_of_every_command_lists_its_options_and_loads_no_engine():
    # One process asks for every help in turn and notes what each one imported: a command whose help
    # pulls in an engine shows up by name.
    probe = (
        "import contextlib, io, json, sys\n"
        "from seqlake.cli import commands, main\n"
        "ENGINES = {'pyspark', 'pyiceberg', 'pydantic', 'pyarrow'}\n"
        "facts = {}\n"
        "for command in [None, *commands()]:\n"
        "    out = io.StringIO()\n"
        "    with contextlib.redirect_stdout(out):\n"
        "        status = main(['--help'] if command is None else [command, '--help'])\n"
        "    heavy = sorted({m.split('.')[0] for m in sys.modules} & ENGINES)\n"
        "    facts[command or ''] = {'status': status, 'help': out.getvalue(), 'heavy': heavy}\n"
        "print(json.dumps(facts))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout)
    assert set(facts) == {"", *commands()}
    for command, seen in facts.items():
        assert seen["status"] == 0 and seen["heavy"] == [], (command, seen["heavy"])
        usage = f"Usage: seqlake {command} [OPTIONS]" if command else "Usage: seqlake [OPTIONS] COMMAND"
        assert seen["help"].startswith(usage), command
        for option in ("--config", "--profile", "--log-level", "--output", "--help"):
            assert option in seen["help"], (command, option)
    for name, (_, summary) in commands().items():
        assert f"  {name}" in facts[""]["help"] and summary in facts[""]["help"]


def test_every_engine_option_takes_spark_or_duckdb(capsys):
    for command in ("ingest", "compact", "samples", "backfill"):
        assert main([command, "--help"]) == 0
        helped = " ".join(capsys.readouterr().out.split())  # the help is wrapped to the terminal
        assert "--engine [spark|duckdb]" in helped, helped
        if command in ("samples", "backfill"):
            assert "arrow, its former name for duckdb, is deprecated" in helped and "[default: duckdb]" in helped


def test_backfill_takes_duckdb_and_arrow_its_former_name_alike(tmp_path):
    warehouse = own_warehouse(tmp_path)
    labels = tmp_path / "labels.csv"
    labels.write_text("user_id,ts,clicked\n33,2026-01-05T12:00:00Z,1\n44,2026-01-05T12:00:00Z,0\n")
    documents = []
    for engine in ("duckdb", "arrow"):
        args = ["--labels", str(labels), "--tenant", "retrieval", "--engine", engine, "--output", "json"]
        done = seqlake("backfill", *args, warehouse=warehouse)
        assert done.returncode == 0, done.stderr[-2000:]
        documents.append({key: value for key, value in json.loads(done.stdout).items() if key != "seconds"})
    as_duckdb, as_arrow = documents
    assert as_duckdb["rows"] == 2 and as_duckdb["engine"] == "duckdb"  # one name in every report
    assert as_arrow == as_duckdb


def test_exit_statuses_are_0_1_and_2(shared_warehouse):
    warehouse = shared_warehouse
    assert seqlake("runs", warehouse=warehouse).returncode == 0
    assert seqlake("describe", "no_such_table", warehouse=warehouse).returncode == 1  # a failure
    assert seqlake("runs", "--table", "../etc", warehouse=warehouse).returncode == 2  # a usage error
    assert seqlake("runz", warehouse=warehouse).returncode == 2
    assert seqlake(warehouse=warehouse).returncode == 2  # no command: the help, as a usage error
    assert seqlake("--version", warehouse=warehouse).returncode == 0


def test_log_level_sets_what_seqlake_logs_and_spark_follows(tmp_path):
    warehouse = own_warehouse(tmp_path)
    quiet = seqlake("compact", "--engine", "duckdb", "--end-of-stream", warehouse=warehouse)
    assert quiet.returncode == 0, quiet.stderr
    assert "INFO" not in quiet.stderr
    drop = seqlake("drop-run", "--run", "w490994", warehouse=warehouse)
    assert drop.returncode == 0, drop.stderr
    chatty = seqlake("--log-level", "info", "compact", "--engine", "duckdb", "--end-of-stream", warehouse=warehouse)
    assert chatty.returncode == 0, chatty.stderr
    assert "INFO seqlake.pipelines.compaction.plan: published run w490994: windows [490994]" in chatty.stderr
    probe = (
        "from seqlake.core import logs\n"
        "before = logs.spark_log_level()\n"
        "logs.configure('info')\n"
        "print(before, logs.spark_log_level())\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO)
    assert done.stdout.split() == ["ERROR", "INFO"], done.stderr


def test_seqlake_debug_shows_the_traceback(shared_warehouse):
    plain = seqlake("describe", "no_such_table", warehouse=shared_warehouse)
    assert "Traceback" not in plain.stderr and len(plain.stderr.splitlines()) == 1
    debug = seqlake("describe", "no_such_table", warehouse=shared_warehouse, env={"SEQLAKE_DEBUG": "1"})
    assert debug.returncode == 1
    assert "Traceback" in debug.stderr and "SchemaError: table seqlake.no_such_table does not exist" in debug.stderr
