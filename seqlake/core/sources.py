"""Where `seqlake ingest` reads raw records: a raw source table, or a Kafka topic named by a URI.

`kafka://HOST:PORT[,HOST:PORT...]/TOPIC`: the topic's bootstrap servers and its name. Each Kafka
partition is a source partition, each offset an LSN, each message's timestamp its arrival time and its
value the JSON payload (`seqlake.pipelines.ingest.kafka`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

KAFKA_SCHEME = "kafka://"
# Kafka's own rule for topic names; a broker is a host name, an IPv4 address or a bracketed IPv6 one.
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_BROKER = re.compile(r"(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):(?P<port>[0-9]{1,5})")


def is_kafka_uri(text: str) -> bool:
    return text.startswith(KAFKA_SCHEME)


@dataclass(frozen=True)
class KafkaTopic:
    bootstrap_servers: str  # host:port,host:port
    topic: str

    @classmethod
    def parse(cls, uri: str) -> KafkaTopic:
        """The topic a `kafka://` URI names; a ValueError saying what is wrong otherwise."""
        if not is_kafka_uri(uri):
            raise ValueError(f"{uri!r} is not a kafka:// URI (kafka://HOST:PORT[,HOST:PORT]/TOPIC)")
        servers, slash, topic = uri[len(KAFKA_SCHEME) :].partition("/")
        if not slash or not _TOPIC.fullmatch(topic):
            raise ValueError(f"{uri!r} names no topic: kafka://HOST:PORT[,HOST:PORT]/TOPIC (letters, digits, . _ -)")
        brokers = [server.strip() for server in servers.split(",")]
        for broker in brokers:
            found = _BROKER.fullmatch(broker)
            if found is None or not 0 < int(found["port"]) < 65536:
                raise ValueError(f"{uri!r}: {broker!r} is not a broker address (HOST:PORT)")
        return cls(",".join(brokers), topic)

    @property
    def uri(self) -> str:
        return f"{KAFKA_SCHEME}{self.bootstrap_servers}/{self.topic}"

    def __str__(self) -> str:
        return self.uri
