"""No secret in any message: every error path that prints a catalog or storage URI masks its password."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from seqlake.core.config import parse_config
from seqlake.core.errors import ConfigError
from seqlake.core.uris import masked_text, masked_uri
from seqlake.engines.spark_session import jdbc_catalog_options
from tests import forked_commands

SECRET = "hunter2"


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        ("postgresql+psycopg2://bob:hunter2@db:5432/iceberg", "postgresql+psycopg2://bob:***@db:5432/iceberg"),
        (
            "jdbc:postgresql://db/iceberg?user=bob&password=hunter2",
            "jdbc:postgresql://db/iceberg?user=bob&password=***",
        ),
        ("s3://bucket/path?access_key=AKIA&secret_key=hunter2", "s3://bucket/path?access_key=***&secret_key=***"),
        ("sqlite:////var/lake/catalog.db", "sqlite:////var/lake/catalog.db"),
        ("s3://bucket/lake", "s3://bucket/lake"),
    ],
)
def test_masked_uri(uri: str, shown: str) -> None:
    assert masked_uri(uri) == shown


def test_masked_text_masks_uris_inside_a_message() -> None:
    uri = "mysql://bob:hunter2@db/x"
    assert SECRET not in masked_text(f"(OperationalError) cannot connect to {uri}: refused", uri)


def run_cli(*args: str, catalog_uri: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEQLAKE_")}
    env["SEQLAKE_CATALOG_URI"] = catalog_uri
    return forked_commands.run([sys.executable, "-m", "seqlake.cli", *args], capture_output=True, text=True, env=env)


@pytest.mark.parametrize(
    "catalog_uri",
    [
        "postgresql+psycopg2://bob:hunter2@127.0.0.1:1/iceberg",  # driver not installed
        "nosuchdb://bob:hunter2@127.0.0.1:1/iceberg",  # no such SQLAlchemy dialect
    ],
)
@pytest.mark.parametrize("command", [("fsck",), ("history", "--user", "1"), ("compact", "--end-of-stream")])
def test_unusable_catalogs_are_one_line_errors_without_the_password(catalog_uri: str, command, tmp_path) -> None:
    result = run_cli(*command, catalog_uri=catalog_uri)
    assert result.returncode != 0
    assert SECRET not in result.stderr + result.stdout
    assert "Traceback" not in result.stderr
    assert "***" in result.stderr


def test_spark_catalog_translation_masks_the_password() -> None:
    with pytest.raises(ConfigError) as error:
        jdbc_catalog_options("mysql://bob:hunter2@db/iceberg")
    assert SECRET not in str(error.value) and "bob:***@" in str(error.value)


def test_configuration_errors_mask_the_password() -> None:
    with pytest.raises(ConfigError) as error:
        parse_config({"warehouse": {"catalog_uri": ["postgresql://bob:hunter2@db/iceberg"]}})
    assert SECRET not in str(error.value) and "bob:***@" in str(error.value)
