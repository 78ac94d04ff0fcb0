"""Size limits of produced records: a record larger than its topic (or the producer) accepts is a bad
record, routed to the dead-letter topic like any other, never a transaction that fails on every retry.

The limit of a topic is the smaller of its `max.message.bytes` (read from the broker once per worker
process, again after the broker refused a record as too large) and the producer's `message.max.bytes`.
"""

from __future__ import annotations

from collections.abc import Callable

from eos.errors import OutputSerializationError
from transactions import Headers, KafkaAdmin

__all__ = ["RecordLimits", "OutputTooLargeError", "record_size", "RECORD_OVERHEAD"]

#: Bytes a record takes in a batch beyond its key, value and headers (lengths, timestamp and offset
#: deltas, attributes) plus the batch header, rounded up.
RECORD_OVERHEAD = 128
_PRODUCER_DEFAULT = 1_000_000  # librdkafka's message.max.bytes


class OutputTooLargeError(OutputSerializationError):
    """An output is larger than its topic accepts (blamed on the input record that produced it)."""


def record_size(key: bytes | None, value: bytes | None, headers: Headers | None) -> int:
    size = (len(key) if key else 0) + (len(value) if value else 0) + RECORD_OVERHEAD
    for name, data in headers or ():
        size += len(name) + (len(data) if data else 0)
    return size


class RecordLimits:
    """Bytes a record may have, per topic, for one cluster and producer configuration."""

    def __init__(self, admin: Callable[[], KafkaAdmin], producer_max: int | None) -> None:
        self._admin = admin
        self._producer_max = producer_max or _PRODUCER_DEFAULT
        self._limits: dict[str, int] = {}

    def __call__(self, topic: str) -> int:
        limit = self._limits.get(topic)
        if limit is None:
            limit = self._limits[topic] = self._read(topic)
        return limit

    def forget(self) -> None:
        """Read the limits again (a broker refused a record: a topic's setting may have changed)."""
        self._limits.clear()

    def _read(self, topic: str) -> int:
        try:
            topic_max = int(self._admin().topic_config(topic).get("max.message.bytes", self._producer_max))
        except Exception:  # the topic does not exist (yet) or the broker is away: the producer's limit
            topic_max = self._producer_max
        return min(topic_max, self._producer_max)
