"""Analyst SQL cannot harm the warehouse: hostile statements through `seqlake sql` and the notebook session.

Each statement is refused with a clear message, and every file of the warehouse is byte for byte the
same afterwards. `--allow-writes DIR` opens exactly one export folder.
"""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from jobs.sql import SqlError, open_session
from jobs.sql import main as sql_main
from seqlake.catalog import open_catalog, table_identifier
from tests.test_sql import build_small_warehouse


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return build_small_warehouse(tmp_path_factory.mktemp("sql_ro") / "warehouse")


@pytest.fixture
def warehouse(small, monkeypatch) -> Path:
    monkeypatch.setenv("SEQLAKE_WAREHOUSE", str(small.config.warehouse_path()))
    return small.config.warehouse_path()


def checksums(root: Path) -> dict[str, str]:
    """Every file under `root` (and only those) with the SHA-256 of its content.

    The SQLite catalog's bytes move between catalog.db and its write-ahead log (-wal, -shm) whenever a
    reader closes it, so the catalog counts by its rows (an SQL dump), every other file by its bytes.
    """
    sums = {}
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.name.endswith(("-wal", "-shm")):
            continue
        if path.name == "catalog.db":
            with closing(sqlite3.connect(path)) as con:
                content = "\n".join(con.iterdump()).encode()
        else:
            content = path.read_bytes()
        sums[str(path.relative_to(root))] = hashlib.sha256(content).hexdigest()
    return sums


def current_metadata(small) -> str:
    table = open_catalog(small.config).load_table(table_identifier(small.config, "history"))
    return table.metadata_location.removeprefix("file://")


def hostile_statements(root: Path, metadata: str, outside: Path) -> dict[str, tuple[str, str]]:
    """name -> (statement, what the refusal says)."""
    read_only = "the session is read-only"
    return {
        "copy over catalog.db": (f"COPY (SELECT 'gone' AS x) TO '{root}/catalog.db' (FORMAT csv)", read_only),
        "copy over metadata.json": (f"COPY (SELECT 'gone' AS x) TO '{metadata}' (FORMAT csv)", read_only),
        "copy into the warehouse": (f"COPY (SELECT 1 AS x) TO '{root}/new.parquet'", read_only),
        "copy outside the warehouse": (f"COPY (SELECT 1 AS x) TO '{outside}/x.csv'", read_only),
        "copy a view": (f"COPY history TO '{outside}/h.parquet'", read_only),
        "copy to an expression": (f"COPY (SELECT 1 AS x) TO ('{root}' || '/catalog.db')", "quoted path"),
        "export database": (f"EXPORT DATABASE '{root}/export'", read_only),
        "read a local file": ("SELECT * FROM read_text('/etc/hostname')", "Permission Error"),
        "read past the warehouse": (f"SELECT * FROM read_text('{root}/../../../etc/hostname')", "Permission Error"),
        "read csv outside": ("SELECT * FROM read_csv('/etc/passwd', sep = ':')", "Permission Error"),
        "install": ("INSTALL httpfs", "LOAD is not allowed"),
        "load": ("LOAD httpfs", "LOAD is not allowed"),
        "attach a new database": (f"ATTACH '{root}/x.duckdb' AS x", "ATTACH is not allowed"),
        "attach the catalog": (f"ATTACH '{root}/catalog.db' AS c", "ATTACH is not allowed"),
        "re-enable access": ("SET enable_external_access = true", "the configuration has been locked"),
        "widen the folders": ("SET allowed_directories = ['/']", "the configuration has been locked"),
        "unlock": ("SET lock_configuration = false", "the configuration has been locked"),
        "reset the lock": ("RESET lock_configuration", "the configuration has been locked"),
        "file logging": (
            f"SELECT * FROM enable_logging(storage = 'file', storage_path = '{root}/log')",
            "enable_logging is not allowed",
        ),
        "call file logging": (f"CALL enable_logging(storage = 'file', storage_path = '{root}/log')", "enable_logging"),
        "copy database": ("COPY FROM DATABASE memory TO other", "not allowed"),
    }


