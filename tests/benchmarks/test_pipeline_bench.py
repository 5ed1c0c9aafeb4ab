"""`seqlake bench-pipeline`: the published history equals the floor's groups (checked by the bench,
exit 1 otherwise); the floor statement and the generated file are what they say. Timings are printed,
never asserted."""

from __future__ import annotations

import json
import subprocess
import sys

import duckdb
import numpy as np
import pyarrow.csv as pcsv

from benchmarks.pipeline import BEHAVIOURS, DAYS, START_S, floor_sql, write_taobao_csv
from tests.paths import REPO_ROOT


def test_the_generated_file_is_taobao_shaped(tmp_path):
    path = tmp_path / "events.csv"
    users, items = write_taobao_csv(path, 50_000, seed=3)
    table = pcsv.read_csv(path)
    assert table.num_rows == 50_000 and users <= 500 and items == 20_000
    ts = table["ts"].to_numpy()
    assert ts.min() >= START_S and ts.max() < START_S + DAYS * 86_400 and np.all(np.diff(ts) >= 0)
    assert table["user_id"].to_numpy().min() >= 2**47 and table["item_id"].to_numpy().min() >= 2**47
    _, per_user = np.unique(table["user_id"].to_numpy(), return_counts=True)
    assert per_user.max() > 20 * np.median(per_user)  # Zipf: a heavy head of users
    names, counts = np.unique(table["behavior"].to_numpy(zero_copy_only=False), return_counts=True)
    shares = dict(zip(names.tolist(), counts.tolist(), strict=True))
    assert set(shares) == set(BEHAVIOURS) and shares["pv"] / 50_000 > 0.85


def test_the_floor_drops_exact_duplicates_and_merges_flags_per_user_item_and_window(tmp_path):
    csv = tmp_path / "events.csv"
    csv.write_text(
        "user_id,item_id,category_id,behavior,ts\n"
        "1,10,5,pv,3600\n1,10,5,pv,3600\n"  # an exact duplicate: one event
        "1,10,6,cart,3700\n"  # the same window: flags merge, the last category wins
        "1,10,6,pv,7200\n"  # the next window
        "2,10,5,buy,3600\n"
    )
    floor = tmp_path / "floor.parquet"
    duckdb.connect().execute(floor_sql(csv, floor, 3600))
    rows = duckdb.sql(f"SELECT user_id, item_id, window_id, action_flags, category_id, event_count FROM '{floor}'")
    assert rows.fetchall() == [(1, 10, 1, 65, 6, 2), (1, 10, 2, 1, 6, 1), (2, 10, 1, 128, 5, 1)]


def test_small_bench_history_equals_the_floor(tmp_path, measurement):
    # The in-process engine: Spark's landing rows and runs equal DuckDB's in tests/pipelines, and a
    # Spark step here would cost two JVM starts of the suite's time.
    out = tmp_path / "bench.json"
    command = [sys.executable, "-m", "benchmarks.commands.pipeline", "--scale", "small", "--events", "10000"]
    command += ["--engine", "duckdb"]
    run = subprocess.run(
        [*command, "--work-dir", str(tmp_path), "--json", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    measurement(run.stdout)
    bench = json.loads(out.read_text())
    assert bench["ok"]
    (scale,) = bench["runs"]
    assert [e["engine"] for e in scale["engines"]] == ["duckdb"]
    for engine in scale["engines"]:
        assert engine["matches_floor"] and engine["history_rows"] == scale["floor_groups"] > 0
        assert [s["step"] for s in engine["steps"]] == ["import", "ingest", "compact", "fsck"]
    assert "| duckdb | import+ingest+compact |" in run.stdout
