"""The main job end to end on a small generated data set."""

from __future__ import annotations

import json

import pytest
import yaml

from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.jobs.demo import main
from seqlake.jobs.samples import main as samples_main
from seqlake.pipelines.demo.full import RAW_TABLE, run_demo
from seqlake.tableformat.snapshots import total_records

pytestmark = pytest.mark.spark


def test_demo_lands_every_record_and_all_engines_agree(spark, lake_config, tmp_path, capsys):
    # The demo runs in-process whatever is installed (its `auto` engines are duckdb; the engines land and
    # publish the same rows: tests/pipelines/ingest/test_ingest_engines.py, tests/pipelines/compaction/);
    # Spark counts the raw table and rebuilds every tenant's samples beside it.
    report = run_demo(lake_config)
    facts = report.to_dict()
    generated, landed = facts["generated"], facts["raw_landing"]
    assert landed["records"] == generated["records"] > generated["events"] > 0
    assert landed["engines_agree"] is True
    assert landed["partitions_duckdb"] == lake_config.generator.source_partitions
    assert generated["max_history_length"] == lake_config.generator.max_events
    assert sum(generated["malformed_records"].values()) > 0

    # Every valid record lands, every malformed one is quarantined with its reason.
    ingest = facts["ingest"]
    assert ingest["engine"] == "duckdb"
    assert ingest["records"] == generated["records"]
    assert ingest["events_landed"] == generated["events"] + generated["duplicate_records"]
    assert ingest["quarantined"] == generated["malformed_records"]

    # Each event is counted exactly once in history, duplicates and late arrivals included.
    compaction = facts["compaction"]
    assert compaction["engine"] == "duckdb"
    assert compaction["windows_published"] == lake_config.generator.windows
    assert compaction["events_compacted"] == generated["events"]
    assert compaction["detail_events"] == generated["events"]
    assert 0 < compaction["history_rows"] < generated["events"]  # repeated items merged
    assert compaction["runs_per_bucket"] <= lake_config.layout.max_runs
    assert facts["fsck"]["ok"] is True and facts["fsck"]["rows"] == compaction["history_rows"]
    # Each step says how fast it went, and its parts take no more than the whole run.
    rates = {
        "generated": ("records", "records"),
        "ingest": ("records", "records"),
        "compaction": ("events", "events_compacted"),
        "small_files": ("files", "files_rewritten"),
    }
    for step, (unit, count) in rates.items():
        assert facts[step]["seconds"] > 0 and facts[step][f"{unit}_per_second"] > 0, step
        # The rate comes from the unrounded seconds; the report rounds seconds to 0.01.
        seconds, done = facts[step]["seconds"], facts[step][count]
        assert done / (seconds + 0.005) - 1 <= facts[step][f"{unit}_per_second"] <= done / (seconds - 0.005) + 1, step
    stepped = sum(facts[step]["seconds"] for step in rates) + facts["late_materialization"]["capture_seconds"]
    assert stepped <= facts["run"]["seconds"] + 0.1

    # Every request was captured while ingest and compaction ran, and every tenant's samples rebuild
    # exactly what inference saw, on both engines; replaying by event time alone does not.
    served = facts["late_materialization"]
    assert served["capture_points"] == landed["commits"] and served["requests"] > 0
    for name in lake_config.tenants:
        tenant = facts[f"tenant_{name}"]
        assert tenant["samples"] == tenant["spark_samples"] == tenant["streamed_samples"] == served["requests"]
        assert tenant["exact_match_lsn"] == tenant["spark_exact_match_lsn"] == 1.0
        assert tenant["checksum_failures_lsn"] == tenant["spark_checksum_failures"] == 0
        assert tenant["exact_match_time_only"] < 1.0 and tenant["checksum_failures_time_only"] > 0
    # Each tenant reads only its columns and length: retrieval (3 columns, 100 events) reads less.
    assert 0 < facts["tenant_retrieval"]["bytes_read_mib"] < facts["tenant_ranking"]["bytes_read_mib"]
    storage = facts["storage"]
    assert storage["history_mib"] > 0 and storage["normalized_training_mib"] > 0 and storage["fat_row_mib"] > 0

    # The report opens with its verdict: storage, each tenant's sample time, exactness, each against
    # its target, met or not as the figure says.
    assert list(facts)[1] == "verdict"
    verdict = facts["verdict"]
    assert set(verdict) == {
        "storage_at_this_horizon",
        "storage_at_steady_state",
        *(f"samples_time_{name}" for name in lake_config.tenants),
        *(f"samples_job_{name}" for name in lake_config.tenants),
        "exact",
    }
    figures = {
        "storage_at_this_horizon": storage["normalized_plus_history_and_detail_vs_fat_row"],
        "storage_at_steady_state": storage["normalized_plus_history_vs_fat_row"],
        **{f"samples_time_{n}": facts[f"tenant_{n}"]["samples_time_vs_fat_row_read"] for n in lake_config.tenants},
        **{f"samples_job_{n}": facts[f"tenant_{n}"]["samples_job_vs_fat_row_copy"] for n in lake_config.tenants},
    }
    for name, figure in figures.items():
        line = verdict[name]
        assert line["measured"] == figure, name
        assert line["verdict"] == ("met" if figure <= float(line["target"].removeprefix("<= ")) else "not met"), name
    assert verdict["exact"]["verdict"] == "met"  # every sample above was exact on both engines
    for name in lake_config.tenants:  # and the line says so for each engine
        assert f"{name}: in-process 100.00%, spark 100.00%, 0 checksum failures" in verdict["exact"]["measured"]

    # Key order is meaningful (feature groups and their columns are declared in order): keep it.
    config_file = tmp_path / "seqlake.yaml"
    config_file.write_text(yaml.safe_dump(lake_config.model_dump(mode="json"), sort_keys=False))

    # The sample job on its own, as `seqlake samples` runs it, on the demo's pointers; in-process as
    # `--engine duckdb` and as its former name, `--engine arrow`.
    capsys.readouterr()
    assert samples_main(["--config", str(config_file), "--tenant", "retrieval", "--engine", "duckdb"]) == 0
    printed = capsys.readouterr().out
    assert (
        f"retrieval: {served['requests']:,} requests, {served['requests']:,} verified samples, 0 quarantined" in printed
    )
    assert "100.00% equal to the fat-row reference (duckdb, lsn)" in printed
    as_arrow = ["--config", str(config_file), "--tenant", "retrieval", "--engine", "arrow", "--output", "json"]
    assert samples_main(as_arrow) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["engine"] == "duckdb"  # the former name is taken, reports give the engine's name
    (rebuilt,) = document["tenants"]
    requests = served["requests"]
    assert rebuilt | {"bytes_read": 0} == {
        "tenant": "retrieval",
        "requests": requests,
        "samples": requests,
        "quarantined": 0,
        "matched": requests,
        "match_rate": 1.0,
        "bytes_read": 0,
    }

    # Running it again, as `seqlake demo` does, replaces the demo's tables (nothing appended twice)
    # and saves the report in the warehouse. The small demo is the re-run: it resets the same tables
    # as the full one, so a table kept from the full run would count its rows again.
    assert main(["--config", str(config_file), "--small"]) == 0
    saved = json.loads((lake_config.warehouse_path() / "report.json").read_text())
    small = saved["generated"]
    assert 0 < small["events"] < generated["events"]  # not the full run's report
    assert saved["ingest"]["records"] == small["records"]
    assert saved["ingest"]["events_landed"] == small["events"] + small["duplicate_records"]
    assert saved["compaction"]["events_compacted"] == small["events"]
    assert saved["fsck"]["rows"] == saved["compaction"]["history_rows"]
    catalog = open_catalog(lake_config)
    raw = catalog.load_table(table_identifier(lake_config, RAW_TABLE)).current_snapshot()
    assert total_records(raw) == small["records"]
    history = catalog.load_table(table_identifier(lake_config, "history")).current_snapshot()
    assert total_records(history) == saved["compaction"]["history_rows"]
