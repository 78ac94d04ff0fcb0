"""Raw confluent-kafka helpers for tests that check the broker itself (no framework code involved)."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient


def read_values(bootstrap: str, topic: str, *, isolation: str = "read_committed", timeout: float = 30.0) -> list[bytes]:
    """Every visible value of `topic` (all partitions), read until the consumer reaches each partition's end."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.time_ns()}",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    pending, values = set(partitions), []
    deadline = time.monotonic() + timeout
    try:
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"partitions {sorted(pending)} of {topic} did not reach their end")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    pending.discard(msg.partition())
                    continue
                raise RuntimeError(msg.error())
            values.append(msg.value())
    finally:
        consumer.close()
    return values
