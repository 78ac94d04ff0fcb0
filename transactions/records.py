"""What the framework hands to a producer, and the one interface both producers offer.

`ProducerRecord` is the single "record to produce" type of the framework (outputs, changelog records,
dead letters, repartition records). `OutputProducer` is what a task's batch needs from a producer:
the transactional one (`TransactionalProducer`) and the at-least-once one (`AtLeastOnceProducer`)
both implement it, so the batch protocol is written once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

from confluent_kafka import TopicPartition

__all__ = ["ProducerRecord", "OutputProducer", "Headers"]

Headers = list[tuple[str, bytes]]


class ProducerRecord(NamedTuple):
    """A serialized record to produce. `partition=None`: the partitioner (murmur2 of the key, as the Java
    client); `timestamp=None`: the producer's current time; `headers` may be empty."""

    topic: str
    partition: int | None
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp: int | None

    @property
    def size(self) -> int:
        """Key and value bytes (what the batch reports as bytes out)."""
        return (len(self.key) if self.key else 0) + (len(self.value) if self.value else 0)


class OutputProducer(Protocol):
    """The producer calls of one batch, in protocol order: begin, produce..., send_offsets, commit.

    `token` identifies the instance (recorded in offset-commit metadata); `commits` counts its commits;
    `last_offsets` holds the offset of the last tracked record delivered to each partition in the current
    transaction (stores record the changelog offset they reflect); `usable` says whether the instance can
    run another batch."""

    token: str
    commits: int
    last_offsets: dict[tuple[str, int], int]

    @property
    def usable(self) -> bool: ...

    def init(self, timeout: float = 60.0) -> None: ...

    def begin(self) -> None: ...

    def produce(self, topic: str, value: bytes | None, key: bytes | None = None, *, partition: int | None = None,
                headers: Headers | None = None, timestamp: int | None = None, track: bool = True) -> None: ...

    def produce_all(self, records: Sequence[ProducerRecord], *, track: bool = False) -> int: ...

    def send_offsets(self, offsets: list[TopicPartition], group_metadata: object, timeout: float = 30.0) -> None: ...

    def commit(self, timeout: float = 60.0) -> float: ...

    def abort(self, timeout: float = 60.0) -> None: ...

    def close(self) -> None: ...
