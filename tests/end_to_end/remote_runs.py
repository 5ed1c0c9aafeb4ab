"""What the remote pipeline tests share: a tiny demo's configuration, its commands as a user runs them,
content digests of its tables, and the embedded run they must equal (computed once per test run)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from seqlake.core.config import DEFAULT_CONFIG_PATH, Config, load_config
from tests import forked_commands
from tests.conftest import SHARED_SESSION_SETTINGS
from tests.paths import REPO_ROOT
from tests.server_process import TEST_JVM_OPTIONS
from tests.spark_cluster import SPARK_BIN, SparkCluster

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
    done = forked_commands.run(
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
    jars = forked_commands.run(
        [sys.executable, "-m", "seqlake.engines.spark_session", "--jars", "--s3"],
        env=tools,
        capture_output=True,
        text=True,
    ).stdout.strip()
    code = folder / "seqlake-code.zip"
    forked_commands.run(
        [sys.executable, "-m", "seqlake.engines.spark_session", "--py-files", str(code)], env=tools, check=True
    )
    done = forked_commands.run(
        [str(SPARK_BIN / "spark-submit"), "--master", cluster.master, "--jars", jars, "--py-files", str(code)]
        + ["--conf", "spark.executor.memory=1g", "--conf", f"spark.executor.extraJavaOptions={TEST_JVM_OPTIONS}"]
        # Expressions interpreted and queries planned once, as in the tests' shared session
        # (tests/conftest.py): on this tiny demo, compiling generated code and re-planning by stage cost
        # more than they save. The REST run keeps seqlake's settings.
        + [arg for key, value in SHARED_SESSION_SETTINGS.items() for arg in ("--conf", f"{key}={value}")]
        + [str(REPO / "jobs" / "demo.py"), "--config", str(config)],
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
def embedded_run(
    lake_config: Config, tmp_path_factory: pytest.TempPathFactory, request
) -> tuple[dict[str, str], float]:
    """The embedded run's table contents and seconds: the demo on a worker's shared local Spark session
    and its warehouse (a local folder, SQLite), in a namespace of its own. Computed once for the whole
    test run: the first module to ask runs it and keeps the result in the run's temporary folder; a
    module on another worker waits for it and reads it."""
    # The run's own folder: the workers' temporary folders' parent, or the only one without workers.
    run_folder = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        run_folder = run_folder.parent
    shared = run_folder / "embedded_run.json"
    with open(f"{shared}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if shared.exists():
            found = json.loads(shared.read_text())
            return found["contents"], found["seconds"]
        from seqlake.pipelines.demo.full import run_demo

        request.getfixturevalue("spark")  # the worker's session, which the demo's Spark steps reuse
        warehouse = lake_config.warehouse.model_copy(update={"namespace": "embedded_run"})
        config = tiny(lake_config.model_copy(update={"warehouse": warehouse}))
        started = time.monotonic()
        run_demo(config)
        names = ["history", *(f"samples_{tenant}" for tenant in config.tenants)]
        contents = {name: content_digest(config, name) for name in names}
        seconds = time.monotonic() - started
        shared.write_text(json.dumps({"contents": contents, "seconds": seconds}))
        return contents, seconds
