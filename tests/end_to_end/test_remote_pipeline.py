"""The whole pipeline on object storage (S3 API) with a shared PostgreSQL catalog, in local Spark and
submitted to a standalone Spark cluster: the same content as the embedded warehouse (local folder,
SQLite, local Spark), and no secret in any output."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from seqlake.core.config import DEFAULT_CONFIG_PATH, Config, load_config
from seqlake.engines.storage import create_bucket
from tests.paths import REPO_ROOT
from tests.rest_catalog_server import RestCatalogServer
from tests.s3_server import S3Server
from tests.server_process import free_port
from tests.spark_cluster import SPARK_BIN, SparkCluster

pytestmark = pytest.mark.spark

BUCKET = "seqlake-pipeline"
# Small enough for a few Spark jobs on one machine; late, duplicate and malformed records included.
TINY_GENERATOR = {"users": 16, "heavy_users": 1, "max_events": 300, "windows": 2, "malformed_share": 0.02}
REPO = REPO_ROOT
SORT_KEYS = {"history": ["user_id", "feature_group", "event_ts", "lsn", "source_partition"]}


def write_config(folder: Path, warehouse: str, catalog_uri: str | None) -> Path:
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    data["warehouse"] = {**data["warehouse"], "path": warehouse, "catalog_uri": catalog_uri}
    data["generator"] = {**data["generator"], **TINY_GENERATOR}
    data["training"] = {**data["training"], "captures_per_window": 1}
    path = folder / "seqlake.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def seqlake(config: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """Run a seqlake command as a user would; its output (stdout and stderr), failing on a non-zero exit."""
    done = subprocess.run(
        [sys.executable, "-m", "seqlake", "--config", str(config), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=1200,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"seqlake {' '.join(args)} exited {done.returncode}:\n{output[-4000:]}"
    return output


def content_digest(config: Config, name: str) -> str:
    """SHA-256 of a table's rows in key order (run ids and file layout left out)."""
    from seqlake.engines.catalog import open_catalog, table_identifier

    table = open_catalog(config).load_table(table_identifier(config, name)).scan().to_arrow()
    keys = SORT_KEYS.get(name, ["request_id"])
    table = table.sort_by([(key, "ascending") for key in keys])
    digest = hashlib.sha256()
    for batch in table.to_batches():
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        digest.update(sink.getvalue().to_pybytes())
    return digest.hexdigest()


def pipeline_contents(config_path: Path) -> dict[str, str]:
    config = load_config(str(config_path))
    names = ["history", *(f"samples_{tenant}" for tenant in config.tenants)]
    return {name: content_digest(config, name) for name in names}


