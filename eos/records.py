"""What processing functions see and return."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Record", "Output"]


@dataclass(slots=True)
class Record:
    """One input record, deserialized. `timestamp` is in milliseconds since the epoch."""

    key: Any
    value: Any
    topic: str
    partition: int
    offset: int
    timestamp: int
    headers: list[tuple[str, bytes]] | None = None


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
