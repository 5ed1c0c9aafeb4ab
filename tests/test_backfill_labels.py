"""Label tables the backfill refuses, each with a one-line error naming what is wrong."""

from __future__ import annotations

import pytest

from pipelines.training.backfill import write_backfill
from pipelines.training.sequence import Tenant
from seqlake.errors import SchemaError
from tests.test_late_materialization import example_config


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
