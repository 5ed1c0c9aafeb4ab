"""A history file replaced by another valid Parquet file is refused by every seqlake reader.

Two replacements of one live history file of the small warehouse, each a file that reads without a
single checksum error: the file's own rows filtered down to one user (written by DuckDB, so its
footer has none of seqlake's metadata; what the issue's `COPY ... TO` did) and another history file
written by seqlake (its footer intact, its size not the manifest's). Each is refused, with one line
naming the table, the file and the problem, by `seqlake history`, `Lake.history` and `Lake.histories`,
a Top-K read by pages, the cached reader, `seqlake sql` and `Lake.sql`, and the samples rebuild; the
clean file restored, every reader answers again.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
import yaml

import seqlake
from seqlake.core.errors import CorruptFileError, SqlError
from seqlake.engines.duckdb_session import lake_cursor
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.sql_session import open_session
from seqlake.tableformat.cache import CachedHistoryReader
from seqlake.tableformat.reader import HistoryReader, Selection
from tests import forked_commands
from tests.capture_step import capture_step
from tests.facade.test_sql import build_small_warehouse

USER = 44  # 5,000 rows, in bucket 1's files of both live runs (the users the capture step asks for)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    root = tmp_path_factory.mktemp("replaced")
    small = build_small_warehouse(root / "warehouse")
    config_file = root / "seqlake.yaml"
    # Two capture points per window, so that step 1's requests ask for USER (whose files get replaced).
    data = small.config.model_dump(mode="json")
    data["training"]["captures_per_window"] = 2
    config_file.write_text(yaml.safe_dump(data))
    assert capture_step(str(config_file), 1) > 0  # a training table, for the samples rebuild
    return small


def files_of(config) -> list[tuple[str, Path, int]]:
    """(uri, path, manifest size) of every live history file, largest first."""
    history, _ = history_tables(config)
    tasks = sorted(history.scan().plan_files(), key=lambda t: -t.file.file_size_in_bytes)
    return [
        (t.file.file_path, Path(t.file.file_path.removeprefix("file://")), t.file.file_size_in_bytes) for t in tasks
    ]


def replacements(path: Path, other: Path, work: Path) -> dict[str, Path]:
    """Valid Parquet files to put in `path`'s place: a filtered copy padded to the original's size
    (zeros between its column chunks and its footer, which readers find from the end), so that only
    its footer gives it away; and another history file seqlake wrote."""
    filtered = work / "filtered.parquet"
    with lake_cursor() as con:
        con.execute(
            f"COPY (FROM read_parquet('{path}') WHERE user_id = {USER} AND lsn % 2 = 0) TO '{filtered}' "
            "(FORMAT parquet, COMPRESSION zstd)"
        )
    data, size = filtered.read_bytes(), path.stat().st_size
    assert len(data) < size
    footer = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    filtered.write_bytes(data[:footer] + bytes(size - len(data)) + data[footer:])
    return {"filtered copy (no seqlake metadata)": filtered, "another seqlake file (another size)": other}


def refusals(config) -> dict[str, str]:
    """What each reader says about the replaced file: one line each."""
    said: dict[str, str] = {}

    def expect(name: str, read) -> None:
        try:
            read()
        except (CorruptFileError, SqlError) as error:
            said[name] = str(error)
            return
        said[name] = "read without an error"

    history, _ = history_tables(config)
    with seqlake.open(config) as lake:
        expect("Lake.history", lambda: lake.history(USER))
        expect("Lake.histories", lambda: lake.histories([11, USER]))
        expect("Lake.history Top-K by pages", lambda: lake.history(USER, top_k=10))
        expect("Lake.sql", lambda: lake.sql("SELECT count(*) FROM history WHERE user_id = 44"))
        expect("samples rebuild", lambda: lake.samples("ranking"))
    expect("cached reader", lambda: CachedHistoryReader(history).read_user(USER, selection=Selection(top_k=10)))
    expect("plain reader", lambda: HistoryReader(history).read_user(USER))

    def sql_session() -> None:
        with open_session(config, quiet=True) as session:
            session.run("SELECT count(*) FROM history")

    expect("SQL session", sql_session)
    command = [sys.executable, "-m", "seqlake.cli"]
    env = {"SEQLAKE_WAREHOUSE": str(config.warehouse_path())}
    commands = {
        "seqlake history": ["history", "--user", str(USER)],
        "seqlake sql": ["sql", "--quiet", "-q", "FROM history"],
    }
    for name, args in commands.items():
        done = forked_commands.run([*command, *args], capture_output=True, text=True, env={**os.environ, **env})
        lines = done.stderr.strip().splitlines()
        said[name] = lines[0] if done.returncode == 1 and len(lines) == 1 else f"exit {done.returncode}: {done.stderr}"
    return said


def test_a_replaced_history_file_is_refused_by_every_reader(small, tmp_path):
    files = files_of(small.config)
    uri, path, size = files[0]
    other = files[1][1]
    with seqlake.open(small.config) as lake:
        clean = lake.history(USER)
        clean_count = lake.sql("SELECT count(*) AS n FROM history")["n"].tolist()
        clean_samples = lake.samples("ranking")
    assert clean.num_rows == 5000
    original = path.read_bytes()
    problems = {
        "filtered copy (no seqlake metadata)": "not a file seqlake wrote",
        "another seqlake file (another size)": f"differs from the manifest's {size}",
    }
    try:
        for kind, replacement in replacements(path, other, tmp_path).items():
            shutil.copyfile(replacement, path)
            with lake_cursor() as con:  # a valid Parquet file: DuckDB reads it without an error
                counted = con.execute(f"SELECT count(*) FROM read_parquet('{path}')").fetchone()
                assert counted is not None and counted[0] > 0
            said = refusals(small.config)
            for reader, message in said.items():
                assert "\n" not in message, f"{kind}, {reader}: {message}"
                assert f"table history: file {uri}: " in message, f"{kind}, {reader}: {message}"
                assert problems[kind] in message, f"{kind}, {reader}: {message}"
    finally:
        path.write_bytes(original)
    with seqlake.open(small.config) as lake:  # the file restored: every reader answers as before
        assert lake.history(USER).equals(clean)
        assert lake.sql("SELECT count(*) AS n FROM history")["n"].tolist() == clean_count
        assert lake.samples("ranking").requests == clean_samples.requests
