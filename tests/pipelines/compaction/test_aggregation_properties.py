"""Property tests: the window aggregation (on DuckDB) equals a plain Python fold of the same events.

Random small windows: few users, two or three feature groups of the default configuration, repeated
items, arrivals in random order with LSN = arrival position within the source partition,
retransmissions (same event id and values, a later LSN), nulls in attribute columns, and values in
columns the event's feature group does not own (which the aggregate must ignore). The reference fold
below is the documented semantics written out in Python:

- first arrival of an event id wins (smallest (source_partition, lsn), as `dedupe_sql` orders them);
  ids published by earlier windows are dropped;
- one row per (user, feature group, source partition, item); event_ts = min, lsn = max,
  last_event_ts = max, min_lsn = min, event_count = events merged, window_id = max;
- each column the row's group declares merges with that group's operator over the non-null values:
  max/min/sum/bit_or, count (0 when none), first/last = the value of the smallest/largest-LSN event
  that carries one; NULL when no event carries a value; NULL for columns the group does not declare.
"""

from __future__ import annotations

import functools
import operator
import tempfile
from collections import defaultdict
from collections.abc import Set as AbstractSet
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqlake.core.config import Config
from seqlake.pipelines.compaction.duckdb_aggregate import aggregate_window_local
from seqlake.pipelines.landing.schema import landing_schema
from seqlake.tableformat.schema import history_arrow_schema
from tests.conftest import make_config

CONFIG = make_config(Path(tempfile.gettempdir()) / "seqlake-aggregation-properties" / "warehouse")
BASE_TS = datetime(2026, 1, 5, tzinfo=UTC)
SORT_KEY = ("user_id", "feature_group", "event_ts", "lsn", "source_partition")
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

INTEGER_RANGES = {"int8": 100, "int16": 1000, "int32": 10**6, "int64": 10**12}


def _values(kind: str) -> st.SearchStrategy:
    """Non-null values of a column type; small enough that no sum overflows its type."""
    if kind in INTEGER_RANGES:
        bound = INTEGER_RANGES[kind]
        # Few distinct values, so max/min ties and repeated bit patterns are common.
        return st.one_of(st.integers(-3, 3), st.integers(-bound, bound))
    if kind in ("float32", "float64"):
        return st.floats(-1e6, 1e6, width=32 if kind == "float32" else 64)
    if kind == "bool":
        return st.booleans()
    return st.sampled_from(["", "a", "b", "ab", "é", "zz"])


@st.composite
def _events(draw: st.DrawFn, config: Config) -> list[dict]:
    """Distinct events (one per event id) of 2-3 feature groups, few users and items."""
    groups = draw(st.lists(st.sampled_from(sorted(config.feature_groups)), min_size=2, max_size=3, unique=True))
    count = draw(st.integers(0, 10))
    events = []
    for i in range(count):
        group = draw(st.sampled_from(groups))
        spec = config.feature_groups[group]
        event = {
            "user_id": draw(st.integers(1, 2)),
            "feature_group": group,
            "event_ts": BASE_TS + timedelta(seconds=draw(st.integers(0, 5))),
            "source_partition": draw(st.integers(0, 1)),
            "event_id": f"e{i}",
        }
        for column, kind in config.column_types().items():
            if column == spec.item_column:
                value = draw(st.one_of(st.none(), st.integers(1, 3)) if i % 4 == 3 else st.integers(1, 3))
            elif column in spec.columns:
                value = draw(st.one_of(st.none(), _values(kind)))
            else:
                # Parsing leaves other groups' columns NULL; the aggregate must ignore them anyway.
                value = draw(st.one_of(st.none(), st.none(), _values(kind)))
            event[column] = value
        events.append(event)
    return events


@st.composite
def _arrivals(draw: st.DrawFn, config: Config = CONFIG) -> list[dict]:
    """Landing rows: every event arrives, some more than once, in random order; LSN per partition."""
    events = draw(_events(config))
    resent = draw(st.lists(st.sampled_from(events), max_size=4)) if events else []
    order = draw(st.permutations(events + resent))
    next_lsn: dict[int, int] = defaultdict(lambda: 100)
    rows = []
    for position, event in enumerate(order):
        partition = event["source_partition"]
        # A retransmission keeps the event's id and values; it only gets the next LSN of its partition.
        rows.append(
            {
                **event,
                "lsn": next_lsn[partition],
                "arrival_ts": BASE_TS + timedelta(minutes=position),
                "window_id": 0,
            }
        )
        next_lsn[partition] += 1
    return rows


def _landing(config: Config, rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=landing_schema(config))


# -- the reference fold ------------------------------------------------------------------------


