"""Top-K of a long history decodes only the newest pages, found with the page index."""

from __future__ import annotations

from pathlib import Path

import pytest

from seqlake.tableformat.cache import CachedHistoryReader
from seqlake.tableformat.io import CountingFileSystem, FooterCache
from seqlake.tableformat.layout import LayoutPolicy
from seqlake.tableformat.reader import HistoryReader, Selection
from seqlake.tableformat.thrift_compact import decode, encode
from seqlake.tableformat.verified import CorruptFileError
from tests.conftest import make_config
from tests.history_data import history_table, publish_run, synthetic_history

HEAVY = 1_000_042
SMALL_PAGES = LayoutPolicy(data_page_size=8 * 1024)


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    config = make_config(tmp_path_factory.mktemp("topk") / "wh")
    table = history_table(config)
    data = synthetic_history(config, {HEAVY: 100_000, 1_000_043: 300}, seed=9)
    publish_run(table, config, data, "w1", policy=SMALL_PAGES)
    return table


@pytest.mark.parametrize("groups", [("engagement",), None])
def test_top_100_of_a_long_history_decodes_a_few_pages_per_column(table, groups, measurement, monkeypatch):
    columns = ("item_id", "watch_time_ms")
    top = Selection(columns=columns, feature_groups=groups, top_k=100)
    everything = HistoryReader(table).read_user(HEAVY, selection=Selection(columns=columns, feature_groups=groups))
    fs, whole_fs = CountingFileSystem(), CountingFileSystem()
    reader = HistoryReader(table, fs, FooterCache())
    reader.lookup_index()
    reader.read_user(HEAVY, selection=Selection(columns=("item_id",), top_k=1))  # footers and page index read
    (uri,) = reader.files_for_user(HEAVY)
    paged = reader.lookup_index().entry(uri).paged()
    before_pages, before = paged.pages_read, fs.stats.snapshot()
    newest = reader.read_user(HEAVY, selection=top)
    assert newest.to_pylist() == everything.slice(everything.num_rows - 100).to_pylist()

    # Each of the user's feature groups is one segment whose newest 100 rows span at most 2 pages of
    # each column read (the asked ones, plus event_ts to merge several groups).
    _, found = reader.lookup_index().segments([HEAVY], top, reader.read_groups)
    read_columns = len(columns) + (1 if groups is None else 0)
    pages = paged.pages_read - before_pages
    assert pages <= 2 * len(found[HEAVY]) * read_columns
    # Against reading the newest row groups whole, as a reader without the page index does.
    whole = HistoryReader(table, whole_fs, FooterCache())
    monkeypatch.setattr(whole, "read_rows", lambda *args: None)
    whole.read_user(HEAVY, selection=top)
    whole_bytes = whole_fs.stats.bytes_read
    whole_fs.stats.bytes_read = 0
    assert whole.read_user(HEAVY, selection=top).equals(newest)
    # Bytes fall less than pages: the dictionary page of a high-cardinality column is read whole.
    assert fs.stats.since(before).bytes_read < whole_fs.stats.bytes_read
    measurement(
        f"Top-100 of a 100,000-event history, groups {groups}: {pages} pages decoded, "
        f"{fs.stats.since(before).bytes_read:,} B read against {whole_fs.stats.bytes_read:,} B for whole row groups "
        f"(cold {whole_bytes:,} B)"
    )
    cached = CachedHistoryReader(table)
    assert cached.read_user(HEAVY, selection=top).equals(newest)
    assert cached.read_user(HEAVY, selection=top).equals(newest)  # served from the cached page ranges


@pytest.mark.parametrize("k", [1, 100, 5000])
def test_top_k_of_strings_floats_and_ids_whose_pages_cover_other_rows_equals_the_whole_read(table, k):
    # 8 KiB pages end at different rows per column (bit-packed ids, plain floats, dictionary
    # indices of strings): the page reader decodes each set of columns with the same page rows as one
    # narrowed file, and expands the strings of the asked rows only.
    columns = ("item_id", "surface", "completion_ratio", "session_id", "device")
    group = ("engagement",)
    reader = HistoryReader(table)
    whole = reader.read_user(HEAVY, selection=Selection(columns=columns, feature_groups=group))
    newest = reader.read_user(HEAVY, selection=Selection(columns=columns, feature_groups=group, top_k=k))
    assert newest.equals(whole.slice(whole.num_rows - k))
    assert newest.schema.field("surface").type == whole.schema.field("surface").type == "string"
    again = reader.read_user(HEAVY, selection=Selection(columns=columns, feature_groups=group, top_k=k))
    assert again.equals(newest)  # the kept page plan
    (uri,) = reader.files_for_user(HEAVY)
    paged = reader.lookup_index().entry(uri).paged()
    _, found = reader.lookup_index().segments([HEAVY], Selection(feature_groups=group, top_k=k), reader.read_groups)
    rg, end = int(found[HEAVY].rg[-1]), int(found[HEAVY].start[-1] + found[HEAVY].length[-1])
    plan = paged._plans[rg, end - k, end, columns]
    assert plan is not None  # the row range is read by pages
    _, narrowed_files, _ = plan
    # a string's page holds the whole newest row group here, a float's 2,048 rows: two files at least
    assert len(narrowed_files) > 1


def test_thrift_compact_round_trip_keeps_every_field(table):
    reader = HistoryReader(table)
    (uri,) = reader.files_for_user(HEAVY)
    paged = reader.lookup_index().entry(uri).paged()
    assert decode(encode(paged.fields))[0] == paged.fields


def test_a_remembered_top_k_plan_never_serves_another_selection(table):
    reader = HistoryReader(table)
    columns = ("item_id",)
    for groups in (("engagement",), None):
        newest = reader.read_user(HEAVY, selection=Selection(columns=columns, feature_groups=groups, top_k=1))
        whole = reader.read_user(HEAVY, selection=Selection(columns=columns, feature_groups=groups))
        fresh = HistoryReader(table).read_user(HEAVY, selection=Selection(columns=columns, feature_groups=groups))
        assert newest.num_rows == 1 and whole.num_rows > 30_000
        assert whole.equals(fresh) and newest.equals(whole.slice(whole.num_rows - 1))


def test_a_flipped_byte_in_a_page_read_by_pages_is_an_error(table):
    reader = HistoryReader(table)
    top = Selection(columns=("item_id",), feature_groups=("engagement",), top_k=5)
    newest = reader.read_user(HEAVY, selection=top)
    (uri,) = reader.files_for_user(HEAVY)
    paged = reader.lookup_index().entry(uri).paged()
    before = paged.pages_read
    assert reader.read_user(HEAVY, selection=top).equals(newest) and paged.pages_read > before  # by pages
    _, found = reader.lookup_index().segments([HEAVY], top, reader.read_groups)
    rg = int(found[HEAVY].rg[-1])
    offsets, sizes, _ = paged.locations(rg, [paged.column["item_id"]], lambda r: [])[0]
    path = Path(uri.removeprefix("file://"))
    original = path.read_bytes()
    damaged = bytearray(original)
    damaged[int(offsets[-1] + sizes[-1]) - 2] ^= 0x01  # inside the newest page's body
    try:
        path.write_bytes(bytes(damaged))
        with pytest.raises(CorruptFileError, match="checksum"):
            reader.read_user(HEAVY, selection=top)
    finally:
        path.write_bytes(original)
