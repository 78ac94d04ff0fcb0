"""Keyed aggregations on state stores: count, sum, reduce and aggregate with an initializer.

Records are grouped by their key as it is on the input topic: a task holds the aggregates of the keys of
its partition. Tombstones (null values) are ignored, as Kafka Streams' aggregations ignore them; records
without a key are bad records (dead-letter topic). To aggregate by another key, first write the records
re-keyed to a topic (a stateless sub-topology) and aggregate that topic. Every update is emitted (the
output is the aggregate's changelog stream, like a KTable's), so the committed output holds each key's
running value in order; with a record cache (`cache_max_bytes`, `eos.cache`), the latest one per key per
batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from eos.cache import updates
from eos.processor import Processor, ProcessorContext
from eos.records import Record

__all__ = ["AggregateProcessor", "Aggregation", "counter", "summer", "reducer"]


class AggregateProcessor(Processor):
    def __init__(self, store: str, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any]) -> None:
        self.store_name = store
        self.initializer = initializer
        self.aggregator = aggregator

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.store = context.store(self.store_name)
        self.emit = updates(context, self.store)

    def process(self, record: Record) -> None:
        if record.value is None:
            return  # a tombstone: ignored by aggregations, as in Kafka Streams
        if record.key is None:
            raise ValueError("records without a key cannot be aggregated by key")
        current = self.store.get_with_timestamp(record.key)
        if current is None:
            aggregate, timestamp = self.initializer(), record.timestamp
        else:
            aggregate, timestamp = current[0], max(current[1], record.timestamp)
        updated = self.aggregator(record.key, record.value, aggregate)
        self.store.put(record.key, updated, timestamp)
        self.emit(record.key, updated, timestamp)  # the largest timestamp aggregated


class Aggregation(NamedTuple):
    """An aggregation's functions: start, fold a value in, and merge two aggregates (session windows)."""

    initializer: Callable[[], Any]
    aggregator: Callable[[Any, Any, Any], Any]
    merger: Callable[[Any, Any, Any], Any]


def counter() -> Aggregation:
    return Aggregation(lambda: 0, lambda key, value, count: count + 1, lambda key, a, b: a + b)


def summer(value: Callable[[Any], Any]) -> Aggregation:
    return Aggregation(lambda: 0, lambda key, v, total: total + value(v), lambda key, a, b: a + b)


_FIRST = object()


def reducer(reduce: Callable[[Any, Any], Any]) -> Aggregation:
    """The first value of a key is its aggregate; later values are folded in with `reduce(aggregate, value)`."""
    return Aggregation(lambda: _FIRST, lambda key, v, agg: v if agg is _FIRST else reduce(agg, v),
                       lambda key, a, b: b if a is _FIRST else a if b is _FIRST else reduce(a, b))
