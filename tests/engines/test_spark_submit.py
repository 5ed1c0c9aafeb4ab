"""Jobs launched by `spark-submit`: what the submitter passed stays, seqlake fills in only the rest."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pyspark
import pytest
import yaml

from seqlake.core.config import DEFAULT_CONFIG_PATH
from seqlake.core.errors import SetupError
from seqlake.engines.spark_session import session_settings, spark_jars
from tests import forked_commands
from tests.paths import REPO_ROOT

SPARK_SUBMIT = Path(pyspark.__file__).parent / "bin" / "spark-submit"
REPO = REPO_ROOT

# Run by spark-submit: builds seqlake's session, uses the Iceberg catalog (jars and extensions loaded),
# prints the effective settings as one JSON line.
PROBE = """
import json, sys
from seqlake.core.config import load_config
from seqlake.engines.spark_session import spark_session

config = load_config(sys.argv[1])
spark = spark_session(config, "probe-app")
conf = spark.sparkContext.getConf()
namespaces = [row[0] for row in spark.sql("SHOW NAMESPACES IN " + config.warehouse.catalog_name).collect()]
keys = ["spark.master", "spark.sql.shuffle.partitions", "spark.default.parallelism", "spark.app.name",
        "spark.sql.extensions"]
print("SETTINGS " + json.dumps({**{k: conf.get(k, None) for k in keys},
      "runtime_shuffle": spark.conf.get("spark.sql.shuffle.partitions"), "namespaces": namespaces}))
spark.stop()
"""


def test_submitted_settings_win_over_seqlake_defaults() -> None:
    jars = ",".join(f"file://{jar}" for jar in spark_jars())
    merged = session_settings(
        {"spark.master": "local[2]", "spark.sql.shuffle.partitions": "8", "spark.ui.enabled": "false"},
        {"spark.master": "spark://127.0.0.1:7077", "spark.sql.shuffle.partitions": "3", "spark.jars": jars},
    )
    assert merged == {"spark.ui.enabled": "false"}


def test_submission_without_jars_says_how_to_pass_them() -> None:
    with pytest.raises(SetupError, match=r"spark-submit was not given the jars .*iceberg-spark-runtime.*--jars"):
        session_settings({"spark.master": "local[2]"}, {"spark.master": "local[1]"})


def test_spark_submit_keeps_master_and_conf(tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    config_file = tmp_path / "seqlake.yaml"
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    data["warehouse"] = {**data["warehouse"], "path": str(warehouse), "catalog_uri": None}
    config_file.write_text(yaml.safe_dump(data))
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable}
    env.pop("SEQLAKE_SPARK_MASTER", None)
    jars = forked_commands.run(
        [sys.executable, "-m", "seqlake.engines.spark_session", "--jars"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    done = forked_commands.run(
        [
            str(SPARK_SUBMIT),
            "--master",
            "local[1]",
            "--name",
            "submitted-name",
            "--jars",
            jars,
            "--conf",
            "spark.sql.shuffle.partitions=3",
            str(probe),
            str(config_file),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("SETTINGS "))
    settings = json.loads(line[len("SETTINGS ") :])
    assert settings["spark.master"] == "local[1]"  # not seqlake's local[2]
    assert settings["spark.sql.shuffle.partitions"] == "3"  # not bucket_count (8)
    assert settings["runtime_shuffle"] == "3"
    assert settings["spark.app.name"] == "submitted-name"
    # What the submitter left unset is still seqlake's: the default parallelism and the extensions.
    assert settings["spark.default.parallelism"] == "2"
    assert "IcebergSparkSessionExtensions" in settings["spark.sql.extensions"]
    assert "seqlake" in settings["namespaces"]


def test_no_job_module_shadows_the_standard_library():
    # spark-submit runs jobs/<job>.py as a script, which puts jobs/ first on sys.path: a jobs/inspect.py
    # would be imported by the standard library itself (dataclasses imports inspect) and break the job.
    jobs = {path.stem for path in (REPO / "jobs").glob("*.py")}
    assert not jobs & sys.stdlib_module_names, sorted(jobs & sys.stdlib_module_names)
