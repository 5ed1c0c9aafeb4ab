"""`seqlake demo` purges its tables only in a warehouse it created: a fresh or empty location, or one an
earlier demo marked. Any other warehouse is refused (unless --yes) before anything is touched."""

from __future__ import annotations

from pathlib import Path

import pytest

from seqlake.core.errors import SeqlakeError
from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.pipelines.demo.full import DEMO_MARK, DEMO_PROPERTY, check_demo_may_reset, reset_demo_tables
from seqlake.pipelines.landing.tables import landing_paths
from tests.conftest import make_config
from tests.facade.test_sql import build_small_warehouse


def test_a_fresh_or_empty_location_is_the_demos(tmp_path):
    fresh = make_config(tmp_path / "fresh")
    check_demo_may_reset(fresh)
    assert not (tmp_path / "fresh").exists()  # checking creates nothing
    empty = make_config(tmp_path / "empty")
    (tmp_path / "empty").mkdir()
    check_demo_may_reset(empty)


def test_a_warehouse_the_demo_did_not_create_is_refused_until_the_demo_marks_it(tmp_path):
    small = build_small_warehouse(tmp_path / "warehouse")
    catalog = open_catalog(small.config)
    before = sorted(catalog.list_tables(small.config.warehouse.namespace))
    with pytest.raises(SeqlakeError, match="was not created by seqlake demo and holds history, history_detail"):
        check_demo_may_reset(small.config)
    assert sorted(catalog.list_tables(small.config.warehouse.namespace)) == before  # refused: nothing touched
    # What `--yes` lets the demo do: reset its tables, which marks the warehouse as its own.
    reset_demo_tables(small.config)
    namespace = small.config.warehouse.namespace
    assert catalog.load_namespace_properties(namespace)[DEMO_PROPERTY] == DEMO_MARK
    assert not catalog.table_exists(table_identifier(small.config, "history"))
    assert not Path(landing_paths(small.config).root.removeprefix("file://")).exists()
    check_demo_may_reset(small.config)  # from now on the demo may run there again
