"""Stable committed-offset reads: the committed group offsets are the only record of progress.

A read_committed consumer makes librdkafka send OffsetFetch with RequireStable (KIP-447): while a
transaction holds pending offsets for a partition, the broker answers UNSTABLE_OFFSET_COMMIT and the
client keeps asking until the transaction completes or the timeout passes. So a stable read never
returns an offset that a still-open transaction may change.
"""

from __future__ import annotations

from typing import NamedTuple

from confluent_kafka import OFFSET_INVALID, Consumer, TopicPartition

from transactions.deadline import call_with_deadline
from transactions.errors import classify
from transactions.retry import DEFAULT_POLICY, RetryPolicy, call

__all__ = ["stable_committed", "Committed"]


class Committed(NamedTuple):
    offset: int | None  # None: nothing committed yet
    metadata: str | None


def stable_committed(consumer: Consumer, partitions: list[tuple[str, int]], *, timeout: float = 30.0,
                     policy: RetryPolicy = DEFAULT_POLICY) -> dict[tuple[str, int], Committed]:
    """Committed offset and commit metadata of each partition for the consumer's group.

    Raises `RetriableKafkaError` when a pending transaction keeps the offsets unstable past `timeout`.
    """
    if not partitions:
        return {}
    tps = [TopicPartition(t, p) for t, p in partitions]
    result = call("committed", call_with_deadline, "committed", lambda: consumer.committed(tps, timeout), timeout + 10,
                  policy=policy)
    out: dict[tuple[str, int], Committed] = {}
    for tp in result:
        if tp.error is not None:
            raise classify(tp.error, f"committed offset of {tp.topic}[{tp.partition}]")
        offset = None if tp.offset == OFFSET_INVALID or tp.offset < 0 else tp.offset
        try:
            metadata = tp.metadata or None
        except UnicodeDecodeError:  # another client's binary commit metadata (Kafka Streams writes some)
            metadata = None
        out[(tp.topic, tp.partition)] = Committed(offset, metadata)
    return out
