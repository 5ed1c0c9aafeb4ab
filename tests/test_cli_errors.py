"""Every user mistake on the command line is one line on stderr, no traceback, and exit code 1 or 2.

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

from seqlake.config import DEFAULT_CONFIG_PATH
from tests.test_sql import build_small_warehouse

BIG = "99999999999999999999"  # beyond every 64-bit integer


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cli_errors") / "warehouse"
    build_small_warehouse(root)
    return root


def seqlake(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "seqlake.cli", *args], capture_output=True, text=True, env={**os.environ, **(env or {})}
    )


def bad_config(tmp_path: Path, warehouse: Path, section: str, key: str, value: object) -> str:
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    data["warehouse"]["path"] = str(warehouse)
    data[section][key] = value
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


CASES = {
    "history: a path as table": (["history", "--table", "../../etc/passwd", "--user", "1"], "is not a table name"),
    "history: a table without the history schema": (
        ["history", "--table", "raw_events", "--user", "11"],
        "is not a seqlake history table",
    ),
    "history: an unknown table": (["history", "--table", "nope", "--user", "1"], "does not exist in the catalog"),
    "history: LSN beyond int64": (["history", "--user", "11", "--as-of-lsn", BIG], "--as-of-lsn: must be an integer"),
    "history: negative LSN": (["history", "--user", "11", "--as-of-lsn", "-1"], "--as-of-lsn: must be an integer >= 0"),
    "history: user beyond int64": (["history", "--user", BIG], "--user: must be an integer <="),
    "history: negative user": (["history", "--user", "-5"], "--user: must be an integer >= 0"),
    "history: user not a number": (["history", "--user", "11 OR 1=1"], "--user: must be an integer"),
    "history: top-k beyond int64": (["history", "--user", "11", "--top-k", BIG], "--top-k: must be an integer"),
    "history: malformed time": (["history", "--user", "11", "--start", "2026-13-01Z"], "is not an ISO 8601 time"),
    "history: time without zone": (["history", "--user", "11", "--end", "2026-01-05T10:00"], "needs a time zone"),
    "history: unknown feature group": (["history", "--user", "11", "--fg", "clicks"], "unknown feature groups"),
    "history: unknown column": (["history", "--user", "11", "--columns", "x;drop"], "unknown columns"),
    "fsck: a path as table": (["fsck", "--table", "../x"], "is not a table name"),
    "fsck: a table without the history schema": (["fsck", "--table", "raw_events"], "is not a seqlake history table"),
    "export-sst: a table without the history schema": (
        ["export-sst", "--table", "raw_events", "--out", "{tmp}/sst"],
        "is not a seqlake history table",
    ),
    "export-sst: an unknown run": (["export-sst", "--run", "w1'", "--out", "{tmp}/sst"], "is not live"),
    "ingest: a path as source": (["ingest", "--source", "../raw"], "is not a table name"),
    "import: a path as table": (["import", "--mapping", "otto", "--input", "x", "--table", "a/b"], "not a table name"),
    "import: missing mapping": (
        ["import", "--mapping", "nope", "--input", "/nonexistent"],
        "cannot read import mapping",
    ),
    "generate: zero users": (["generate", "--out", "{tmp}/g.parquet", "--users", "0"], "--users: must be an integer"),
    "generate: seed beyond int64": (["generate", "--out", "{tmp}/g.parquet", "--seed", BIG], "--seed: must be"),
    "samples: unknown tenant": (["samples", "--tenant", "nope"], "unknown tenant 'nope'"),
    "backfill: unknown tenant": (["backfill", "--labels", "x", "--tenant", "nope"], "unknown tenant 'nope'"),
    "backfill: unknown semantics": (
        ["backfill", "--labels", "x", "--tenant", "ranking", "--as-of", "now"],
        "invalid choice",
    ),
    "samples: unknown engine": (["samples", "--engine", "gpu"], "invalid choice"),
    "sql: negative max rows": (["sql", "--max-rows", "-1", "--query", "SELECT 1"], "--max-rows: must be"),
    "sql: a malformed parameter": (["sql", "--query", "SELECT $a", "-p", "a b"], "is not NAME=VALUE"),
    "sql: a statement DuckDB rejects": (["sql", "--query", "SELECT nope FROM history"], "Binder Error"),
    "sql: a write": (["sql", "--query", "COPY history TO 'x.csv'"], "the session is read-only"),
    "bench-reads: NaN exponent": (["bench-reads", "--zipf", "nan"], "must be a finite number"),
    "bench-layout: zero users": (["bench-layout", "--users", "0"], "--users: must be an integer >= 1"),
    "compact: negative window": (["compact", "--window", "-1"], "--window: must be an integer >= 0"),
    "compact: window beyond int64": (["compact", "--window", BIG], "--window: must be an integer"),
    "compact: unknown engine": (["compact", "--engine", "gpu"], "invalid choice"),
    "compact: from detail without windows": (["compact", "--from-detail"], "--from-detail needs the windows"),
    "drop-run: a path as run": (["drop-run", "--run", "../w1"], "is not a run id"),
    "drop-run: a table without the history schema": (
        ["drop-run", "--table", "raw_events", "--run", "w1"],
        "is not a seqlake history table",
    ),
    "drop-run: an unknown run": (["drop-run", "--run", "w7"], "run w7 is not a live run"),
    "demo: a missing configuration": (["demo", "--config", "{tmp}/none.yaml"], "cannot read configuration"),
    "bench-ingest: a path as namespace": (["bench-ingest", "--namespace", "../x"], "is not a namespace name"),
    "bench-ingest: zero users": (["bench-ingest", "--users", "0"], "--users: must be an integer >= 1"),
    "storage: an unknown chore": (["storage", "remove", "bucket"], "invalid choice: 'remove'"),
    "storage: no bucket": (["storage", "list"], "the following arguments are required: bucket"),
    "forget: no user": (["forget", "--skip-landing"], "the following arguments are required: --user"),
    "forget: a user id that is not a number": (["forget", "--user", "ann"], "--user: invalid int value: 'ann'"),
    "migrate: a narrowed column": (
        [
            "migrate",
            "--config",
            "{bad:feature_groups.purchase={item_column: item_id, columns: {item_id: {type: int64}, "
            "price_cents: {type: int32}}}}",
        ],
        "seqlake cannot migrate this",
    ),
    "maintain: a negative retention": (["maintain", "--snapshot-retention-hours", "-3"], "-3 is negative"),
    "bench-merge: too few windows": (["bench-merge", "--windows", "0"], "--windows: must be an integer >= 2"),
    "init: a folder that cannot exist": (["init", "/proc/nope/x"], "cannot write the starter configuration"),
    "bench-compact: negative seed": (["bench-compact", "--seed", "-1"], "--seed: must be an integer >= 0"),
    "bench-compact: a dotted namespace": (["bench-compact", "--namespace", "a.b"], "is not a namespace name"),
    "bench-compact: unknown scale": (["bench-compact", "--scale", "huge"], "invalid choice"),
    "bench-peers: unknown scale": (["bench-peers", "--scale", "huge"], "invalid choice"),
    "bench-samples: seed beyond int64": (["bench-samples", "--seed", BIG], "--seed: must be an integer"),
    "bench-samples: unknown scale": (["bench-samples", "--scale", "huge"], "invalid choice"),
    "unknown command": (["frobnicate"], "unknown command 'frobnicate'"),
    "config: true as an integer": (["history", "--user", "1", "--config", "{bad:layout.bucket_count=true}"], "= True"),
    "config: a quoted integer": (["fsck", "--config", "{bad:layout.window_seconds='3600'}"], "= '3600'"),
    "config: a missing file": (["fsck", "--config", "{tmp}/none.yaml"], "cannot read configuration"),
}


def _expand(arg: str, tmp_path: Path, warehouse: Path) -> str:
    if arg.startswith("{bad:"):
        where, _, value = arg[len("{bad:") : -1].partition("=")
        section, key = where.split(".")
        return bad_config(tmp_path, warehouse, section, key, yaml.safe_load(value))
    return arg.replace("{tmp}", str(tmp_path))


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_user_mistake_is_one_line_and_a_nonzero_exit(warehouse, tmp_path, case):
    args, says = CASES[case]
    done = seqlake(*[_expand(a, tmp_path, warehouse) for a in args], env={"SEQLAKE_WAREHOUSE": str(warehouse)})
    assert done.returncode in (1, 2), done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert says in lines[0]


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
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert says in done.stderr
        assert "s3cret" not in done.stderr


def test_a_damaged_catalog_file_is_one_line(tmp_path):
    root = tmp_path / "warehouse"
    root.mkdir()
    (root / "catalog.db").write_text("COPY (SELECT 'gone') TO ...")
    done = seqlake("history", "--user", "1", env={"SEQLAKE_WAREHOUSE": str(root)})
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        f"seqlake history: error: cannot open the catalog sqlite:///{root}/catalog.db: file is not a database"
    )


def test_every_command_has_a_hostile_case():
    from seqlake.cli import COMMANDS

    assert set(COMMANDS) <= {args[0] for args, _ in CASES.values()}
