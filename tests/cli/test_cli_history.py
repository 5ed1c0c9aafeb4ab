"""`seqlake history` as a user reads it: the chosen groups' columns only, exact integers, UTC times."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tests import forked_commands
from tests.conftest import make_config
from tests.history_data import history_table, publish_run, synthetic_history

BIG_USER = 2**62 + 12_345  # a float would print it as 4.611686018427400e+18
ROWS = 60


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    root = tmp_path_factory.mktemp("history_cli") / "warehouse"
    config = make_config(root)
    rows = synthetic_history(config, {BIG_USER: ROWS, 8: 5})
    # 64-bit item ids beyond 2^53, which a float column rounds.
    big_items = pc.add(pa.array(range(rows.num_rows), pa.int64()), 2**60 + 1)
    items = pc.if_else(pc.is_null(rows["item_id"]), pa.nulls(rows.num_rows, pa.int64()), big_items)
    rows = rows.set_column(rows.schema.get_field_index("item_id"), rows.schema.field("item_id"), items)
    publish_run(history_table(config), config, rows, "w1")
    return root, config, rows.filter(pc.equal(rows["user_id"], BIG_USER))


def history(root, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SEQLAKE_WAREHOUSE": str(root)}
    command = [sys.executable, "-m", "seqlake", "history", "--user", str(BIG_USER), *args]
    return forked_commands.run(command, capture_output=True, text=True, env=env)


def test_text_shows_the_selected_groups_columns_with_exact_integers_and_utc_times(warehouse):
    root, config, rows = warehouse
    done = history(root, "--fg", "purchase")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    header = lines[0].split()
    assert header == ["feature_group", "event_ts", "lsn", *config.feature_groups["purchase"].columns]
    purchases = rows.filter(pc.equal(rows["feature_group"], "purchase"))
    body = [line.split() for line in lines[2:]]
    assert len(body) == purchases.num_rows > 0
    assert [int(cells[3]) for cells in body] == purchases["item_id"].to_pylist()  # exact, not rounded
    assert [int(cells[2]) for cells in body] == purchases["lsn"].to_pylist()
    for cells, moment in zip(body, purchases["event_ts"].to_pylist(), strict=True):
        assert cells[1] == moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert not re.search(r"NaN|\de\+\d|None", done.stdout)
    assert done.stderr.strip() == f"{purchases.num_rows} rows for user {BIG_USER}"


def test_every_group_by_default_blank_where_a_group_has_no_value(warehouse):
    root, config, rows = warehouse
    done = history(root, "--max-rows", "0")
    assert done.returncode == 0, done.stderr
    header = done.stdout.splitlines()[0].split()
    assert header[:3] == ["feature_group", "event_ts", "lsn"]
    assert set(header[3:]) == set(config.column_types())
    assert "NaN" not in done.stdout and len(done.stdout.splitlines()) == 2 + ROWS


def test_json_rows_are_exact_and_hold_only_the_chosen_columns(warehouse):
    root, _, rows = warehouse
    done = history(root, "--fg", "engagement", "--columns", "item_id,author_id", "--top-k", "7", "--output", "json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["user_id"] == BIG_USER and document["columns"] == [
        "feature_group",
        "event_ts",
        "lsn",
        "item_id",
        "author_id",
    ]
    engagement = rows.filter(pc.equal(rows["feature_group"], "engagement"))
    newest = engagement.slice(engagement.num_rows - 7)
    assert [r["item_id"] for r in document["rows"]] == newest["item_id"].to_pylist()
    assert {r["user_id"] for r in document["rows"]} == {BIG_USER}
    assert all(r["event_ts"].endswith("Z") for r in document["rows"])
    assert done.stderr == ""


TRAVELLER = 1_000_003


@pytest.fixture(scope="module")
def travelled(tmp_path_factory):
    from tests.history_data import time_travel_history

    root = tmp_path_factory.mktemp("history_as_of") / "warehouse"
    config = make_config(root)
    _, snapshots, rows = time_travel_history(config, TRAVELLER)
    return root, snapshots, rows


def as_of(root, *args: str) -> tuple[list[tuple[int, int]], dict]:
    """(source partition, LSN) of the rows `seqlake history --output json ARGS` shows, and its document."""
    env = {**os.environ, "SEQLAKE_WAREHOUSE": str(root)}
    command = [sys.executable, "-m", "seqlake", "history", "--user", str(TRAVELLER), "--output", "json"]
    done = forked_commands.run(
        [*command, "--columns", "source_partition", *args], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    return [(r["source_partition"], r["lsn"]) for r in document["rows"]], document


def keys_of(rows: pa.Table, bounds: dict[int, int]) -> list[tuple[int, int]]:
    """The rows' (partition, LSN) at or below their partition's bound, in sequence order."""
    keys = zip(rows["source_partition"].to_pylist(), rows["lsn"].to_pylist(), strict=True)
    return [(p, lsn) for p, lsn in keys if lsn <= bounds.get(p, -1)]


def test_as_of_a_snapshot_shows_what_its_publications_had_published(travelled):
    root, (first, second, unpublished), rows = travelled
    got, document = as_of(root, "--as-of", str(first))
    assert got == keys_of(rows, {0: 109, 1: 19}) and len(got) == 20  # the first window's rows
    assert document["as_of"] == {"0": 109, "1": 19}
    assert as_of(root, "--as-of", str(second))[0] == keys_of(rows, {0: 119, 1: 29}) and len(rows) == 40
    # A snapshot that published nothing (another user's run without a frontier): the frontier before it.
    assert as_of(root, "--as-of", str(unpublished))[1]["as_of"] == {"0": 119, "1": 29}
    # Text: the frontier the read was bounded by follows the count.
    env = {**os.environ, "SEQLAKE_WAREHOUSE": str(root)}
    done = forked_commands.run(
        [sys.executable, "-m", "seqlake", "history", "--user", str(TRAVELLER), "--as-of", str(first)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0
    assert done.stderr.strip().startswith(f"20 rows for user {TRAVELLER} as of frontier 0:109,1:19; ")
    assert done.stderr.strip().endswith(" empty columns not shown (--columns)")


def test_as_of_an_arrival_time_shows_the_publications_current_then(travelled):
    root, _, rows = travelled
    # The first window ends at 01:00 on 2026-01-05 (hourly windows from BASE), the second at 02:00.
    nothing, document = as_of(root, "--as-of", "2026-01-05T00:59:59Z")
    assert nothing == [] and document["as_of"] == {}
    assert as_of(root, "--as-of", "2026-01-05T01:30:00Z")[0] == keys_of(rows, {0: 109, 1: 19})
    assert as_of(root, "--as-of", "2026-01-05T02:30:00+01:00")[0] == keys_of(rows, {0: 109, 1: 19})  # 01:30 UTC
    assert as_of(root, "--as-of", "2026-01-05T02:00:00Z")[0] == keys_of(rows, {0: 119, 1: 29})


def test_as_of_a_frontier_bounds_each_partition_by_its_own_lsn(travelled):
    root, _, rows = travelled
    got, document = as_of(root, "--as-of-frontier", "0:104,1:24")
    assert got == keys_of(rows, {0: 104, 1: 24}) and document["as_of"] == {"0": 104, "1": 24}
    assert {p for p, _ in got} == {0, 1} and len(got) == 5 + 15
    assert as_of(root, "--as-of-frontier", "1:24")[0] == keys_of(rows, {1: 24})  # partition 0: nothing
