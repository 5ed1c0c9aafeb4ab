"""Backfills equal the plain per-row reference for random histories with late arrivals and random
label rows, under event-time and arrival semantics, with the same leakage counts."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqlake.engines.duckdb_session import connect
from seqlake.pipelines.training.backfill.plan import ArrivalFrontiers, backfill_batch
from seqlake.tableformat.schema import TIMESTAMP_US
from tests.backfill_reference import reference_backfill
from tests.pipelines.training.test_reconstruction_properties import (
    COLUMNS,
    CONFIG,
    T0,
    TENANT,
    detail_rows,
    history_rows,
)

events_strategy = st.lists(
    st.fixed_dictionaries(
        {
            "user_id": st.sampled_from([1, 2]),
            "feature_group": st.sampled_from(["engagement", "engagement", "search"]),
            "minute": st.integers(0, 30),  # event time: often long before its arrival (late)
            "wait": st.integers(0, 3),  # minutes after the previous arrival
            "source_partition": st.integers(0, 1),
            "item_id": st.integers(1, 4),
            "watch_time_ms": st.integers(0, 50) | st.none(),
            "completion_ratio": st.sampled_from([0.0, 0.25, -1.5, float("inf")]) | st.none(),
            "surface": st.sampled_from(["feed", "é"]) | st.none(),
        }
    ),
    min_size=1,
    max_size=30,
)


def arrived(events: list[dict]) -> list[dict]:
    """Arrival order is list order: LSNs grow per partition, arrival times never go back, and the
    processing window is the arrival's ten-minute slot."""
    next_lsn = {0: 1, 1: 1}
    now = 0
    out = []
    for e in events:
        now += e["wait"]
        lsn = next_lsn[e["source_partition"]]
        next_lsn[e["source_partition"]] += 1
        out.append(
            {
                **e,
                "lsn": lsn,
                "event_ts": T0 + timedelta(minutes=e["minute"]),
                "arrival_ts": T0 + timedelta(minutes=now),
                "window_id": now // 10,
            }
        )
    return out


def arrival_points(events: list[dict], publications: list[tuple[int, int, int]]) -> list[dict]:
    points = [{k: e[k] for k in ("source_partition", "arrival_ts", "lsn", "window_id")} for e in events]
    for partition, minute, lsn in publications:  # recorded frontiers: no landing window
        points.append(
            {"source_partition": partition, "arrival_ts": T0 + timedelta(minutes=minute), "lsn": lsn, "window_id": None}
        )
    return points


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=events_strategy,
    data=st.data(),
    as_of=st.sampled_from(["event-time", "arrival"]),
    publications=st.lists(st.tuples(st.integers(0, 1), st.integers(0, 60), st.integers(0, 20)), max_size=2),
)
def test_backfill_equals_the_per_row_reference(events, data, as_of, publications):
    events = arrived(events)
    minutes = st.sampled_from(
        [e["minute"] for e in events] + [int(e["arrival_ts"].timestamp() - T0.timestamp()) // 60 for e in events]
    )
    labels = data.draw(
        st.lists(
            st.fixed_dictionaries({"user_id": st.sampled_from([1, 1, 2, 3]), "minute": minutes | st.integers(-1, 70)}),
            min_size=1,
            max_size=6,
        )
    )
    labels = [
        {"user_id": x["user_id"], "ts": T0 + timedelta(minutes=x["minute"]), "label": n} for n, x in enumerate(labels)
    ]
    history, detail = history_rows(events), detail_rows(events)
    detail = detail.set_column(
        detail.schema.get_field_index("arrival_ts"),
        "arrival_ts",
        pa.array([e["arrival_ts"] for e in events], TIMESTAMP_US),
    )
    points = arrival_points(events, publications)
    expected, expected_leaks = reference_backfill(CONFIG, TENANT, as_of, labels, history, detail, points)

    with connect(extensions=()) as con:
        con.register(
            "_points",
            pa.Table.from_pylist(
                points,
                schema=pa.schema(
                    [
                        pa.field("source_partition", pa.int32()),
                        pa.field("arrival_ts", TIMESTAMP_US),
                        pa.field("lsn", pa.int64()),
                        pa.field("window_id", pa.int64()),
                    ]
                ),
            ),
        )
        con.execute("SET TimeZone = 'UTC'")
        frontiers = ArrivalFrontiers(con, "SELECT * FROM _points")
        table = pa.table(
            {
                "user_id": pa.array([x["user_id"] for x in labels], pa.int64()),
                "_ts": pa.array([x["ts"] for x in labels], TIMESTAMP_US),
            }
        )
        bounds, windows = frontiers.at(table["_ts"])
    table = table.append_column("lsn_bound", bounds).append_column("open_window", windows)
    found = backfill_batch(CONFIG, TENANT, as_of, table, history, detail)
    actual = pa.table(found.sequences).to_pylist()
    assert actual == expected
    assert found.leaked.tolist() == expected_leaks
    assert set(COLUMNS) <= {c.removeprefix("seq_") for c in found.sequences}
