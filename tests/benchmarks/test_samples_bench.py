"""`seqlake bench-samples --scale tiny`: the answers are checked against each other (every sample
equal to its fat row, Spark's samples equal to the in-process ones, no checksum failure, the
time-only replay visibly wrong); timings are printed, never asserted."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.paths import REPO_ROOT

ROOT = REPO_ROOT

pytestmark = pytest.mark.spark


def test_small_bench_answers_agree(tmp_path, measurement):
    out = tmp_path / "bench.json"
    # Its own process: the bench starts (and stops) a Spark session bound to its own warehouse.
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.commands.samples", "--scale", "tiny", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = run.stdout
    measurement(report)
    bench = json.loads(out.read_text())
    assert bench["ok"]
    assert [t["tenant"] for t in bench["tenants"]] == ["retrieval", "ranking"]
    for tenant in bench["tenants"]:
        assert tenant["requests"] > 0
        assert tenant["samples"] == tenant["matched"] == tenant["requests"] == tenant["fatrow_rows"]
        assert tenant["checksum_failures"] == 0
        assert tenant["stream_samples"] == tenant["samples"]
        assert tenant["spark_samples"] == tenant["samples"] and tenant["spark_differences"] == 0
        assert tenant["spark_checksum_failures"] == 0
        # Late events make a replay by event time alone differ from what inference saw.
        assert tenant["time_only_matched"] < tenant["requests"]
        assert tenant["backfill_rows"] == tenant["requests"]  # every request as a label row
        # The writing jobs are weighed against copies of the fat rows, on each engine.
        assert tenant["fatrow_copy_seconds"] > 0 and tenant["spark_fatrow_copy_seconds"] > 0
    assert "| ranking | spark |" in report
    assert "ranking: backfill (event time, stream)" in report
    assert "ranking: samples job / fat-row copy (read and written again)" in report
    assert "Spark job / Spark fat-row copy" in report
