"""Helpers for the integration tests: raw confluent-kafka reads and writes that check the broker itself (no
framework code involved), and a script run as a fresh driver process."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient


def fresh_driver(script: str, *args: str, timeout: float = 180) -> Any:
    """Run `script` in a fresh Python process (a driver of its own: its own JVM, zygote and workers) with
    `args`; it must succeed and print JSON as its last line, which is returned."""
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


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


def produce(bootstrap: str, topic: str, records, *, partition_of=None, timestamp_of=None) -> int:
    """Produce (key, value) pairs (idempotent producer, not transactional); returns the count.
    `partition_of(n, key)` and `timestamp_of(n, key)` choose each record's partition and timestamp."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    failed: list[str] = []

    def delivered(err, msg) -> None:
        if err is not None and len(failed) < 3:
            failed.append(str(err))

    n = 0
    for key, value in records:
        kwargs = {"on_delivery": delivered}
        if partition_of is not None:
            kwargs["partition"] = partition_of(n, key)
        if timestamp_of is not None:
            kwargs["timestamp"] = timestamp_of(n, key)
        while True:
            try:
                producer.produce(topic, value=value, key=key, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
        n += 1
        if n % 20_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0, "input not fully delivered"
    assert not failed, f"the broker refused input records: {failed}"  # e.g. a timestamp too far ahead
    return n


def assert_exactly_once(bootstrap: str, *, inputs: list[str], outputs: list[str], group: str,
                        dead_letter_topic: str | None = None, expected_inputs: int | None = None):
    """Lineage audit on the committed output + no open transaction on any output (I1, I2, I5)."""
    from eos.audit import audit_lineage
    from transactions import KafkaAdmin

    admin = KafkaAdmin(bootstrap)
    result = audit_lineage(bootstrap, inputs, outputs, dead_letter_topic=dead_letter_topic, group=group, admin=admin)
    assert result.violations == 0, f"exactly-once violated: {result}"
    if expected_inputs is not None:
        assert result.expected == expected_inputs, f"committed offsets cover {result.expected} of {expected_inputs}"
        assert result.unique_origins + result.dead_lettered == expected_inputs
    topics = outputs + ([dead_letter_topic] if dead_letter_topic else [])
    for topic in topics:
        if admin.partition_counts([topic])[topic] is None:
            continue
        offsets = admin.partition_offsets(admin.topic_partitions(topic))
        open_txn = {tp: o for tp, o in offsets.items() if o.open_transaction}
        assert not open_txn, f"transactions left open on {topic}: {open_txn}"
    return result


def assert_totals_exact(bootstrap: str, *, inputs: list[str], totals: list[str], group: str):
    """Per key: the last committed {"count", "sum"} equals the value recomputed from the committed input, and
    the committed sequence is exactly the running sequence (no step repeated or skipped)."""
    import json

    from eos.audit import audit_aggregate

    results = {}
    for kind, field in (("count", "count"), ("sum", "sum")):
        r = audit_aggregate(bootstrap, inputs, totals, kind=kind, group=group,
                            input_value=lambda raw: json.loads(raw)["n"],
                            output_value=lambda raw, f=field: json.loads(raw)[f])
        assert r.violations == 0, f"{kind}: {r}"
        results[kind] = r
    return results
