"""No poison pills: values at each declared type's limits land, values beyond them are quarantined at ingest.

Raw records carry, for every declared column type (int16, int32, int64, float32, bool, string with a
maximum length) and for the keys (user id, event time), the extreme values that fit and the first ones
that do not, strings JSON can spell but UTF-8 cannot (lone surrogates), and payloads with a key twice
(`duplicate_key`, one rule on both engines). Real Spark ingests them (the in-process engine lands the
same rows) and compacts every window; the test checks what a user would: each bad record is in
quarantine with its reason, every other one landed, every window is published, and history equals the
fold of the valid events (the reference aggregation, `seqlake.pipelines.compaction.duckdb_aggregate`, over exactly those
events).
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from seqlake.core.events import MAX_EVENT_TS_MS, MIN_EVENT_TS_MS, RAW_SCHEMA
from seqlake.core.payload import INT_RANGES
from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.pipelines.compaction.duckdb_aggregate import aggregate_window_local
from seqlake.pipelines.compaction.spark import compact_window
from seqlake.pipelines.demo.full import reset_demo_tables
from seqlake.pipelines.ingest.duckdb import ingest_source_in_process
from seqlake.pipelines.ingest.raw_source import create_raw_table, land_raw_records
from seqlake.pipelines.ingest.spark import ingest_source
from seqlake.pipelines.landing.tables import LandingPaths, landing_paths
from seqlake.pipelines.landing.windows import closed_windows
from seqlake.tableformat.schema import KEY_COLUMNS as SORT_COLUMNS
from tests.conftest import make_config
from tests.pipelines.compaction.test_exactly_once import delta_rows, history_rows

pytestmark = pytest.mark.spark

RAW = "raw_poison"
W0 = 490_992  # 2026-01-05T00:00Z in hour windows
EVENT_TS = W0 * 3_600_000
INT32, INT16, INT64 = INT_RANGES["int32"], INT_RANGES["int16"], INT_RANGES["int64"]
FLOAT32_MAX = 3.4028234663852886e38


def engagement(item: int, **columns: object) -> dict:
    return {"user_id": 7, "feature_group": "engagement", "event_ts": EVENT_TS, "item_id": item, **columns}


def purchase(item: int, **columns: object) -> dict:
    return {"user_id": 7, "feature_group": "purchase", "event_ts": EVENT_TS, "item_id": item, **columns}


# Every record that must land: each limit once, on its own item (so no sum adds two limits together).
VALID = [
    engagement(1, action_flags=INT32[0]),
    engagement(2, action_flags=INT32[1], watch_time_ms=INT32[1], dwell_ms=INT32[1], impression_count=INT32[1]),
    engagement(3, watch_time_ms=INT32[0], duration_ms=INT32[0], category_id=INT32[1]),
    engagement(4, position=INT16[0]),
    engagement(5, position=INT16[1]),
    engagement(INT64[1], author_id=INT64[1], session_id=INT64[0]),
    engagement(INT64[0], author_id=INT64[0], session_id=INT64[1]),
    engagement(8, completion_ratio=FLOAT32_MAX, is_autoplay=True),
    engagement(9, completion_ratio=-FLOAT32_MAX, is_autoplay=False),
    engagement(10, completion_ratio=1e-45),
    engagement(11, surface="s" * 32, device="é" * 32, country="🙂" * 8),  # lengths count characters
    engagement(12, surface=""),
    engagement(13) | {"user_id": 0},
    engagement(14) | {"user_id": INT64[1]},
    engagement(15) | {"event_ts": MIN_EVENT_TS_MS},
    engagement(16) | {"event_ts": MAX_EVENT_TS_MS},
    purchase(17, price_cents=INT64[1], quantity=INT32[1], currency="EUR"),
    purchase(18, price_cents=INT64[0], quantity=INT32[0], currency="€€€"),
    {"user_id": 8, "feature_group": "search", "event_ts": EVENT_TS, "item_id": 19, "result_position": INT16[0]},
    engagement(20, action_flags=3) | {"event_id": "emoji-🙂"},
    engagement(20, action_flags=4, watch_time_ms=10),  # the same item again: folded with the one above
]

# Every record that must be quarantined, with its reason.
INVALID = [
    (engagement(30, action_flags=INT32[1] + 1), "wrong_type"),
    (engagement(31, action_flags=2 * INT32[1]), "wrong_type"),  # 4294967294
    (engagement(32, watch_time_ms=INT32[0] - 1), "wrong_type"),
    (engagement(33, position=INT16[1] + 1), "wrong_type"),
    (engagement(34, position=INT16[0] - 1), "wrong_type"),
    (engagement(INT64[1] + 1), "wrong_type"),
    (engagement(36, author_id=INT64[0] - 1), "wrong_type"),
    (engagement(37, completion_ratio=3.5e38), "wrong_type"),
    (engagement(38, completion_ratio=10**400), "wrong_type"),
    (engagement(39, is_autoplay=1), "wrong_type"),
    (engagement(40, dwell_ms=1.5), "wrong_type"),
    (engagement(41, surface="s" * 33), "oversize_value"),
    (engagement(42, country="🙂" * 9), "oversize_value"),
    (engagement(43, surface="\ud800"), "invalid_utf8"),
    (engagement(44, device="a\udfffb"), "invalid_utf8"),
    (engagement(45) | {"event_id": "lone-\ud83d"}, "invalid_utf8"),
    (engagement(46) | {"user_id": INT64[1] + 1}, "bad_user_id"),
    (engagement(47) | {"user_id": -1}, "bad_user_id"),
    (engagement(48) | {"event_ts": MAX_EVENT_TS_MS + 1}, "event_ts_out_of_range"),
    (engagement(49) | {"event_ts": MIN_EVENT_TS_MS - 1}, "event_ts_out_of_range"),
    (purchase(50, price_cents=INT64[1] + 1), "wrong_type"),
    (purchase(51, quantity=INT32[1] + 1), "wrong_type"),
    (purchase(52, currency="EURO"), "oversize_value"),
]


# A key twice: quarantined as duplicate_key on both engines, whichever value a parser would keep and
# whatever else is wrong (`seqlake.core.payload`). (event, the key repeated at the end, its second value)
DUPLICATED = [
    (engagement(60, action_flags=1), "action_flags", 2),
    (engagement(61), "user_id", 8),
    (engagement(62), "event_ts", EVENT_TS),  # the same value twice
    (engagement(63, surface="s" * 33), "surface", "ok"),  # the second value would fit
    (engagement(64) | {"user_id": -1}, "user_id", 7),
]
INVALID += [(event, "duplicate_key") for event, _, _ in DUPLICATED]
REPEATED = {event["item_id"]: (key, value) for event, key, value in DUPLICATED}


def raw_records() -> tuple[pa.Table, dict[int, str]]:
    """Two arrival windows of records (valid and invalid interleaved); lsn -> expected reason."""
    start = datetime.fromtimestamp(W0 * 3600, UTC)
    records, reasons = [], {}
    events = [(e, None) for e in VALID] + INVALID
    for lsn, (event, reason) in enumerate(sorted(events, key=lambda e: e[0]["item_id"] % 5)):
        # ensure_ascii: the text is valid UTF-8 even where the value it spells is not
        payload = json.dumps({"event_id": f"e{lsn}", **event})
        if event["item_id"] in REPEATED:
            key, value = REPEATED[event["item_id"]]
            payload = f"{payload[:-1]}, {json.dumps(key)}: {json.dumps(value)}}}"
        records.append(
            {
                "source_partition": event["item_id"] % 2,  # one item, one partition: folded together
                "lsn": lsn,
                "arrival_ts": start + timedelta(seconds=100 * lsn),  # 49 records across two hours
                "payload": payload,
            }
        )
        if reason is not None:
            reasons[lsn] = reason
    return pa.Table.from_pylist(records, schema=RAW_SCHEMA), reasons


def test_limits_land_beyond_them_quarantined_and_every_window_is_published(spark, lake_config):
    config = make_config(lake_config.warehouse_path())
    reset_demo_tables(config)
    records, reasons = raw_records()
    raw = create_raw_table(open_catalog(config), table_identifier(config, RAW), replace=True)
    land_raw_records(raw, records.to_batches(), window_seconds=config.layout.window_seconds)
    paths = landing_paths(config)

    ingested = ingest_source(spark, config, RAW, paths)
    assert ingested.landed == len(VALID)
    assert sum(ingested.quarantined.values()) == len(INVALID)

    quarantine = delta_rows(paths.quarantine)
    assert dict(zip(quarantine["lsn"].to_pylist(), quarantine["reason"].to_pylist(), strict=True)) == reasons
    landing = delta_rows(paths.events)
    assert sorted(landing["lsn"].to_pylist()) == sorted(set(range(records.num_rows)) - set(reasons))

    # The in-process engine lands and quarantines the same rows, every limit value exactly.
    root = config.warehouse_path() / "landing_poison_in_process"
    shutil.rmtree(root, ignore_errors=True)
    mine = LandingPaths(events=f"{root.as_uri()}/events", quarantine=f"{root.as_uri()}/quarantine")
    in_process = ingest_source_in_process(config, RAW, mine)
    assert (in_process.landed, in_process.quarantined) == (ingested.landed, ingested.quarantined)
    assert delta_rows(mine.events).equals(landing) and delta_rows(mine.quarantine).equals(quarantine)

    windows = closed_windows(paths, end_of_stream=True)
    assert windows == [W0, W0 + 1]
    results = [compact_window(spark, config, paths, w) for w in windows]
    assert all(r.published for r in results)

    expected = pa.concat_tables(
        aggregate_window_local(config, landing.filter(pc.equal(landing["window_id"], w))) for w in windows
    ).sort_by([(c, "ascending") for c in SORT_COLUMNS])
    got = history_rows(config).sort_by([(c, "ascending") for c in SORT_COLUMNS])
    assert got.num_rows == expected.num_rows == len(VALID) - 1  # item 20 twice: one row
    assert got.select(expected.column_names).to_pylist() == expected.to_pylist()
    folded = got.filter(pc.equal(got["item_id"], 20)).to_pylist()
    assert [(r["event_count"], r["action_flags"], r["watch_time_ms"]) for r in folded] == [(2, 7, 10)]
