"""Multi-user reads and the history cache return exactly what per-user `read_user` returns, with less I/O.

Only counted I/O and results are asserted on; measured time ratios are recorded, never checked.
"""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.reads import format_report, identical, run_read_bench
from seqlake.core.errors import SchemaError
from seqlake.tableformat.cache import CachedHistoryReader, HistoryCache
from seqlake.tableformat.io import CountingFileSystem, FooterCache, IOStats
from seqlake.tableformat.multi_reader import histories, plan_files
from seqlake.tableformat.reader import HistoryReader, Selection
from tests.conftest import make_config
from tests.history_data import (
    SMALL_ROW_GROUPS,
    frontiers,
    history_table,
    lsn_base,
    publish_run,
    synthetic_history,
)
from tests.history_data import selections as history_selections

USERS = {1_000_000 + 3 * i: 5 + (i * 53) % 700 for i in range(150)} | {1_000_007: 9000, 1_000_011: 2500}
LATER = {u: n // 7 + 1 for u, n in USERS.items() if u % 2}  # users in runs w1 and w2
LATEST = {u: 20 for u in list(USERS)[::11]}  # some of them in w3 too
ABSENT = [999, 1_000_001, 1_000_002, 2_000_000]  # between and beyond the stored ids
COLUMNS = ["item_id", "watch_time_ms", "surface", "price_cents", "query_hash"]


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    config = make_config(tmp_path_factory.mktemp("multi") / "wh")
    table = history_table(config)
    publish_run(table, config, synthetic_history(config, USERS, seed=31), "w1", policy=SMALL_ROW_GROUPS)
    publish_run(table, config, synthetic_history(config, LATER, seed=32), "w2", policy=SMALL_ROW_GROUPS)
    publish_run(table, config, synthetic_history(config, LATEST, seed=33), "w3", policy=SMALL_ROW_GROUPS)
    return table


@pytest.fixture(scope="module")
def cached(table):
    # Small enough to evict while the property test runs: results must not depend on cache state.
    return CachedHistoryReader(table, cache=HistoryCache(max_bytes=512 * 1024))


# Synthetic LSNs start at user % 1000 * 1e6, and user u's rows are in source partition u % 4: a
# partition's bound inside one user's range cuts that history, keeps the partition's users below and
# drops those above; a partition the frontier does not name shows none of its users' rows.
selections = history_selections(
    columns=st.one_of(st.none(), st.sampled_from([tuple(COLUMNS), ("item_id",), ("feature_group", "lsn", "item_id")])),
    as_of=frontiers(st.builds(lambda u, k: lsn_base(u) + k, st.sampled_from(sorted(USERS)), st.integers(0, 3000))),
)
user_sets = st.lists(st.sampled_from(sorted(USERS) + ABSENT), max_size=14)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(users=user_sets, sel=selections, workers=st.sampled_from([1, 4]))
def test_histories_and_cached_reads_equal_read_user(table, cached, users, sel, workers):
    reader = HistoryReader(table)
    expected = {u: reader.read_user(u, selection=sel) for u in users}
    got = histories(HistoryReader(table), users, sel, max_workers=workers)
    assert list(got) == list(expected)  # first-given order, duplicates once
    for user, rows in expected.items():
        assert identical(got[user], rows), user
        assert identical(cached.read_user(user, selection=sel), rows), user
    through_cache = histories(cached, users, sel, max_workers=workers)
    assert all(identical(through_cache[u], expected[u]) for u in expected)
    assert cached.cache.bytes <= cached.cache.max_bytes


def test_users_in_several_runs_and_absent_users(table):
    several = sorted(set(LATER) & set(LATEST))[:3]
    users = several + ABSENT + [1_000_007]
    got = histories(HistoryReader(table), users)
    plans = plan_files(table, users)
    for user in several:
        assert sum(user in p.users for p in plans) == 3  # one file in each run
        assert got[user].num_rows == USERS[user] + LATER[user] + LATEST[user]
    # The cached reader's file index (one scan per snapshot, then manifest bounds and buckets) picks
    # the same files, in the same order, as a per-user Iceberg scan.
    index_reader = CachedHistoryReader(table)
    for user in users:
        assert index_reader.files_for_user(user) == HistoryReader(table).files_for_user(user)
    for user in ABSENT:
        assert got[user].num_rows == 0 and got[user].column_names == HistoryReader(table).columns
    assert got[1_000_007].num_rows == sum(run.get(1_000_007, 0) for run in (USERS, LATER, LATEST))
    assert histories(HistoryReader(table), []) == {}
    with pytest.raises(SchemaError, match="unknown columns"):
        histories(HistoryReader(table), users, Selection(columns=("nope",)))


def test_coalesced_reads_open_each_file_once(table, measurement):
    users = sorted(USERS)[::2] + ABSENT
    sel = Selection(columns=("item_id", "watch_time_ms"))
    loop_fs, multi_fs = CountingFileSystem(), CountingFileSystem()
    loop_reader = HistoryReader(table, loop_fs, FooterCache())
    multi_reader = HistoryReader(table, multi_fs, FooterCache())
    for reader in (loop_reader, multi_reader):  # footers cached and the lookup index built
        histories(reader, users, sel)
    loop_fs.stats, multi_fs.stats = IOStats(), IOStats()
    expected = {u: loop_reader.read_user(u, selection=sel) for u in users}
    got = histories(multi_reader, users, sel)
    assert all(identical(got[u], expected[u]) for u in users)
    loop, multi = loop_fs.stats, multi_fs.stats
    assert multi.files <= len(plan_files(table, users, sel)) and multi.opens == loop.opens == 0  # kept open
    assert multi.reads < loop.reads
    assert multi.bytes_read < loop.bytes_read
    measurement(
        f"histories, {len(users)} users, 2 columns: {multi.files} files / {multi.reads} reads / "
        f"{multi.bytes_read:,} B against {loop.files} / {loop.reads} / {loop.bytes_read:,} B for the read_user loop"
    )


def test_cache_is_bounded_and_thread_safe(table):
    reader = HistoryReader(table)
    users = sorted(USERS)[:40]
    sel = Selection(columns=tuple(COLUMNS))
    expected = {u: reader.read_user(u, selection=sel) for u in users}
    tight = CachedHistoryReader(table, cache=HistoryCache(max_bytes=64 * 1024))
    failures = []

    def work(offset: int) -> None:
        for i in range(len(users)):
            user = users[(i + offset) % len(users)]
            if not identical(tight.read_user(user, selection=sel), expected[user]):
                failures.append(user)

    threads = [threading.Thread(target=work, args=(k * 7,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    cache = tight.cache
    assert 0 < cache.bytes <= cache.max_bytes and cache.evictions > 0
    assert cache.hits + cache.misses > 0 and 0 < cache.hit_rate < 1

    lru = HistoryCache(max_bytes=100)
    lru.put("a", pa.array(range(5), pa.int64()))  # 40 B
    lru.put("b", pa.array(range(5), pa.int64()))
    assert lru.get("a") is not None  # "b" is now the least recently used
    lru.put("c", pa.array(range(5), pa.int64()))
    assert "b" not in lru and "a" in lru and "c" in lru and lru.bytes == 80
    lru.put("huge", pa.array(range(50), pa.int64()))  # larger than the bound: never kept
    assert "huge" not in lru and lru.bytes == 80
    assert (lru.hits, lru.misses, lru.hit_rate) == (1, 0, 1.0)


def test_cached_reader_follows_new_snapshots(tmp_path):
    config = make_config(tmp_path / "wh")
    table = history_table(config, "fresh")
    publish_run(table, config, synthetic_history(config, {5: 30, 6: 40}, seed=3), "w1")
    reader = CachedHistoryReader(table)
    assert reader.read_user(5).num_rows == 30
    publish_run(table, config, synthetic_history(config, {5: 12}, seed=4), "w2")  # refreshes `table`
    assert identical(reader.read_user(5), HistoryReader(table).read_user(5))
    assert reader.read_user(5).num_rows == 42


def test_bench_reads_at_small_size(measurement):
    bench = run_read_bench(
        users=300,
        heavy_users=2,
        heavy_rows=3000,
        runs=3,
        multi_users=48,
        lookups=300,
        cache_bytes=(16 * 2**20, 256 * 1024, 0),
        repeats=1,
    )
    report = format_report(bench)
    assert bench.ok, bench.failures
    assert bench.multi and bench.cache
    assert bench.verification["cost_ratio"] > 0 and "Verification (" in report  # printed, not a target
    assert (
        all(bench.sql[q]["cost_ratio"] > 0 for q in ("scan", "lookups", "open")) and "verified history view" in report
    )
    for row in bench.multi:
        assert row["multi_io"]["opens"] <= row["loop_io"]["opens"]  # both keep each file open once read
        assert row["multi_io"]["reads"] < row["loop_io"]["reads"]
    for row in bench.cache:
        assert row["bytes"] <= row["max_bytes"]
        assert row["hit_rate"] > 0 if row["max_bytes"] else row["hits"] == 0
    assert "all identical" in report
    for row in bench.multi:
        measurement(
            f"bench-reads (small), {row['users']} users, {row['selection']}: histories ×{row['speedup']:.1f} "
            f"faster than the read_user loop; opens ×{row['opens_ratio']:.1f}, reads ×{row['reads_ratio']:.1f}, "
            f"bytes ×{row['bytes_ratio']:.1f} fewer"
        )
    sql = bench.sql
    measurement(
        f"bench-reads (small), SQL through the verified history view against plain DuckDB: grouped scan "
        f"×{sql['scan']['cost_ratio']:.2f}, {sql['users']} point lookups ×{sql['lookups']['cost_ratio']:.2f}, "
        f"opening ×{sql['open']['cost_ratio']:.2f}"
    )
    for row in bench.cache:
        measurement(
            f"bench-reads (small), {row['lookups']} Zipf lookups, {row['selection']}, cache "
            f"{row['max_bytes'] / 2**20:g} MiB: hit rate {row['hit_rate']:.3f}, speed-up ×{row['speedup']:.1f}"
        )


def test_cached_reader_returns_a_hot_users_assembled_result_in_one_hit(table):
    reader = CachedHistoryReader(table)
    sel = Selection(columns=("item_id", "watch_time_ms"), top_k=50)
    first = reader.read_user(1_000_007, selection=sel)
    hits, misses = reader.cache.hits, reader.cache.misses
    again = reader.read_user(1_000_007, selection=sel)
    assert again is first  # the kept result itself: no chunk looked up, nothing assembled
    assert (reader.cache.hits, reader.cache.misses) == (hits + 1, misses)
    other = reader.read_user(1_000_007, selection=Selection(columns=("item_id",), top_k=50))
    assert other["item_id"].equals(first["item_id"]) and reader.cache.misses > misses
