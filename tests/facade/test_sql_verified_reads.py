"""`seqlake sql` and `Lake.sql` never return rows from a damaged history page.

DuckDB's Parquet reader checks no page checksums; the SQL session's `history` view reads through a
verified Arrow scan instead (`seqlake.tableformat.verified_scan`). One history file of the small warehouse is
damaged in place, a byte flipped at offsets across its dictionary pages, data pages and footer. After
each flip, a digest of the whole history view is either the clean table's or a one-line error naming
the table, the file and what is wrong: through a new session (what `seqlake sql` opens) and through
`Lake.sql`, as `seqlake history` refuses the same file. DuckDB reading the same damaged file itself
(`iceberg_scan`, the control) returns a wrong digest for some of the flips.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

import seqlake
from seqlake.engines.duckdb_session import lake_cursor
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.sql_session import SqlError, open_session
from tests import forked_commands
from tests.facade.test_sql import build_small_warehouse
from tests.tableformat.test_verified_reads import damage_offsets

DIGEST = "SELECT count(*) AS n, md5(string_agg(h::VARCHAR, '|' ORDER BY h::VARCHAR)) AS digest FROM {} AS h"
PER_PART = 10  # offsets flipped per part of the file


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return build_small_warehouse(tmp_path_factory.mktemp("sql_verified") / "warehouse")


def largest_history_file(config) -> tuple[str, Path]:
    history, _ = history_tables(config)
    task = max(history.scan().plan_files(), key=lambda t: t.file.file_size_in_bytes)
    return task.file.file_path, Path(task.file.file_path.removeprefix("file://"))


def control_digest(config) -> tuple:
    """The digest as DuckDB computes it reading the files itself (no page checksums checked)."""
    history, _ = history_tables(config)
    with lake_cursor() as con:
        digest = con.execute(DIGEST.format("iceberg_scan(?)"), [history.metadata_location]).fetchone()
    assert digest is not None  # an aggregate answers one row
    return digest


def page_offsets(path: Path) -> dict[str, list[int]]:
    """Offsets in every dictionary page and data page (headers and bodies) of the file, and its footer."""
    meta = pq.read_metadata(path)
    dictionary, data = [], []
    for g in range(meta.num_row_groups):
        for c in range(meta.num_columns):
            chunk = meta.row_group(g).column(c)
            if chunk.dictionary_page_offset is not None:
                dictionary += [chunk.dictionary_page_offset + k for k in (3, 12, 30)]
            start, length = chunk.data_page_offset, chunk.total_compressed_size
            data += [start + 5, start + 24, start + length // 2, start + length - 2]
    return {"dictionary": dictionary, "data": data, "footer": damage_offsets(path)["footer"]}


def sample(offsets: list[int], n: int) -> list[int]:
    return [offsets[round(i * (len(offsets) - 1) / max(1, n - 1))] for i in range(min(n, len(offsets)))]


def digest_or_refusal(run) -> tuple | str:
    """The digest a reader computes, or the one-line error it raises."""
    try:
        return tuple(run())
    except SqlError as error:
        return str(error)


def test_flipped_bytes_through_sql_are_the_clean_rows_or_one_line_naming_the_file(small):
    uri, path = largest_history_file(small.config)
    query = DIGEST.format("history")
    with open_session(small.config, quiet=True) as session:
        clean = tuple(session.run(query)[0].rows[0])
    clean_control = control_digest(small.config)
    assert clean[0] == 5443
    original = path.read_bytes()
    refused: dict[str, int] = {}
    wrong_control = checked = 0
    kept = open_session(small.config, quiet=True)  # a session open before the damage (pages are read anew)
    lake = seqlake.open(small.config)
    try:
        for part, offsets in page_offsets(path).items():
            for i, offset in enumerate(sample(offsets, PER_PART)):
                damaged = bytearray(original)
                damaged[offset] ^= 0x5A
                path.write_bytes(bytes(damaged))
                checked += 1
                with contextlib.suppress(duckdb.Error):  # DuckDB may notice a flip by itself
                    wrong_control += control_digest(small.config) != clean_control
                got = {"kept session": digest_or_refusal(lambda: kept.run(query)[0].rows[0])}
                got["Lake.sql"] = digest_or_refusal(lambda: lake.sql(query).iloc[0])
                if part == "footer" or i % 4 == 0:  # footers are checked when a session opens
                    with open_session(small.config, quiet=True) as fresh:
                        got["new session"] = digest_or_refusal(lambda fresh=fresh: fresh.run(query)[0].rows[0])
                    with seqlake.open(small.config) as fresh_lake:
                        got["new Lake"] = digest_or_refusal(lambda fresh_lake=fresh_lake: fresh_lake.sql(query).iloc[0])
                for reader, result in got.items():
                    if isinstance(result, str):
                        assert "\n" not in result, result
                        assert f"table history: file {uri}: " in result, f"{reader}: {result}"
                        refused[part] = refused.get(part, 0) + 1
                    else:
                        assert result == clean, f"{part} byte {offset}: wrong rows through {reader}"
    finally:
        path.write_bytes(original)
        kept.close()
        lake.close()
    assert checked == 3 * PER_PART
    assert set(refused) == {"dictionary", "data", "footer"}, refused
    # Without page checksums the same damage turns into wrong rows: the verified scan is what refuses it.
    assert wrong_control > 0


def test_a_damaged_page_through_seqlake_sql_is_one_line_and_exit_1(small, monkeypatch):
    uri, path = largest_history_file(small.config)
    original = path.read_bytes()
    offsets = damage_offsets(path)
    monkeypatch.setenv("SEQLAKE_WAREHOUSE", str(small.config.warehouse_path()))
    try:
        for offset in (offsets["data"][len(offsets["data"]) // 2], offsets["footer"][5]):
            damaged = bytearray(original)
            damaged[offset] ^= 0x5A
            path.write_bytes(bytes(damaged))
            command = [sys.executable, "-m", "seqlake.cli"]
            done = forked_commands.run(
                [*command, "sql", "--quiet", "--query", DIGEST.format("history")], capture_output=True, text=True
            )
            refused = forked_commands.run([*command, "history", "--user", "44"], capture_output=True, text=True)
            if done.returncode == 0:  # a flip the page checksums do not cover: the rows must be clean
                assert refused.returncode == 0
                continue
            assert done.returncode == 1 and refused.returncode == 1
            for stderr in (done.stderr, refused.stderr):
                assert len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr, stderr
                assert f"table history: file {uri}: " in stderr
    finally:
        path.write_bytes(original)
