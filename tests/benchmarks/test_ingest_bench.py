"""The ingest benchmark on a small batch: the deterministic facts behind "no read-before-write".

Asserted: both setups land byte-identical data and identical rows, and no process opens, reads or
lists a history file (nor a prior landing file) during ingest, while the same watch does see a
history file read on purpose. The time ratio B/A is recorded, never asserted.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from benchmarks.commands.ingest import main as bench_main
from benchmarks.ingest import (
    OTHER_USERS_OFFSET,
    FileAccessWatch,
    format_report,
    run_ingest_bench,
    synthetic_run,
)
from seqlake.pipelines.demo.generator import USER_ID_BASE
from seqlake.tableformat.bucketing import bucket_of
from seqlake.tableformat.schema import history_arrow_schema

pytestmark = pytest.mark.spark

USERS, PER_USER, PRIOR, LANDING_PRIOR, RUNS, REPEATS = 3, 100, 3000, 100, 2, 2


@pytest.fixture(scope="module")
def bench(spark, lake_config):
    return run_ingest_bench(
        spark,
        lake_config,
        namespace="bench_ingest_test",
        users=USERS,
        records_per_user=PER_USER,
        prior_events=PRIOR,
        landing_prior=LANDING_PRIOR,
        history_runs=RUNS,
        repeats=REPEATS,
        warmup=0,
    )


def test_both_setups_have_the_same_shape_but_only_b_has_the_batch_users_history(bench):
    a, b = bench.sides
    assert (a.name, b.name) == ("A", "B")
    assert a.history_rows == b.history_rows == USERS * (PRIOR - LANDING_PRIOR)
    assert a.landing_prior_rows == b.landing_prior_rows == USERS * LANDING_PRIOR
    assert a.history_files > 0 and b.history_files > 0  # one per bucket the users fall in, per run
    batch_users = set((USER_ID_BASE + np.arange(USERS)).tolist())
    assert set(b.prior_users.tolist()) == batch_users
    assert set(a.prior_users.tolist()).isdisjoint(batch_users)
    assert set((a.prior_users - OTHER_USERS_OFFSET).tolist()) == batch_users


def test_the_same_batch_lands_the_same_bytes_and_rows(bench):
    a, b = bench.sides
    assert len(a.seconds) == len(b.seconds) == REPEATS
    assert a.landed_rows == b.landed_rows and bench.events == a.landed_rows[0] >= USERS * PER_USER
    assert bench.records > bench.events  # malformed records went to quarantine
    assert a.landing_bytes == b.landing_bytes and min(a.landing_bytes) > 0
    assert a.landing_files == b.landing_files
    assert bench.rows_identical and len(set(a.checksums)) == REPEATS  # each repeat's LSNs are new


def test_ingest_never_touches_history_or_prior_landing_files(bench):
    assert bench.control_reads > 0  # the watch does see a history file being read
    for side in bench.sides:
        assert side.history_access.total == 0, (side.name, sorted(side.history_access.files))
        assert side.prior_landing_access.total == 0, (side.name, sorted(side.prior_landing_access.files))
    assert bench.ok


def test_report_and_ratio_are_recorded(bench, measurement):
    facts = bench.to_dict()
    assert facts["ratio_b_over_a"] == round(bench.ratio, 3) > 0
    report = format_report(bench)
    assert "ratio B/A" in report and "history untouched by ingest: True" in report
    a, b = bench.sides
    measurement(
        f"ingest bench (small: {bench.records} records, {USERS} users, {PRIOR:,} prior events/user, "
        f"{REPEATS} repeats): B/A = {bench.ratio:.2f} (A {a.median:.2f} s, B {b.median:.2f} s; target <= 1.2)"
    )


def test_watch_sees_reads_and_writes(tmp_path):
    target = tmp_path / "f.bin"
    with FileAccessWatch([tmp_path]) as watch:
        target.write_bytes(b"x" * 10)
        written = watch.drain()
        target.read_bytes()
        read = watch.drain()
        list(tmp_path.iterdir())
        listed = watch.drain()
    assert written.opens == 1 and written.writes >= 1 and written.reads == 0
    assert read.opens == 1 and read.reads >= 1 and read.writes == 0
    assert listed.listings >= 1 and listed.opens == 0


def test_synthetic_run_is_in_storage_order(lake_config):
    from seqlake.tableformat.writer import KeyOrder

    users = USER_ID_BASE + np.arange(5, dtype=np.int64)
    rows = synthetic_run(lake_config, users, 50, window_id=7, seed=1, partitions=4)
    assert rows.schema == history_arrow_schema(lake_config)
    assert rows.num_rows == 250
    buckets = bucket_of(rows["user_id"], lake_config.layout.bucket_count)
    assert np.all(np.diff(buckets) >= 0)
    for bucket in np.unique(buckets):
        order = KeyOrder(list(lake_config.feature_groups))
        for batch in rows.filter(pa.array(buckets == bucket)).to_batches(max_chunksize=16):
            order.check(batch)


def test_cli_rejects_inconsistent_arguments(capsys):
    with pytest.raises(SystemExit):
        bench_main(["--prior-events", "10", "--landing-prior", "20"])
    assert "exceeds" in capsys.readouterr().err
