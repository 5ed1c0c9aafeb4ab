"""The history reader's pushed-down selections return exactly what a plain DuckDB query returns."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqlake.core.errors import SchemaError
from seqlake.engines.duckdb_session import lake_cursor
from seqlake.tableformat.aggregates import history_stats
from seqlake.tableformat.io import CountingFileSystem
from seqlake.tableformat.reader import HistoryReader, Selection
from tests.conftest import make_config
from tests.history_data import (
    SMALL_ROW_GROUPS,
    frontier_sql,
    history_table,
    publish_run,
    shifted,
    synthetic_history,
)
from tests.history_data import selections as history_selections

USERS = {1_000_000 + i: 5 + (i * 53) % 700 for i in range(120)} | {1_000_007: 9000, 1_000_011: 2500}
COLUMNS = ["item_id", "watch_time_ms", "surface", "price_cents", "query_hash"]


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    config = make_config(tmp_path_factory.mktemp("sel") / "wh")
    table = history_table(config)
    publish_run(table, config, synthetic_history(config, USERS, seed=21), "w1", policy=SMALL_ROW_GROUPS)
    later = {u: n // 7 + 1 for u, n in USERS.items()}
    publish_run(table, config, synthetic_history(config, later, seed=22), "w2", policy=SMALL_ROW_GROUPS)
    return table


def duckdb_reference(table, user: int, sel: Selection, columns: list[str]) -> list[dict]:
    where = ["user_id = ?"]
    params: list[object] = [user]
    if sel.feature_groups is not None:
        where.append("list_contains(?, feature_group)")
        params.append(list(sel.feature_groups))
    if sel.start is not None:
        where.append("event_ts >= ?")
        params.append(sel.start)
    if sel.end is not None:
        where.append("event_ts < ?")
        params.append(sel.end)
    if sel.as_of is not None:
        condition, values = frontier_sql(sel.as_of)
        where.append(condition)
        params.extend(values)
    selected = ", ".join(dict.fromkeys([*columns, "event_ts", "lsn"]))
    query = f"SELECT {selected} FROM iceberg_scan(?) WHERE {' AND '.join(where)}"
    query += " ORDER BY event_ts, lsn"
    with lake_cursor() as con:
        rows = con.execute(query, [table.metadata_location, *params]).to_arrow_table()
    if sel.top_k is not None:
        rows = rows.slice(max(0, rows.num_rows - sel.top_k))
    if sel.newest_first:
        rows = rows.take(pa.array(range(rows.num_rows - 1, -1, -1), pa.int64()))
    return rows.select(columns).to_pylist()


selections = history_selections()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(user=st.sampled_from(sorted(USERS) + [999]), sel=selections, columns=st.sampled_from([COLUMNS, ["item_id"]]))
def test_reader_equals_plain_duckdb_query(table, user, sel, columns):
    sel = shifted(Selection(**{**sel.__dict__, "columns": tuple(columns)}), user)  # LSNs from the user's base
    got = HistoryReader(table).read_user(user, selection=sel).to_pylist()
    assert got == duckdb_reference(table, user, sel, columns)


SHARED: dict[str, HistoryReader] = {}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(user=st.sampled_from(sorted(USERS)[:4] + [1_000_007, 1_000_011]), sel=selections)
def test_one_reader_answers_many_selections_of_the_same_users_like_duckdb(table, user, sel):
    # One reader across examples: a user's plan remembered for one selection must never serve another.
    reader = SHARED.setdefault(table.metadata_location, HistoryReader(table))
    sel = shifted(Selection(**{**sel.__dict__, "columns": ("item_id",)}), user)
    # Plans of near selections first (the newest row only, another feature group), then the asked one, twice.
    reader.read_user(user, selection=Selection(**{**sel.__dict__, "top_k": 1}))
    reader.read_user(user, selection=Selection(**{**sel.__dict__, "feature_groups": ("search",)}))
    expected = duckdb_reference(table, user, sel, ["item_id"])
    assert reader.read_user(user, selection=sel).to_pylist() == expected
    assert reader.read_user(user, selection=sel).to_pylist() == expected


def test_top_k_reads_only_the_newest_row_groups(table, measurement):
    # 9,000 rows in run w1, about 7,200 of them engagement: three row groups in event-time order.
    user = 1_000_007
    everything, newest = CountingFileSystem(), CountingFileSystem()
    one_group = Selection(columns=("item_id",), feature_groups=("engagement",))
    full = HistoryReader(table, everything).read_user(user, selection=one_group)
    top = HistoryReader(table, newest).read_user(user, selection=Selection(**{**one_group.__dict__, "top_k": 100}))
    assert top.num_rows == 100 and top.to_pylist() == full.slice(full.num_rows - 100).to_pylist()
    assert newest.stats.bytes_read < everything.stats.bytes_read
    measurement(
        f"Top-100 engagement events of a {full.num_rows:,}-event history: {newest.stats.bytes_read:,} B read, "
        f"against {everything.stats.bytes_read:,} B for all of them"
    )


def test_unknown_identifiers_are_clear_errors(table):
    reader = HistoryReader(table)
    with pytest.raises(SchemaError, match=r"unknown columns \['nope'\]"):
        reader.read_user(1_000_000, selection=Selection(columns=("nope",)))
    with pytest.raises(SchemaError, match=r"unknown feature groups \['clicks'\]"):
        reader.read_user(1_000_000, selection=Selection(feature_groups=("clicks",)))
    with pytest.raises(ValueError, match="needs a time zone"):
        Selection(start=datetime(2026, 1, 5))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(user=st.sampled_from(sorted(USERS) + [999]), sel=selections)
def test_pushed_down_count_and_times_equal_duckdb(table, user, sel):
    sel = shifted(sel, user)
    stats = history_stats(HistoryReader(table), user, sel)
    rows = duckdb_reference(table, user, Selection(**{**sel.__dict__, "newest_first": False}), ["event_ts"])
    times = [r["event_ts"] for r in rows]
    assert (stats.count, stats.first_ts, stats.last_ts) == (
        len(times),
        min(times, default=None),
        max(times, default=None),
    )


def test_count_of_a_long_history_comes_from_statistics_alone(table):
    fs = CountingFileSystem()
    stats = history_stats(HistoryReader(table, fs), 1_000_007, Selection(feature_groups=("engagement",)))
    assert stats.row_groups_scanned == 0 and stats.row_groups_from_statistics > 0
    footers = fs.stats.bytes_read
    assert (
        stats.count
        == HistoryReader(table).read_user(1_000_007, selection=Selection(feature_groups=("engagement",))).num_rows
    )
    assert footers < 40_000  # only the footers were read: no column chunk of 8,000+ rows


def test_top_k_with_a_time_window_across_row_groups_keeps_every_selected_row(table):
    # The window straddles a row-group boundary of one file; only part of each row group is selected,
    # so neither row group alone can be trusted to hold the newest K selected rows.
    user, groups = 1_000_007, ("engagement",)
    uri = next(u for u in HistoryReader(table).files_for_user(user) if "/rw1-" in u)
    meta = pq.read_metadata(uri.removeprefix("file://"))
    names = meta.schema.to_arrow_schema().names
    spans = []
    for rg in range(meta.num_row_groups):
        columns = meta.row_group(rg).column
        if (
            columns(names.index("user_id")).statistics.min == user
            and columns(names.index("feature_group")).statistics.min == "engagement"
        ):
            ts = columns(names.index("event_ts")).statistics
            spans.append((ts.min, ts.max))
    (_, first_max), (second_min, _) = spans[0], spans[1]
    window = Selection(
        columns=("lsn",),
        feature_groups=groups,
        start=first_max - timedelta(minutes=20),
        end=second_min + timedelta(minutes=20),
        top_k=1_000,  # more than the window holds, less than one row group
    )
    got = HistoryReader(table).read_user(user, selection=window).to_pylist()
    assert got == duckdb_reference(table, user, window, ["lsn"])
    assert len(got) > 2


def test_rows_of_one_run_and_feature_group_come_back_without_a_merge(tmp_path, monkeypatch):
    import seqlake.tableformat.reader as reader_module

    merges: list[int] = []
    original = reader_module.merge_order

    def counted(ts, lsn):
        merges.append(len(ts))
        return original(ts, lsn)

    monkeypatch.setattr(reader_module, "merge_order", counted)
    config = make_config(tmp_path / "wh")
    single = history_table(config)
    user = 1_000_005
    publish_run(
        single, config, synthetic_history(config, {user: 8000, 1_000_006: 50}, seed=4), "w1", policy=SMALL_ROW_GROUPS
    )
    reader = HistoryReader(single)
    # One run, one feature group: segments in consecutive row groups, concatenated as stored.
    one = Selection(columns=("item_id",), feature_groups=("engagement",))
    segments = reader.lookup_index().segments([user], one, reader.read_groups)[1][user]
    assert len(segments) > 1  # the group spans several row groups
    got = reader.read_user(user, selection=one)
    assert got.num_rows > 3000 and merges == []
    assert got.to_pylist() == duckdb_reference(single, user, one, ["item_id"])
    # All its feature groups interleave in time: one merge of their segments, the same answer as DuckDB.
    every = Selection(columns=("item_id", "feature_group"))
    got = reader.read_user(user, selection=every)
    assert got.num_rows == 8000 and len(merges) == 1 and merges[0] >= 3
    assert got.to_pylist() == duckdb_reference(single, user, every, ["item_id", "feature_group"])


def test_a_frontier_bounds_each_source_partition_by_its_own_lsns(tmp_path):
    """LSNs count per source partition: one user's rows from two partitions whose LSNs lie far apart.
    No single LSN selects what was known at {0: 5009, 1: 34}; the frontier gives exactly those rows,
    through every reader, with the table's partitions recorded by its publications or not."""
    from seqlake.tableformat.cache import CachedHistoryReader
    from seqlake.tableformat.frontier import Frontier
    from seqlake.tableformat.multi_reader import histories
    from tests.history_data import two_partition_rows

    config = make_config(tmp_path / "wh")
    user = 1_000_003
    data = two_partition_rows(config, user, 60, {0: 5_000, 1: 20})
    frontier = Frontier({0: 5_009, 1: 34})
    keys = list(zip(data["source_partition"].to_pylist(), data["lsn"].to_pylist(), strict=True))
    known = [(p, lsn) for p, lsn in keys if (p == 0 and lsn <= 5_009) or (p == 1 and lsn <= 34)]
    assert 0 < len(known) < len(keys)
    # Whatever one integer bound: the rows under it are never the rows the frontier knew.
    assert all([k for k in keys if k[1] <= bound] != known for bound in [-1, *(lsn for _, lsn in keys)])

    columns = ["source_partition", "lsn", "item_id"]
    for recorded in (True, False):
        table = history_table(config, f"two_partitions_{int(recorded)}")
        publish_run(table, config, data, "w1", policy=SMALL_ROW_GROUPS, frontier=recorded)
        reader = HistoryReader(table)
        assert reader.lookup_index().partitions == (frozenset({0, 1}) if recorded else None)
        chosen = Selection(columns=tuple(columns), as_of=frontier)
        got = reader.read_user(user, selection=chosen)
        assert [(r["source_partition"], r["lsn"]) for r in got.to_pylist()] == known
        assert got.to_pylist() == duckdb_reference(table, user, chosen, columns)
        assert histories(HistoryReader(table), [user, 999], chosen)[user].equals(got)
        assert CachedHistoryReader(table).read_user(user, selection=chosen).equals(got)
        assert history_stats(HistoryReader(table), user, chosen).count == len(known)
        newest = Selection(columns=tuple(columns), as_of=frontier, top_k=5, newest_first=True)
        assert reader.read_user(user, selection=newest).to_pylist() == got.to_pylist()[::-1][:5]
        # A partition the frontier does not name had delivered nothing: none of its rows.
        # A mapping is taken as a Frontier (the field's type is what it becomes, hence the ignore).
        only = Selection(columns=tuple(columns), as_of={0: 5_009})  # type: ignore[arg-type]
        assert [(r["source_partition"], r["lsn"]) for r in reader.read_user(user, selection=only).to_pylist()] == [
            k for k in known if k[0] == 0
        ]
        assert reader.read_user(user, selection=Selection(as_of=Frontier())).num_rows == 0
        # A frontier above every row keeps the segments whole when the table's partitions are known.
        everything = Selection(columns=tuple(columns), as_of=Frontier({0: 10**6, 1: 10**6}))
        assert reader.read_user(user, selection=everything).num_rows == len(keys)
        segments = reader.lookup_index().segments([user], everything, reader.read_groups)[1][user]
        assert bool(segments.cut_lsn.any()) is not recorded


