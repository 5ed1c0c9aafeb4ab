"""Configuration as an installed seqlake finds it: packaged data, lookup order, paths relative to the file."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from seqlake.core import resources
from seqlake.core.config import load_config, parse_config
from seqlake.core.errors import ConfigError, SeqlakeError
from seqlake.jobs.init import main as init_main
from seqlake.pipelines.importers.mapping import load_mapping
from seqlake.sql_session import open_session, resolve_file, sql_files
from tests.paths import REPO_ROOT

REPO = REPO_ROOT


def _config_file(folder: Path, warehouse: str) -> Path:
    data = yaml.safe_load(resources.default_config().read_text())
    data["warehouse"]["path"] = warehouse
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "seqlake.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_packaged_data_is_the_repository_files():
    # One copy in git: the package reads conf/, sql/ and SPEC.md of the repository.
    assert resources.default_config().read_text() == (REPO / "conf" / "seqlake.yaml").read_text()
    shipped = sorted(p.name for p in (REPO / "conf" / "mappings").glob("*.yaml"))
    assert [m.name for m in resources.mapping_files()] == shipped
    assert [p.name for p in sql_files()] == sorted(p.name for p in (REPO / "sql").glob("*.sql"))
    assert resources.spec().read_text() == (REPO / "tableformat" / "SPEC.md").read_text()
    assert resolve_file("storage").read_text() == (REPO / "sql" / "storage.sql").read_text()
    assert load_mapping("otto").item == "aid"  # a bare name is a packaged example


def test_packaged_default_puts_the_warehouse_in_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_config().warehouse_path() == tmp_path / "warehouse"


def test_lookup_order_option_then_environment_then_local_file(tmp_path, monkeypatch):
    work = tmp_path / "work"
    local = _config_file(work, "local_wh")
    env = _config_file(tmp_path / "env", "env_wh")
    option = _config_file(tmp_path / "option", "option_wh")
    monkeypatch.chdir(work)
    assert load_config().warehouse_path() == work / "local_wh"
    monkeypatch.setenv("SEQLAKE_CONFIG", str(env))
    assert load_config().warehouse_path() == tmp_path / "env" / "env_wh"
    assert load_config(option).warehouse_path() == tmp_path / "option" / "option_wh"
    # A relative path resolves against the file's folder, whatever the current directory.
    monkeypatch.chdir(tmp_path)
    assert load_config(local.relative_to(tmp_path)).warehouse_path() == work / "local_wh"


def test_absolute_paths_uris_and_the_environment_are_kept(tmp_path, monkeypatch):
    assert load_config(_config_file(tmp_path / "a", "/srv/lake")).warehouse_path() == Path("/srv/lake")
    assert load_config(_config_file(tmp_path / "b", "s3://bucket/lake")).warehouse_uri() == "s3://bucket/lake"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SEQLAKE_WAREHOUSE", "from_env")  # relative to where the command runs
    assert load_config(_config_file(tmp_path / "c", "ignored")).warehouse_path() == tmp_path / "from_env"


def test_init_writes_a_starter_that_loads_and_keeps_existing_files(tmp_path, monkeypatch, capsys):
    target = tmp_path / "project"
    assert init_main([str(target)]) == 0
    assert (target / "seqlake.yaml").read_text() == resources.default_config().read_text()
    assert sorted(p.name for p in (target / "mappings").iterdir()) == [m.name for m in resources.mapping_files()]
    assert load_mapping(target / "mappings" / "otto.yaml") == load_mapping("otto")
    monkeypatch.chdir(target)
    assert load_config().warehouse_path() == target / "warehouse"  # found as ./seqlake.yaml

    (target / "seqlake.yaml").write_text("layout: {bucket_count: 4}\n")
    with pytest.raises(SeqlakeError, match="already exist.*--force"):
        init_main([str(target)])
    assert (target / "seqlake.yaml").read_text() == "layout: {bucket_count: 4}\n"  # nothing overwritten
    assert init_main([str(target), "--force"]) == 0
    assert load_config().layout.bucket_count == 8


def test_a_missing_warehouse_says_so_without_creating_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SeqlakeError, match="no warehouse at"):
        open_session(load_config(), quiet=True)
    assert not (tmp_path / "warehouse").exists()
    with pytest.raises(ConfigError, match="cannot read configuration"):
        load_config("nowhere.yaml")


def test_a_warehouse_that_is_not_a_mapping_is_still_refused():
    data = yaml.safe_load(resources.default_config().read_text())
    with pytest.raises(ConfigError, match=r"warehouse = \[\]: Input should be a valid dictionary"):
        parse_config({**data, "warehouse": []})
    assert parse_config({**data, "warehouse": None}).warehouse.catalog_name == "seqlake"  # left empty: defaults
