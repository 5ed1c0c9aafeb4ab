"""A Spark standalone cluster for tests: a master and two workers on loopback, from the Spark that
pyspark ships, started once per test run and stopped with it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyspark
import pytest

from tests.server_process import TEST_JVM_OPTIONS

SPARK_BIN = Path(pyspark.__file__).parent / "bin"
WORKERS = 2


@dataclass(frozen=True)
class SparkCluster:
    master: str  # spark://127.0.0.1:PORT


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _alive_workers(ui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as answer:
            return int(json.load(answer).get("aliveworkers", 0))
    except OSError:
        return 0


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory, s3_server) -> Iterator[SparkCluster]:
    """Workers get the S3 server's settings: executors read and write the warehouse with them."""
    folder = tmp_path_factory.mktemp("spark-cluster")
    port, ui_port = _free_port(), _free_port()
    env = {**os.environ, **s3_server.env(), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    env["SPARK_DAEMON_JAVA_OPTS"] = TEST_JVM_OPTIONS  # the master's and workers' JVMs
    spark_class = str(SPARK_BIN / "spark-class")
    master = f"spark://127.0.0.1:{port}"
    processes = []

    def start(name: str, *args: str) -> None:
        log = (folder / f"{name}.log").open("w")
        processes.append(subprocess.Popen([spark_class, *args], stdout=log, stderr=log, env=env))

    try:
        start(
            "master",
            "org.apache.spark.deploy.master.Master",
            *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui_port)),
        )
        for n in range(WORKERS):
            start(
                f"worker{n}",
                "org.apache.spark.deploy.worker.Worker",
                master,
                *("--host", "127.0.0.1", "--cores", "1", "--memory", "2g"),
                *("--webui-port", str(_free_port()), "--work-dir", str(folder / f"work{n}")),
            )
        for _ in range(600):
            if _alive_workers(ui_port) == WORKERS:
                break
            if any(process.poll() is not None for process in processes):
                raise RuntimeError(f"a Spark cluster process exited at start (logs in {folder})")
            time.sleep(0.2)
        else:
            raise RuntimeError(f"the Spark workers did not register with the master (logs in {folder})")
        yield SparkCluster(master)
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
