"""The whole pipeline on object storage (S3 API) with a shared PostgreSQL catalog, submitted to a
standalone Spark cluster: the same content as the embedded warehouse (local folder, SQLite, local
Spark), and no secret in any output."""

from __future__ import annotations

import time

import pytest

from seqlake.core.config import load_config
from seqlake.engines.storage import create_bucket
from tests.end_to_end.remote_runs import BUCKET, embedded_run, pipeline_contents, run_pipeline, write_config
from tests.s3_server import S3Server

pytestmark = pytest.mark.spark
__all__ = ["embedded_run"]  # the fixture, used by name


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
