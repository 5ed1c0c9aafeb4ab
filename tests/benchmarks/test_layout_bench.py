"""The layout benchmark on a small file: its structure, and the invariants its numbers must keep.

Only counted bytes are asserted on; wall-clock times are reported, never checked.
"""

from __future__ import annotations

import pyarrow.compute as pc
import pytest

from benchmarks.layout import (
    DEFAULT_VARIANT,
    EXPECTED_USERS,
    LOOKUP_COLUMNS,
    METRICS,
    format_table,
    history_rows,
    run_layout_bench,
)
from seqlake.core.config import load_config
from seqlake.tableformat.io import CountingFileSystem, FooterCache
from seqlake.tableformat.layout import DEFAULT_POLICY
from seqlake.tableformat.reader import read_user_from_file
from seqlake.tableformat.schema import KEY_COLUMNS, history_arrow_schema
from seqlake.tableformat.writer import HistoryFileWriter

HEAVY_ROWS = 4000
EXPECTED_VARIANTS = [
    "default",
    "default again (A/A)",
    "encodings fixed by type",
    "zstd-1",
    "zstd-3",
    "zstd-9",
    "snappy",
    "none",
    "integers under zstd",
    "plain integers, all zstd",
    *(
        f"dedicated {d} / packed {p}"
        for d in (256, 1024, 4096)
        for p in (4096, 16384, 65536)
        if (d, p) != (DEFAULT_POLICY.dedicated_user_rows, DEFAULT_POLICY.packed_row_group_rows)
    ),
    "no user alignment (128K rows)",
    "stats: all columns",
    "pages 8 KiB",
    "pages 1 MiB",
    "pages of at most 4,096 rows",
    "no page row limit",
]


@pytest.fixture(scope="module")
def rows():
    return run_layout_bench(users=300, heavy_users=2, heavy_rows=HEAVY_ROWS, repeats=1, lookups=50)


def by_name(rows) -> dict[str, dict]:
    return {row["variant"]: row for row in rows}


def test_every_variant_is_measured_on_every_metric(rows, measurement):
    assert [row["variant"] for row in rows] == EXPECTED_VARIANTS
    for row in rows:
        for key, *_ in METRICS:
            assert row[key] > 0, (row["variant"], key)
            assert row[f"{key}_ratio"] > 0, (row["variant"], key)
    table = format_table(rows)
    lines = [line for line in table.splitlines() if line.startswith("| ")]
    assert len(lines) == len(rows) + 1  # header and one line per variant
    assert all(line.count("|") == lines[0].count("|") for line in lines)
    measurement("layout benchmark (small: 300 users, heavy users at 4,000 rows, 1 repeat):\n" + table)


def test_default_row_is_the_unit_of_every_ratio(rows):
    default = by_name(rows)[DEFAULT_VARIANT]
    assert default["default"] and rows[0] is default
    for key, *_ in METRICS:
        assert default[f"{key}_ratio"] == 1.0
    for row in rows[1:]:
        assert not row["default"]
        assert row["file_bytes_ratio"] == row["file_bytes"] / default["file_bytes"]


def test_every_variant_returns_the_same_rows(rows):
    # A layout changes how rows are stored, never which rows a lookup finds.
    assert {row["rows"] for row in rows} == {rows[0]["rows"]}
    assert {row["heavy_rows"] for row in rows} == {HEAVY_ROWS}
    assert {row["light_rows"] for row in rows} == {rows[0]["light_rows"]}
    assert 0 < rows[0]["light_rows"] < HEAVY_ROWS
    assert {row["lookup_rows"] for row in rows} == {rows[0]["lookup_rows"]}
    assert {row["result_digest"] for row in rows} == {rows[0]["result_digest"]}


def test_user_aligned_row_groups_cut_heavy_lookup_bytes(rows):
    # The claim the layout rests on; bytes are counted, so it holds on any machine.
    named = by_name(rows)
    unaligned, default = named["no user alignment (128K rows)"], named[DEFAULT_VARIANT]
    assert unaligned["heavy_lookup_bytes"] > default["heavy_lookup_bytes"]
    assert unaligned["lookup_bytes"] > default["lookup_bytes"]


def test_control_repeats_the_default_byte_for_byte(rows):
    named = by_name(rows)
    control = named["default again (A/A)"]
    for key, *_ in METRICS:
        if key.endswith("bytes"):
            assert control[f"{key}_ratio"] == 1.0, key


def test_compression_pays(rows):
    named = by_name(rows)
    for zstd in ("default", "zstd-1", "zstd-3", "zstd-9"):
        assert named["none"]["file_bytes"] > named[zstd]["file_bytes"]


def test_statistics_on_every_column_grow_the_footer(rows):
    named = by_name(rows)
    assert named["stats: all columns"]["footer_bytes"] > named[DEFAULT_VARIANT]["footer_bytes"]


def test_bench_lookup_reads_what_the_history_reader_reads(tmp_path):
    # The benchmark mirrors HistoryReader.read_user_in_file (which needs no Iceberg table itself):
    # both must read the same bytes and return the same rows, or the benchmark measures something else.
    config = load_config()
    data = history_rows(config, users=200, heavy_users=1, heavy_rows=3000, seed=3)
    path = str(tmp_path / "f.parquet")
    with HistoryFileWriter(
        path,
        history_arrow_schema(config),
        run_id="b1",
        bucket=0,
        group_order=list(config.feature_groups),
        expected_users=EXPECTED_USERS,
    ) as writer:
        writer.write(data)
    counts = data.group_by("user_id").aggregate([("user_id", "count")])
    users = counts.sort_by([("user_id_count", "descending")])["user_id"].to_pylist()
    for user in (users[0], users[len(users) // 2], users[-1]):
        ours = read_user_from_file(CountingFileSystem(), FooterCache(), path, user, LOOKUP_COLUMNS)
        assert ours.num_rows == data.filter(pc.equal(data["user_id"], user)).num_rows

    # history_rows yields rows in the writer's key order (the writer would have refused otherwise).
    assert data.sort_by([(k, "ascending") for k in KEY_COLUMNS])["lsn"].equals(data["lsn"])
