"""SST export of a sorted run, checked with real RocksDB: ingest the files, scan users, compare to Iceberg."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from pyiceberg.expressions import In
from pyiceberg.table import Table
from rocksdict import Options, Rdict, ReadOptions

from benchmarks.synthetic import publish_synthetic_run
from seqlake.core.config import Config
from seqlake.core.errors import SchemaError, SeqlakeError
from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.jobs.export_sst import main
from seqlake.tableformat.registry import create_history_table
from seqlake.tableformat.schema import KEY_COLUMNS
from seqlake.tableformat.sst_export import (
    UnknownRunError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    export_run_sst,
    user_key_range,
    user_prefix,
)
from tests import forked_commands
from tests.conftest import make_config
from tests.history_data import synthetic_history

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
HEAVY = 7_000_001
LOW, HIGH = -(2**40), 2**40  # the history writer's order check overflows for user ids near the int64 ends
# Run w1: one 5000-row history, many short ones, and the negatives the key must order before positives.
W1 = {HEAVY: 5000, LOW: 3, -5: 40, 0: 1, HIGH: 2} | {7_000_100 + i: 5 + 11 * i for i in range(40)}
W2 = {9_000_000 + i: 20 for i in range(10)}  # newer run, other users


@dataclass
class Lake:
    config: Config
    table: Table
    base: Path


def raw_db(path: Path) -> Rdict:
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    return Rdict(str(path), options)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Lake:
    with pytest.MonkeyPatch.context() as env:
        for name in ("SEQLAKE_WAREHOUSE", "SEQLAKE_CATALOG_URI", "SEQLAKE_CONFIG"):
            env.delenv(name, raising=False)
        base = tmp_path_factory.mktemp("sst")
        config = make_config(base / "wh")
        table = create_history_table(open_catalog(config), table_identifier(config, "history"), config)
        for run, lengths, seed in (("w1", W1, 1), ("w2", W2, 2)):
            data = synthetic_history(config, lengths, seed=seed)
            publish_synthetic_run(table, config, data, run, [int(run[1:])], batch_rows=2000)
    return Lake(config, table, base)


@pytest.fixture(scope="module")
def exported(lake: Lake):
    # A small target size so the run becomes many files.
    return export_run_sst(lake.table, lake.base / "export", run_id="w1", target_file_bytes=32 * 1024)


@pytest.fixture(scope="module")
def db(exported, lake: Lake):
    store = raw_db(lake.base / "db")
    store.ingest_external_file([str(p) for p in exported.paths])
    yield store
    store.close()


def iceberg_rows(table: Table, users, columns) -> list[tuple]:
    """What pyiceberg returns for these users, as (key tuple, value list) sorted by key."""
    selected = (*KEY_COLUMNS, *columns)
    scan = table.scan(row_filter=In("user_id", set(users)), selected_fields=selected).to_arrow()
    scan = scan.select(selected)  # pyiceberg returns schema order; the export keeps the requested order
    scan = scan.set_column(2, "event_ts", scan["event_ts"].cast(pa.int64()))
    scan = scan.sort_by([(k, "ascending") for k in KEY_COLUMNS])
    return [(tuple(row[:4]), list(row[4:])) for row in zip(*scan.to_pydict().values(), strict=True)]


def prefix_scan(store: Rdict, user: int) -> list[tuple]:
    prefix = user_prefix(user)
    out = []
    for key, value in store.items(from_key=prefix):
        if not key.startswith(prefix):
            break
        out.append((decode_key(key), decode_value(value)))
    return out


def test_run_becomes_disjoint_increasing_files_cut_at_user_boundaries(exported, lake: Lake):
    manifest = json.loads(exported.manifest_path.read_text())
    files = manifest["files"]
    assert len(files) >= 5 and len(exported.files) == len(files)
    assert [f["name"] for f in files] == [f"{i:06d}.sst" for i in range(1, len(files) + 1)]
    assert manifest["run_id"] == "w1" and manifest["keys"] == sum(W1.values()) == exported.keys
    assert manifest["bytes"] == exported.bytes == sum(p.stat().st_size for p in exported.paths)
    for before, after in zip(files, files[1:], strict=False):
        assert bytes.fromhex(before["last_key"]) < bytes.fromhex(after["first_key"])
        assert before["last_user"] < after["first_user"]

    # Read every file back on its own: its real key range and users match the manifest.
    seen_users: set[int] = set()
    for entry, path in zip(files, exported.paths, strict=True):
        store = raw_db(lake.base / f"one-{entry['name']}")
        store.ingest_external_file([str(path)])
        keys = list(store.keys())
        store.close()
        assert len(keys) == entry["keys"]
        assert keys[0].hex() == entry["first_key"] and keys[-1].hex() == entry["last_key"]
        users = {decode_key(k)[0] for k in keys}
        assert min(users) == entry["first_user"] and max(users) == entry["last_user"]
        assert not users & seen_users, "a user's history spans two SST files"
        seen_users |= users
    assert seen_users == set(W1)


def test_ingested_users_read_back_exactly_as_iceberg_returns_them(exported, db, lake: Lake):
    columns = list(exported.columns)
    assert columns == list(lake.config.column_types())  # default: every feature-group column
    for user in (HEAVY, LOW, HIGH, -5, 0, 7_000_100 + 39):
        got = prefix_scan(db, user)
        assert got == iceberg_rows(lake.table, [user], columns), user
        assert len(got) == W1[user]
    assert any(None in values for _, values in prefix_scan(db, HEAVY)), "nulls must survive the export"

    # The bounded form of the same scan, as a serving store would set iterate bounds.
    lower, upper = user_key_range(-5)
    bounds = ReadOptions()
    bounds.set_iterate_upper_bound(upper)
    assert [decode_key(k) for k in db.keys(from_key=lower, read_opt=bounds)] == [key for key, _ in prefix_scan(db, -5)]

    # The whole store, in RocksDB's order, is the whole run in key order.
    everything = [(decode_key(k), decode_value(v)) for k, v in db.items()]
    assert len(everything) == sum(W1.values())
    assert everything == iceberg_rows(lake.table, W1, columns)


def test_projected_columns_and_newest_run_by_default(lake: Lake, tmp_path: Path):
    summary = export_run_sst(lake.table, tmp_path / "out", columns=["surface", "item_id", "price_cents"])
    assert summary.run_id == "w2" and summary.keys == sum(W2.values()) and len(summary.files) == 1
    manifest = json.loads(summary.manifest_path.read_text())
    assert manifest["value"]["columns"] == ["surface", "item_id", "price_cents"]
    assert manifest["value"]["types"] == {"surface": "string", "item_id": "long", "price_cents": "long"}
    store = raw_db(tmp_path / "db")
    store.ingest_external_file([str(p) for p in summary.paths])
    user = 9_000_003
    assert prefix_scan(store, user) == iceberg_rows(lake.table, [user], summary.columns)
    store.close()


def test_unknown_run_and_columns_are_clear_errors(lake: Lake, tmp_path: Path):
    with pytest.raises(UnknownRunError, match=r"run 'nope' is not live .*live runs: w1, w2"):
        export_run_sst(lake.table, tmp_path / "a", run_id="nope")
    with pytest.raises(SchemaError, match="unknown column 'bogus'"):
        export_run_sst(lake.table, tmp_path / "b", columns=["item_id", "bogus"])
    with pytest.raises(SchemaError, match="part of the key"):
        export_run_sst(lake.table, tmp_path / "c", columns=["lsn"])
    assert not list(tmp_path.rglob("*.sst"))


def test_cli_exports_the_newest_run_and_refuses_a_used_directory(lake: Lake, tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setenv("SEQLAKE_WAREHOUSE", str(lake.config.warehouse_path()))
    out = tmp_path / "cli"
    assert main(["--out", str(out), "--columns", "item_id,surface", "--target-file-mb", "1"]) == 0
    printed = capsys.readouterr().out
    assert f"{sum(W2.values()):,} keys" in printed and "1 SST files" in printed
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["run_id"] == "w2" and manifest["value"]["columns"] == ["item_id", "surface"]
    with pytest.raises(SeqlakeError, match="not empty; export to a new or empty folder"):
        main(["--out", str(out)])
    with pytest.raises(UnknownRunError, match="'w9'"):
        main(["--out", str(tmp_path / "other"), "--run", "w9"])
    with pytest.raises(SchemaError, match="does not exist"):
        main(["--out", str(tmp_path / "other"), "--table", "missing"])


def test_cli_refuses_a_folder_that_is_not_empty_or_is_inside_the_warehouse(lake: Lake, tmp_path: Path) -> None:
    warehouse = lake.config.warehouse_path()
    used = tmp_path / "used"
    used.mkdir()
    (used / "notes.txt").write_text("mine")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEQLAKE_")} | {"SEQLAKE_WAREHOUSE": str(warehouse)}
    inside = f"inside the warehouse ({warehouse}); export to a folder outside it"
    refusals = {
        str(used): "not empty; export to a new or empty folder",
        str(used / "notes.txt"): "a file, not a folder; export to a new or empty folder",
        str(warehouse / "exports"): inside,
        str(warehouse): inside,
        f"{warehouse.parent}/../{warehouse.parent.name}/{warehouse.name}/x": inside,  # spelled another way
    }
    before = sorted(warehouse.rglob("*"))
    for out, reason in refusals.items():
        command = [sys.executable, "-m", "seqlake.cli", "export-sst", "--out", out]
        done = forked_commands.run(command, capture_output=True, text=True, env=env)
        assert done.returncode == 1, done.stderr
        assert done.stderr.splitlines() == [f"seqlake export-sst: error: --out {out}: {reason}"]
    assert (used / "notes.txt").read_text() == "mine" and sorted(used.iterdir()) == [used / "notes.txt"]
    assert sorted(warehouse.rglob("*")) == before  # nothing written, not even a folder


# -- encodings ---------------------------------------------------------------------------------

int64s = st.integers(INT64_MIN, INT64_MAX)
# A small alphabet makes prefixes ("a" / "ab") and embedded NULs ("a\x00") frequent.
groups = st.text(alphabet=st.sampled_from(["a", "b", "\x00", "\x01", "\xff", "é", "😀"]), max_size=4)
keys = st.tuples(int64s, groups, int64s, int64s)


@given(st.lists(keys, min_size=2, max_size=30))
@example([(0, "a", 0, 0), (0, "ab", 0, 0), (0, "a\x00", 0, 0), (0, "", 0, 0), (0, "a\x00\x00", 0, 0)])
@example([(-1, "a", 0, 0), (0, "a", 0, 0), (INT64_MIN, "a", INT64_MAX, 0), (INT64_MAX, "", INT64_MIN, -1)])
def test_encoded_keys_sort_like_the_tuples(tuples):
    assert sorted(tuples) == sorted(tuples, key=lambda t: encode_key(*t))
    for t in tuples:
        encoded = encode_key(*t)
        assert decode_key(encoded) == t
        assert encoded.startswith(user_prefix(t[0]))


@given(int64s)
def test_user_key_range_holds_exactly_that_users_keys(user):
    lower, upper = user_key_range(user)
    key = encode_key(user, "\xff\xff", INT64_MAX, INT64_MAX)
    assert lower <= encode_key(user, "", INT64_MIN, INT64_MIN) and (upper is None or key < upper)
    if user < INT64_MAX:
        assert upper is not None  # only the largest user's range is open above
        assert encode_key(user + 1, "", INT64_MIN, INT64_MIN) >= upper


def test_values_round_trip_and_reject_unknown_versions():
    row = [1, None, "surf\x00ace é", 0.10000000149011612, True, -(2**63)]
    assert decode_value(encode_value(row)) == row
    with pytest.raises(ValueError, match="value format"):
        decode_value(b"\x02[]")
    with pytest.raises(ValueError, match="not an int64"):
        encode_key(2**63, "a", 0, 0)
