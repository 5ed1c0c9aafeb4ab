"""Label tables the backfill refuses, each with a one-line error naming what is wrong."""

from __future__ import annotations

import pytest

from seqlake.core.errors import SchemaError
from seqlake.pipelines.training.backfill.plan import write_backfill
from seqlake.pipelines.training.sequence import Tenant
from tests.pipelines.training.test_late_materialization import example_config


def test_bad_label_tables_are_one_line_errors(tmp_path):
    config = example_config(tmp_path / "warehouse", top_k=10, fragment=2)
    tenant = Tenant(config, "example")
    csv = tmp_path / "labels.csv"
    csv.write_text("user,ts\n1,2026-03-02 10:00:00\n")
    with pytest.raises(SchemaError, match="need columns user_id and ts; missing user_id"):
        write_backfill(config, csv, tenant)
    csv.write_text("user_id,ts\n1,yesterday\n")
    with pytest.raises(SchemaError, match="ts a timestamp"):
        write_backfill(config, csv, tenant)
    with pytest.raises(SchemaError, match="no_such_table"):
        write_backfill(config, "no_such_table", tenant)


def test_lake_backfill_streams_and_writes_label_rows_as_they_are(tmp_path):
    """On a lake with no history yet: every label row comes back once, its columns as they were,
    with empty sequences and nothing leaked; written, the table is bucketed like history."""
    from datetime import UTC, datetime

    import pyarrow as pa

    import seqlake
    from seqlake.pipelines.compaction.plan import history_tables
    from seqlake.pipelines.tables import load_existing_table

    config = example_config(tmp_path / "warehouse", top_k=10, fragment=2)
    history_tables(config)
    lake = seqlake.open(config)
    labels = pa.table(
        {
            "user_id": pa.array([7, 8, 7], pa.int32()),
            "ts": [datetime(2026, 3, 2, tzinfo=UTC)] * 3,
            "label": ["a", "b", "c"],
        }
    )
    job = lake.backfill_batches(labels, "example")
    try:
        rows = pa.concat_tables(list(job.batches()))
    finally:
        job.close()
    assert sorted(rows["label"].to_pylist()) == ["a", "b", "c"]
    assert rows["seq_item_id"].to_pylist() == [[], [], []]
    assert (job.leakage.label_rows, job.leakage.leaking_rows) == (3, 0)
    result = lake.backfill(labels, "example", as_of="arrival", out="labelled")
    assert (result.rows, result.table) == (3, "labelled")
    table = load_existing_table(config, "labelled")
    assert str(table.spec().fields[0].transform).startswith("bucket")
    assert sorted(table.scan().to_arrow()["label"].to_pylist()) == ["a", "b", "c"]
