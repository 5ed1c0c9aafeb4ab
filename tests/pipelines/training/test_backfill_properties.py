"""Backfills give exactly the fold of the events before each label's time, for random event streams.

Events of two users, several items (so one item often has several events in one processing window,
merged into one history row stamped with the earliest), arriving in list order into ten-minute
processing windows, many of them late (their event time long before their arrival). History is
what compaction publishes (the DuckDB aggregation, window by window), detail the windows' events.
Labels sit at, just before and just after events' times and arrivals, often on an item that has
later events in the same window. The reference folds the raw events in plain Python, with the
documented merge operators (`test_aggregation_properties.reference_fold`), independent of history:

- event time: the events with `event_ts < ts`, per (window, user, group, partition, item);
- arrival: the events with `arrival_ts < ts` (`<= ts` when inclusive), the same way;

then the newest `max_length` by (event_ts, lsn, source_partition). The leakage checks see the same
rows: none merged events from ts on, none withheld (detail is complete), and under arrival
semantics none arrived after ts, nor at it unless inclusive.
"""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqlake.engines.duckdb_session import connect
from seqlake.pipelines.compaction.duckdb_aggregate import aggregate_window_local
from seqlake.pipelines.landing.schema import landing_schema
from seqlake.pipelines.training.backfill.plan import ArrivalFrontiers, backfill_batch
from seqlake.pipelines.training.rebuild.gather import WindowDetail
from seqlake.tableformat.schema import TIMESTAMP_US
from tests.pipelines.compaction.test_aggregation_properties import reference_fold
from tests.pipelines.training.test_reconstruction_properties import CONFIG, T0, TENANT

ONE_US = timedelta(microseconds=1)

events_strategy = st.lists(
    st.fixed_dictionaries(
        {
            "user_id": st.sampled_from([1, 2]),
            "feature_group": st.sampled_from(["engagement", "engagement", "search"]),
            "seconds": st.integers(0, 40 * 60),  # event time: often long before its arrival (late)
            "wait": st.sampled_from([0, 0, 30, 90, 240]),  # seconds after the previous arrival
            "source_partition": st.integers(0, 1),
            "item_id": st.integers(1, 3),
            "watch_time_ms": st.integers(0, 50) | st.none(),
            "completion_ratio": st.sampled_from([0.0, 0.25, -1.5, 1024.0]) | st.none(),
            "surface": st.sampled_from(["feed", "é"]) | st.none(),
        }
    ),
    min_size=1,
    max_size=30,
)


def arrived(events: list[dict]) -> list[dict]:
    """Arrival order is list order: LSNs grow per partition, arrival times never go back (and are
    never before the event: an event "from the future" happened at its arrival), the processing
    window is the arrival's ten-minute slot."""
    next_lsn = {0: 1, 1: 1}
    now = 0
    out = []
    for n, e in enumerate(events):
        now += e["wait"]
        lsn = next_lsn[e["source_partition"]]
        next_lsn[e["source_partition"]] += 1
        event_ts = T0 + timedelta(seconds=min(e["seconds"], now))
        out.append(
            {
                **dict.fromkeys(landing_schema(CONFIG).names),
                **e,
                "event_id": f"e{n}",
                "lsn": lsn,
                "event_ts": event_ts,
                "arrival_ts": T0 + timedelta(seconds=now),
                "window_id": now // 600,
            }
        )
    return out


def landing_rows(events: list[dict]) -> pa.Table:
    schema = landing_schema(CONFIG)
    rows = [{name: e.get(name) for name in schema.names} for e in events]
    return pa.Table.from_pylist(rows, schema=schema)


def published_history(events: list[dict]) -> pa.Table:
    """What compaction publishes: each window's events aggregated by the DuckDB aggregation."""
    landing = landing_rows(events)
    windows = sorted({e["window_id"] for e in events})
    parts = [aggregate_window_local(CONFIG, landing.filter(pc.equal(landing["window_id"], w))) for w in windows]
    return pa.concat_tables(parts)


