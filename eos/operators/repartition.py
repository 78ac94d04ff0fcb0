"""Re-keying: forward every record under a new key (or its own) to a repartition topic, where the
partitioner (murmur2 of the key, as the Java client and Kafka Streams) puts each key in one partition, so
that the sub-topology reading it sees all the records of a key in one task."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from eos.processor import Processor
from eos.records import Record

__all__ = ["RepartitionProcessor"]


class RepartitionProcessor(Processor):
    def __init__(self, key: Callable[[Record], Any] | None) -> None:
        self.key = key

    def process(self, record: Record) -> None:
        new_key = record.key if self.key is None else self.key(record)
        if new_key is None:
            raise ValueError("the new key is None: a record without a key cannot be grouped")
        self.context.forward(new_key, record.value)
