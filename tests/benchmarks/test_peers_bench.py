"""`seqlake bench-peers --scale small`: every system answers every lookup the same; timings are printed."""

from __future__ import annotations

import json

import pyarrow as pa

from benchmarks.peers import SYSTEMS, ZSTD_EVERYTHING, _same
from seqlake.cli import main


def test_bench_peers_small_answers_agree_and_reports_every_target(tmp_path, capsys, measurement):
    out = tmp_path / "peers.json"
    assert main(["bench-peers", "--scale", "small", "--json", str(out), "--plots", str(tmp_path / "plots")]) == 0
    report = capsys.readouterr().out
    result = json.loads(out.read_text())
    assert result["failures"] == []
    whole = result["lookups"]["long 2 cols"]
    assert set(whole) == set(SYSTEMS)
    assert all(t["qps"] > 0 and t["cpu_s"] >= 0 for t in whole.values())
    assert {"seqlake index", "seqlake read+count", "rocksdb count key"} == set(result["lookups"]["count of long"])
    assert len(result["targets"]) >= 20 and all(t["ratio"] is not None for t in result["targets"])
    # every QPS comparison also has its CPU-time ratio; only the bytes and disk targets have none
    assert all((t["cpu_ratio"] is None) == t["name"].startswith(("bytes read", "disk")) for t in result["targets"])
    # Disk against both RocksDB stores and against seqlake's own files with zstd on every column.
    disk = {t["name"]: t["ratio"] for t in result["targets"] if t["name"].startswith("disk")}
    assert set(disk) == {f"disk: seqlake vs {p}" for p in ("rocksdb app-zstd", "rocksdb block+cache")} | {
        "disk: seqlake vs the same files with zstd everything"
    }
    sizes = result["disk_bytes"]
    assert disk["disk: seqlake vs the same files with zstd everything"] == sizes["seqlake"] / sizes[ZSTD_EVERYTHING]
    assert (tmp_path / "plots" / "qps_by_length.png").stat().st_size > 0
    assert (tmp_path / "plots" / "qps_by_columns.png").stat().st_size > 0
    assert "| target | ratio | bound | met | CPU ratio |" in report
    # The machine's load at the start and the end stands beside the table, and in the JSON.
    machine = result["machine"]
    assert machine["cores"] >= 1 and machine["load_start"] >= 0 and machine["load_end"] >= 0
    assert machine["loaded"] == (max(machine["load_start"], machine["load_end"]) > machine["cores"])
    (line,) = [line for line in report.splitlines() if line.startswith("machine: ")]  # after the tables
    assert line.startswith(f"machine: {machine['cores']} cores, load average ") and line.endswith(
        "run again on an idle machine)" if machine["loaded"] else " at the end"
    ), line
    measurement("bench-peers (small):\n" + report)


def test_answers_are_compared_by_value_and_type_insensitive_to_metadata():
    reference = pa.table({"a": pa.array([1, 2], pa.int64())}).replace_schema_metadata({"k": "v"})
    assert _same(reference, pa.table({"a": pa.array([1, 2], pa.int32())}))
    assert not _same(reference, pa.table({"a": pa.array([2, 1], pa.int64())}))
    assert not _same(reference, pa.table({"b": pa.array([1, 2], pa.int64())}))
