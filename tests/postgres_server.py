"""A real PostgreSQL server for tests: Debian's binaries, a throwaway data folder, a loopback port.

The server is started once per test run (`postgres_server`) and stopped with it; each test that
asks for `postgres_catalog_uri` gets a database of its own. Password authentication is on over TCP,
as a shared catalog database would have it. Run as root (as CI does), the server runs as the
`postgres` user that Debian's package creates.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

USER = "seqlake"


@dataclass(frozen=True)
class PostgresServer:
    port: int
    password: str

    def uri(self, database: str) -> str:
        """SQLAlchemy URI (pyiceberg's SqlCatalog; Spark's JDBC options are derived from it)."""
        return f"postgresql+psycopg://{USER}:{self.password}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> None:
        import psycopg

        with psycopg.connect(self.uri("postgres").replace("+psycopg", ""), autocommit=True) as con:
            con.execute(f'CREATE DATABASE "{name}"')


def _binaries() -> Path:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if not candidates:
        raise RuntimeError("PostgreSQL's server binaries are missing: install Debian's postgresql package")
    return Path(candidates[-1]).parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _as_server_user(command: list[str]) -> list[str]:
    """initdb and postgres refuse to run as root: run them as `postgres` then."""
    if os.geteuid() != 0:
        return command
    return ["runuser", "-u", "postgres", "--", *command]


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    binaries = _binaries()
    root = Path(tempfile.mkdtemp(prefix="seqlake-pg-"))
    data, password_file = root / "data", root / "password"
    password = secrets.token_urlsafe(16)
    password_file.write_text(password)
    if os.geteuid() == 0:
        server_user = pwd.getpwnam("postgres")
        for path in (root, password_file):
            os.chown(path, server_user.pw_uid, server_user.pw_gid)
    port = _free_port()
    subprocess.run(
        _as_server_user(
            [
                str(binaries / "initdb"),
                "-D",
                str(data),
                "-U",
                USER,
                f"--pwfile={password_file}",
                "--auth-host=scram-sha-256",
                "--auth-local=trust",
                "--no-sync",
            ]
        ),
        check=True,
        capture_output=True,
    )
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c fsync=off"
    start = [str(binaries / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-o", options, "-w", "start"]
    subprocess.run(_as_server_user(start), check=True, capture_output=True)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield PostgresServer(port, password)
    finally:
        stop = [str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]
        subprocess.run(_as_server_user(stop), capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def postgres_catalog_uri(postgres_server: PostgresServer, request: pytest.FixtureRequest) -> str:
    """A fresh, empty catalog database for this test."""
    name = "t_" + secrets.token_hex(6)
    postgres_server.create_database(name)
    return postgres_server.uri(name)