def expected_sequence(events: list[dict], label: dict, as_of: str, inclusive: bool) -> dict[str, list]:
    """The fold of exactly the events known before the label's ts, its newest `max_length` rows."""
    ts = label["ts"]
    if as_of == "event-time":
        known = [e for e in events if e["event_ts"] < ts]
    else:
        known = [e for e in events if e["arrival_ts"] < ts or (inclusive and e["arrival_ts"] == ts)]
    mine = [e for e in known if e["user_id"] == label["user_id"] and e["feature_group"] in TENANT.feature_groups]
    rows = []
    for window in sorted({e["window_id"] for e in mine}):
        rows += reference_fold(CONFIG, [e for e in mine if e["window_id"] == window])
    rows.sort(key=lambda r: (r["event_ts"], r["lsn"], r["source_partition"]))
    rows = rows[max(0, len(rows) - TENANT.max_length) :]
    return {f"seq_{c}": [r[c] for r in rows] for c in TENANT.model_columns}


def label_times(events: list[dict]):
    """Times at, just before and just after events' times and arrivals, and a few anywhere."""
    edges = [e["event_ts"] for e in events] + [e["arrival_ts"] for e in events]
    near = st.tuples(st.sampled_from(edges), st.sampled_from([-ONE_US, timedelta(0), timedelta(0), ONE_US]))
    return near.map(lambda pair: pair[0] + pair[1]) | st.integers(-60, 50 * 60).map(lambda s: T0 + timedelta(seconds=s))


def frontiers(events: list[dict], labels: list[dict]) -> pa.Table:
    """The label rows with their frontiers from the events' arrivals (one point per landing record)."""
    points = pa.Table.from_pylist(
        [{k: e[k] for k in ("source_partition", "arrival_ts", "lsn", "window_id")} for e in events],
        schema=pa.schema(
            [
                pa.field("source_partition", pa.int32()),
                pa.field("arrival_ts", TIMESTAMP_US),
                pa.field("lsn", pa.int64()),
                pa.field("window_id", pa.int64()),
            ]
        ),
    )
    table = pa.table(
        {
            "user_id": pa.array([x["user_id"] for x in labels], pa.int64()),
            "_ts": pa.array([x["ts"] for x in labels], TIMESTAMP_US),
        }
    )
    with connect(extensions=()) as con:
        con.execute("SET TimeZone = 'UTC'")
        con.register("_points", points)
        found = ArrivalFrontiers(con, "SELECT * FROM _points")
        before, before_window = found.before(table["_ts"])
        by, by_window = found.at(table["_ts"])
    return table, (before, before_window), (by, by_window)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=events_strategy,
    data=st.data(),
    as_of=st.sampled_from(["event-time", "arrival"]),
    inclusive=st.booleans(),
)
def test_backfill_is_the_fold_of_the_events_before_each_label(events, data, as_of, inclusive):
    events = arrived(events)
    labels = data.draw(
        st.lists(
            st.fixed_dictionaries({"user_id": st.sampled_from([1, 1, 2, 3]), "ts": label_times(events)}),
            min_size=1,
            max_size=8,
        )
    )
    history, detail = published_history(events), landing_rows(events)
    table, before, by = frontiers(events, labels)
    bounds, windows = by if inclusive else before
    table = table.append_column("lsn_bound", bounds).append_column("open_window", windows)
    table = table.append_column("arrived_before", before[0]).append_column("arrived_by", by[0])

    def window_events(users: list[int], windows: list[int]) -> pa.Table:
        return detail.filter(
            pc.and_(
                pc.is_in(detail["user_id"], pa.array(users, pa.int64())),
                pc.is_in(detail["window_id"], pa.array(windows, pa.int64())),
            )
        )

    held = WindowDetail(frozenset(e["window_id"] for e in events), window_events)
    open_events = detail if as_of == "arrival" else None
    found = backfill_batch(CONFIG, TENANT, as_of, table, history, open_events, held)

    actual = pa.table(found.sequences).to_pylist()
    assert actual == [expected_sequence(events, label, as_of, inclusive) for label in labels]
    assert found.leaks.merged.tolist() == [0] * len(labels)
    assert found.leaks.withheld.tolist() == [0] * len(labels)
    if as_of == "arrival":
        assert found.leaks.late.tolist() == [0] * len(labels)
        if not inclusive:
            assert found.leaks.at_ts.tolist() == [0] * len(labels)
