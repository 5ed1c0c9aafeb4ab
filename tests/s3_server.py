"""A real S3 API for tests: moto's server on a free loopback port, with credential checks on.

The server starts with authentication off for its first requests, which create an IAM user with full
S3 access and its key; from then on, S3 checks every request's signature against that key, so a
wrong secret is refused as AWS would refuse it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest

SETUP_REQUESTS = 3  # create_user, put_user_policy, create_access_key: unauthenticated
S3_POLICY = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    access_key_id: str
    secret_access_key: str

    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_REGION": "us-east-1",
        }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = (tmp_path_factory.mktemp("moto") / "server.log").open("w")
    server_bin = Path(sys.executable).parent / "moto_server"
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(SETUP_REQUESTS)}
    process = subprocess.Popen([str(server_bin), "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log, env=env)
    try:
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                if process.poll() is not None:
                    raise RuntimeError("moto_server exited at start") from None
                time.sleep(0.1)
        iam = boto3.client(
            "iam",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="setup",
            aws_secret_access_key="setup",
        )
        iam.create_user(UserName="seqlake")
        iam.put_user_policy(UserName="seqlake", PolicyName="s3", PolicyDocument=json.dumps(S3_POLICY))
        key = iam.create_access_key(UserName="seqlake")["AccessKey"]
        yield S3Server(endpoint, key["AccessKeyId"], key["SecretAccessKey"])
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


@pytest.fixture
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """The AWS_* settings of the test server in this test's environment."""
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    return s3_server
