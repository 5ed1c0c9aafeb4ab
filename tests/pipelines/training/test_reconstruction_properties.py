"""The set-based reconstruction equals the plain per-pointer reference, for random histories, late
arrivals (rows of a window published after the bound, rebuilt from detail) and pointers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqlake.core.config import DEFAULT_CONFIG_PATH, parse_config
from seqlake.pipelines.landing.schema import landing_schema
from seqlake.pipelines.training.rebuild.duckdb import rebuild_batch
from seqlake.pipelines.training.sequence import Tenant
from seqlake.pipelines.training.tables import training_schema
from tests.reconstruction_reference import reference_rebuild

T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
COLUMNS = ["item_id", "watch_time_ms", "completion_ratio", "surface"]


def property_config():
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    data["tenants"] = {"example": {"feature_groups": ["engagement"], "columns": COLUMNS, "max_length": 6}}
    return parse_config(data, "test")


CONFIG = property_config()
TENANT = Tenant(CONFIG, "example")

events_strategy = st.lists(
    st.fixed_dictionaries(
        {
            "user_id": st.sampled_from([1, 2]),
            "feature_group": st.sampled_from(["engagement", "engagement", "search"]),
            "minute": st.integers(0, 12),
            "source_partition": st.integers(0, 1),
            "window_id": st.integers(0, 2),
            "item_id": st.integers(1, 4),
            "watch_time_ms": st.integers(0, 50) | st.none(),
            "completion_ratio": st.sampled_from([0.0, 0.25, 1 / 3, -1.5, 1e-40, float("inf")]) | st.none(),
            "surface": st.sampled_from(["feed", "search", "é"]) | st.none(),
        }
    ),
    min_size=3,
    max_size=30,
)


def pointer_strategy(events: list[dict]):
    """Pointers whose bounds, ranges and fragment keys often sit exactly on an event (the edges)."""
    minutes = st.sampled_from([e["minute"] for e in events]) if events else st.integers(0, 12)
    minutes = minutes | st.integers(0, 12)
    keys = st.sampled_from([(e["minute"], e["lsn"], e["source_partition"]) for e in events]) if events else st.nothing()
    keys = keys | st.tuples(st.integers(0, 12), st.integers(0, 20), st.integers(0, 1))
    lsns = st.sampled_from([e["lsn"] for e in events]) if events else st.integers(0, 20)
    return st.fixed_dictionaries(
        {
            "user_id": st.sampled_from([1, 1, 2, 3]),
            # Mostly a range and a bound on both partitions (a pointer without is the rare case).
            "range": st.tuples(minutes, minutes) | st.tuples(minutes, minutes) | st.none(),
            "bound": st.fixed_dictionaries({0: lsns, 1: lsns})
            | st.dictionaries(st.integers(0, 1), st.integers(0, 20), max_size=2),
            "open_window": st.integers(0, 2) | st.just(3),
            "length": st.integers(0, 8),
            "fragment": st.lists(st.tuples(minutes, st.integers(1, 4), st.integers(0, 50)), max_size=3),
            "fragment_key": keys,
            "checksum_from_reference": st.booleans(),
            "length_from_reference": st.booleans(),
        }
    )


def with_lsns(events: list[dict]) -> list[dict]:
    """Arrival order is list order: LSNs grow per source partition."""
    next_lsn = {0: 1, 1: 1}
    out = []
    for e in events:
        lsn = next_lsn[e["source_partition"]]
        next_lsn[e["source_partition"]] += 1
        out.append({**e, "lsn": lsn, "event_ts": T0 + timedelta(minutes=e["minute"])})
    return out


def history_rows(events: list[dict]) -> pa.Table:
    """History as published rows (one per event here: equivalence needs no aggregation)."""
    rows = [
        {
            "user_id": e["user_id"],
            "feature_group": e["feature_group"],
            "event_ts": e["event_ts"],
            "lsn": e["lsn"],
            "last_event_ts": e["event_ts"],
            "min_lsn": e["lsn"],
            "source_partition": e["source_partition"],
            "window_id": e["window_id"],
            **{c: e[c] for c in COLUMNS},
        }
        for e in events
    ]
    types = {f.name: f.type for f in TENANT.schema}
    schema = pa.schema(
        [
            pa.field("user_id", pa.int64()),
            pa.field("feature_group", pa.string()),
            pa.field("event_ts", types["event_ts"]),
            pa.field("lsn", pa.int64()),
            pa.field("last_event_ts", types["event_ts"]),
            pa.field("min_lsn", pa.int64()),
            pa.field("source_partition", pa.int32()),
            pa.field("window_id", pa.int64()),
            *(pa.field(c, types[c]) for c in COLUMNS),
        ]
    )
    return pa.Table.from_pylist(rows, schema=schema)


def detail_rows(events: list[dict]) -> pa.Table:
    schema = landing_schema(CONFIG)
    rows = []
    for n, e in enumerate(events):
        row = dict.fromkeys(schema.names)
        row.update({k: v for k, v in e.items() if k in schema.names})
        row.update(event_id=f"e{n}", arrival_ts=T0)
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=schema)


def pointer_rows(pointers: list[dict]) -> pa.Table:
    rows = []
    for n, p in enumerate(pointers):
        fragment = sorted(p["fragment"])
        start, end = sorted(p["range"]) if p["range"] else (None, None)
        minute = lambda m: None if m is None else T0 + timedelta(minutes=m)  # noqa: E731
        key_ts, key_lsn, key_partition = p["fragment_key"]
        rows.append(
            {
                "request_id": f"r{n}",
                "user_id": p["user_id"],
                "request_ts": T0,
                "label_click": False,
                "label_dwell_ms": 0,
                "surface": "feed",
                "hour_of_day": 10,
                "feature_groups": ["engagement"],
                "range_start": minute(start),
                "range_end": minute(end),
                "lsn_bound": sorted(p["bound"].items()),
                "open_window": p["open_window"],
                "length": p["length"],
                "top_k": TENANT.max_length,
                "checksum": b"\x00" * 16,
                "fragment_start_ts": minute(key_ts) if fragment else None,
                "fragment_start_lsn": key_lsn if fragment else None,
                "fragment_start_partition": key_partition if fragment else None,
                "recent_feature_group": ["engagement"] * len(fragment),
                "recent_event_ts": [minute(m) for m, _, _ in fragment],
                "recent_item_id": [item for _, item, _ in fragment],
                "recent_watch_time_ms": [watch for _, _, watch in fragment],
                "recent_completion_ratio": [0.5] * len(fragment),
                "recent_surface": ["feed"] * len(fragment),
            }
        )
    return pa.Table.from_pylist(rows, schema=training_schema(TENANT))


def set_column(table: pa.Table, name: str, values: list) -> pa.Table:
    index = table.schema.get_field_index(name)
    return table.set_column(index, table.schema.field(name), pa.array(values, table.schema.field(name).type))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=events_strategy, data=st.data(), mode=st.sampled_from(["lsn", "time"]))
def test_set_based_reconstruction_equals_the_per_pointer_reference(events, data, mode):
    events = with_lsns(events)
    pointers = data.draw(st.lists(pointer_strategy(events), min_size=1, max_size=5))
    history, detail = history_rows(events), detail_rows(events)
    batch = pointer_rows(pointers)
    first = reference_rebuild(CONFIG, TENANT, mode, batch, history, detail)
    # Let some pointers carry what the reference rebuilds, so both verified and failed rows occur.
    checksums = [
        bytes.fromhex(actual) if p["checksum_from_reference"] else b"\x00" * 16
        for p, actual in zip(pointers, _actual_checksums(first, batch), strict=True)
    ]
    lengths = [
        len(seq) if p["length_from_reference"] else p["length"]
        for p, seq in zip(pointers, first.assembled["seq_event_ts"].to_pylist(), strict=True)
    ]
    batch = set_column(set_column(batch, "checksum", checksums), "length", lengths)

    expected = reference_rebuild(CONFIG, TENANT, mode, batch, history, detail)
    actual = rebuild_batch(CONFIG, TENANT, mode, batch, history, detail)
    assert actual.assembled.to_pylist() == expected.assembled.to_pylist()
    assert actual.samples.to_pylist() == expected.samples.to_pylist()
    assert actual.quarantined.to_pylist() == expected.quarantined.to_pylist()


def _actual_checksums(result, batch: pa.Table) -> list[str]:
    """The reference's checksum of every request (from its quarantine rows: every pointer fails the
    first pass, its checksum being zeros)."""
    by_request = dict(
        zip(
            result.quarantined["request_id"].to_pylist(), result.quarantined["actual_checksum"].to_pylist(), strict=True
        )
    )
    return [by_request.get(r, "00" * 16) for r in batch["request_id"].to_pylist()]
