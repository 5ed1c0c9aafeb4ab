"""Opening a table checks it against the configuration: a feature-group column added, retyped or
removed in the configuration, but not in the table, is refused with one line naming the column and
the command that migrates it (or why none can), for the history table and for the detail table
(whose columns follow the feature groups too)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from seqlake.core.config import DEFAULT_CONFIG_PATH, Config, parse_config
from seqlake.core.errors import SchemaError
from seqlake.engines.catalog import purge_tables
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.tables import HISTORY


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
    assert message.startswith("seqlake.history: adds query_lang (string)")
    assert "run `seqlake migrate`" in message and "\n" not in message

    retyped = config_with(tmp_path, click_count={"type": "int64", "merge": "sum"})
    with pytest.raises(SchemaError, match=r"widens click_count int -> long .*seqlake migrate"):
        history_tables(retyped)
    narrowed = config_with(tmp_path, query_hash={"type": "int32", "merge": "last"})
    with pytest.raises(SchemaError, match=r"query_hash is long in the table but int configured.*cannot migrate"):
        history_tables(narrowed)

    # A new history table, the old detail table: the detail check refuses it the same way.
    purge_tables(grown, (HISTORY,))
    with pytest.raises(SchemaError, match=r"history_detail: adds query_lang \(string\)"):
        history_tables(grown)
