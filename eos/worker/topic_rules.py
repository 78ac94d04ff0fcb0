"""What a topic accepts: an output the broker would refuse is a bad record, routed to the dead-letter
topic like any other, never a transaction that fails on every retry.

A broker refuses a record that is larger than the topic's `max.message.bytes` (or the producer's
`message.max.bytes`), a record without a key on a compacted topic, and, on a `CreateTime` topic, a
record whose timestamp is more than `message.timestamp.before.max.ms` behind or
`message.timestamp.after.max.ms` ahead of the broker's clock (an event-time extractor that returns a
date far in the future makes such records). The rules of a topic are read from the broker once per
worker process, again after the broker refused a record (a topic's setting may have changed).

In a record's scope a broken rule raises `OutputRejectedError` (the input record goes to the dead-letter
topic). A punctuation has no input record to blame: its output keeps the rule by taking the producer's
clock as its timestamp when its own is out of range (logged), and fails the batch when it is too large
or has no key for a compacted topic, with the reason in the error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import eos.clock
from eos.clock import wall_time as _clock
from eos.errors import OutputSerializationError
from transactions import Headers, KafkaAdmin

__all__ = ["TopicRules", "TopicRule", "OutputRejectedError", "record_size", "RECORD_OVERHEAD"]

#: Bytes a record takes in a batch beyond its key, value and headers (lengths, timestamp and offset
#: deltas, attributes) plus the batch header, rounded up.
RECORD_OVERHEAD = 128
_PRODUCER_DEFAULT = 1_000_000  # librdkafka's message.max.bytes
_NO_LIMIT = 2**63 - 1  # Kafka's Long.MAX_VALUE: the timestamp bound is off


class OutputRejectedError(OutputSerializationError):
    """An output its topic would refuse (blamed on the input record that produced it)."""


def record_size(key: bytes | None, value: bytes | None, headers: Headers | None) -> int:
    size = (len(key) if key else 0) + (len(value) if value else 0) + RECORD_OVERHEAD
    for name, data in headers or ():
        size += len(name) + (len(data) if data else 0)
    return size


@dataclass(frozen=True)
class TopicRule:
    """What one topic accepts. `before_ms`/`after_ms` are None when the topic takes any timestamp
    (LogAppendTime, or bounds left at Long.MAX_VALUE)."""

    topic: str
    max_bytes: int
    needs_key: bool = False
    before_ms: int | None = None
    after_ms: int | None = None
    #: [clock source, ms]: a time that source's clock had reached at an earlier check. A timestamp at most
    #: after_ms past it is at most after_ms past now, since the clock has only moved on since: with no lower
    #: bound to check, such a record needs no reading of the clock (one per output was ~2 % of a worker's CPU).
    #: A system clock set back meanwhile can let a record through that the broker then refuses: its batch runs
    #: again with the rules read afresh, as after any refusal (`eos.worker.entry`).
    _reached: list[Any] = field(default_factory=lambda: [None, 0], init=False, repr=False, compare=False)

    def violation(self, key: bytes | None, value: bytes | None, headers: Headers | None,
                  timestamp: int | None, now_ms: Callable[[], int] | None = None) -> str | None:
        """Why the topic would refuse this record, or None."""
        if (len(value) if value else 0) + (len(key) if key else 0) + RECORD_OVERHEAD > self.max_bytes and (
                (size := record_size(key, value, headers)) > self.max_bytes):
            return (f"is {size:,} bytes, above topic {self.topic}'s limit of {self.max_bytes:,} bytes (its "
                    "max.message.bytes, or the producer's message.max.bytes if smaller)")
        if key is None and self.needs_key:
            return f"has no key, and topic {self.topic} is compacted (cleanup.policy=compact needs a key)"
        if timestamp is None or timestamp < 0 or (self.before_ms is None and self.after_ms is None):
            return None
        if now_ms is None:
            reached = self._reached
            if (self.before_ms is None and reached[0] is eos.clock._source
                    and timestamp <= reached[1] + self.after_ms):
                return None
            now = int(_clock() * 1000)
            reached[0], reached[1] = eos.clock._source, now
        else:
            now = now_ms()
        if self.after_ms is not None and timestamp > now + self.after_ms:
            return (f"has timestamp {timestamp}, {timestamp - now:,} ms ahead of now; topic {self.topic} takes "
                    f"at most {self.after_ms:,} ms ahead (message.timestamp.after.max.ms)")
        if self.before_ms is not None and timestamp < now - self.before_ms:
            return (f"has timestamp {timestamp}, {now - timestamp:,} ms behind now; topic {self.topic} takes at "
                    f"most {self.before_ms:,} ms behind (message.timestamp.before.max.ms)")
        return None


class TopicRules:
    """The rules of each topic, for one cluster and producer configuration."""

    def __init__(self, admin: Callable[[], KafkaAdmin], producer_max: int | None) -> None:
        self._admin = admin
        self._producer_max = producer_max or _PRODUCER_DEFAULT
        self._rules: dict[str, TopicRule] = {}
        self._partitions: dict[str, int] = {}

    def partitions(self, topic: str) -> int:
        """How many partitions `topic` has (a sink's partitioner chooses among them)."""
        count = self._partitions.get(topic)
        if count is None:
            found = self._admin().partition_counts([topic])[topic]
            if found is None:
                raise ValueError(f"topic {topic!r} does not exist: a partitioner cannot choose its partition")
            count = self._partitions[topic] = found
        return count

    def __call__(self, topic: str) -> TopicRule:
        rule = self._rules.get(topic)
        if rule is None:
            rule = self._rules[topic] = self._read(topic)
        return rule

    def forget(self) -> None:
        """Read the rules again (a broker refused a record: a topic's setting may have changed)."""
        self._rules.clear()
        self._partitions.clear()

    def _read(self, topic: str) -> TopicRule:
        try:
            config = self._admin().topic_config(topic)
        except Exception:  # the topic does not exist (yet) or the broker is away: the producer's limit only
            return TopicRule(topic, self._producer_max)
        max_bytes = min(int(config.get("max.message.bytes", self._producer_max)), self._producer_max)
        needs_key = "compact" in config.get("cleanup.policy", "")
        if config.get("message.timestamp.type", "CreateTime") != "CreateTime":
            return TopicRule(topic, max_bytes, needs_key)
        either = config.get("message.timestamp.difference.max.ms")  # brokers before 3.6: one bound for both
        return TopicRule(topic, max_bytes, needs_key, _bound(config.get("message.timestamp.before.max.ms", either)),
                         _bound(config.get("message.timestamp.after.max.ms", either)))


def _bound(value: str | None) -> int | None:
    if value is None:
        return None
    ms = int(value)
    return None if ms >= _NO_LIMIT else ms
