"""At-least-once output (processing_guarantee="at_least_once"): an idempotent producer without transactions.

Same calls as `TransactionalProducer`, different guarantee: records are produced and flushed, and only then
are the input offsets committed, by the consumer, outside any transaction. A crash between the flush and
the offset commit replays the batch: outputs may be duplicated, never lost. Used for comparison
benchmarks and by jobs that accept duplicates; never the default.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from transactions.errors import DeliveryFailedError, classify
from transactions.producer import TxnState
from transactions.records import ProducerRecord, producer_token
from transactions.retry import DEFAULT_POLICY, RetryPolicy, call
from transactions.settings import producer_settings

__all__ = ["AtLeastOnceProducer"]


class AtLeastOnceProducer:
    commits: int
    token: str

    def __init__(self, bootstrap_servers: str, consumer: Consumer, *, overrides: Mapping[str, Any] | None = None,
                 policy: RetryPolicy = DEFAULT_POLICY) -> None:
        settings = producer_settings(bootstrap_servers, "unused", 60_000, overrides)
        for key in ("transactional.id", "transaction.timeout.ms"):
            settings.pop(key)
        self._errors: list[KafkaError] = []
        self.last_offsets: dict[tuple[str, int], int] = {}
        settings["on_delivery"] = self._on_delivery
        self._producer = Producer(settings)
        self._consumer = consumer
        self._offsets: list[TopicPartition] = []
        self._policy = policy
        self.token = producer_token()
        self.commits = 0
        self.state = TxnState.READY
        self.usable = True

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self._errors.append(err)
        else:
            self.last_offsets[(msg.topic(), msg.partition())] = msg.offset()

    def init(self, timeout: float = 60.0) -> None:
        pass

    def begin(self) -> None:
        self._errors.clear()
        self.last_offsets = {}
        self._offsets = []
        self.state = TxnState.IN_TRANSACTION

    def produce_all(self, records: Sequence[ProducerRecord], *, track: bool = False) -> int:
        """Every record's delivery is reported (`track` is implied): without a transaction, a failed delivery
        would otherwise go unnoticed."""
        size = 0
        for r in records:
            self.produce(r.topic, r.value, r.key, partition=r.partition, headers=r.headers, timestamp=r.timestamp)
            size += r.size
        return size

    def produce(self, topic: str, value: bytes | None, key: bytes | None = None, *, partition: int | None = None,
                headers: list[tuple[str, bytes]] | None = None, timestamp: int | None = None,
                track: bool = True) -> None:
        kwargs: dict[str, Any] = {"value": value, "key": key}
        if partition is not None:
            kwargs["partition"] = partition
        if headers:
            kwargs["headers"] = headers
        if timestamp:
            kwargs["timestamp"] = timestamp
        while True:
            try:
                self._producer.produce(topic, **kwargs)
                return
            except BufferError:
                self._producer.poll(0.05)
            except KafkaException as exc:
                raise classify(exc, f"produce to {topic}") from exc

    def send_offsets(self, offsets: list[TopicPartition], group_metadata: object, timeout: float = 30.0) -> None:
        """Keep the offsets for `commit`, once every record produced so far is delivered: from here to the
        commit, the batch's outputs are on the broker and its offsets are not (the window in which a crash
        duplicates output, which the chaos harness's at-least-once job relies on to be observable)."""
        self._deliver(timeout)
        self._offsets = list(offsets)

    def flush(self, timeout: float = 30.0) -> None:
        """Send what was produced and wait for its delivery; failures are raised by `send_offsets`."""
        self._producer.flush(timeout)

    def _deliver(self, timeout: float) -> None:
        remaining = self._producer.flush(timeout)
        if remaining or self._errors:
            raise DeliveryFailedError(f"{len(self._errors)} record(s) failed delivery, {remaining} still queued",
                                      self._errors[0] if self._errors else None)

    def commit(self, timeout: float = 60.0) -> float:
        """Flush and check every delivery, then commit the offsets with the consumer (outside a transaction)."""
        started = time.monotonic()
        self._deliver(timeout)
        if self._offsets:
            call("commit offsets", self._consumer.commit, offsets=self._offsets, asynchronous=False,
                 policy=self._policy)
        self.state = TxnState.READY
        self.commits += 1
        return time.monotonic() - started

    def abort(self, timeout: float = 60.0) -> None:
        """Nothing to abort: records already sent stay (that is what at-least-once means)."""
        self.state = TxnState.READY

    def close(self) -> None:
        self.usable = False
        self.state = TxnState.CLOSED
