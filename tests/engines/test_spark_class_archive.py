"""Spark's driver maps the classes of a seqlake job from the archive set-up wrote
(seqlake.engines.spark_classes), and a driver whose archive does not fit starts as it would without one."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from seqlake.engines.spark_session import CLASS_ARCHIVE, ENV_JARS_DIR, class_archive_path, driver_java_options
from tests.conftest import make_config
from tests.paths import REPO_ROOT
from tests.server_process import java

pytestmark = pytest.mark.spark

SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from seqlake.engines.spark_session import driver_java_options, spark_session
    from tests.conftest import make_config

    config = make_config(Path(sys.argv[1]))
    options = driver_java_options() + f" -Xlog:class+load=info:file={sys.argv[2]}"
    spark = spark_session(config, "archive-check", "local[1]", **{"spark.driver.extraJavaOptions": options})
    name = f"{config.warehouse.catalog_name}.{config.warehouse.namespace}.archived"
    spark.sql(f"CREATE TABLE {name} (id BIGINT) USING iceberg")
    spark.sql(f"INSERT INTO {name} VALUES (1), (2)")
    print(spark.sql(f"SELECT sum(id) FROM {name}").first()[0])
    """
)
# `-Xlog:class+load` names where each class came from: the archive set-up wrote is the "top" layer over
# the JDK's own. Lambdas' classes are made at run time, never archived.
LOADED = re.compile(r"\] (org\.apache\.(?:iceberg|spark\.sql)\.\S+) source: (.*)$")


def test_a_driver_maps_the_classes_of_an_iceberg_query_from_the_archive(tmp_path: Path) -> None:
    assert class_archive_path().is_file(), "no Spark class archive: `make setup` writes it"
    make_config(tmp_path / "wh")  # validates before the subprocess runs
    log = tmp_path / "classes.log"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "wh"), str(log)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.splitlines() == ["3"]  # the answer alone: nothing of the archive on stdout
    loaded = [m.groups() for m in map(LOADED.search, log.read_text().splitlines()) if m]
    sources = [source for name, source in loaded if "$$Lambda" not in name]
    archived = sum(source == "shared objects file (top)" for source in sources)
    # A query the warm-up did not run loads a few classes of its own from the jars.
    assert len(sources) > 1000 and archived / len(sources) > 0.8, (archived, len(sources))


def test_an_archive_that_does_not_fit_is_left_unused_without_a_word(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / CLASS_ARCHIVE).write_bytes(b"not an archive")
    monkeypatch.setenv(ENV_JARS_DIR, str(tmp_path))
    options = driver_java_options()
    assert f"-XX:SharedArchiveFile={tmp_path / CLASS_ARCHIVE}" in options
    done = subprocess.run([java(), *shlex.split(options), "-version"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and "cds" not in done.stderr and "archive" not in done.stderr, done.stderr
