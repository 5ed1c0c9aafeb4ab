import re
from pathlib import Path

import pytest
import yaml

from seqlake.core.config import DEFAULT_CONFIG_PATH, load_config, parse_config
from seqlake.core.errors import ConfigError
from seqlake.core.sources import KafkaTopic


def default_data() -> dict:
    return yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())


def test_default_config_loads_with_feature_groups_and_tenants():
    config = load_config()
    assert set(config.feature_groups) == {"engagement", "search", "purchase"}
    assert len(config.feature_groups["engagement"].columns) == 15
    assert config.tenant_columns("retrieval") == ["item_id", "action_flags", "watch_time_ms"]
    assert "currency" in config.tenant_columns("ranking")
    assert config.catalog_uri().startswith("sqlite:///") and config.catalog_uri().endswith("catalog.db")


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda d: d["layout"].update(bucket_count=0), "layout.bucket_count = 0"),
        (
            lambda d: d["feature_groups"]["search"]["columns"]["click_count"].update(merge="avg"),
            "unknown merge operator 'avg'",
        ),
        (lambda d: d["generator"].update(late_share=1.5), "generator.late_share = 1.5"),
        (lambda d: d["layout"].update(window_secs=60), "layout.window_secs = 60"),
        (
            lambda d: d["tenants"]["retrieval"].update(feature_groups=["clicks"]),
            "unknown feature group 'clicks'",
        ),
        (
            lambda d: d["feature_groups"]["search"]["columns"]["item_id"].update(type="int32"),
            "column 'item_id' is int32 in 'search' but int64 in 'engagement'",
        ),
        (lambda d: d["feature_groups"]["search"].update(item_column="sku"), "item_column 'sku'"),
        # Strict types: YAML's true is not the integer 1, a quoted number is not a number.
        (
            lambda d: d["layout"].update(bucket_count=True),
            "layout.bucket_count = True: Input should be a valid integer",
        ),
        (lambda d: d["layout"].update(window_seconds="3600"), "layout.window_seconds = '3600'"),
        (lambda d: d["layout"].update(max_runs=4.0), "layout.max_runs = 4.0"),
        (lambda d: d["generator"].update(late_share=False), "generator.late_share = False"),
        (lambda d: d["tenants"]["retrieval"].update(max_length=True), "tenants.retrieval.max_length = True"),
        (lambda d: d["warehouse"].update(path=5), "warehouse.path = 5"),
        (lambda d: d.update(spark={"driver_memory": "lots"}), "spark.driver_memory = 'lots'"),
        (
            lambda d: d["feature_groups"]["purchase"]["columns"]["currency"].update(max_length="3"),
            "feature_groups.purchase.columns.currency.max_length = '3'",
        ),
    ],
)
def test_invalid_config_names_key_and_value(edit, expected):
    data = default_data()
    edit(data)
    with pytest.raises(ConfigError) as error:
        parse_config(data, "seqlake.yaml")
    assert expected in str(error.value)
    assert "seqlake.yaml" in str(error.value)
    assert "\n" not in str(error.value)  # one line, as the command prints it


def test_bit_or_on_a_string_column_is_rejected():
    data = default_data()
    data["feature_groups"]["engagement"]["columns"]["surface"]["merge"] = "bit_or"
    with pytest.raises(ConfigError, match="feature_groups.engagement.columns.surface") as error:
        parse_config(data)
    assert "merge 'bit_or' does not apply to a string column" in str(error.value)


def test_a_registered_operator_becomes_valid():
    from seqlake.core.operators import NUMERIC_TYPES, register_operator

    data = default_data()
    data["feature_groups"]["search"]["columns"]["click_count"]["merge"] = "avg_clicks"
    with pytest.raises(ConfigError, match="unknown merge operator 'avg_clicks'"):
        parse_config(data)
    register_operator("avg_clicks", "avg({col})", NUMERIC_TYPES)
    assert parse_config(data).feature_groups["search"].columns["click_count"].merge == "avg_clicks"


def test_environment_overrides_warehouse_and_catalog(monkeypatch, tmp_path):
    monkeypatch.setenv("SEQLAKE_WAREHOUSE", str(tmp_path / "wh"))
    monkeypatch.setenv("SEQLAKE_CATALOG_URI", f"sqlite:///{tmp_path}/other.db")
    config = load_config()
    assert config.warehouse_path() == tmp_path / "wh"
    assert config.catalog_uri() == f"sqlite:///{tmp_path}/other.db"


