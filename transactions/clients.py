"""The Kafka clients the framework builds, all in one place (no other layer constructs a client).

* `input_consumer`: a task's read_committed consumer of its application's group (assigned, never
  subscribed: tasks are placed by the planner, not by a group rebalance);
* `scan_consumer`: a throwaway reader with its own random group, for audits and tools;
* `plain_producer` / `produce_pairs`: an idempotent, non-transactional producer for loading input
  (demos, load generators, command-line tools).

`Message` is the type of a record read from a topic (what `read_ranges` yields); `TopicPartition` is
re-exported for the layers above.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Literal, Protocol, cast

from confluent_kafka import Consumer, Producer, TopicPartition

from transactions.settings import consumer_settings

__all__ = ["input_consumer", "scan_consumer", "plain_producer", "produce_pairs", "ProduceFailedError", "Message",
           "TopicPartition", "Consumer", "Isolation"]

Isolation = Literal["read_committed", "read_uncommitted"]


class RangeConsumer(Consumer):
    """A consumer that remembers which topics' metadata it has fetched (`read_ranges` fetches a topic's
    before its first assignment: see `transactions.reader`)."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.known_topics: set[str] = set()


class Message(Protocol):
    """A record read from a partition (no error): confluent-kafka's `Message` as the framework reads it.
    The client's own type allows None for topic, partition and offset, which a consumed record always has."""

    def topic(self) -> str: ...
    def partition(self) -> int: ...
    def offset(self) -> int: ...
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...
    def headers(self) -> list[tuple[str, bytes]] | None: ...
    def timestamp(self) -> tuple[int, int]: ...


def input_consumer(bootstrap_servers: str, group_id: str, overrides: Mapping[str, Any] | None = None, *,
                   out_of_range: Literal["error", "earliest"] = "error") -> Consumer:
    """A read_committed consumer of `group_id` with the framework's settings (see `consumer_settings`).
    `out_of_range="error"`: reading at an offset the partition no longer has raises
    `OffsetOutOfRangeError` instead of silently jumping (input ranges are planned); "earliest" suits
    changelog replays, which check their range themselves."""
    return RangeConsumer({**consumer_settings(bootstrap_servers, group_id, overrides),
                          "auto.offset.reset": out_of_range})


def scan_consumer(bootstrap_servers: str, isolation: Isolation = "read_committed") -> Consumer:
    """A consumer with a fresh random group that never commits: reads what is in a topic right now (of an
    in-memory cluster, where the address names one: `transactions.memory.MemoryCluster.bootstrap_servers`)."""
    from transactions.memory import MemoryConsumer, named_cluster  # (it imports this package's admin)

    cluster = named_cluster(bootstrap_servers)
    if cluster is not None:
        if isolation != "read_committed":
            raise ValueError(f"an in-memory cluster is read with read_committed only, not {isolation}")
        return cast(Consumer, MemoryConsumer(cluster, f"eos-scan-{uuid.uuid4().hex}"))
    return RangeConsumer({"bootstrap.servers": bootstrap_servers, "group.id": f"eos-scan-{uuid.uuid4().hex}",
                          "isolation.level": isolation, "enable.auto.commit": False, "enable.partition.eof": True,
                          "auto.offset.reset": "earliest", "fetch.wait.max.ms": 50, "queued.min.messages": 200_000})


def plain_producer(bootstrap_servers: str, **overrides: Any) -> Producer:
    """An idempotent producer without transactions (acks=all), for loading input. Keys are partitioned as
    the Java client and the framework's own producers partition them (murmur2), so a topic loaded here is
    co-partitioned with repartition topics and with the topics a foreign-key join writes."""
    return Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True, "acks": "all",
                     "linger.ms": 20, "partitioner": "murmur2_random", **overrides})


class ProduceFailedError(RuntimeError):
    """Records `produce_pairs` wrote that the broker refused (`errors`, one per record), or that a flush left
    undelivered; the rest of the `sent` were written."""

    def __init__(self, topic: str, sent: int, errors: list[Any]) -> None:
        self.topic, self.sent, self.errors = topic, sent, errors
        why = f"{len(errors)} of {sent} records to {topic} were refused ({errors[0]})" if errors else \
            f"the records to {topic} were not all delivered in time (flush timed out)"
        super().__init__(f"{why}; the others were written" if errors and len(errors) < sent else why)


def produce_pairs(bootstrap_servers: str, topic: str,
                  records: Iterable[tuple[bytes | None, bytes | None] | tuple[bytes | None, bytes | None, int | None]],
                  *, timeout: float = 120.0, headers: list[tuple[str, str | bytes | None]] | None = None) -> int:
    """Produce (key, value) or (key, value, timestamp ms) records to `topic`, each with `headers`, and wait
    until every one is acknowledged; returns the count. Raises `ProduceFailedError` if any record was not
    delivered."""
    producer = plain_producer(bootstrap_servers)
    failed: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err)

    n = 0
    for key, value, *stamp in records:
        timestamp = stamp[0] if stamp and stamp[0] is not None else 0  # 0: the producer's clock
        while True:
            try:
                producer.produce(topic, value=value, key=key, on_delivery=delivered, timestamp=timestamp,
                                 headers=headers)
                break
            except BufferError:
                producer.poll(0.1)
        n += 1
        if n % 10_000 == 0:
            producer.poll(0)
    if producer.flush(timeout) or failed:
        raise ProduceFailedError(topic, n, failed)
    return n
