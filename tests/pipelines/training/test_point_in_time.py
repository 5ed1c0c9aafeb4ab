"""Point in time on a real lake, through the public commands: labels made from events never see
their own outcome, on either engine, and the leakage report counts each way the future gets in.

Seeded sessions of wide hashed users: an item viewed, and often bought minutes later in the same
hourly window, so the history row of that item holds the view and the buy and is stamped with the
view. Arrival is event time (as an import's is). Labels sit at each buy, a microsecond before it
and a microsecond after it. The reference folds the lake's own detail events in plain Python
(`test_aggregation_properties.reference_fold`), independent of history and of the backfill:

1. clean data: both semantics on both engines give the fold of exactly the events before ts (and
   arrival `--inclusive` also those that arrived at ts); the report is 0, except inclusive, which
   counts the rows that arrived at ts;
2. late events (happened early, arrived after every label): event time takes them in, and the
   report counts them as late arrivals;
3. detail dropped (`seqlake gc`): the rows that merged events from ts on cannot be rebuilt; they
   are withheld, and the report says how many.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from seqlake.core.config import parse_config
from seqlake.core.events import RAW_SCHEMA
from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.jobs.backfill import main as backfill_main
from seqlake.jobs.detail_gc import main as gc_main
from seqlake.pipelines.compaction.duckdb import compact_batch_duckdb
from seqlake.pipelines.compaction.plan import history_tables, plan_batches
from seqlake.pipelines.demo.full import reset_demo_tables
from seqlake.pipelines.ingest.duckdb import ingest_source_in_process
from seqlake.pipelines.ingest.raw_source import create_raw_table, land_raw_records
from seqlake.pipelines.landing.tables import landing_paths
from seqlake.pipelines.landing.windows import landed_windows
from seqlake.pipelines.tables import load_existing_table
from seqlake.pipelines.training.backfill.plan import AsOf
from seqlake.pipelines.training.backfill.spark import write_spark_backfill
from seqlake.pipelines.training.sequence import Tenant
from tests.pipelines.compaction.test_aggregation_properties import reference_fold

pytestmark = pytest.mark.spark

T0 = datetime(2026, 3, 2, 8, tzinfo=UTC)
ONE_US = timedelta(microseconds=1)
VIEW, BUY = 1, 128
TENANT = "pit"
MAX_LENGTH = 12


def pit_config(lake_config, tmp_path):
    data = lake_config.model_dump(mode="json")
    data["warehouse"]["namespace"] = "point_in_time"
    data["tenants"] = {
        TENANT: {
            "feature_groups": ["engagement"],
            "columns": ["item_id", "action_flags", "watch_time_ms"],
            "max_length": MAX_LENGTH,
        }
    }
    config = parse_config(data, "test")
    path = tmp_path / "seqlake.yaml"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    return config, path


def sessions(seed: int) -> list[dict]:
    """Bursty sessions of a few users: views of popular items, often a buy of one of them later."""
    rng = random.Random(seed)
    users = [rng.getrandbits(40) for _ in range(5)]
    out = []
    for user in users:
        for _ in range(3):
            at = T0 + timedelta(seconds=rng.randrange(0, 5 * 3600))
            viewed = []
            for _ in range(rng.randint(3, 7)):
                item = min(int(rng.paretovariate(1.2)), 8)
                out.append(
                    {"user_id": user, "item_id": item, "event_ts": at, "flags": VIEW, "watch": rng.randrange(900)}
                )
                viewed.append(item)
                at += timedelta(seconds=rng.randint(5, 240), milliseconds=rng.randrange(1000))
            if rng.random() < 0.7:
                out.append({"user_id": user, "item_id": rng.choice(viewed), "event_ts": at, "flags": BUY, "watch": 0})
    return out


def land(config, events: list[dict], arrival: datetime | None, first_lsn: int) -> list[dict]:
    """Append the events as raw records of source partition 0 (arrival: event time, or the one
    given), ingest and compact every window in-process; the events with their LSNs and arrivals."""
    events = sorted(events, key=lambda e: e["event_ts"])
    records = []
    for n, e in enumerate(events):
        e.update(lsn=first_lsn + n, arrival_ts=arrival or e["event_ts"], event_id=f"e{first_lsn + n}")
        payload = {
            "event_id": e["event_id"],
            "user_id": e["user_id"],
            "feature_group": "engagement",
            "event_ts": int(e["event_ts"].timestamp() * 1000),
            "item_id": e["item_id"],
            "action_flags": e["flags"],
            "watch_time_ms": e["watch"],
        }
        records.append(
            {"source_partition": 0, "lsn": e["lsn"], "arrival_ts": e["arrival_ts"], "payload": json.dumps(payload)}
        )
    raw = create_raw_table(open_catalog(config), table_identifier(config, "raw_events"))
    land_raw_records(raw, [pa.RecordBatch.from_pylist(records, schema=RAW_SCHEMA)])
    paths = landing_paths(config)
    assert ingest_source_in_process(config, "raw_events", paths).landed == len(events)
    state = landed_windows(paths)
    published = set(
        history_tables(config)[0].refresh().scan(selected_fields=("window_id",)).to_arrow()["window_id"].to_pylist()
    )
    pending = {w: n for w, n in state.rows.items() if w not in published}
    for batch in plan_batches(pending, config.layout.compaction_batch_rows):
        compact_batch_duckdb(config, paths, batch)
    return events


def detail_events(config) -> list[dict]:
    """The lake's detail events as typed rows (what compaction folded)."""
    _, detail = history_tables(config)
    return detail.refresh().scan().to_arrow().to_pylist()