def _merge(merge: str, carried: list):
    """One column's merge over the values that events carried, in LSN order (nulls removed)."""
    if merge == "count":
        return len(carried)
    if not carried:
        return None
    if merge == "max":
        return max(carried)
    if merge == "min":
        return min(carried)
    if merge == "sum":
        return sum(carried)
    if merge == "bit_or":
        return functools.reduce(operator.or_, carried)
    if merge == "first":
        return carried[0]
    if merge == "last":
        return carried[-1]
    raise AssertionError(f"no reference for merge operator {merge!r}")


def reference_fold(config: Config, rows: list[dict], published: AbstractSet[str] = frozenset()) -> list[dict]:
    first: dict[str, dict] = {}
    for row in sorted(rows, key=lambda r: (r["source_partition"], r["lsn"])):
        first.setdefault(row["event_id"], row)
    merged: dict[tuple, list[dict]] = defaultdict(list)
    for row in first.values():
        if row["event_id"] in published:
            continue
        item = row[config.feature_groups[row["feature_group"]].item_column]
        merged[(row["user_id"], row["feature_group"], row["source_partition"], item)].append(row)
    out = []
    for (user_id, group, partition, _item), events in merged.items():
        events.sort(key=lambda r: r["lsn"])
        spec = config.feature_groups[group]
        result = {
            "user_id": user_id,
            "feature_group": group,
            "event_ts": min(r["event_ts"] for r in events),
            "lsn": events[-1]["lsn"],
            "last_event_ts": max(r["event_ts"] for r in events) if len(events) > 1 else None,
            "min_lsn": events[0]["lsn"],
            "source_partition": partition,
            "event_count": len(events),
            "window_id": max(r["window_id"] for r in events),
        }
        for column in config.column_types():
            if column not in spec.columns:
                result[column] = None
                continue
            carried = [r[column] for r in events if r[column] is not None]
            result[column] = _merge(spec.columns[column].merge, carried)
        out.append(result)
    return sorted(out, key=lambda r: tuple(r[k] for k in SORT_KEY))


def _check(config: Config, rows: list[dict], published: set[str] | None = None) -> pa.Table:
    ids = None if published is None else pa.array(sorted(published), pa.string())
    result = aggregate_window_local(config, _landing(config, rows), ids)
    assert result.schema.equals(history_arrow_schema(config), check_metadata=True)
    assert result.to_pylist() == reference_fold(config, rows, published or set())
    return result


# -- properties ---------------------------------------------------------------------------------


def test_reference_fold_on_a_hand_written_window() -> None:
    """The fold itself, checked by hand: two events of one item, one retransmission, one other group."""
    common = {column: None for column in CONFIG.column_types()}
    t0 = BASE_TS
    rows = [
        {**common, "event_id": "a", "user_id": 1, "feature_group": "engagement", "event_ts": t0 + timedelta(seconds=5),
         "source_partition": 0, "lsn": 1, "item_id": 7, "action_flags": 1, "duration_ms": 10, "impression_count": 1},
        {**common, "event_id": "b", "user_id": 1, "feature_group": "engagement", "event_ts": t0,
         "source_partition": 0, "lsn": 2, "item_id": 7, "action_flags": 4, "duration_ms": None, "impression_count": 2},
        {**common, "event_id": "a", "user_id": 1, "feature_group": "engagement", "event_ts": t0 + timedelta(seconds=5),
         "source_partition": 0, "lsn": 3, "item_id": 7, "action_flags": 1, "duration_ms": 10, "impression_count": 1},
        {**common, "event_id": "c", "user_id": 1, "feature_group": "search", "event_ts": t0,
         "source_partition": 0, "lsn": 4, "item_id": 7, "click_count": None, "action_flags": 2},
    ]  # fmt: skip
    for row in rows:
        row.update(arrival_ts=t0, window_id=3)
    out = reference_fold(CONFIG, rows)
    assert [(r["feature_group"], r["event_ts"], r["lsn"], r["min_lsn"], r["event_count"]) for r in out] == [
        ("engagement", t0, 2, 1, 2),
        ("search", t0, 4, 4, 1),
    ]
    engagement, search = out
    assert (engagement["action_flags"], engagement["duration_ms"], engagement["impression_count"]) == (5, 10, 3)
    assert (search["action_flags"], search["click_count"], search["item_id"]) == (None, None, 7)
    assert _check(CONFIG, rows).num_rows == 2


@SETTINGS
@given(rows=_arrivals())
def test_window_aggregate_equals_reference_fold(rows: list[dict]) -> None:
    _check(CONFIG, rows)


@SETTINGS
@given(data=st.data())
def test_published_event_ids_are_excluded(data: st.DataObject) -> None:
    rows = data.draw(_arrivals())
    ids = sorted({r["event_id"] for r in rows})
    published = set(data.draw(st.lists(st.sampled_from(ids), unique=True))) if ids else set()
    published.add("published-elsewhere")  # ids of other windows' events need not be in this one
    result = _check(CONFIG, rows, published)
    assert sum(result["event_count"].to_pylist()) == len(set(ids) - published)


