"""Shared fixtures: one small configuration on a temporary warehouse, one Spark session for all tests."""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from hypothesis import settings

from seqlake.core.config import DEFAULT_CONFIG_PATH, Config, parse_config
from seqlake.core.forget_key import FORGET_KEY_ENV
from tests.server_process import TEST_JVM_OPTIONS

# The lake's forget key (a secret from the environment): every forget, and every ingest after one,
# needs it; the commands the tests run inherit it.
os.environ.setdefault(FORGET_KEY_ENV, "seqlake-tests-forget-key")

# Every Spark driver the tests start (each worker's session, `seqlake ... --engine spark` in a
# subprocess, spark-submit) on the JIT's quick tier (tests.server_process): Spark's launcher adds
# SPARK_SUBMIT_OPTS to a driver's JVM options.
os.environ.setdefault("SPARK_SUBMIT_OPTS", TEST_JVM_OPTIONS)

# The S3 server, PostgreSQL server, Spark cluster, Iceberg REST catalog and Kafka broker fixtures for
# every test module.
pytest_plugins = [
    "tests.s3_server",
    "tests.postgres_server",
    "tests.spark_cluster",
    "tests.rest_catalog_server",
    "tests.kafka_broker",
]

# The suite draws the same examples on every run, so a pass or a failure is the commit's and not the
# draw's; `make explore` draws new ones (a case it finds goes into the test as a fixed example).
settings.register_profile("suite", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False, database=None)
settings.load_profile("suite")

SMALL_GENERATOR = {
    "users": 120,
    "heavy_users": 1,
    "max_events": 3000,
    "windows": 4,
    "malformed_share": 0.01,
}


def make_config(warehouse: Path, **generator: object) -> Config:
    """The default configuration on `warehouse`, with a small generator unless overridden."""
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    data["warehouse"] = {**data["warehouse"], "path": str(warehouse), "catalog_uri": None}
    data["generator"] = {**data["generator"], **SMALL_GENERATOR, **generator}
    return parse_config(data, "test")


@pytest.fixture(autouse=True)
def _no_env_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    # A developer's SEQLAKE_* variables must not redirect the tests' warehouse.
    for name in ("SEQLAKE_WAREHOUSE", "SEQLAKE_CATALOG_URI", "SEQLAKE_CONFIG"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def lake_config(tmp_path_factory: pytest.TempPathFactory) -> Config:
    """The configuration the shared Spark session is bound to (one warehouse per test run)."""
    return make_config(tmp_path_factory.mktemp("lake") / "warehouse")


# The shared session runs thousands of small queries, where generating and compiling Java for each new
# plan (a quarter of its CPU) costs more than it saves: it evaluates expressions as Spark's interpreter
# does. Re-planning each query stage by stage as it runs (adaptive execution) costs another seventh of
# its CPU on tables this small, for results that are the same. The Spark runs of seqlake's commands in
# the tests (drivers of their own) keep seqlake's settings, so generated code and adaptive execution
# are still exercised, except the cluster run (tests/end_to_end/remote_runs.py).
SHARED_SESSION_SETTINGS = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.adaptive.enabled": "false",
}


@pytest.fixture(scope="session")
def spark(lake_config: Config):
    from seqlake.engines.spark_session import spark_session

    session = spark_session(lake_config, "seqlake-tests", "local[2]", **SHARED_SESSION_SETTINGS)
    yield session
    session.stop()


# The test files that take longest, longest first (from `make test`'s durations). `make test` runs each
# file whole on one worker (--dist loadfile), handing files out in collection order: starting the long
# ones first keeps a long file from running alone at the end while the other worker idles.
LONG_FILES = (
    "tests/end_to_end/test_remote_cluster.py",
    "tests/end_to_end/test_faults_in_every_job.py",
    "tests/pipelines/ingest/test_importers.py",
    "tests/pipelines/ingest/test_kafka_ingest.py",
    "tests/pipelines/forget/test_forget_fence.py",
    "tests/pipelines/ingest/test_ingest_engines.py",
    "tests/pipelines/compaction/test_no_event_lost.py",
    "tests/cli/test_cli_output.py",
    "tests/cli/test_cli_errors.py",
    "tests/pipelines/compaction/test_exactly_once.py",
    "tests/pipelines/compaction/test_batch_compaction.py",
    "tests/end_to_end/test_remote_rest.py",  # apart from test_remote_cluster, whose embedded_run it reuses
    "tests/benchmarks/test_compaction_bench.py",
    "tests/facade/test_sql_read_only.py",
    "tests/pipelines/compaction/test_publication_races.py",
    "tests/end_to_end/test_readme_examples.py",
    "tests/benchmarks/test_samples_bench.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: n for n, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(LONG_FILES)))  # stable: the rest in order


def pytest_collection_finish() -> None:
    # What collection imported (the libraries, seqlake, the test modules) lives as long as the process:
    # out of the collector's reach, each collection during the tests visits only what the tests made.
    gc.freeze()


_MEASUREMENTS: list[str] = []
MEASURED = "seqlake-measurement"


@pytest.fixture
def measurement(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Record a measured line; all of them are printed in the test run's summary. Kept in the test's
    report (its user properties), so lines measured in a parallel worker reach the summary too."""
    return lambda line: request.node.user_properties.append((MEASURED, line))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "teardown":  # the last report of a test carries every line it recorded
        # user_properties are typed as any objects; `measurement` records strings
        _MEASUREMENTS.extend(str(value) for name, value in report.user_properties if name == MEASURED)


def pytest_terminal_summary(terminalreporter) -> None:
    if _MEASUREMENTS:
        terminalreporter.section("seqlake measurements")
        for line in _MEASUREMENTS:
            terminalreporter.write_line(line)


@pytest.fixture(autouse=True)
def _no_object_storage_left_on():
    # A test that opened an S3 warehouse switches on S3 access for the process's later DuckDB
    # connections (seqlake.engines.duckdb_session); the next test starts without it, as a new process would,
    # even if it opens no catalog before connecting.
    yield
    from seqlake.engines.duckdb_session import object_storage_for

    object_storage_for(False)
