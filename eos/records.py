"""What processing functions see and return."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Record", "Output", "FORWARDABLE", "forwarded"]


@dataclass(slots=True)
class Record:
    """One input record, deserialized. `timestamp` is in milliseconds since the epoch. A processor may forward
    it, or a copy with another key, value, timestamp or headers, as Kafka Streams' `forward(record.withValue(v))`:
    `context.forward(record.with_value(v))`."""

    key: Any
    value: Any
    topic: str
    partition: int
    offset: int
    timestamp: int
    headers: list[tuple[str, bytes]] | None = None

    def with_key(self, key: Any) -> Record:
        return Record(key, self.value, self.topic, self.partition, self.offset, self.timestamp, self.headers)

    def with_value(self, value: Any) -> Record:
        return Record(self.key, value, self.topic, self.partition, self.offset, self.timestamp, self.headers)

    def with_timestamp(self, timestamp: int) -> Record:
        return Record(self.key, self.value, self.topic, self.partition, self.offset, timestamp, self.headers)

    def with_headers(self, headers: list[tuple[str, bytes]] | None) -> Record:
        return Record(self.key, self.value, self.topic, self.partition, self.offset, self.timestamp, headers)


@dataclass(slots=True)
class Output:
    """A record to produce. `topic=None` means the sub-topology's output topic; `partition=None` means
    the partitioner (murmur2 of the key, like the Java client). `timestamp=None` keeps the input's.
    `headers=None` keeps the input record's headers."""

    key: Any = None
    value: Any = None
    topic: str | None = None
    partition: int | None = None
    headers: list[tuple[str, bytes]] | None = None
    timestamp: int | None = None


#: what `forward(x)` takes whole, in place of a key and a value
FORWARDABLE = (Output, Record)


def forwarded(given: Output | Record, topic: str | None, partition: int | None,
              headers: list[tuple[str, bytes]] | None, timestamp: int | None,
              ) -> tuple[Any, Any, str | None, int | None, list[tuple[str, bytes]] | None, int | None]:
    """(key, value, topic, partition, headers, timestamp) of a `forward()` given an `Output` (all its own) or a
    `Record` (its key, value, headers and timestamp; topic and partition as the call gave them)."""
    if type(given) is Output:
        return given.key, given.value, given.topic, given.partition, given.headers, given.timestamp
    return given.key, given.value, topic, partition, given.headers, given.timestamp
