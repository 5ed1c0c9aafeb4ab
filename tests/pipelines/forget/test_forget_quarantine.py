"""`forget` on a warehouse whose landing quarantine holds malformed records: the generator's own (a
user id as "u1000012x", as -1000019, a payload cut short) never stop it, and every quarantined record
that names a forgotten user, as far as one can be read from it (`seqlake.core.payload.named_user_ids`),
goes with the user's rows; every other quarantined record stays.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from seqlake.core.config import Config, load_config
from seqlake.core.forget_key import FORGET_KEY_ENV
from seqlake.core.payload import named_user_ids, validate_payload
from seqlake.engines.duckdb_session import lake_cursor
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.demo.generator import EventGenerator
from seqlake.pipelines.forget.landing import names_users, user_rows_in_landing
from seqlake.pipelines.forget.remove import tables_with_users, user_rows
from seqlake.pipelines.landing.tables import landing_paths
from seqlake.tableformat.io import engine_location
from tests import forked_commands
from tests.pipelines.compaction.test_no_event_lost import make_warehouse

pytestmark = pytest.mark.spark

# Payloads beside the generator's: how far an id can be read, and where it cannot.
CRAFTED = [
    '{"event_id":"a","user_id":1000031,"feature_group":"nope"}',
    '{"event_id":"b","user_id":"1000031","feature_group":"engagement"}',  # a numeric string
    '{"event_id":"c","user_id" : "u1000031x" , "event_ts":1}',
    '{"event_id":"d","user_id":-1000031}',
    '{"event_id":"e","user_id":1000031,"feature_gr',  # cut after the id: it names the user
    '{"event_id":"f","user_id":10000',  # cut inside the id: it names nobody
    '{"event_id":"g","user_id":null,"feature_group":"engagement"}',
    '{"event_id":"h","feature_group":"engagement"}',
    '{"event_id":"i","user_id":5,"user_id":1000031}',  # a key twice: both
    '{"event_id":"j","user_id":99999999999999999999999}',  # beyond a BIGINT: no error, nobody
    '{"event_id":"k","user_id":10000310}',  # a longer number is another user
    "[1000031]",
    "not json at all 1000031",
    '{"unreadable_line":"1000031::5::1364690142"}',  # which field is the user? nobody says
]


def generated_malformed(config: Config) -> list[str]:
    """The generator's malformed payloads: every defect it makes, ids mangled and payloads cut."""
    spec = config.generator.model_copy(update={"users": 30, "max_events": 300, "windows": 2, "malformed_share": 0.1})
    records = [
        b.column("payload").to_pylist() for b in EventGenerator(config.model_copy(update={"generator": spec})).batches()
    ]
    return [p for batch in records for p in batch if validate_payload(p, config)[1] is not None]


def test_spark_selects_the_quarantined_payloads_the_reference_names(spark, lake_config: Config) -> None:
    payloads = CRAFTED + generated_malformed(lake_config)
    assert {"invalid_json", "bad_user_id", "missing_user_id"} <= {validate_payload(p, lake_config)[1] for p in payloads}
    frame = spark.createDataFrame([(p,) for p in payloads], "payload string")
    named = Counter(u for p in payloads for u in named_user_ids(p))
    for users in ([1000031], [1000000, 1000007], [5, 10000310], [2**63 - 1], sorted(named)[:3]):
        got = sorted(row.payload for row in frame.where(names_users(users)).collect())
        assert got == sorted(p for p in payloads if named_user_ids(p) & set(users))
    assert [p for p in CRAFTED if 1000031 in named_user_ids(p)] == CRAFTED[:5] + [CRAFTED[8]]


def test_duckdb_selects_the_quarantined_payloads_the_reference_names(tmp_path: Path, lake_config: Config) -> None:
    from deltalake import write_deltalake

    payloads = CRAFTED + generated_malformed(lake_config)
    records = pa.table(
        {
            "source_partition": pa.array([n % 3 for n in range(len(payloads))], pa.int32()),
            "lsn": pa.array(range(len(payloads)), pa.int64()),
            "payload": payloads,
        }
    )
    write_deltalake(str(tmp_path / "quarantine"), records)
    by_key = {(n % 3, n): p for n, p in enumerate(payloads)}
    named = Counter(u for p in payloads for u in named_user_ids(p))
    with lake_cursor() as con:
        for users in ([1000031], [1000000, 1000007], [5, 10000310], [2**63 - 1], sorted(named)[:3]):
            held = user_rows_in_landing(con, (tmp_path / "quarantine").as_uri(), pa.array(users, pa.int64()), True)
            keys = set(zip(held["source_partition"].to_pylist(), held["lsn"].to_pylist(), strict=True))
            assert sorted(by_key[k] for k in keys) == sorted(p for p in payloads if named_user_ids(p) & set(users))


def quarantined(config: Config) -> list[str]:
    path = engine_location(landing_paths(config).quarantine)
    with lake_cursor() as con:
        return [row[0] for row in con.execute("SELECT payload FROM delta_scan(?)", [path]).fetchall()]


def landed_users(config: Config) -> set[int]:
    path = engine_location(landing_paths(config).events)
    with lake_cursor() as con:
        return {row[0] for row in con.execute("SELECT DISTINCT user_id FROM delta_scan(?)", [path]).fetchall()}


def test_forget_on_the_small_demo_with_its_quarantine_removes_the_users_everywhere(tmp_path: Path) -> None:
    # The small demo's data, with more malformed records than its default share so that every form is
    # there: an id as "u<id>x" and as -<id>, a payload cut after the id.
    config_path = make_warehouse(tmp_path)
    data = yaml.safe_load(config_path.read_text())
    data["generator"]["malformed_share"] = 0.02
    config_path.write_text(yaml.safe_dump(data, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEQLAKE_") or k == FORGET_KEY_ENV}
    seqlake = [sys.executable, "-m", "seqlake.cli"]
    demo = forked_commands.run(
        [*seqlake, "demo", "--small", "--config", str(config_path)], capture_output=True, text=True, env=env
    )
    assert demo.returncode == 0, demo.stderr
    config = load_config(str(config_path))

    before = quarantined(config)
    forms = {
        "string id": [p for p in before if '"user_id":"u' in p],
        "negative id": [p for p in before if '"user_id":-' in p],
        "cut short": [p for p in before if validate_payload(p, config)[1] == "invalid_json" and named_user_ids(p)],
    }
    assert all(forms.values()), forms
    doomed = sorted({min(named_user_ids(found[0])) for found in forms.values()})
    assert set(doomed) <= landed_users(config)
    history, _ = history_tables(config)
    tables = [history, *tables_with_users(config)]
    assert all(user_rows(table, doomed) for table in tables[:2])  # history and detail hold them

    chosen = [arg for user in doomed for arg in ("--user", str(user))]
    forget = forked_commands.run(
        [*seqlake, "forget", "--config", str(config_path), *chosen, "--output", "json"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert forget.returncode == 0, forget.stderr
    removed = {report["target"]: report["removed"] for report in json.loads(forget.stdout)["tables"]}
    naming = [p for p in before if named_user_ids(p) & set(doomed)]
    assert removed["landing/quarantine"] == len(naming) > len(doomed)

    # Gone everywhere; every other quarantined record, and every other user's event, stays.
    after = quarantined(config)
    assert Counter(after) == Counter(before) - Counter(naming)
    assert not landed_users(config) & set(doomed) and landed_users(config)
    assert sum(user_rows(table, doomed) for table in tables) == 0
