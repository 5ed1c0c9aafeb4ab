"""The synthetic stream, measured from its own output: shares, ordering, LSNs, lengths, payloads."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pytest

from seqlake.core.config import Config, load_config
from seqlake.core.events import MAX_EVENT_TS_MS, PAYLOAD_KEYS, RAW_SCHEMA
from seqlake.core.payload import MAX_PAYLOAD_BYTES, unreadable_line_payload, validate_payload
from seqlake.pipelines.demo.generator import MALFORMED_REASONS, EventGenerator, GeneratorStats, stream_window

SMALL = {"users": 300, "max_events": 5000, "windows": 6, "heavy_users": 2, "items": 5000}


@pytest.fixture(scope="module")
def config() -> Config:
    return load_config()


def generate(config: Config, batch_rows: int = 65_536, **update) -> tuple[pa.Table, GeneratorStats]:
    spec = config.generator.model_copy(update={**SMALL, **update})
    generator = EventGenerator(config, spec)
    batches = list(generator.batches(batch_rows))
    return pa.Table.from_batches(batches, schema=RAW_SCHEMA), generator.stats


@dataclass
class Measured:
    """What a consumer sees in the stream, computed from the records alone."""

    events: dict[str, dict]  # event_id -> first delivered event, with arrival_ts and window
    valid_records: int
    reasons: Counter
    late: int
    very_late: int


def measure(table: pa.Table, config: Config) -> Measured:
    window_seconds, start = config.layout.window_seconds, config.generator.start_ts
    arrivals = table["arrival_ts"].cast(pa.int64()).to_numpy().tolist()
    partitions = table["source_partition"].to_pylist()
    reasons: Counter = Counter()
    events: dict[str, dict] = {}
    valid = 0
    # Rows are in arrival order, so the first occurrence of an event id is its first delivery.
    rows = zip(arrivals, partitions, table["payload"].to_pylist(), strict=True)
    for arrival, partition, payload in rows:
        event, reason = validate_payload(payload, config)
        if reason:
            reasons[reason] += 1
            continue
        assert event is not None  # no reason: a valid event
        valid += 1
        if event["event_id"] not in events:
            event["arrival_ts"], event["source_partition"] = arrival, partition
            events[event["event_id"]] = event
    late = very_late = 0
    newest: dict[int, int] = defaultdict(lambda: -1)  # latest event time seen per user so far
    for event in events.values():
        own = int(stream_window(event["event_ts"], window_seconds, start))
        delivered = int(stream_window(event["arrival_ts"], window_seconds, start))
        if delivered > own:
            very_late += 1
        elif newest[event["user_id"]] > event["event_ts"]:
            late += 1  # an event of the same user with a later event time arrived before it
        newest[event["user_id"]] = max(newest[event["user_id"]], event["event_ts"])
        event["window"] = own
    return Measured(events, valid, reasons, late, very_late)


@pytest.fixture(scope="module")
def small(config: Config) -> tuple[pa.Table, GeneratorStats, Measured]:
    table, stats = generate(config, batch_rows=1000, malformed_share=0.05)
    return table, stats, measure(table, config)


def assert_share(count: int, total: int, share: float, relative: float = 0.25) -> None:
    assert abs(count / total - share) <= max(relative * share, 2 / total), (count, total, share)


def test_same_seed_same_bytes_other_seed_differs(config: Config) -> None:
    first, _ = generate(config, windows=3)
    again, _ = generate(config, windows=3)
    other, _ = generate(config, windows=3, seed=8)
    assert first.num_rows > 1000
    assert first.equals(again)
    assert not first.equals(other)


def test_schema_batches_and_lsns(config: Config, small) -> None:
    table, stats, _ = small
    assert table.schema == RAW_SCHEMA
    assert table.num_rows == stats.records
    spec = config.generator.model_copy(update={**SMALL, "malformed_share": 0.05})
    sizes = [b.num_rows for b in EventGenerator(config, spec).batches(1000)]
    assert max(sizes) == 1000 and sum(sizes) == stats.records
    partitions = table["source_partition"].to_numpy()
    lsns = table["lsn"].to_numpy()
    arrivals = table["arrival_ts"].cast(pa.int64()).to_numpy()
    assert set(partitions.tolist()) == set(range(spec.source_partitions))
    for p in range(spec.source_partitions):
        mask = partitions == p
        assert lsns[mask].tolist() == list(range(mask.sum()))  # no gaps, arrival order
        assert np.all(np.diff(arrivals[mask]) >= 0)
    windows = stream_window(arrivals, config.layout.window_seconds, spec.start_ts)
    assert windows.min() == 0 and windows.max() == spec.windows - 1
    # The stream is keyed by user: a user's records all land in user_id % partitions.
    for event in small[2].events.values():
        assert event["source_partition"] == event["user_id"] % spec.source_partitions


def test_shares_match_config_and_stats(config: Config, small) -> None:
    _, stats, measured = small
    spec = config.generator
    events = len(measured.events)
    assert events == stats.events
    assert measured.late == stats.late
    assert_share(measured.late, events, spec.late_share)
    assert measured.very_late == stats.very_late
    assert_share(measured.very_late, events, spec.very_late_share)
    duplicates = measured.valid_records - events
    assert duplicates == stats.duplicates
    assert_share(duplicates, events, spec.duplicate_share)
    malformed = sum(measured.reasons.values())
    assert dict(measured.reasons) == stats.malformed
    assert_share(malformed, stats.records, 0.05)
    assert stats.records == events + duplicates + malformed


def test_every_malformed_reason_appears(small) -> None:
    _, stats, measured = small
    assert set(measured.reasons) == set(MALFORMED_REASONS)
    assert min(measured.reasons.values()) >= 5
    assert set(stats.malformed) == set(MALFORMED_REASONS)


def test_arrival_follows_event_time(config: Config, small) -> None:
    table, _, measured = small
    delays = np.array([e["arrival_ts"] - e["event_ts"] for e in measured.events.values()])
    assert delays.min() >= 0  # nothing arrives before it happened
    assert np.median(delays) < 10_000  # in-order events arrive within seconds
    # Very late events arrive 1 to 3 windows after their own.
    window_ms = config.layout.window_seconds * 1000
    assert delays.max() < 4 * window_ms


def test_history_lengths_heavy_tailed(config: Config, small) -> None:
    _, stats, measured = small
    per_user = Counter(e["user_id"] for e in measured.events.values())
    lengths = np.array([per_user.get(1_000_000 + u, 0) for u in range(SMALL["users"])])
    assert lengths.tolist() == list(stats.history_lengths)
    min_events = config.generator.min_events
    assert lengths.min() >= min_events
    assert np.median(lengths) < 10 * min_events
    assert lengths[: SMALL["heavy_users"]].tolist() == [SMALL["max_events"]] * 2
    assert lengths.max() == SMALL["max_events"]


def test_pareto_tail(config: Config) -> None:
    update = {"users": 40_000, "heavy_users": 0, "max_events": 10**6, "length_alpha": 1.1}
    spec = config.generator.model_copy(update=update)
    lengths = EventGenerator(config, spec).stats.history_lengths
    m = spec.min_events
    for x in (10, 40, 200):
        # Lengths are floor(Pareto), so length > x means Pareto >= x + 1.
        expected = (m / (x + 1)) ** spec.length_alpha
        assert abs(np.mean(lengths > x) / expected - 1) < 0.15, x


def test_feature_groups_and_values(config: Config, small) -> None:
    events = list(small[2].events.values())
    groups = Counter(e["feature_group"] for e in events)
    assert set(groups) == set(config.feature_groups)
    assert_share(groups["engagement"], len(events), 0.8, relative=0.05)
    assert groups["engagement"] > groups["search"] > groups["purchase"]
    for event in events:
        assert set(PAYLOAD_KEYS) <= set(event)
        assert None not in event.values()
        if event["feature_group"] == "engagement":
            assert 0 <= event["watch_time_ms"] <= event["duration_ms"]
            assert 0.0 <= event["completion_ratio"] <= 1.0
            assert event["surface"] in {"feed", "search", "profile", "explore"}
            assert event["device"] in {"ios", "android", "web"}
            assert event["action_flags"] & 1 and event["action_flags"] < 64
        elif event["feature_group"] == "purchase":
            assert event["currency"] in {
                "USD",
                "EUR",
                "GBP",
                "JPY",
                "BRL",
                "INR",
                "IDR",
                "MXN",
                "TRY",
            }
            assert event["quantity"] >= 1 and event["price_cents"] > 0


def test_repeated_items_within_a_window(small) -> None:
    keys = Counter((e["user_id"], e["feature_group"], e["item_id"], e["window"]) for e in small[2].events.values())
    repeated = sum(1 for n in keys.values() if n > 1)
    assert repeated / len(keys) > 0.1
    assert sum(n for n in keys.values() if n > 1) / sum(keys.values()) > 0.5


def test_last_window_catches_very_late(config: Config) -> None:
    # With two windows only the first can deliver late, and the share still holds overall.
    table, stats = generate(config, windows=2, very_late_share=0.1)
    measured = measure(table, config)
    assert measured.very_late == stats.very_late
    assert_share(stats.very_late, stats.events, 0.1, relative=0.05)


# -- validate_payload ---------------------------------------------------------------------------

VALID = {
    "event_id": "1000007-3",
    "user_id": 1000007,
    "feature_group": "purchase",
    "event_ts": 1767571200123,
    "item_id": 42,
    "price_cents": 1999,
    "quantity": 2,
    "currency": "EUR",
}


def with_(**changes) -> str:
    data = {**VALID, **changes}
    return json.dumps({k: v for k, v in data.items() if v is not ...})


def test_valid_payload_round_trips(config: Config) -> None:
    event, reason = validate_payload(json.dumps(VALID), config)
    assert reason is None
    assert event == VALID
    event, _ = validate_payload(with_(currency=None, quantity=...), config)
    assert event is not None
    assert event["currency"] is None and event["quantity"] is None
    moved = json.dumps({**VALID, "feature_group": "engagement"})
    assert validate_payload(moved, config) == (None, "unknown_column")  # price_cents is not there
    engagement = {k: VALID[k] for k in PAYLOAD_KEYS} | {"feature_group": "engagement"}
    event, _ = validate_payload(json.dumps(engagement | {"completion_ratio": 1}), config)
    assert event is not None
    assert event["completion_ratio"] == 1.0 and isinstance(event["completion_ratio"], float)


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (json.dumps(VALID)[:40], "invalid_json"),
        ("[1, 2]", "invalid_json"),
        (with_(price_cents=float("nan")), "invalid_json"),
        (with_(user_id=...), "missing_user_id"),
        (with_(user_id=None, feature_group="nope"), "missing_user_id"),
        (with_(user_id="u12x"), "bad_user_id"),
        (with_(user_id=-5), "bad_user_id"),
        (with_(user_id="1000007"), "bad_user_id"),
        (with_(feature_group="clicks", event_ts=1), "unknown_feature_group"),
        (with_(event_ts=...), "missing_event_ts"),
        (with_(event_ts=1767571200), "event_ts_out_of_range"),
        (with_(event_ts=MAX_EVENT_TS_MS + 1), "event_ts_out_of_range"),
        (with_(event_ts="2026-01-05"), "wrong_type"),
        (with_(quantity="abc", currency="EURO"), "wrong_type"),
        (with_(quantity=2**31), "wrong_type"),
        (with_(quantity=True), "wrong_type"),
        (with_(quantity=2.5), "wrong_type"),
        (with_(currency=3), "wrong_type"),
        (with_(event_id=7), "wrong_type"),
        (with_(quantity=-(2**31) - 1), "wrong_type"),
        (with_(price_cents=2**63), "wrong_type"),
        (with_(price_cents=10**400), "wrong_type"),
        (with_(currency="\ud800"), "invalid_utf8"),
        (with_(currency="E\udfffR"), "invalid_utf8"),
        (with_(event_id="e-\ud83d"), "invalid_utf8"),
        (with_(currency="\ud800", quantity=2**31), "wrong_type"),
        (with_(currency="EURO", color="red"), "oversize_value"),
        ("{" + " " * MAX_PAYLOAD_BYTES + json.dumps(VALID)[1:], "oversize_value"),
        (with_(color="red"), "unknown_column"),
        # A key twice, whatever else is wrong and whichever value would win: one rule, duplicate_key.
        (with_()[:-1] + ',"quantity":3}', "duplicate_key"),
        (with_()[:-1] + ',"user_id":1000008}', "duplicate_key"),
        (with_(user_id="x")[:-1] + ',"user_id":"x"}', "duplicate_key"),
        (with_(currency={"a": 1}).replace('{"a": 1}', '{"a": 1, "a": 2}'), "wrong_type"),  # nested: a bad value
        (unreadable_line_payload("8,104,1700000500,view"), "unreadable_line"),
        (unreadable_line_payload(""), "unreadable_line"),
        (json.dumps({"unreadable_line": 5}), "missing_user_id"),  # not the envelope an import writes
    ],
)
def test_validate_payload_reasons(config: Config, payload: str, reason: str) -> None:
    assert validate_payload(payload, config) == (None, reason)


def test_event_time_bounds_are_the_configuration_s(config: Config) -> None:
    nineties = with_(event_ts=826_000_000_000)  # 1996-03-05
    assert validate_payload(nineties, config) == (None, "event_ts_out_of_range")
    events = config.events.model_copy(update={"min_event_time": datetime(1995, 1, 1, tzinfo=UTC)})
    wider = config.model_copy(update={"events": events})
    assert validate_payload(nineties, wider)[1] is None
    assert validate_payload(with_(event_ts=events.min_event_ms), wider)[1] is None  # both ends included
    assert validate_payload(with_(event_ts=events.min_event_ms - 1), wider)[1] == "event_ts_out_of_range"
    assert (config.events.min_event_ms, config.events.max_event_ms) == (946_684_800_000, 4_102_444_800_000)
