"""Analyst SQL cannot harm the warehouse: hostile statements through `seqlake sql` and the notebook session.

Each statement is refused with a clear message, and every file of the warehouse is byte for byte the
same afterwards. Every statement type DuckDB's parser knows is either refused or cannot write, and
the engine itself refuses the writes the statement guard refuses (the guard bypassed). `--allow-writes
DIR` opens exactly one export folder.
"""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import duckdb
import pytest

from seqlake.core.errors import ReadOnlyError
from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.jobs.sql import main as sql_main
from seqlake.sql_guard import ALLOWED
from seqlake.sql_session import SqlError, open_session
from tests import forked_commands
from tests.facade.test_sql import build_small_warehouse
from tests.snapshots import current_snapshot


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
        "prepare a copy": (
            f"PREPARE p AS COPY (SELECT 'gone' AS x) TO '{root}/catalog.db' (FORMAT csv); EXECUTE p",
            "a prepared statement cannot write",
        ),
        "execute what was never prepared": ("EXECUTE never_prepared", "no statement 'never_prepared' was prepared"),
        "explain analyze a copy": (f"EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO '{root}/x.csv'", read_only),
        "dynamic sql": (f"FROM query('COPY (SELECT 1) TO ''{root}/x.csv'' ')", "query is not allowed"),
        "checkpoint": ("CHECKPOINT", "CHECKPOINT is not allowed"),
        "iceberg properties": (
            f"FROM set_iceberg_table_properties('{metadata}', {{'x': 'y'}})",
            "set_iceberg_table_properties is not allowed",
        ),
        "a persistent secret": ("CREATE PERSISTENT SECRET s (TYPE http)", "secrets cannot be created"),
        "a macro that writes": (
            f"CREATE MACRO m() AS TABLE FROM enable_logging(storage = 'file', storage_path = '{root}/log')",
            "enable_logging is not allowed",
        ),
        "write_log": ("SELECT write_log('x')", "write_log is not allowed"),
        "vacuum": ("VACUUM", "VACUUM is not allowed"),
        "pragma": ("PRAGMA enable_profiling", "PRAGMA is not allowed"),
        "detach": ("DETACH memory", "DETACH is not allowed"),
        "delta's reader outside": ("FROM delta_list_files('/etc')", "delta_list_files is not allowed"),
        "delta scan outside": ("FROM delta_scan('/etc')", "delta_scan is not allowed"),
        "delta_files outside": ("FROM delta_files('/etc')", "is not a Delta table of this warehouse"),
        "an unverified read of history": (
            "FROM iceberg_scan(getvariable('history_metadata'))",
            "read through the history view",
        ),
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
    done = forked_commands.run(
        [sys.executable, "-m", "seqlake.cli", "sql", "--quiet", "--query", statement], capture_output=True, text=True
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "the session is read-only; pass --allow-writes DIR" in done.stderr
    assert checksums(warehouse) == before
    # and every later command still works
    after = forked_commands.run(
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


# -- every statement type ---------------------------------------------------------------------------

# Types DuckDB's parser never gives a statement written in SQL: ANALYZE parses as VACUUM, CREATE MACRO
# and CREATE FUNCTION as CREATE, SET VARIABLE as SET; the others belong to the Python relational API
# and the C API. The guard refuses them all should one ever come.
NEVER_PARSED = {"INVALID", "RELATION", "LOGICAL_PLAN", "MULTI", "ANALYZE", "VARIABLE_SET", "CREATE_FUNC", "EXTENSION"}


def statement_samples(root: Path, history_file: Path, metadata: str, export: Path) -> dict[str, list[str]]:
    """StatementType name -> statements DuckDB parses as that type: harmless ones and attempts to write."""
    delta_log = "file://" + str(next((root / "landing").rglob("_delta_log/*.json")))  # the warehouse by URI
    return {
        "SELECT": [
            "SELECT count(*) FROM history",
            "DESCRIBE history",
            "SUMMARIZE SELECT 1 AS x",
            "PIVOT (SELECT 1 AS a, 2 AS b) ON a USING sum(b)",
            "PRAGMA show_tables",
            f"SELECT * FROM read_parquet('{history_file}')",
            f"SELECT * FROM enable_logging(storage = 'file', storage_path = '{root}/log')",
            f"FROM set_iceberg_table_properties('{metadata}', {{'x': 'y'}})",
            f"FROM query('COPY (SELECT 1) TO ''{root}/x.csv'' ')",
        ],
        "INSERT": ["INSERT INTO scratch VALUES (2)", "INSERT INTO scratch SELECT count(*) FROM history"],
        "UPDATE": ["UPDATE scratch SET x = x + 1"],
        "DELETE": ["DELETE FROM scratch WHERE x > 100", "TRUNCATE scratch"],
        "MERGE_INTO": ["MERGE INTO scratch USING (SELECT 1 AS x) AS s ON scratch.x = s.x WHEN MATCHED THEN DELETE"],
        "CREATE": [
            "CREATE TEMP TABLE probe AS SELECT user_id FROM history LIMIT 3",
            "CREATE OR REPLACE VIEW probe_view AS SELECT * FROM history",
            "CREATE MACRO probe_macro(a) AS a + 1",
            "CREATE TYPE probe_type AS ENUM ('a')",
            f"CREATE TABLE probe_raw AS SELECT * FROM read_parquet('{history_file}')",
            "CREATE PERSISTENT SECRET probe_secret (TYPE http)",
            "CREATE MACRO probe_log() AS TABLE FROM enable_logging()",
        ],
        "ALTER": ["ALTER TABLE scratch ADD COLUMN y INTEGER", "COMMENT ON TABLE scratch IS 'probe'"],
        "TRANSACTION": ["BEGIN TRANSACTION; ROLLBACK"],
        "DROP": ["DROP TABLE IF EXISTS nothing_here", "DROP SECRET IF EXISTS nothing_here"],
        "SET": [
            "SET VARIABLE probe = 1",
            "RESET VARIABLE probe",
            "USE memory",
            "SET enable_external_access = true",
            f"SET allowed_directories = ['{root.parent}']",
        ],
        "CALL": ["CALL pragma_version()", "CALL enable_logging()", "CHECKPOINT", "FORCE CHECKPOINT"],
        "PREPARE": [
            "PREPARE probe_p AS SELECT 42",
            f"PREPARE probe_w AS COPY (SELECT 'gone' AS x) TO '{root}/catalog.db' (FORMAT csv)",
            "PREPARE probe_q AS SELECT * FROM query('SELECT 1')",
        ],
        "EXECUTE": ["PREPARE probe_e AS SELECT 42; EXECUTE probe_e", "EXECUTE never_prepared"],
        "EXPLAIN": [
            "EXPLAIN SELECT count(*) FROM history",
            "EXPLAIN ANALYZE SELECT count(*) FROM history",
            f"EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO '{root}/x.csv'",
        ],
        "COPY": [
            f"CREATE TABLE probe_log AS FROM read_json('{delta_log}') LIMIT 0; COPY probe_log FROM '{delta_log}'",
            f"COPY scratch FROM '{root}/no-such.csv'",
            f"COPY (SELECT 1 AS x) TO '{root}/x.csv'",
            f"COPY (SELECT * FROM history WHERE user_id = 11) TO '{history_file}' (FORMAT parquet)",
            f"COPY (SELECT count(*) AS n FROM history) TO '{export}/n.csv'",
        ],
        "EXPORT": [f"EXPORT DATABASE '{root}/exported'", f"EXPORT DATABASE '{export}/db'"],
        "PRAGMA": ["PRAGMA enable_profiling", "PRAGMA force_checkpoint"],
        "VACUUM": ["VACUUM", "ANALYZE"],
        "LOAD": ["LOAD httpfs", "INSTALL httpfs"],
        "ATTACH": [f"ATTACH '{root}/x.duckdb' AS x", f"ATTACH '{root}/catalog.db' AS c (TYPE sqlite)"],
        "DETACH": ["DETACH memory"],
        "COPY_DATABASE": ["COPY FROM DATABASE memory TO other"],
    }


def test_every_statement_type_is_refused_or_cannot_write(small, warehouse, tmp_path):
    members = set(duckdb.StatementType.__members__)
    metadata = current_metadata(small)
    history_file = next((warehouse / "seqlake" / "history" / "data").rglob("*.parquet"))
    export = tmp_path / "export"  # the one folder writes may go to (--allow-writes)
    samples = statement_samples(warehouse, history_file, metadata, export)
    # A type a later DuckDB adds fails here until it is judged (and the guard refuses it meanwhile).
    assert set(samples) | NEVER_PARSED == members and not set(samples) & NEVER_PARSED
    assert all(getattr(duckdb.StatementType, name) not in ALLOWED for name in NEVER_PARSED)
    before = checksums(warehouse)
    outcomes: dict[str, set[str]] = {}
    with open_session(small.config, quiet=True, allow_writes=export) as session:
        session.con.execute("CREATE TABLE scratch AS SELECT 1 AS x")
        # A statement DuckDB parses to a type outside its own enumeration is refused too.
        with pytest.raises(ReadOnlyError, match="UPDATE is not allowed"):
            session.judge("UPDATE EXTENSIONS", session.con.extract_statements("UPDATE EXTENSIONS"))
        for name, statements in samples.items():
            member = getattr(duckdb.StatementType, name)
            for text in statements:
                parsed = session.con.extract_statements(text)
                assert member in {p.type for p in parsed}, f"{text!r} does not parse as {name}"
                try:
                    session.judge(text, parsed)
                except ReadOnlyError:
                    outcomes.setdefault(name, set()).add("refused")
                    continue
                assert member in ALLOWED, f"{text!r} ({name}) was not refused"
                try:
                    session.run(text)
                    outcomes.setdefault(name, set()).add("ran")
                except SqlError:  # DuckDB refused it (locked settings, unreadable history files...)
                    outcomes.setdefault(name, set()).add("failed")
        # After all of it, the session still reads the same data.
        assert session.query("SELECT count(*) AS n FROM history")["n"].tolist() == [5443]
    assert checksums(warehouse) == before
    assert not any(p.name in ("log", "x.csv", "x.duckdb", "exported") for p in warehouse.rglob("*"))
    assert (export / "n.csv").is_file() and (export / "db" / "schema.sql").is_file()
    assert {p.parent for p in export.rglob("*") if p.is_file()} == {export, export / "db"}
    for name in samples:
        member = getattr(duckdb.StatementType, name)
        assert outcomes[name] == {"refused"} if member not in ALLOWED else "ran" in outcomes[name], (name, outcomes)


def test_the_engine_refuses_every_write_even_without_the_guard(small, warehouse, tmp_path):
    """The second wall alone: statements the guard refuses, run on the session's DuckDB connection
    directly, still cannot write, read a history data file unverified, or reach outside the warehouse."""
    metadata = current_metadata(small)
    history_file = next((warehouse / "seqlake" / "history" / "data").rglob("*.parquet"))
    outside = tmp_path / "outside"
    outside.mkdir()
    before = checksums(warehouse)
    copy = "COPY (SELECT 'gone' AS x) TO '{}' (FORMAT csv)"
    attempts = [
        *(copy.format(t) for t in (warehouse / "catalog.db", f"file://{warehouse}/catalog.db", metadata)),
        *(copy.format(t) for t in (f"file:{warehouse}/catalog.db", warehouse / "new.csv", outside / "x.csv")),
        f"COPY (SELECT 1 AS x) TO '{warehouse}/catalog.db' (FORMAT csv, USE_TMP_FILE false)",
        f"COPY (SELECT * FROM history WHERE user_id = 11) TO '{history_file}' (FORMAT parquet)",
        f"COPY (SELECT * FROM history WHERE user_id = 11) TO 'file://{history_file}' (FORMAT parquet)",
        f"COPY (SELECT 1 AS x) TO '{warehouse}/parts' (FORMAT parquet, PARTITION_BY (x), WRITE_PARTITION_COLUMNS)",
        f"EXPORT DATABASE '{warehouse}/exported'",
        f"EXPORT DATABASE 'file://{warehouse}/exported'",
        f"ATTACH '{warehouse}/x.duckdb' AS x",
        f"ATTACH 'file://{warehouse}/x.duckdb' AS x",
        f"SELECT * FROM read_parquet('{history_file}')",
        f"SELECT * FROM read_parquet('file://{history_file}')",
        "SELECT * FROM iceberg_scan(getvariable('history_metadata'))",
        f"SELECT * FROM read_text('{outside}')",
        "INSTALL httpfs",
        "SET enable_external_access = true",
        "SET lock_configuration = false",
    ]
    with open_session(small.config, quiet=True) as session:
        for statement in attempts:
            with pytest.raises(duckdb.Error):
                session.con.execute(statement).fetchall()
        assert session.con.execute("SELECT count(*) FROM history").fetchall() == [(5443,)]
    assert checksums(warehouse) == before
    assert list(outside.iterdir()) == []
    assert not (warehouse / "exported").exists() and not (warehouse / "parts").exists()


def test_prepared_statements_cannot_overwrite_the_catalog_or_a_history_file(small, warehouse):
    """The reproductions of issue 24: through `seqlake sql`, one line each, exit 1, and the catalog's
    and the history file's bytes unchanged (hashed as they are, not as their rows)."""
    history_file = next((warehouse / "seqlake" / "history" / "data").rglob("*.parquet"))

    def digest(path: Path) -> str:
        if path.name == "catalog.db":  # pages a reader left in SQLite's write-ahead log go to the file first
            with closing(sqlite3.connect(path)) as con:
                con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return hashlib.sha256(path.read_bytes()).hexdigest()

    def seqlake_sql(query: str) -> subprocess.CompletedProcess:
        return forked_commands.run(
            [sys.executable, "-m", "seqlake.cli", "sql", "--quiet", "--query", query], capture_output=True, text=True
        )

    assert seqlake_sql("SELECT count(*) FROM history").returncode == 0
    catalog, data = digest(warehouse / "catalog.db"), digest(history_file)
    attempts = [
        f"PREPARE p AS COPY (SELECT 'gone' AS x) TO '{warehouse}/catalog.db' (FORMAT csv); EXECUTE p",
        f"PREPARE p AS COPY (SELECT * FROM history WHERE user_id = 11) TO '{history_file}' (FORMAT parquet); EXECUTE p",
        f"PREPARE p AS SELECT 1; EXECUTE p; PREPARE p AS COPY (SELECT 1 AS x) TO '{warehouse}/catalog.db'; EXECUTE p",
        f"COPY (SELECT * FROM history WHERE user_id = 11) TO '{history_file}' (FORMAT parquet)",
    ]
    for query in attempts:
        done = seqlake_sql(query)
        assert done.returncode == 1, done.stdout
        assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith("seqlake sql: error: "), (
            done.stderr
        )
        assert "cannot write" in done.stderr or "read-only" in done.stderr
        assert digest(warehouse / "catalog.db") == catalog and digest(history_file) == data
    after = seqlake_sql("SELECT count(*) AS n FROM history")
    assert after.returncode == 0 and "5443" in after.stdout
    with pytest.raises(SqlError, match="a prepared statement cannot write"):
        sql_main(["--quiet", "--query", attempts[0]])
    assert digest(warehouse / "catalog.db") == catalog


def test_a_table_whose_metadata_spells_file_colon_is_read_and_only_its_files_open(tmp_path):
    """Spark writes local paths as file:/path (Hadoop's spelling), which DuckDB opens with its own
    local file system, not the read-only one: the session lets that file system open exactly the
    current snapshot's metadata files of such a table (its manifests), never a data file (the table's
    verified view reads those), nothing beside them, and the guard refuses writing them."""
    small = build_small_warehouse(tmp_path / "warehouse")
    catalog = open_catalog(small.config)
    identifier = table_identifier(small.config, "raw_events")
    old = catalog.load_table(identifier)
    rows = old.scan().to_arrow()
    catalog.drop_table(identifier)
    location = f"file:{tmp_path}/warehouse/seqlake/raw_spelled"
    table = catalog.create_table(identifier, schema=old.schema(), location=location, properties=old.properties)
    table.append(rows)
    table = catalog.load_table(identifier)
    assert current_snapshot(table).manifest_list.startswith("file:/") and "://" not in table.metadata_location
    before = checksums(tmp_path / "warehouse")
    with open_session(small.config, quiet=True) as session:
        assert session.query("SELECT count(*) AS n FROM raw_events")["n"].tolist() == [rows.num_rows]
        data = [t.file.file_path.removeprefix("file:") for t in table.scan().plan_files()]
        assert not set(data) & set(session.local_files) and len(session.local_files) == 2  # the manifests
        with pytest.raises(duckdb.Error):  # DuckDB itself reads no data file: only the verified view does
            session.con.execute(f"SELECT count(*) FROM read_parquet('file:{data[0]}')").fetchall()
        beside = Path(data[0]).with_name("beside.parquet")
        for target in (beside, Path(data[0]).parent.parent / "metadata" / "v9.metadata.json"):
            with pytest.raises(duckdb.Error, match="Permission Error"):
                session.con.execute(f"COPY (SELECT 1 AS x) TO '{target}' (FORMAT csv)")
        with pytest.raises(SqlError, match="the session is read-only"):
            session.run(f"COPY (SELECT 1 AS x) TO '{data[0]}' (FORMAT parquet)")
    assert checksums(tmp_path / "warehouse") == before
