"""The whole pipeline with every table in an Iceberg REST catalog (Apache Iceberg's own server): the
same content as the embedded warehouse, forget and maintain through it, and no secret in any output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import yaml

from seqlake.core.config import load_config
from tests import forked_commands
from tests.end_to_end.remote_runs import embedded_run, pipeline_contents, run_pipeline, seqlake, write_config
from tests.rest_catalog_server import AuthenticatingFront, RestCatalogServer
from tests.server_process import free_port

pytestmark = pytest.mark.spark
__all__ = ["embedded_run"]  # the fixture, used by name


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
    done = forked_commands.run(
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


def test_wrong_credentials_are_refused_in_one_line_without_them(rest_catalog_server: RestCatalogServer, tmp_path):
    """A catalog that checks who calls (an OAuth2 front on the same server): the right client secret
    lists the tables; a wrong secret or token is one line naming the catalog, and neither is printed."""
    client_secret = "secret-" + os.urandom(8).hex()
    with AuthenticatingFront(rest_catalog_server.uri, "seqlake", client_secret) as front:
        config = write_config(tmp_path, str(tmp_path / "warehouse"), front.uri)
        data = yaml.safe_load(config.read_text())
        data["warehouse"] |= {"catalog_type": "rest", "namespace": "rest_credentials"}
        config.write_text(yaml.safe_dump(data, sort_keys=False))

        def tables(**secrets: str) -> subprocess.CompletedProcess[str]:
            env = {k: v for k, v in os.environ.items() if not k.startswith("SEQLAKE_CATALOG_")}
            return forked_commands.run(
                [sys.executable, "-m", "seqlake", "--config", str(config), "tables"],
                capture_output=True,
                text=True,
                env=env | secrets,
                timeout=300,
            )

        allowed = tables(SEQLAKE_CATALOG_CREDENTIAL=f"seqlake:{client_secret}")
        assert allowed.returncode == 0, allowed.stderr
        assert client_secret not in allowed.stdout + allowed.stderr

        wrong_secret = "wrong-" + os.urandom(8).hex()
        wrong_token = "token-" + os.urandom(8).hex()
        for refused, secret in (
            (tables(SEQLAKE_CATALOG_CREDENTIAL=f"seqlake:{wrong_secret}"), wrong_secret),
            (tables(SEQLAKE_CATALOG_TOKEN=wrong_token), wrong_token),
        ):
            assert refused.returncode != 0
            (line,) = refused.stderr.strip().splitlines()
            assert f"the REST catalog {front.uri} refused seqlake" in line, line
            assert secret not in refused.stdout + refused.stderr
