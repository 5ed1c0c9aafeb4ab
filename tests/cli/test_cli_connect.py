"""`seqlake connect TOOL` gives what DuckDB, pyiceberg and Spark need to open the warehouse without
seqlake: each output is used by the tool itself, in a process that never imports seqlake."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest
import yaml

from tests import forked_commands
from tests.facade.test_sql import USER_ROWS, build_small_warehouse


@pytest.fixture(scope="module")
def config_file(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("connect")
    config = build_small_warehouse(root / "warehouse").config
    path = root / "seqlake.yaml"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
    return path


def seqlake(config_file: Path, *args: str, cwd: Path | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEQLAKE_")}
    done = forked_commands.run(
        [sys.executable, "-m", "seqlake.cli", "connect", "--config", str(config_file), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def without_seqlake(code: str, stdin: str = "", cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    """Python code run in a process where importing seqlake fails: the tool alone."""
    guard = "import sys; sys.modules['seqlake'] = None\n"
    done = forked_commands.run(
        [sys.executable, "-c", guard + code], input=stdin, capture_output=True, text=True, cwd=cwd, env=env
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_plain_duckdb_runs_the_printed_sql_and_reads_every_table(config_file: Path) -> None:
    script = seqlake(config_file, "duckdb")
    assert "iceberg_scan(" in script and "delta_scan(" in script
    counted = without_seqlake(
        "import duckdb\n"
        "con = duckdb.connect()\n"
        "con.execute(sys.stdin.read())\n"
        "for name in ('history', 'history_detail', 'raw_events', 'landing_events', 'quarantine'):\n"
        "    print(name, con.execute(f'SELECT count(*) FROM {name}').fetchone()[0])\n",
        stdin=script,
    )
    counts = dict(line.split() for line in counted.splitlines())
    assert int(counts["history"]) == sum(USER_ROWS.values())
    assert int(counts["landing_events"]) > 0 and int(counts["quarantine"]) > 0


def test_pyiceberg_loads_the_written_catalog(config_file: Path, tmp_path: Path) -> None:
    printed = seqlake(config_file, "pyiceberg")
    entry = yaml.safe_load(printed)
    [(name, catalog)] = entry["catalog"].items()
    assert catalog["type"] == "sql" and catalog["uri"].startswith("sqlite:///")
    assert "written" not in printed and "added catalog" in seqlake(config_file, "pyiceberg", "--write", cwd=tmp_path)
    assert yaml.safe_load((tmp_path / ".pyiceberg.yaml").read_text()) == entry
    again = seqlake(config_file, "pyiceberg", "--write", cwd=tmp_path)  # the same entry: kept as it is
    assert "added catalog" in again and yaml.safe_load((tmp_path / ".pyiceberg.yaml").read_text()) == entry
    env = {**os.environ, "PYICEBERG_HOME": str(tmp_path)}
    rows = without_seqlake(
        f"from pyiceberg.catalog import load_catalog\n"
        f"print(load_catalog({name!r}).load_table('seqlake.history').scan().to_arrow().num_rows)\n",
        cwd=tmp_path,
        env=env,
    )
    assert int(rows) == sum(USER_ROWS.values())


def test_spark_options_name_the_jars_and_the_catalog(config_file: Path) -> None:
    options = shlex.split(seqlake(config_file, "spark").splitlines()[0])
    assert options[0] == "--jars" and all(Path(jar).is_file() for jar in options[1].split(","))
    conf = dict(options[i + 1].split("=", 1) for i in range(2, len(options), 2) if options[i] == "--conf")
    catalog = yaml.safe_load(config_file.read_text())["warehouse"]["catalog_name"]
    assert conf[f"spark.sql.catalog.{catalog}"] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf[f"spark.sql.catalog.{catalog}.uri"].startswith("jdbc:sqlite:")
    assert not [key for key in conf if key.startswith("spark.pyspark.")]  # the caller's own Python
