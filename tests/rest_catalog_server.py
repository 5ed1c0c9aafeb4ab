"""A real Iceberg REST catalog for tests: Apache Iceberg's own RESTCatalogServer (the test-fixtures jar
of iceberg-open-api, which `make jars` resolves into .jars/rest/) on a free port, in a JVM of its own.

Behind the REST API the server keeps a JdbcCatalog on a SQLite file of its own and writes the tables
into a temporary warehouse folder (HadoopFileIO), which pyiceberg, DuckDB and Spark read directly.
The server is configured through its CATALOG_* environment variables (CATALOG_WAREHOUSE is the
`warehouse` property); it listens on every interface of the port it is given, and the tests reach it
on 127.0.0.1. It accepts any client credential: its token endpoint issues a token to every client.
"""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.server_process import classpath, free_port, java, start, stop

MAIN_CLASS = "org.apache.iceberg.rest.RESTCatalogServer"
HEAP = "-Xmx512m"


@dataclass(frozen=True)
class RestCatalogServer:
    uri: str  # http://127.0.0.1:PORT
    warehouse: Path
    log: Path
    startup_seconds: float

    def properties(self) -> dict[str, str]:
        """pyiceberg's `load_catalog` properties for this server."""
        return {"type": "rest", "uri": self.uri}


def _answers(uri: str) -> bool:
    try:
        with urllib.request.urlopen(f"{uri}/v1/config", timeout=2) as answer:
            return answer.status == 200
    except (urllib.error.URLError, OSError):
        return False


@pytest.fixture(scope="session")
def rest_catalog_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestCatalogServer]:
    root = tmp_path_factory.mktemp("rest-catalog")
    warehouse = root / "warehouse"
    warehouse.mkdir()
    port = free_port()
    # Only this server's settings: a CATALOG_* variable of the environment would reconfigure it.
    env = {name: value for name, value in os.environ.items() if not name.startswith("CATALOG_")}
    env |= {
        "CATALOG_REST_PORT": str(port),
        "CATALOG_WAREHOUSE": str(warehouse),
        "CATALOG_URI": f"jdbc:sqlite:{root / 'catalog.db'}",
    }
    log = root / "server.log"
    began = time.monotonic()
    process = start([java(), HEAP, "-cp", classpath("rest"), MAIN_CLASS], log, env)
    try:
        uri = f"http://127.0.0.1:{port}"
        for _ in range(1200):
            if _answers(uri):
                break
            if process.poll() is not None:
                raise RuntimeError(f"the Iceberg REST catalog server exited at start (log: {log})")
            time.sleep(0.1)
        else:
            raise RuntimeError(f"the Iceberg REST catalog server did not answer (log: {log})")
        yield RestCatalogServer(uri, warehouse, log, round(time.monotonic() - began, 1))
    finally:
        stop(process)
