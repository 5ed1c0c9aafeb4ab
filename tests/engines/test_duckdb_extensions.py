"""DuckDB extensions load from the installed wheels, their signatures checked: once per process and
file, and again when the file changes."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import duckdb
import pytest

from seqlake.engines import duckdb_session
from seqlake.engines.duckdb_session import connect


def unchecked_allowed(con: duckdb.DuckDBPyConnection) -> bool:
    found = con.execute("SELECT current_setting('allow_unsigned_extensions')").fetchone()
    return bool(found and found[0])


@pytest.fixture
def avro_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The avro extension as a file of this test's own, which no database of this process has loaded."""
    copy = tmp_path / "avro.duckdb_extension"
    shutil.copyfile(duckdb_session.extension_path("avro"), copy)
    monkeypatch.setattr(duckdb_session, "extension_path", lambda name: copy)
    return copy


def test_a_file_is_checked_once_then_loaded_unchecked_until_it_changes(avro_copy: Path) -> None:
    with connect(extensions=("avro",)) as first:
        assert not unchecked_allowed(first)  # DuckDB checks the signature
        loaded = "SELECT count(*) FROM duckdb_extensions() WHERE loaded AND extension_name = 'avro'"
        assert first.execute(loaded).fetchone() == (1,)
    with connect(extensions=("avro",)) as second:
        assert unchecked_allowed(second)
        assert second.execute(loaded).fetchone() == (1,)
    # The same file with bytes changed in its code (a second later): checked again, and refused.
    checked_at = avro_copy.stat().st_mtime_ns
    with avro_copy.open("r+b") as file:
        file.seek(avro_copy.stat().st_size // 2)
        byte = file.read(1)
        file.seek(-1, 1)
        file.write(bytes([byte[0] ^ 0xFF]))
    os.utime(avro_copy, ns=(checked_at + 10**9, checked_at + 10**9))
    with pytest.raises(duckdb.Error, match="signature"):
        connect(extensions=("avro",))


def test_a_database_without_extensions_checks_nothing_and_allows_nothing_unchecked() -> None:
    with connect(extensions=()) as con:
        assert not unchecked_allowed(con)