def submit_demo(cluster: SparkCluster, config: Path, folder: Path, env: dict[str, str]) -> str:
    """`spark-submit --master spark://... jobs/demo.py`, seqlake's code shipped as --py-files."""
    tools = {**os.environ, **env}
    jars = subprocess.run(
        [sys.executable, "-m", "seqlake.engines.spark_session", "--jars", "--s3"],
        env=tools,
        capture_output=True,
        text=True,
    ).stdout.strip()
    code = folder / "seqlake-code.zip"
    subprocess.run(
        [sys.executable, "-m", "seqlake.engines.spark_session", "--py-files", str(code)], env=tools, check=True
    )
    done = subprocess.run(
        [str(SPARK_BIN / "spark-submit"), "--master", cluster.master, "--jars", jars, "--py-files", str(code)]
        + ["--conf", "spark.executor.memory=1g", str(REPO / "jobs" / "demo.py"), "--config", str(config)],
        capture_output=True,
        text=True,
        env={**tools, "PYSPARK_PYTHON": sys.executable},
        cwd=folder,
        timeout=1800,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"spark-submit jobs/demo.py exited {done.returncode}:\n{output[-4000:]}"
    return output


def run_pipeline(config: Path, env: dict[str, str] | None = None, cluster: SparkCluster | None = None) -> str:
    """generate, ingest, compact, capture and samples (the demo), then reads, SQL and fsck."""
    if cluster is None:
        output = seqlake(config, "demo", env=env)
    else:
        output = submit_demo(cluster, config, config.parent, env or {})
    user = 1  # the generator's users are numbered from 1
    output += seqlake(config, "history", "--user", str(user), "--top-k", "5", "--output", "json", env=env)
    output += seqlake(config, "sql", "--query", "SELECT count(*) AS n FROM history", env=env)
    output += seqlake(config, "fsck", env=env)
    return output


def tiny(config: Config) -> Config:
    """`config` with what write_config sets: the tiny generator and one capture per window."""
    # Validated again, as a configuration file is (model_copy would skip the validators).
    generator = type(config.generator).model_validate({**config.generator.model_dump(), **TINY_GENERATOR})
    training = type(config.training).model_validate({**config.training.model_dump(), "captures_per_window": 1})
    return config.model_copy(update={"generator": generator, "training": training})


@pytest.fixture(scope="module")
def embedded_run(spark, lake_config: Config) -> tuple[dict[str, str], float]:
    """The embedded run's table contents and seconds: the demo in this process, on the shared local
    Spark session and its warehouse (a local folder, SQLite), in a namespace of its own; no second JVM."""
    from seqlake.pipelines.demo.full import run_demo

    warehouse = lake_config.warehouse.model_copy(update={"namespace": "embedded_run"})
    config = tiny(lake_config.model_copy(update={"warehouse": warehouse}))
    started = time.monotonic()
    run_demo(config)
    names = ["history", *(f"samples_{tenant}" for tenant in config.tenants)]
    return {name: content_digest(config, name) for name in names}, time.monotonic() - started


# Submitted to a cluster: object storage, the shared catalog and remote executors at once (the "s3"
# profile differs only in running Spark locally: tests/core/test_config.py checks what each profile sets).
@pytest.mark.parametrize(("where", "profile"), [("cluster", "cluster")])
def test_the_pipeline_on_s3_with_a_postgres_catalog_equals_the_embedded_run(
    where,
    profile,
    embedded_run,
    s3_env: S3Server,
    postgres_server,
    postgres_catalog_uri,
    tmp_path,
    request,
    monkeypatch,
    measurement,
):
    embedded_contents, embedded_seconds = embedded_run
    create_bucket(BUCKET)
    # The deployment profile says where everything runs; the environment names this test's bucket and
    # catalog database, as a deployment would without editing files.
    cluster = request.getfixturevalue("spark_cluster") if where == "cluster" else None
    monkeypatch.setenv("SEQLAKE_PROFILE", profile)
    monkeypatch.setenv("SEQLAKE_WAREHOUSE", f"s3://{BUCKET}/{tmp_path.name}")
    monkeypatch.setenv("SEQLAKE_CATALOG_URI", postgres_catalog_uri)
    if cluster is not None:
        monkeypatch.setenv("SEQLAKE_SPARK_MASTER", cluster.master)
    config = write_config(tmp_path, str(tmp_path / "local-warehouse-not-used"), None)
    started = time.monotonic()
    output = run_pipeline(config, env=s3_env.env(), cluster=cluster)
    seconds = time.monotonic() - started
    assert load_config(str(config)).warehouse_uri().startswith("s3://")
    assert not (tmp_path / "local-warehouse-not-used").exists()
    assert pipeline_contents(config) == embedded_contents
    for secret in (s3_env.secret_access_key, postgres_server.password):
        assert secret not in output
    measurement(
        f"whole pipeline on S3 + PostgreSQL ({where}, profile {profile}) vs embedded: "
        f"{seconds / embedded_seconds:.2f}x ({seconds:.0f} s vs {embedded_seconds:.0f} s)"
    )


def test_the_pipeline_through_a_rest_catalog_equals_the_embedded_run(
    embedded_run, rest_catalog_server: RestCatalogServer, tmp_path, monkeypatch, measurement
):
    """Every table through Iceberg's REST catalog server: the demo on the in-process engines (its Spark
    samples cross-check reading through the server), then reads, SQL, forget, maintain and fsck."""
    embedded_contents, embedded_seconds = embedded_run
    config = write_config(tmp_path, str(tmp_path / "warehouse"), rest_catalog_server.uri)
    data = yaml.safe_load(config.read_text())
    data["warehouse"] |= {"catalog_type": "rest", "namespace": "rest_pipeline"}
    data["layout"] |= {"ingest_engine": "duckdb", "compaction_engine": "duckdb"}
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    token = "rest-token-" + os.urandom(8).hex()
    env = {"SEQLAKE_CATALOG_TOKEN": token}  # the server takes any: it must not be printed, all the same
    monkeypatch.setenv("SEQLAKE_CATALOG_TOKEN", token)
    started = time.monotonic()
    output = run_pipeline(config, env=env)
    seconds = time.monotonic() - started
    # The tables live where the server put them, not in the local warehouse (which holds landing).
    loaded = load_config(str(config))
    from seqlake.engines.catalog import open_catalog, table_identifier

    history = open_catalog(loaded).load_table(table_identifier(loaded, "history"))
    assert history.metadata_location.startswith(str(rest_catalog_server.warehouse))
    assert not (tmp_path / "warehouse" / "catalog.db").exists()
    assert pipeline_contents(config) == embedded_contents

    forgotten = seqlake(config, "forget", "--user", "1", "--by", "test", env=env)
    assert "removed; none left in the tables searched" in forgotten, forgotten
    output += forgotten
    output += seqlake(config, "maintain", "--snapshot-retention-hours", "0", "--orphan-safety-hours", "0", env=env)
    output += seqlake(config, "fsck", env=env)
    query = "SELECT count(*) AS n FROM history WHERE user_id = 1"
    counted = seqlake(config, "sql", "--quiet", "--output", "json", "--query", query, env=env)
    assert json.loads(counted)["results"][0]["rows"] == [{"n": 0}]
    assert token not in output
    measurement(
        f"whole pipeline through the Iceberg REST catalog (in-process engines, Spark samples) vs embedded: "
        f"{seconds / embedded_seconds:.2f}x ({seconds:.0f} s vs {embedded_seconds:.0f} s)"
    )


def test_a_rest_catalog_that_cannot_be_reached_is_one_line_without_its_secret(tmp_path):
    config = write_config(tmp_path, str(tmp_path / "warehouse"), f"http://127.0.0.1:{free_port()}")
    data = yaml.safe_load(config.read_text())
    data["warehouse"]["catalog_type"] = "rest"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    secret = "client-" + os.urandom(8).hex()
    done = subprocess.run(
        [sys.executable, "-m", "seqlake", "--config", str(config), "tables"],
        capture_output=True,
        text=True,
        env={**os.environ, "SEQLAKE_CATALOG_CREDENTIAL": f"seqlake:{secret}"},
        timeout=300,
    )
    assert done.returncode != 0
    (line,) = done.stderr.strip().splitlines()
    assert "cannot reach the REST catalog http://127.0.0.1:" in line, line
    assert secret not in done.stdout + done.stderr