def test_a_selection_bound_is_a_frontier_never_one_integer():
    from seqlake.tableformat.frontier import Frontier

    with pytest.raises(TypeError, match="takes a Frontier"):
        Selection(as_of=120)  # type: ignore[arg-type]
    # A mapping is converted (the field's type is what it becomes, hence the ignore).
    assert Selection(as_of={1: 98, 0: 120}).as_of == Frontier({0: 120, 1: 98})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must be an integer in"):
        Frontier({0: -1})


def test_time_travel_names_the_frontier_of_a_snapshot_or_of_an_arrival_time(tmp_path):
    from seqlake.tableformat.frontier import Frontier
    from seqlake.tableformat.time_travel import arrival_frontier, frontier_as_of, snapshot_frontier
    from tests.history_data import HOUR_US, TRAVEL_WINDOW, time_travel_history

    config = make_config(tmp_path / "wh")
    table, (first, second, unpublished), _ = time_travel_history(config, 1_000_003)
    before, after = Frontier({0: 109, 1: 19}), Frontier({0: 119, 1: 29})
    assert snapshot_frontier(table, first) == before
    assert snapshot_frontier(table, second) == after
    # A snapshot that published nothing has the frontier of the publication before it.
    assert snapshot_frontier(table, unpublished) == after
    end = datetime.fromtimestamp((TRAVEL_WINDOW + 1) * HOUR_US / 1e6, UTC)  # the first window's end
    assert arrival_frontier(table, end - timedelta(microseconds=1), 3600) == Frontier()  # nothing published
    assert arrival_frontier(table, end, 3600) == before
    assert arrival_frontier(table, end + timedelta(minutes=59), 3600) == before
    assert arrival_frontier(table, end + timedelta(hours=1), 3600) == after
    assert frontier_as_of(table, first, 3600) == before
    assert frontier_as_of(table, end, 3600) == before
    assert frontier_as_of(table, {1: 7}, 3600) == Frontier({1: 7})
    with pytest.raises(SchemaError, match="has no snapshot 12345"):
        frontier_as_of(table, 12345, 3600)
    with pytest.raises(TypeError, match="takes a Frontier"):
        frontier_as_of(table, "yesterday", 3600)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs a time zone"):
        frontier_as_of(table, datetime(2026, 1, 5), 3600)
    # Once the first publication's snapshot expires, what it recorded is unknown: an error, not nothing.
    table.maintenance.expire_snapshots().by_ids([first]).commit()
    table.refresh()
    with pytest.raises(SchemaError, match=f"has no snapshot {first}"):
        snapshot_frontier(table, first)
    assert snapshot_frontier(table, second) == after
    with pytest.raises(SchemaError, match="is recorded any more"):
        arrival_frontier(table, end, 3600)
    assert arrival_frontier(table, end + timedelta(hours=1), 3600) == after