def expected(config, events: list[dict], label: dict, as_of: str, inclusive: bool = False) -> dict[str, list]:
    ts = label["ts"]
    if as_of == "event-time":
        known = [e for e in events if e["event_ts"] < ts]
    else:
        known = [e for e in events if e["arrival_ts"] < ts or (inclusive and e["arrival_ts"] == ts)]
    mine = [e for e in known if e["user_id"] == label["user_id"]]
    rows = []
    for window in sorted({e["window_id"] for e in mine}):
        rows += reference_fold(config, [e for e in mine if e["window_id"] == window])
    rows.sort(key=lambda r: (r["event_ts"], r["lsn"], r["source_partition"]))
    return {c: [r[c] for r in rows[-MAX_LENGTH:]] for c in ("item_id", "action_flags", "watch_time_ms", "lsn")}


def sequences(config, table: str) -> dict[tuple, dict[str, list]]:
    rows = load_existing_table(config, table).scan().to_arrow().to_pylist()
    return {
        (r["user_id"], r["ts"], r["kind"]): {c: r[f"seq_{c}"] for c in ("item_id", "action_flags", "watch_time_ms")}
        for r in rows
    }


def reference(config, events, labels, as_of, inclusive=False) -> dict[tuple, dict[str, list]]:
    out = {}
    for label in labels:
        seq = expected(config, events, label, as_of, inclusive)
        seq.pop("lsn")
        out[(label["user_id"], label["ts"], label["kind"])] = seq
    return out


def backfill(config_path, labels, out: str, *args: str) -> int:
    return backfill_main(
        ["--config", str(config_path), "--labels", str(labels), "--tenant", TENANT, "--out", out, *args]
    )


