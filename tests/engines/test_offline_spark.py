"""Spark must start and run Iceberg and Delta SQL with no network: jars are local, nothing resolves."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import make_config
from tests.paths import REPO_ROOT

pytestmark = pytest.mark.spark

SCRIPT = textwrap.dedent(
    """
    import sys
    from seqlake.engines.spark_session import spark_session
    from tests.conftest import make_config
    from pathlib import Path

    config = make_config(Path(sys.argv[1]))
    spark = spark_session(config, "offline-check")
    assert not spark.conf.get("spark.jars.packages", ""), "spark.jars.packages must stay unset"
    name = f"{config.warehouse.catalog_name}.{config.warehouse.namespace}.offline"
    spark.sql(f"CREATE TABLE {name} (id BIGINT) USING iceberg")
    spark.sql(f"INSERT INTO {name} VALUES (1), (2)")
    delta = sys.argv[1] + "/delta_offline"
    spark.sql(f"CREATE TABLE delta.`{delta}` (id BIGINT) USING delta")
    spark.sql(f"INSERT INTO delta.`{delta}` VALUES (3)")
    iceberg_sum = spark.sql(f"SELECT sum(id) FROM {name}").first()[0]
    total = iceberg_sum + spark.sql(f"SELECT sum(id) FROM delta.`{delta}`").first()[0]
    print("OFFLINE-OK", total)
    """
)


def _can_isolate_network() -> bool:
    if shutil.which("unshare") is None or shutil.which("ip") is None or os.geteuid() != 0:
        return False
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(
    not _can_isolate_network() and not os.environ.get("SEQLAKE_REQUIRE_OFFLINE_TEST"),
    reason="needs root and unshare to drop the network",
)
def test_spark_runs_iceberg_and_delta_without_network(tmp_path):
    # CI sets SEQLAKE_REQUIRE_OFFLINE_TEST: there the test must run, never skip quietly.
    assert _can_isolate_network(), "cannot drop the network (needs root, unshare and ip)"
    warehouse = tmp_path / "wh"
    make_config(warehouse)  # validates before the subprocess runs
    # A fresh network namespace has only a loopback device: no route to any registry.
    command = f'ip link set lo up && test -z "$(ip route show default)" && exec "{sys.executable}" -c "$0" "$1"'
    result = subprocess.run(
        ["unshare", "--net", "bash", "-c", command, SCRIPT, str(warehouse)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(REPO_ROOT),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "OFFLINE-OK 6" in result.stdout
