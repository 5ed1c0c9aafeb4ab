"""A real Iceberg REST catalog for tests: Apache Iceberg's own RESTCatalogServer (the test-fixtures jar
of iceberg-open-api, which `make jars` resolves into .jars/rest/) on a free port, in a JVM of its own.

Behind the REST API the server keeps a JdbcCatalog on a SQLite file of its own and writes the tables
into a temporary warehouse folder (HadoopFileIO), which pyiceberg, DuckDB and Spark read directly.
The server is configured through its CATALOG_* environment variables (CATALOG_WAREHOUSE is the
`warehouse` property); it listens on every interface of the port it is given, and the tests reach it
on 127.0.0.1. It accepts any client credential: its token endpoint issues a token to every client, so the tests
of refused credentials put `AuthenticatingFront` before it.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from seqlake.engines.spark_session import QUICK_JVM_OPTIONS
from tests.server_process import classpath, free_port, java, start, stop

MAIN_CLASS = "org.apache.iceberg.rest.RESTCatalogServer"
HEAP = "-Xmx512m"


@dataclass(frozen=True)
class RestCatalogServer:
    uri: str  # http://127.0.0.1:PORT
    warehouse: Path
    log: Path
    startup_seconds: float
    process: subprocess.Popen[bytes] | None = field(default=None, compare=False, repr=False)

    def stop(self) -> None:
        """Stop the server now (SIGKILL), as a catalog that goes down."""
        if self.process is not None:
            stop(self.process)

    def properties(self) -> dict[str, str]:
        """pyiceberg's `load_catalog` properties for this server."""
        return {"type": "rest", "uri": self.uri}


def forward(request: http.server.BaseHTTPRequestHandler, upstream: str, body: bytes) -> tuple[int, bytes, str | None]:
    """`request` sent on to the server at `upstream`: its status, body and content type."""
    forwarded = urllib.request.Request(
        upstream + request.path,
        data=body if body or request.command in ("POST", "PUT") else None,
        method=request.command,
        headers={
            k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length", "accept-encoding")
        },
    )
    try:
        with urllib.request.urlopen(forwarded, timeout=60) as answer:
            return answer.status, answer.read(), answer.headers.get("Content-Type")
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read(), refused.headers.get("Content-Type")


def _answers(uri: str) -> bool:
    try:
        with urllib.request.urlopen(f"{uri}/v1/config", timeout=2) as answer:
            return answer.status == 200
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def running_rest_catalog(root: Path, port: int | None = None) -> Iterator[RestCatalogServer]:
    """A REST catalog server keeping its catalog and tables under `root` (started again on the same
    `root`, it serves the same tables), stopped (SIGKILL) when the block ends."""
    warehouse = root / "warehouse"
    warehouse.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    # Only this server's settings: a CATALOG_* variable of the environment would reconfigure it.
    env = {name: value for name, value in os.environ.items() if not name.startswith("CATALOG_")}
    env |= {
        "CATALOG_REST_PORT": str(port),
        "CATALOG_WAREHOUSE": str(warehouse),
        "CATALOG_URI": f"jdbc:sqlite:{root / 'catalog.db'}",
    }
    log = root / "server.log"
    began = time.monotonic()
    process = start([java(), HEAP, *QUICK_JVM_OPTIONS, "-cp", classpath("rest"), MAIN_CLASS], log, env)
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
        yield RestCatalogServer(uri, warehouse, log, round(time.monotonic() - began, 1), process)
    finally:
        stop(process)


@pytest.fixture(scope="session")
def rest_catalog_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestCatalogServer]:
    with running_rest_catalog(tmp_path_factory.mktemp("rest-catalog")) as server:
        yield server


class AuthenticatingFront:
    """An OAuth2 front for the REST server, which itself takes any credential: its token endpoint
    issues a token only to `client_id:client_secret`, and every other request needs that token as
    its bearer; the rest is forwarded as it came. A refusal is the REST specification's 401."""

    def __init__(self, upstream: str, client_id: str, client_secret: str) -> None:
        self.upstream, self.client = upstream, (client_id, client_secret)
        self.token = "front-" + os.urandom(8).hex()
        front = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # the test's output stays the test's
                pass

            def _answer(self, status: int, body: bytes, content_type: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.endswith("/v1/oauth/tokens"):
                    form = urllib.parse.parse_qs(body.decode())
                    given = (form.get("client_id", [""])[0], form.get("client_secret", [""])[0])
                    if given != front.client:
                        refusal = {"error": "invalid_client", "error_description": "unknown client or wrong secret"}
                        return self._answer(401, json.dumps(refusal).encode())
                    issued = {"access_token": front.token, "token_type": "bearer", "expires_in": 3600}
                    issued["issued_token_type"] = "urn:ietf:params:oauth:token-type:access_token"
                    return self._answer(200, json.dumps(issued).encode())
                if self.headers.get("Authorization") != f"Bearer {front.token}":
                    error = {"message": "not authorized", "type": "NotAuthorizedException", "code": 401}
                    return self._answer(401, json.dumps({"error": error}).encode())
                status, payload, kind = forward(self, front.upstream, body)
                self._answer(status, payload, kind or "application/json")

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _handle

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.uri = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> AuthenticatingFront:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class CommitCutter:
    """A front for the REST server that cuts it off in the middle of a commit: it forwards every request
    until the first commit to a table named `table` (pyiceberg's POST to .../tables/TABLE), then runs
    `cut` (which stops the server) before forwarding the commit or, with `after_applied`, once the
    server has applied it, and closes the connection without an answer. From then on it accepts no
    connection, as a server that went down. `reopen` listens again on the same port, forwarding to
    another upstream (the server started again)."""

    def __init__(self, upstream: str, table: str, cut: Callable[[], None], after_applied: bool = False) -> None:
        self.upstream, self.table, self.cut, self.after_applied = upstream, table, cut, after_applied
        self.cut_done = threading.Event()
        self._closing: threading.Thread | None = None
        self._port = 0
        self._serve(upstream, cutting=True)

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def _serve(self, upstream: str, cutting: bool) -> None:
        front = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the server answers pyiceberg

            def log_message(self, *args: object) -> None:
                pass

            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                commit = self.command == "POST" and self.path.rstrip("/").endswith(f"/tables/{front.table}")
                if cutting and front.cut_done.is_set():
                    self.close_connection = True
                    return
                if cutting and commit and not front.after_applied:
                    return self._cut()
                status, payload, kind = forward(self, upstream, body)
                if cutting and commit:
                    return self._cut()  # applied by the server; its answer is lost with it
                self.send_response(status)
                self.send_header("Content-Type", kind or "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _cut(self) -> None:
                front.cut()
                front.cut_done.set()
                self.close_connection = True
                front._closing = threading.Thread(target=front._close, daemon=True)  # refuse what comes next
                front._closing.start()

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _handle

        server = http.server.ThreadingHTTPServer(("127.0.0.1", self._port), Handler)
        self._port = server.server_address[1]
        self.server = server
        threading.Thread(target=server.serve_forever, daemon=True).start()

    def _close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def reopen(self, upstream: str) -> None:
        """Forward every request to `upstream` from now on, on the same port."""
        if self._closing is not None:
            self._closing.join()
        else:
            self._close()
        self._serve(upstream, cutting=False)

    def __enter__(self) -> CommitCutter:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()
