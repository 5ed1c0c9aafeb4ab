"""Real I/O of point lookups, counted through an instrumented filesystem (not estimated)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from seqlake.tableformat.io import CountingFileSystem, FooterCache
from seqlake.tableformat.reader import HistoryReader, Selection
from tests.conftest import make_config
from tests.history_data import history_table, publish_run, synthetic_history

USER = 1_000_003
COLUMNS = ["event_ts", "item_id"]


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    config = make_config(tmp_path_factory.mktemp("io") / "wh")
    table = history_table(config)
    lengths = {1_000_000 + i: 20 + (i * 37) % 400 for i in range(2000)} | {USER: 10_000}
    publish_run(table, config, synthetic_history(config, lengths, seed=5), "w1", batch_rows=8192)
    publish_run(table, config, synthetic_history(config, {USER: 300, 1_000_004: 50}, seed=6), "w2")
    publish_run(table, config, synthetic_history(config, {USER: 40, 1_000_010: 50}, seed=7), "w3")
    return table


def compressed_size(uri: str, user: int, columns: list[str], group_name: str | None = None) -> int:
    """Compressed bytes of `columns` in the row groups that hold only `user` (and only `group_name`)."""
    meta = pq.read_metadata(uri.removeprefix("file://"))
    names = meta.schema.to_arrow_schema().names
    total = 0
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        stats = group.column(names.index("user_id")).statistics
        kind = group.column(names.index("feature_group")).statistics
        if stats.min == stats.max == user and (group_name is None or kind.min == kind.max == group_name):
            total += sum(group.column(names.index(c)).total_compressed_size for c in columns)
    return total


def test_ten_thousand_event_lookup_reads_little_more_than_its_two_columns(table, measurement):
    run_file = next(u for u in HistoryReader(table).files_for_user(USER) if "/rw1-" in u)
    target = compressed_size(run_file, USER, COLUMNS)
    fs = CountingFileSystem()
    reader = HistoryReader(table, fs, FooterCache())
    cold = reader.read_user_in_file(run_file, USER, COLUMNS)
    cold_io = fs.stats.snapshot()
    warm = reader.read_user_in_file(run_file, USER, COLUMNS)
    warm_io = fs.stats.since(cold_io)

    assert cold.num_rows == warm.num_rows == 10_000
    assert cold_io.opens == 2  # the footer, then the row groups
    assert cold_io.bytes_read <= 1.5 * target
    # With the footer cached, exactly the projected chunks: the user's feature groups interleave in
    # time, so the merge needs `event_ts` (asked for here) and `lsn` only for ties, of which it has none
    # (pre-buffering coalesces the chunks of adjacent row groups, reading the small gaps between them).
    assert target <= warm_io.bytes_read <= 1.1 * target
    assert warm_io.opens == 0 and warm_io.files == 1  # the data file stays open between lookups
    # Asked without `event_ts`, one feature group comes out of one run as stored: no key column is read.
    one_group = Selection(columns=("item_id", "watch_time_ms"), feature_groups=("engagement",))
    before = fs.stats.snapshot()
    rows = reader.read_user_in_file(run_file, USER, ["item_id", "watch_time_ms"], one_group)
    assert rows.column_names == ["item_id", "watch_time_ms"] and rows.num_rows > 0
    assert fs.stats.since(before).bytes_read == compressed_size(
        run_file, USER, ["item_id", "watch_time_ms"], "engagement"
    )
    measurement(
        f"I/O, 10K-event user, 2 columns ({target:,} B compressed): cold {cold_io.bytes_read:,} B "
        f"({cold_io.bytes_read / target:.2f}x, footer included) in {cold_io.reads} reads; "
        f"footer cached {warm_io.bytes_read:,} B ({warm_io.bytes_read / target:.2f}x)"
    )


def test_lookup_opens_one_file_per_sorted_run(table, measurement):
    fs = CountingFileSystem()
    reader = HistoryReader(table, fs)
    reader.read_user(USER, COLUMNS)  # cold: each file's footer is read once, for the lookup index
    cold = fs.stats.snapshot()
    history = reader.read_user(USER, COLUMNS)
    assert history.num_rows == 10_000 + 300 + 40
    assert fs.stats.since(cold).files == 3  # runs w1, w2, w3: one file each
    assert fs.stats.since(cold).opens == 0  # kept open since the first lookup
    times = history["event_ts"].to_pylist()
    assert times == sorted(times)

    # A user of runs w1 and w3 only: the w2 file of its bucket is pruned by its user bounds.
    other = CountingFileSystem()
    other_reader = HistoryReader(table, other)
    other_reader.read_user(1_000_010, COLUMNS)
    before = other.stats.snapshot()
    assert other_reader.read_user(1_000_010, COLUMNS).num_rows == (20 + 10 * 37 % 400) + 50
    assert other.stats.since(before).files == 2
    measurement(
        f"files read for a user present in 3 runs: {fs.stats.since(cold).files} "
        f"({cold.opens} opens for the first lookup, footers included); other user: {other.stats.since(before).files}"
    )


def test_top_k_of_a_long_history_reads_the_row_groups_holding_k_rows_plus_at_most_one(tmp_path, measurement):
    config = make_config(tmp_path / "wh")
    table = history_table(config)
    heavy = 1_000_042
    publish_run(table, config, synthetic_history(config, {heavy: 100_000, 1_000_043: 300}, seed=9), "w1")
    (uri,) = HistoryReader(table).files_for_user(heavy)
    meta = pq.read_metadata(uri.removeprefix("file://"))
    names = meta.schema.to_arrow_schema().names
    k = 500
    selection = Selection(columns=("item_id",), feature_groups=("engagement",), top_k=k)

    fs = CountingFileSystem()
    reader = HistoryReader(table, fs, FooterCache())
    newest = reader.read_user(heavy, selection=selection)
    whole = Selection(columns=("item_id", "event_ts"), feature_groups=("engagement",))
    everything = HistoryReader(table).read_user(heavy, selection=whole)
    assert newest["item_id"].to_pylist() == everything["item_id"].slice(everything.num_rows - k).to_pylist()

    # Row groups that hold the K newest rows, counted from the data itself.
    ts = everything["event_ts"].slice(everything.num_rows - k)
    holding = {
        rg
        for rg in range(meta.num_row_groups)
        for stats in [meta.row_group(rg).column(names.index("event_ts")).statistics]
        if meta.row_group(rg).column(names.index("user_id")).statistics.min == heavy
        and meta.row_group(rg).column(names.index("feature_group")).statistics.min == "engagement"
        and stats.max >= ts[0].as_py()
    }
    _, found = reader.lookup_index().segments([heavy], selection, reader.read_groups)
    chosen = sorted(set(found[heavy].rg.tolist()))
    assert len(chosen) <= len(holding) + 1
    read_limit = sum(
        meta.row_group(rg).column(names.index(c)).total_compressed_size
        for rg in chosen
        for c in ("item_id",)  # one feature group of one run: no key column is needed
    )
    assert fs.stats.bytes_read <= read_limit + meta.serialized_size + 8 + 256  # + the offset index
    measurement(
        f"Top-{k} of a 100,000-event history: {len(chosen)} of {meta.num_row_groups} row groups read "
        f"({len(holding)} hold the K rows), {fs.stats.bytes_read:,} B"
    )