@SETTINGS
@given(data=st.data())
def test_each_event_counts_once_across_windows(data: st.DataObject) -> None:
    """Windows cut by arrival; each aggregated with the earlier windows' ids excluded."""
    rows = data.draw(_arrivals())
    cuts = sorted(data.draw(st.lists(st.integers(0, len(rows)), max_size=3)))
    bounds = [0, *cuts, len(rows)]
    published: set[str] = set()
    total = 0
    for window_id, (start, end) in enumerate(zip(bounds, bounds[1:], strict=False)):
        window = [{**row, "window_id": window_id} for row in rows[start:end]]
        result = _check(CONFIG, window, set(published))
        assert set(result["window_id"].to_pylist()) <= {window_id}
        total += sum(result["event_count"].to_pylist())
        published.update(row["event_id"] for row in window)
    assert total == len({row["event_id"] for row in rows})


def test_empty_window_has_history_schema() -> None:
    result = aggregate_window_local(CONFIG, _landing(CONFIG, []), pa.array([], pa.string()))
    assert result.num_rows == 0
    assert result.schema.equals(history_arrow_schema(CONFIG), check_metadata=True)


def test_a_sum_beyond_its_column_type_is_left_out_never_null_or_wrapped() -> None:
    """An int32 sum that overflows: the plain definition fails (ANSI CAST, as Spark runs it); the
    rows compaction and fresh reads publish leave that group out and keep every other group."""
    from seqlake.engines.duckdb_session import connect
    from seqlake.pipelines.compaction.aggregation import aggregation_sql

    common = {column: None for column in CONFIG.column_types()}
    rows = [
        {**common, "event_id": f"e{i}", "user_id": 1, "feature_group": "engagement", "event_ts": BASE_TS,
         "source_partition": 0, "lsn": i, "arrival_ts": BASE_TS, "window_id": 0, "item_id": item,
         "impression_count": count}
        for i, (item, count) in enumerate([(1, 2**31 - 1), (1, 2**31 - 1), (2, 5), (2, 6)])
    ]  # fmt: skip
    landing = _landing(CONFIG, rows)
    with connect(extensions=()) as con, pytest.raises(duckdb.ConversionException, match="out of range"):
        con.register("events", landing)
        con.execute(aggregation_sql(CONFIG, "events", "duckdb")).fetchall()
    published = aggregate_window_local(CONFIG, landing)
    assert published.select(["item_id", "impression_count", "event_count"]).to_pylist() == [
        {"item_id": 2, "impression_count": 11, "event_count": 2}
    ]


def _aggregate_batch(config: Config, landing: pa.Table) -> list[dict]:
    """Several windows in one pass, as catch-up compaction runs them (DuckDB engine's SQL)."""
    from seqlake.engines.duckdb_session import connect
    from seqlake.pipelines.compaction.aggregation import aggregation_sql, first_arrivals_sql

    schema = history_arrow_schema(config)
    with connect(extensions=()) as con:
        con.register("_landing", landing)
        con.execute(f"CREATE TEMP VIEW _events AS {first_arrivals_sql('_landing', 168, 'duckdb')}")
        sql = aggregation_sql(config, "_events", "duckdb", group_by_extra=("window_id",))
        rows = con.execute(f"SELECT {', '.join(schema.names)} FROM ({sql})").to_arrow_table()
    rows = rows.cast(schema).to_pylist()
    return sorted(rows, key=lambda r: (r["window_id"], *(r[k] for k in SORT_KEY)))


@SETTINGS
@given(data=st.data())
def test_a_batch_of_windows_equals_the_fold_window_by_window(data: st.DataObject) -> None:
    """Catch-up compaction: one pass over several windows gives each window its own fold, with the
    ids of earlier windows excluded, exactly as compacting the windows one after the other."""
    rows = data.draw(_arrivals())
    cuts = sorted(data.draw(st.lists(st.integers(0, len(rows)), max_size=3)))
    bounds = [0, *cuts, len(rows)]
    windows: list[dict] = []
    expected: list[dict] = []
    published: set[str] = set()
    for window_id, (start, end) in enumerate(zip(bounds, bounds[1:], strict=False)):
        window = [{**row, "window_id": window_id} for row in rows[start:end]]
        windows.extend(window)
        expected.extend(reference_fold(CONFIG, window, set(published)))
        published.update(row["event_id"] for row in window)
    expected.sort(key=lambda r: (r["window_id"], *(r[k] for k in SORT_KEY)))
    assert _aggregate_batch(CONFIG, _landing(CONFIG, windows)) == expected