def test_labels_from_events_never_see_their_own_outcome(spark, lake_config, tmp_path, capsys):
    config, config_path = pit_config(lake_config, tmp_path)
    reset_demo_tables(config)
    events = land(config, sessions(seed=43), None, first_lsn=1)
    buys = [e for e in events if e["flags"] == BUY]
    labels = [
        {"user_id": e["user_id"], "ts": e["event_ts"] + shift, "kind": kind}
        for e in buys
        for kind, shift in (("at", timedelta(0)), ("before", -ONE_US), ("after", ONE_US))
    ]
    path = tmp_path / "labels.parquet"
    pq.write_table(
        pa.table(
            {
                "user_id": pa.array([x["user_id"] for x in labels], pa.int64()),
                "ts": pa.array([x["ts"] for x in labels], pa.timestamp("us", tz="UTC")),
                "kind": [x["kind"] for x in labels],
            }
        ),
        path,
    )
    detail = detail_events(config)
    history = history_tables(config)[0].refresh().scan().to_arrow().to_pylist()
    # The data holds the case: "at" labels whose buy's row (stamped with the view) holds the buy.
    own_buy = sum(
        1
        for x in labels
        for r in history
        if x["kind"] == "at" and r["user_id"] == x["user_id"] and r["event_ts"] < x["ts"] == r["last_event_ts"]
    )
    assert own_buy > 0
    n = len(labels)

    # 1. clean data: each semantics is the fold of exactly what was known before ts, on both engines
    runs: tuple[tuple[AsOf, bool, str], ...] = (
        ("event-time", False, "pit_time"),
        ("arrival", False, "pit_arrival"),
        ("arrival", True, "pit_inclusive"),
    )
    for as_of, inclusive, out in runs:
        flags = ["--as-of", as_of] + (["--inclusive"] if inclusive else [])
        assert backfill(config_path, path, out, *flags) == 0
        printed = capsys.readouterr().out
        want = reference(config, detail, labels, as_of, inclusive)
        assert sequences(config, out) == want, (as_of, inclusive)
        if inclusive:  # the buy at ts arrived at ts: the "at" labels hold it, and the report says so
            at_ts = sum(1 for x in labels if x["kind"] == "at")
            assert (
                f"leakage: {at_ts:,} of {n:,} label rows" in printed
                and f"{at_ts:,} arrived or happened at ts" in printed
            )
        else:
            assert f"leakage: 0 of {n:,} label rows (0.00%)" in printed, printed
        count, report = write_spark_backfill(
            spark, config, path, Tenant(config, TENANT), as_of, f"{out}_spark", inclusive=inclusive
        )
        assert count == n and sequences(config, f"{out}_spark") == want
        assert report.summary() in printed  # the engines count alike
        if inclusive:  # the row of the view and the buy at ts merged an event at ts too
            assert report.merged_after > 0

    # 2. late events: they happened in the sessions' hours and arrive after every label
    late_at = T0 + timedelta(hours=9)
    rng = random.Random(7)
    late = [
        {
            "user_id": e["user_id"],
            "item_id": 50 + rng.randrange(3),
            "event_ts": e["event_ts"] - timedelta(minutes=rng.randint(1, 30)),
            "flags": VIEW,
            "watch": 1,
        }
        for e in buys[::2]
    ]
    land(config, late, late_at, first_lsn=len(events) + 1)
    detail = detail_events(config)
    arrived = {e["lsn"]: e["arrival_ts"] for e in detail}
    late_rows = sum(
        sum(arrived[lsn] > label["ts"] for lsn in expected(config, detail, label, "event-time")["lsn"])
        for label in labels
    )
    assert late_rows > 0
    assert backfill(config_path, path, "pit_late") == 0
    printed = capsys.readouterr().out
    assert sequences(config, "pit_late") == reference(config, detail, labels, "event-time")
    assert f"{late_rows:,} arrived later, 0 arrived or happened at ts, 0 merged events from ts on" in printed
    _, report = write_spark_backfill(spark, config, path, Tenant(config, TENANT), "event-time", "pit_late_spark")
    assert (report.late_arrivals, report.at_label_time, report.merged_after) == (late_rows, 0, 0)

    # 3. detail of every window but the newest dropped: rows that merged events from ts on are withheld
    assert gc_main(["--config", str(config_path), "--retention-windows", "1"]) == 0
    capsys.readouterr()
    newest = max(e["window_id"] for e in detail)
    history = history_tables(config)[0].refresh().scan().to_arrow().to_pylist()
    spanning = sum(
        1
        for label in labels
        for r in history
        if r["user_id"] == label["user_id"]
        and r["window_id"] != newest
        and r["event_ts"] < label["ts"] <= (r["last_event_ts"] or r["event_ts"])
    )
    assert spanning > 0
    assert backfill(config_path, path, "pit_expired") == 0
    printed = capsys.readouterr().out
    assert (
        f"; {spanning:,} rows withheld (they merged events from ts on and their window's detail has expired)" in printed
    )
    _, report = write_spark_backfill(spark, config, path, Tenant(config, TENANT), "event-time", "pit_expired_spark")
    assert report.withheld == spanning and report.merged_after == 0
    assert sequences(config, "pit_expired_spark") == sequences(config, "pit_expired")
