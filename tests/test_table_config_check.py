"""Opening a table checks it against the configuration: a feature-group column added, retyped or
removed in the configuration, but not in the table, is refused with one line naming the column,
for the history table and for the detail table (whose columns follow the feature groups too)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipelines.compaction import HISTORY, history_tables
from seqlake.catalog import purge_tables
from seqlake.config import DEFAULT_CONFIG_PATH, Config, parse_config
from seqlake.errors import SchemaError


def config_with(warehouse: Path, **columns: dict) -> Config:
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    data["warehouse"] = {**data["warehouse"], "path": str(warehouse), "catalog_uri": None}
    data["feature_groups"]["search"]["columns"].update(columns)
    return parse_config(data, "test")


def test_a_column_the_table_lacks_is_a_one_line_error_naming_it(tmp_path: Path) -> None:
    history_tables(config_with(tmp_path))
    grown = config_with(tmp_path, query_lang={"type": "string", "merge": "last", "max_length": 8})
    with pytest.raises(SchemaError) as refused:
        history_tables(grown)
    message = str(refused.value)
    assert "history does not match the configuration's columns" in message
    assert "query_lang (absent in the table, string configured)" in message and "\n" not in message

    retyped = config_with(tmp_path, click_count={"type": "int64", "merge": "sum"})
    with pytest.raises(SchemaError, match=r"click_count \(int in the table, long configured\)"):
        history_tables(retyped)

    # A new history table, the old detail table: the detail check refuses it the same way.
    purge_tables(grown, (HISTORY,))
    with pytest.raises(SchemaError, match=r"history_detail does not match .*query_lang \(absent in the table"):
        history_tables(grown)
