"""A real Kafka broker for tests: Apache Kafka in KRaft mode (`make jars` resolves it into .jars/kafka/),
one JVM that is both broker and controller, on free loopback ports with a temporary log folder.

Its storage is formatted with a random cluster id before it starts. Every message's timestamp is the
broker's log-append time (the arrival time a source partition's records carry), and topics are only
created on purpose (no auto-creation), with a replication factor of 1.
"""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from seqlake.engines.spark_session import QUICK_JVM_OPTIONS
from tests.server_process import classpath, free_port, java, start, stop

HEAP = "-Xmx512m"


@dataclass(frozen=True)
class KafkaBroker:
    bootstrap_servers: str  # 127.0.0.1:PORT
    log_dir: Path
    log: Path
    startup_seconds: float

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap_servers})

    def create_topic(self, name: str, partitions: int, **config: str) -> None:
        """Create the topic and wait until the broker's metadata lists all its partitions."""
        admin = self.admin()  # the futures fail if their client is collected before they are done
        topic = NewTopic(name, num_partitions=partitions, replication_factor=1, config=config)
        admin.create_topics([topic])[name].result()
        for _ in range(100):
            listed = admin.list_topics(name, timeout=5).topics[name]
            if listed.error is None and len(listed.partitions) == partitions:
                return
            time.sleep(0.1)
        raise RuntimeError(f"the Kafka broker does not list the new topic {name!r}")


def _settings(port: int, controller_port: int, log_dir: Path) -> str:
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(log_dir),
        "log.message.timestamp.type": "LogAppendTime",
        "auto.create.topics.enable": "false",
        # One broker: the internal topics have one replica, and consumer groups start at once.
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        # Two cores shared with the rest of the suite.
        "num.network.threads": "2",
        "num.io.threads": "2",
        "background.threads": "2",
        "num.recovery.threads.per.data.dir": "1",
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


# Warnings and errors only, to the broker's output (its log file).
LOG4J2 = """status = error
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.out.ref = out
"""


def _ready(port: int) -> bool:
    """The broker accepts connections, answers metadata requests and lists itself."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        metadata = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=2)
    except (OSError, KafkaException):
        return False
    return bool(metadata.brokers)


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    root = tmp_path_factory.mktemp("kafka")
    log_dir, properties, log = root / "logs", root / "server.properties", root / "server.log"
    port, controller_port = free_port(), free_port()
    properties.write_text(_settings(port, controller_port, log_dir))
    (root / "log4j2.properties").write_text(LOG4J2)
    logs = f"-Dlog4j2.configurationFile={root / 'log4j2.properties'}"
    command = [java(), HEAP, *QUICK_JVM_OPTIONS, logs, "-cp", classpath("kafka")]
    began = time.monotonic()
    # Kafka's cluster ids are 16 random bytes in URL-safe base64 without padding.
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    formatted = subprocess.run(
        # Attached with "=": an id may begin with "-", which the tool would take for an option.
        [*command, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c", str(properties)],
        capture_output=True,
        text=True,
    )
    if formatted.returncode != 0:
        raise RuntimeError(f"formatting the Kafka broker's storage failed: {formatted.stderr.strip()}")
    process = start([*command, "kafka.Kafka", str(properties)], log, os.environ)
    try:
        for _ in range(600):
            if _ready(port):
                break
            if process.poll() is not None:
                raise RuntimeError(f"the Kafka broker exited at start (log: {log})")
            time.sleep(0.1)
        else:
            raise RuntimeError(f"the Kafka broker did not answer (log: {log})")
        yield KafkaBroker(f"127.0.0.1:{port}", log_dir, log, round(time.monotonic() - began, 1))
    finally:
        stop(process)