def test_hostile_statements_are_refused_and_the_warehouse_is_unchanged(small, warehouse, tmp_path):
    before = checksums(warehouse)
    outside = tmp_path / "outside"
    outside.mkdir()
    for name, (statement, says) in hostile_statements(warehouse, current_metadata(small), outside).items():
        with pytest.raises(SqlError) as refused:
            sql_main(["--quiet", "--query", statement])
        assert says in str(refused.value), f"{name}: {refused.value}"
    assert checksums(warehouse) == before
    assert list(outside.iterdir()) == []
    # The session still answers queries afterwards, from the same data.
    assert sql_main(["--quiet", "--query", "SELECT count(*) FROM history"]) == 0


def test_hostile_statement_through_the_command_is_one_clear_error(small, warehouse):
    before = checksums(warehouse)
    statement = f"COPY (SELECT 'gone' AS x) TO '{warehouse}/catalog.db' (FORMAT csv)"
    done = subprocess.run(
        [sys.executable, "-m", "seqlake.cli", "sql", "--quiet", "--query", statement], capture_output=True, text=True
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "the session is read-only; pass --allow-writes DIR" in done.stderr
    assert checksums(warehouse) == before
    # and every later command still works
    after = subprocess.run(
        [sys.executable, "-m", "seqlake.cli", "sql", "--quiet", "--query", "SELECT count(*) AS n FROM history"],
        capture_output=True,
        text=True,
    )
    assert after.returncode == 0, after.stderr
    assert "5443" in after.stdout


def test_the_notebook_session_is_read_only_too(small, warehouse, tmp_path):
    before = checksums(warehouse)
    with open_session(small.config, quiet=True) as session:
        for statement, says in hostile_statements(warehouse, current_metadata(small), tmp_path).values():
            with pytest.raises(SqlError, match=None) as refused:
                session.query(statement)
            assert says in str(refused.value)
        assert session.query("SELECT count(*) AS n FROM history")["n"].tolist() == [5443]
    assert checksums(warehouse) == before


def test_allow_writes_opens_one_export_folder(small, warehouse, tmp_path, capsys):
    before = checksums(warehouse)
    export = tmp_path / "export"
    assert (
        sql_main(
            [
                "--quiet",
                "--allow-writes",
                str(export),
                "--query",
                f"COPY (SELECT user_id, count(*) AS n FROM history GROUP BY 1) TO '{export}/lengths.csv' (HEADER)",
            ]
        )
        == 0
    )
    assert (export / "lengths.csv").read_text().splitlines()[0] == "user_id,n"
    assert sql_main(["--quiet", "--allow-writes", str(export), "--query", f"EXPORT DATABASE '{export}/db'"]) == 0
    assert (export / "db" / "schema.sql").is_file()
    # Reading back what was exported is fine.
    assert sql_main(["--quiet", "--allow-writes", str(export), "--query", f"FROM '{export}/lengths.csv'"]) == 0
    capsys.readouterr()
    refused = {
        f"COPY (SELECT 1 AS x) TO '{export}/../elsewhere.csv'": "writes only go into the export folder",
        f"COPY (SELECT 1 AS x) TO '{warehouse}/catalog.db' (FORMAT csv)": "writes only go into the export folder",
        f"COPY (SELECT 1 AS x) TO ('{export}/' || 'x.csv')": "quoted path",
        "COPY (SELECT 1 AS x) TO 's3://bucket/x.csv'": "writes only go into the export folder",
        f"ATTACH '{export}/x.duckdb'": "ATTACH is not allowed",
    }
    for statement, says in refused.items():
        with pytest.raises(SqlError, match=None) as error:
            sql_main(["--quiet", "--allow-writes", str(export), "--query", statement])
        assert says in str(error.value), statement
    assert not (tmp_path / "elsewhere.csv").exists()
    assert checksums(warehouse) == before


@pytest.mark.parametrize("where", ["warehouse", "inside", "parent"])
def test_the_export_folder_cannot_overlap_the_warehouse(small, warehouse, where):
    folder = {"warehouse": warehouse, "inside": warehouse / "exports", "parent": warehouse.parent}[where]
    with pytest.raises(SqlError, match="the export folder overlaps the warehouse"):
        sql_main(["--quiet", "--allow-writes", str(folder), "--query", "SELECT 1"])
    assert not (warehouse / "exports").exists()