def test_unreadable_and_non_yaml_files_fail_clearly(tmp_path: Path):
    with pytest.raises(ConfigError, match="cannot read configuration"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("layout: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


@pytest.mark.parametrize(
    ("profile", "warehouse", "catalog", "master"),
    [
        ("local", None, None, "local[2]"),
        ("s3", "s3://seqlake/warehouse", "sqlite:///seqlake-catalog.db", "local[2]"),
        (
            "cluster",
            "s3://seqlake/warehouse",
            "postgresql+psycopg://seqlake@127.0.0.1:5432/seqlake",
            "spark://127.0.0.1:7077",
        ),
        ("rest", None, "http://127.0.0.1:8181", "local[2]"),
        ("kafka", None, None, "local[2]"),
    ],
)
def test_a_profile_overlays_warehouse_catalog_and_master(profile, warehouse, catalog, master, monkeypatch, tmp_path):
    monkeypatch.setenv("SEQLAKE_PROFILE", profile)
    config = load_config(None)
    assert config.warehouse_uri() == (warehouse or (Path.cwd() / "warehouse").as_uri())
    assert config.warehouse.catalog_uri == catalog
    assert config.spark.master == master
    # The environment still has the last word, profile or not.
    monkeypatch.setenv("SEQLAKE_WAREHOUSE", "s3://other/lake")
    monkeypatch.setenv("SEQLAKE_SPARK_MASTER", "spark://10.0.0.1:7077")
    config = load_config(None)
    assert (config.warehouse_uri(), config.spark.master) == ("s3://other/lake", "spark://10.0.0.1:7077")
    packaged = parse_config(yaml.safe_load(DEFAULT_CONFIG_PATH.read_text()))
    assert config.tenants == packaged.tenants  # only where it runs changes


@pytest.mark.parametrize(
    ("warehouse", "message"),
    [
        ({"catalog_type": "rest"}, "catalog_type rest needs catalog_uri, the catalog's http:// or https:// address"),
        ({"catalog_uri": "https://polaris.example/api/catalog"}, "an http(s) catalog_uri is a REST catalog"),
        (
            {"catalog_type": "rest", "catalog_uri": "http://h:8181", "catalog_properties": {"credential": "a:b"}},
            "catalog_properties hold no secrets: give credential (SEQLAKE_CATALOG_CREDENTIAL) in the environment",
        ),
    ],
)
def test_a_rest_catalog_needs_its_address_and_takes_no_secret_from_the_file(warehouse, message):
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    data["warehouse"] |= warehouse
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_config(data)


def test_a_rest_catalogs_secrets_come_from_the_environment(monkeypatch):
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    data["warehouse"] |= {"catalog_type": "rest", "catalog_uri": "http://h:8181", "catalog_properties": {"scope": "s"}}
    monkeypatch.setenv("SEQLAKE_CATALOG_TOKEN", "t0ken")
    config = parse_config(data)
    assert config.catalog_secrets() == {"token": "t0ken"}
    from seqlake.engines.spark_session import catalog_options

    assert catalog_options(config) == {"type": "rest", "uri": "http://h:8181", "scope": "s", "token": "t0ken"}


def test_ingest_reads_a_raw_table_a_kafka_uri_or_a_configured_source(monkeypatch):
    monkeypatch.setenv("SEQLAKE_PROFILE", "kafka")
    config = load_config(None)
    assert config.event_source("events") == KafkaTopic("127.0.0.1:9092", "events")
    assert config.event_source("kafka://b1:9092,[::1]:9093/clicks.v2") == KafkaTopic("b1:9092,[::1]:9093", "clicks.v2")
    assert config.event_source("raw_events") == "raw_events"
    monkeypatch.delenv("SEQLAKE_PROFILE")
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    for uri, wrong in (
        ("kafka://b1:9092", "names no topic"),
        ("kafka://b1/events", "'b1' is not a broker address (HOST:PORT)"),
        ("http://b1:9092/events", "is not a kafka:// URI"),
    ):
        with pytest.raises(ConfigError, match=re.escape(f"sources.events.kafka = {uri!r}: Value error, ")) as error:
            parse_config(data | {"sources": {"events": {"kafka": uri}}})
        assert wrong in str(error.value)


def test_the_driver_memory_reaches_the_spark_session_settings():
    from seqlake.engines.spark_session import spark_conf

    assert "spark.driver.memory" not in spark_conf(parse_config(default_data()), jars=False)  # Spark's own 1g
    data = default_data() | {"spark": {"driver_memory": "4g"}}
    assert spark_conf(parse_config(data), jars=False)["spark.driver.memory"] == "4g"
