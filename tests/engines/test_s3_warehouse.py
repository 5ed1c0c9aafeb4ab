"""A warehouse on object storage through the S3 API (moto's server): the same history as on local disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from seqlake.core.config import DEFAULT_CONFIG_PATH, Config, parse_config
from seqlake.core.errors import SetupError
from seqlake.engines.storage import S3Settings, create_bucket, list_objects
from seqlake.tableformat.reader import HistoryReader
from tests import forked_commands
from tests.conftest import SMALL_GENERATOR, make_config
from tests.history_data import history_table, publish_run, synthetic_history
from tests.paths import REPO_ROOT
from tests.s3_server import S3Server

BUCKET = "seqlake-test"
USERS = {1_000_000 + i: 5 + (i * 37) % 300 for i in range(200)}


def s3_config(catalog_dir: Path, prefix: str) -> Config:
    """The default configuration with an S3 warehouse and a local SQLite catalog."""
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    data["warehouse"] = {
        **data["warehouse"],
        "path": f"s3://{BUCKET}/{prefix}",
        "catalog_uri": f"sqlite:///{catalog_dir / 'catalog.db'}",
    }
    data["generator"] = {**data["generator"], **SMALL_GENERATOR}
    return parse_config(data, "test")


def publish_history(config: Config) -> None:
    table = history_table(config)
    publish_run(table, config, synthetic_history(config, USERS, seed=3), "w1")
    publish_run(table, config, synthetic_history(config, {1_000_007: 40, 1_000_150: 9}, seed=4), "w2")


def all_users(config: Config) -> pa.Table:
    from seqlake.engines.catalog import open_catalog, table_identifier

    table = open_catalog(config).load_table(table_identifier(config, "history"))
    reader = HistoryReader(table)
    parts = [reader.read_user(user, ["event_ts", "lsn", "item_id"]) for user in sorted(USERS)]
    return pa.concat_tables(parts)


@pytest.fixture
def s3_history(s3_env: S3Server, tmp_path: Path) -> Config:
    create_bucket(BUCKET)
    config = s3_config(tmp_path, tmp_path.name)
    publish_history(config)
    return config


def test_history_on_s3_reads_back_as_on_local_disk(s3_history: Config, tmp_path: Path) -> None:
    keys = [key for key, _ in list_objects(BUCKET, tmp_path.name + "/")]
    assert any(key.endswith(".parquet") and "/history/" in key for key in keys)
    assert any(key.endswith(".metadata.json") for key in keys)

    local = make_config(tmp_path / "local")
    publish_history(local)
    on_s3, on_disk = all_users(s3_history), all_users(local)
    assert on_s3.num_rows == on_disk.num_rows == sum(USERS.values()) + 49
    assert on_s3.equals(on_disk)


def test_wrong_secret_fails_with_one_line_naming_the_setting(
    s3_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_bucket(BUCKET)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret-" + s3_env.secret_access_key[:4])
    with pytest.raises(SetupError) as refused:
        history_table(s3_config(tmp_path, tmp_path.name))
    message = str(refused.value)
    assert "\n" not in message and "AWS_SECRET_ACCESS_KEY" in message
    assert "not-the-secret" not in message


def test_missing_bucket_says_how_to_create_it(s3_env: S3Server, tmp_path: Path) -> None:
    config = s3_config(tmp_path, "x").model_copy(deep=True)
    data = config.model_dump()
    data["warehouse"]["path"] = "s3://no-such-bucket/x"
    with pytest.raises(SetupError, match=r"bucket s3://no-such-bucket does not exist .*seqlake storage create"):
        history_table(parse_config(data, "test"))


def run_sql(config: Config, folder: Path, query: str, **env: str) -> subprocess.CompletedProcess:
    """`seqlake sql --output json -q query` in a child process, as a user runs it."""
    config_file = folder / "seqlake.yaml"
    config_file.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    repo = REPO_ROOT
    return forked_commands.run(
        [
            sys.executable,
            "-m",
            "seqlake",
            "--config",
            str(config_file),
            "sql",
            "--output",
            "json",
            "--quiet",
            "-q",
            query,
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(repo), **env},
        check=False,
    )


def test_seqlake_sql_reads_the_s3_history_and_prints_no_secret(s3_history: Config, tmp_path: Path) -> None:
    query = "SELECT user_id, count(*) AS n, sum(lsn) AS s FROM history GROUP BY user_id ORDER BY user_id"
    done = run_sql(s3_history, tmp_path, query)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["results"][0]["rows"]
    expected = all_users(s3_history).num_rows
    assert len(rows) == len(USERS) and sum(row["n"] for row in rows) == expected
    assert os.environ["AWS_SECRET_ACCESS_KEY"] not in done.stdout + done.stderr


def test_seqlake_sql_with_a_wrong_secret_fails_in_one_line_without_printing_it(
    s3_history: Config, tmp_path: Path
) -> None:
    wrong = "wrong-secret-" + os.environ["AWS_SECRET_ACCESS_KEY"][::-1]
    done = run_sql(s3_history, tmp_path, "SELECT count(*) FROM history", AWS_SECRET_ACCESS_KEY=wrong)
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "AWS_SECRET_ACCESS_KEY" in errors[0], done.stderr
    output = done.stdout + done.stderr
    assert wrong not in output and os.environ["AWS_SECRET_ACCESS_KEY"] not in output


def test_storage_command_creates_lists_and_empties_a_bucket(s3_env: S3Server, tmp_path: Path, capsys) -> None:
    from seqlake.cli import main

    assert main(["storage", "create", "seqlake-chores"]) == 0
    client = S3Settings.from_env().client()
    for key in ("a/1.parquet", "a/2.parquet", "b/3.parquet"):
        client.put_object(Bucket="seqlake-chores", Key=key, Body=b"x" * 7)
    capsys.readouterr()
    assert main(["storage", "list", "seqlake-chores", "--prefix", "a/"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[-1] for line in listed] == [
        "s3://seqlake-chores/a/1.parquet",
        "s3://seqlake-chores/a/2.parquet",
    ]
    assert main(["storage", "list", "seqlake-chores", "--output", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)["objects"]
    assert listed == [["a/1.parquet", 7], ["a/2.parquet", 7], ["b/3.parquet", 7]]
    assert main(["storage", "empty", "seqlake-chores"]) == 0
    assert "deleted 3 objects" in capsys.readouterr().out
    assert list_objects("seqlake-chores") == []


def test_in_process_ingest_on_s3_lands_what_it_lands_on_local_disk(s3_env: S3Server, tmp_path: Path) -> None:
    from seqlake.engines.catalog import open_catalog, table_identifier
    from seqlake.pipelines.demo.generator import EventGenerator
    from seqlake.pipelines.ingest.duckdb import ingest_source_in_process
    from seqlake.pipelines.ingest.raw_source import create_raw_table, land_raw_records
    from seqlake.pipelines.landing.tables import landing_paths
    from seqlake.pipelines.landing.windows import landed_windows

    create_bucket(BUCKET)
    tiny = {"users": 20, "max_events": 200, "windows": 2}
    on_s3 = s3_config(tmp_path, tmp_path.name)
    on_s3 = on_s3.model_copy(update={"generator": on_s3.generator.model_copy(update=tiny)})
    local = make_config(tmp_path / "local", **tiny)
    landed = {}
    for config in (on_s3, local):
        raw = create_raw_table(open_catalog(config), table_identifier(config, "raw_events"))
        land_raw_records(raw, EventGenerator(config).batches(), window_seconds=config.layout.window_seconds)
        result = ingest_source_in_process(config, "raw_events", landing_paths(config))
        assert result.batches == len(raw.refresh().snapshots()) > 1
        assert ingest_source_in_process(config, "raw_events", landing_paths(config)).batches == 0  # a replay
        landed[config.warehouse_uri().split(":")[0]] = (
            result.landed,
            dict(result.quarantined),
            landed_windows(landing_paths(config)),
        )
    assert landed["s3"] == landed["file"]
    assert sum(landed["s3"][2].rows.values()) == landed["s3"][0] > 0  # DuckDB reads delta-rs's table on S3
    keys = [key for key, _ in list_objects(BUCKET, tmp_path.name + "/landing/")]
    assert any(key.endswith(".parquet") for key in keys) and any("/_delta_log/" in key for key in keys)
