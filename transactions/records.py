"""What the framework hands to a producer, and the one interface both producers offer.

`ProducerRecord` is the single "record to produce" type of the framework (outputs, changelog records,
dead letters, repartition records). `OutputProducer` is what a task's batch needs from a producer:
the transactional one (`TransactionalProducer`) and the at-least-once one (`AtLeastOnceProducer`)
both implement it, so the batch protocol is written once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import NamedTuple, Protocol

from confluent_kafka import TopicPartition

__all__ = ["ProducerRecord", "OutputProducer", "Headers", "producer_token", "issued_after"]

Headers = list[tuple[str, bytes]]


def producer_token() -> str:
    """A new producer instance's token: the wall-clock microseconds it was made at (hexadecimal), then random
    digits. Ordered by issue (`issued_after`), so that a worker can tell a producer of the same transactional
    id made after its own (which fenced it) from an earlier one."""
    return f"{time.time_ns() // 1000:014x}.{os.urandom(3).hex()}"


def issued_after(token: str | None, other: str) -> bool:
    """Whether `token` was issued after `other`. Tokens not made by `producer_token` (none, or another
    client's) are issued after nothing. Clocks of different hosts may disagree: this only ever saves a
    doomed attempt's work; what fences a producer is its epoch."""
    if not token or token == other:
        return False
    issued, _, _ = token.partition(".")
    before, _, _ = other.partition(".")
    try:
        return int(issued, 16) > int(before, 16) if len(issued) == 14 and len(before) == 14 else False
    except ValueError:
        return False


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
    """The producer calls of one batch, in protocol order: begin, produce... (flush), send_offsets, commit.

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

    def flush(self, timeout: float = 30.0) -> None: ...

    def send_offsets(self, offsets: list[TopicPartition], group_metadata: object, timeout: float = 30.0) -> None: ...

    def commit(self, timeout: float = 60.0) -> float: ...

    def abort(self, timeout: float = 60.0) -> None: ...

    def close(self) -> None: ...
