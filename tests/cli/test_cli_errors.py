"""Every user mistake on the command line is one line on stderr, no traceback, exit 2 for a usage error
(a bad option or value) and 1 for a failure (a missing table, a bad configuration, a refused statement).

Each case runs `seqlake COMMAND ...` in a subprocess, as a user would, against a small warehouse:
hostile or malformed table names, tables without the history schema, ids, LSNs and counts out of
range, malformed times, configurations with loosely typed values, and catalogs that cannot be opened
(misspelled URI, missing driver, damaged file), with any password kept out of the message.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from seqlake.core.config import DEFAULT_CONFIG_PATH
from tests import forked_commands
from tests.facade.test_sql import build_small_warehouse

BIG = "99999999999999999999"  # beyond every 64-bit integer


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cli_errors") / "warehouse"
    build_small_warehouse(root)
    return root


def seqlake(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return forked_commands.run(
        [sys.executable, "-m", "seqlake.cli", *args], capture_output=True, text=True, env={**os.environ, **(env or {})}
    )


def bad_config(tmp_path: Path, warehouse: Path, section: str, key: str, value: object) -> str:
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    data["warehouse"]["path"] = str(warehouse)
    data[section][key] = value
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


CASES = {  # name -> (arguments, what the one line says, exit status: 1 a failure, 2 a usage error)
    "history: a path as table": (["history", "--table", "../../etc/passwd", "--user", "1"], "is not a table name", 2),
    "history: a table without the history schema": (
        ["history", "--table", "raw_events", "--user", "11"],
        "is not a seqlake history table",
        1,
    ),
    "history: an unknown table": (["history", "--table", "nope", "--user", "1"], "does not exist in the catalog", 1),
    "history: LSN beyond int64": (
        ["history", "--user", "11", "--as-of-frontier", f"0:{BIG}"],
        "--as-of-frontier: a frontier's LSN must be an integer in [0, 9223372036854775807]",
        2,
    ),
    "history: negative LSN": (
        ["history", "--user", "11", "--as-of-frontier", "0:-1"],
        "--as-of-frontier: a frontier's LSN must be an integer in [0,",
        2,
    ),
    "history: a frontier not PARTITION:LSN": (
        ["history", "--user", "11", "--as-of-frontier", "120"],
        "is not PARTITION:LSN",
        2,
    ),
    "history: a partition twice": (
        ["history", "--user", "11", "--as-of-frontier", "0:5,0:6"],
        "names source partition 0 twice",
        2,
    ),
    "history: as-of neither a snapshot nor a time": (
        ["history", "--user", "11", "--as-of", "yesterday"],
        "--as-of: 'yesterday' is neither a snapshot id nor an ISO 8601 time",
        2,
    ),
    "history: as-of time without zone": (
        ["history", "--user", "11", "--as-of", "2026-01-05T10:00"],
        "--as-of: '2026-01-05T10:00' needs a time zone",
        2,
    ),
    "history: snapshot id beyond int64": (
        ["history", "--user", "11", "--as-of", BIG],
        "--as-of: must be an integer <=",
        2,
    ),
    "history: a snapshot the table does not have": (
        ["history", "--user", "11", "--as-of", "12345"],
        "has no snapshot 12345",
        1,
    ),
    "history: as-of and a frontier": (
        ["history", "--user", "11", "--as-of", "12345", "--as-of-frontier", "0:1"],
        "give --as-of or --as-of-frontier, not both",
        2,
    ),
    "history: user beyond int64": (["history", "--user", BIG], "--user: must be an integer <=", 2),
    "history: negative user": (["history", "--user", "-5"], "--user: must be an integer >= 0", 2),
    "history: user not a number": (["history", "--user", "11 OR 1=1"], "--user: must be an integer", 2),
    "history: top-k beyond int64": (["history", "--user", "11", "--top-k", BIG], "--top-k: must be an integer", 2),
    "history: malformed time": (["history", "--user", "11", "--start", "2026-13-01Z"], "is not an ISO 8601 time", 2),
    "history: time without zone": (["history", "--user", "11", "--end", "2026-01-05T10:00"], "needs a time zone", 2),
    "history: unknown feature group": (["history", "--user", "11", "--fg", "clicks"], "unknown feature groups", 1),
    "history: unknown column": (["history", "--user", "11", "--columns", "x;drop"], "unknown columns", 1),
    "fsck: a path as table": (["fsck", "--table", "../x"], "is not a table name", 2),
    "fsck: a table without the history schema": (
        ["fsck", "--table", "raw_events"],
        "is not a seqlake history table",
        1,
    ),
    "export-sst: a table without the history schema": (
        ["export-sst", "--table", "raw_events", "--out", "{tmp}/sst"],
        "is not a seqlake history table",
        1,
    ),
    "export-sst: a malformed run id": (
        ["export-sst", "--run", "w1'", "--out", "{tmp}/sst"],
        '--run: "w1\'" is not a run id',
        2,
    ),
    "ingest: a path as source": (["ingest", "--source", "../raw"], "is not a table name", 2),
    "ingest: a topic without its brokers' ports": (
        ["ingest", "--source", "kafka://broker/events"],
        "'broker' is not a broker address (HOST:PORT)",
        2,
    ),
    "import: a path as table": (
        ["import", "--mapping", "otto", "--input", "x", "--table", "a/b"],
        "not a table name",
        2,
    ),
    "import: missing mapping": (
        ["import", "--mapping", "nope", "--input", "/nonexistent"],
        "cannot read import mapping",
        2,
    ),
    "generate: zero users": (
        ["generate", "--out", "{tmp}/g.parquet", "--users", "0"],
        "--users: must be an integer",
        2,
    ),
    "generate: seed beyond int64": (["generate", "--out", "{tmp}/g.parquet", "--seed", BIG], "--seed: must be", 2),
    "samples: unknown tenant": (["samples", "--tenant", "nope"], "unknown tenant 'nope'", 1),
    "backfill: unknown tenant": (["backfill", "--labels", "x", "--tenant", "nope"], "unknown tenant 'nope'", 1),
    "backfill: unknown semantics": (
        ["backfill", "--labels", "x", "--tenant", "ranking", "--as-of", "now"],
        "--as-of: 'now' is not one of 'event-time', 'arrival'",
        2,
    ),
    "samples: unknown engine": (["samples", "--engine", "gpu"], "--engine: 'gpu' is not one of 'spark', 'duckdb'", 2),
    "samples: time on spark": (["samples", "--engine", "spark", "--mode", "time"], "runs on the duckdb engine only", 2),
    "backfill: unknown engine": (
        ["backfill", "--labels", "x", "--tenant", "ranking", "--engine", "gpu"],
        "--engine: 'gpu' is not one of 'spark', 'duckdb'",
        2,
    ),
    "connect: an unknown tool": (["connect", "nope"], "TOOL: 'nope' is not one of 'duckdb', 'pyiceberg', 'spark'", 2),
    "capture: a missing requests file": (
        ["capture", "--requests", "{tmp}/none.csv", "--tenant", "ranking"],
        "none.csv: no such file",
        2,
    ),
    "sql: negative max rows": (["sql", "--max-rows", "-1", "--query", "SELECT 1"], "--max-rows: must be", 2),
    "sql: a malformed parameter": (["sql", "--query", "SELECT $a", "-p", "a b"], "is not NAME=VALUE", 2),
    "sql: a statement DuckDB rejects": (["sql", "--query", "SELECT nope FROM history"], "Binder Error", 1),
    "sql: a write": (["sql", "--query", "COPY history TO 'x.csv'"], "the session is read-only", 1),
    "bench-reads: NaN exponent": (["bench-reads", "--zipf", "nan"], "must be a finite number", 2),
    "bench-layout: zero users": (["bench-layout", "--users", "0"], "--users: must be an integer >= 1", 2),
    "compact: negative window": (["compact", "--window", "-1"], "--window: must be an integer >= 0", 2),
    "compact: window beyond int64": (["compact", "--window", BIG], "--window: must be an integer", 2),
    "compact: unknown engine": (["compact", "--engine", "gpu"], "--engine: 'gpu' is not one of 'spark', 'duckdb'", 2),
    "compact: from detail without windows": (["compact", "--from-detail"], "--from-detail needs the windows", 2),
    "drop-run: a path as run": (["drop-run", "--run", "../w1"], "is not a run id", 2),
    "drop-run: a table without the history schema": (
        ["drop-run", "--table", "raw_events", "--run", "w1"],
        "is not a seqlake history table",
        1,
    ),
    "drop-run: an unknown run": (["drop-run", "--run", "w7"], "run w7 is not a live run", 1),
    "demo: a missing configuration": (["demo", "--config", "{tmp}/none.yaml"], "cannot read configuration", 2),
    "bench-ingest: a path as namespace": (["bench-ingest", "--namespace", "../x"], "is not a namespace name", 2),
    "bench-ingest: zero users": (["bench-ingest", "--users", "0"], "--users: must be an integer >= 1", 2),
    "storage: an unknown chore": (
        ["storage", "remove", "bucket"],
        "ACTION: 'remove' is not one of 'create', 'list', 'empty'",
        2,
    ),
    "storage: no bucket": (["storage", "list"], "Missing argument 'BUCKET'", 2),
    "forget: no user": (["forget", "--skip-landing"], "give --user (repeat for more) or --check USER", 2),
    "migrate: a narrowed column": (
        [
            "migrate",
            "--config",
            "{bad:feature_groups.purchase={item_column: item_id, columns: {item_id: {type: int64}, "
            "price_cents: {type: int32}}}}",
        ],
        "seqlake cannot migrate this",
        1,
    ),
    "forget: a user id that is not a number": (["forget", "--user", "ann"], "--user: must be an integer, got 'ann'", 2),
    "maintain: a negative retention": (
        ["maintain", "--snapshot-retention-hours", "-3"],
        "--snapshot-retention-hours: must be a number >= 0, got -3",
        2,
    ),
    "gc: no window kept": (["gc", "--retention-windows", "0"], "--retention-windows: must be an integer >= 1", 2),
    "bench-merge: too few windows": (["bench-merge", "--windows", "0"], "--windows: must be an integer >= 2", 2),
    "init: a folder that cannot exist": (["init", "/proc/nope/x"], "cannot write the starter configuration", 1),
    "bench-compact: negative seed": (["bench-compact", "--seed", "-1"], "--seed: must be an integer >= 0", 2),
    "bench-compact: a dotted namespace": (["bench-compact", "--namespace", "a.b"], "is not a namespace name", 2),
    "bench-compact: unknown scale": (["bench-compact", "--scale", "huge"], "--scale: 'huge' is not one of", 2),
    "bench-peers: unknown scale": (["bench-peers", "--scale", "huge"], "--scale: 'huge' is not one of", 2),
    "bench-samples: seed beyond int64": (["bench-samples", "--seed", BIG], "--seed: must be an integer", 2),
    "bench-samples: unknown scale": (["bench-samples", "--scale", "huge"], "--scale: 'huge' is not one of", 2),
    "bench-validate: no records": (["bench-validate", "--records", "0"], "--records: must be an integer >= 1", 2),
    "bench-pipeline: too few events": (["bench-pipeline", "--events", "10"], "--events: must be an integer >= 1000", 2),
    "bench-pipeline: unknown engine": (["bench-pipeline", "--engine", "arrow"], "--engine: 'arrow' is not one of", 2),
    "unknown command": (["frobnicate"], "unknown command 'frobnicate'", 2),
    "config: true as an integer": (
        ["history", "--user", "1", "--config", "{bad:layout.bucket_count=true}"],
        "= True",
        1,
    ),
    "config: a quoted integer": (["fsck", "--config", "{bad:layout.window_seconds='3600'}"], "= '3600'", 1),
    "config: a missing file": (["fsck", "--config", "{tmp}/none.yaml"], "cannot read configuration", 2),
    "export-sst: a run that is not live": (["export-sst", "--run", "w9", "--out", "{tmp}/sst"], "'w9' is not live", 1),
    "tables: an unknown output": (["tables", "--output", "xml"], "--output: 'xml' is not one of 'text', 'json'", 2),
    "describe: a path as table": (["describe", "../x"], "TABLE: '../x' is not a table name", 2),
    "describe: an unknown table": (["describe", "nope"], "table seqlake.nope does not exist", 1),
    "describe: no table": (["describe"], "Missing argument 'TABLE'", 2),
    "runs: a table without the history schema": (
        ["runs", "--table", "raw_events"],
        "is not a seqlake history table",
        1,
    ),
    "files: a malformed run id": (["files", "--run", "../w1"], "is not a run id", 2),
    "files: a run that is not live": (["files", "--run", "w7"], "run w7 is not live in seqlake.history", 1),
    "files: a run of a table without runs": (
        ["files", "--table", "raw_events", "--run", "w1"],
        "is not a history table",
        1,
    ),
    "demo: a warehouse the demo did not create": (["demo", "--small"], "was not created by seqlake demo", 1),
    "global: an unknown log level": (["--log-level", "loud", "tables"], "--log-level: 'loud' is not one of", 2),
    "global: an unknown option": (["--frobnicate", "tables"], "No such option '--frobnicate'", 2),
    "history: an unknown option": (["history", "--user", "1", "--jsn"], "No such option '--jsn'", 2),
    "history: a misspelt option": (["history", "--user", "1", "--outptu", "json"], "Did you mean '--output'?", 2),
    "sql: --file and --query": (["sql", "--file", "storage", "--query", "SELECT 1"], "--file and --query exclude", 2),
    "generate: an unknown file type": (
        ["generate", "--out", "{tmp}/g.txt"],
        "--out: '{tmp}/g.txt': the file name must end in",
        2,
    ),
}


def _expand(arg: str, tmp_path: Path, warehouse: Path) -> str:
    if arg.startswith("{bad:"):
        where, _, value = arg[len("{bad:") : -1].partition("=")
        section, key = where.split(".")
        return bad_config(tmp_path, warehouse, section, key, yaml.safe_load(value))
    return arg.replace("{tmp}", str(tmp_path))


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_user_mistake_is_one_line_and_a_nonzero_exit(warehouse, tmp_path, case):
    args, says, status = CASES[case]
    done = seqlake(*[_expand(a, tmp_path, warehouse) for a in args], env={"SEQLAKE_WAREHOUSE": str(warehouse)})
    assert done.returncode == status, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert _expand(says, tmp_path, warehouse) in lines[0]
    assert lines[0].startswith("seqlake")
    assert done.stdout == ""  # nothing half done on stdout


@pytest.mark.parametrize(
    ("uri", "says"),
    [
        ("postgresql+psycopg2://analyst:s3cret@db.invalid:5432/iceberg", "pip install psycopg2-binary"),
        ("mysql://analyst:s3cret@127.0.0.1:1/iceberg", "pip install mysqlclient"),
        ("postgrsql://analyst:s3cret@db.invalid/iceberg", "cannot open the catalog postgrsql://analyst:***@"),
        ("not a uri", "cannot open the catalog"),
    ],
)
def test_a_catalog_that_cannot_be_opened_is_one_line_without_its_password(warehouse, uri, says):
    env = {"SEQLAKE_WAREHOUSE": str(warehouse), "SEQLAKE_CATALOG_URI": uri}
    for command in (["history", "--user", "11"], ["sql", "--query", "SELECT 1"]):
        done = seqlake(*command, env=env)
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert says in done.stderr
        assert "s3cret" not in done.stderr


def test_a_damaged_catalog_file_is_one_line(tmp_path):
    root = tmp_path / "warehouse"
    root.mkdir()
    (root / "catalog.db").write_text("COPY (SELECT 'gone') TO ...")
    done = seqlake("history", "--user", "1", env={"SEQLAKE_WAREHOUSE": str(root)})
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        f"seqlake history: error: cannot open the catalog sqlite:///{root}/catalog.db: file is not a database"
    )


def test_every_command_has_a_hostile_case():
    from seqlake.cli import commands

    assert set(commands()) <= {args[0] for args, _, _ in CASES.values()}


def test_a_spark_driver_that_stopped_mid_job_is_one_line_pointing_at_its_memory(capsys):
    """PySpark whose JVM has gone (killed, or out of heap) fails inside py4j with a connection error;
    the user gets one line saying so, not an "unexpected ConnectionRefusedError"."""
    import click
    from py4j.java_gateway import GatewayParameters, JavaGateway

    from seqlake.cli import run
    from tests.server_process import free_port

    @click.command("job")
    def job() -> None:
        gateway = JavaGateway(gateway_parameters=GatewayParameters(port=free_port()))  # nobody listens there
        gateway.jvm.java.lang.System.currentTimeMillis()

    assert run(job, [], "seqlake job") == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("seqlake job: error: Spark's driver JVM stopped during the job"), line
    assert "spark.driver_memory" in line


@pytest.mark.parametrize("failure", ["catalog", "store", "conflict"])
def test_a_commit_failure_no_job_mapped_is_one_line_saying_a_rerun_is_safe(capsys, failure):
    """The command line's last resort for the errors `seqlake.pipelines.commit_failures` knows, raised
    where no job mapped them: one line naming the kind, never "unexpected"."""
    import errno

    import click
    import requests
    from pyiceberg.exceptions import CommitFailedException

    from seqlake.cli import run
    from tests.server_process import free_port

    @click.command("job")
    def job() -> None:
        if failure == "catalog":
            requests.get(f"http://127.0.0.1:{free_port()}/v1/config", timeout=5)  # nobody listens there
        elif failure == "store":
            raise OSError(errno.ENOSPC, "No space left on device")
        else:
            raise CommitFailedException("Requirement failed: branch main has changed")

    assert run(job, [], "seqlake job") == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("seqlake job: error: "), line
    assert "unexpected" not in line, line
    assert line.endswith(
        "before the command finished; the steps it completed stay committed, the one under way may not have; "
        "running the command again is safe: it skips what is done"
    ), line
    says = {
        "catalog": "the catalog http://127.0.0.1:",
        "store": "the store failed (OSError: [Errno 28] No space left on device)",
        "conflict": "another writer committed to the table first (Requirement failed: branch main has changed)",
    }
    assert says[failure] in line, line


def test_an_os_error_that_is_no_store_refusal_stays_unexpected(capsys):
    import click

    from seqlake.cli import run

    @click.command("job")
    def job() -> None:
        raise FileNotFoundError(2, "No such file or directory", "/nowhere/x")

    assert run(job, [], "seqlake job") == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("seqlake job: error: unexpected FileNotFoundError: "), line
