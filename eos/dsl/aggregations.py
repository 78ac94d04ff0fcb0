"""Keyed aggregations: count, sum, reduce and aggregate, by the record's key or by `group_by` (re-keyed
through a repartition topic first)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from eos.dsl.base import SerdeSpec
from eos.dsl.streams import StreamMethods
from eos.operators.aggregate import AggregateProcessor, counter, reducer, summer
from eos.records import Record
from eos.serde import serde_for
from eos.time import TimestampSpec
from eos.topology import SubTopology
from recovery import StoreSpec

__all__ = ["AggregationMethods", "GroupBy"]

GroupBy = Callable[[Record], Any]


class AggregationMethods(StreamMethods):
    def aggregate(self, input: str | Sequence[str], output: str | None, *, name: str,
                  initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any],
                  key_serde: SerdeSpec = "string", value_serde: SerdeSpec = "json",
                  aggregate_serde: SerdeSpec = "json", persistent: bool = True, group_by: GroupBy | None = None,
                  timestamp: TimestampSpec = None) -> SubTopology:
        """Per-key aggregate: `aggregator(key, value, aggregate) -> new aggregate`, starting from `initializer()`.
        The store `<name>-store` holds the aggregates; every update is forwarded to `output`, with the
        largest timestamp of the records it aggregates. `group_by(record) -> key` aggregates by another key:
        records go through the repartition topic `<application_id>-<name>-repartition` first (the
        sub-topology `<name>.repartition` writes it), so each new key is aggregated in one task."""
        if group_by is not None:
            input = self.repartition(input, name=name, key=group_by, key_serde=key_serde, value_serde=value_serde,
                                     output_key_serde=key_serde, timestamp=timestamp,
                                     subtopology=f"{name}.repartition")
            timestamp = None  # the repartitioned records carry the extracted timestamps
        spec = StoreSpec(f"{name}-store", serde_for(key_serde), serde_for(aggregate_serde), persistent,
                         timestamped=True)
        factory = partial(AggregateProcessor, spec.name, initializer, aggregator)
        return self._add(name, input, output, key_serde, value_serde, None, aggregate_serde, (), timestamp=timestamp,
                         processor_factory=factory, stores=(spec,))

    def count(self, input: str | Sequence[str], output: str | None, *, name: str, **kwargs: Any) -> SubTopology:
        """Records per key (as a long). Values are not deserialized (`value_serde` defaults to bytes), so any
        value counts; tombstones do not, as in Kafka Streams."""
        init, agg = counter()
        return self.aggregate(input, output, name=name, initializer=init, aggregator=agg,
                              **{"aggregate_serde": "long", "value_serde": "bytes", **kwargs})

    def sum(self, input: str | Sequence[str], output: str | None, *, name: str,
            value: Callable[[Any], Any] = lambda v: v, **kwargs: Any) -> SubTopology:
        """Sum of `value(record value)` per key."""
        init, agg = summer(value)
        return self.aggregate(input, output, name=name, initializer=init, aggregator=agg, **kwargs)

    def reduce(self, input: str | Sequence[str], output: str | None, *, name: str,
               reducer_fn: Callable[[Any, Any], Any], **kwargs: Any) -> SubTopology:
        """Fold the values of a key with `reducer_fn(aggregate, value)`; the first value starts the aggregate."""
        init, agg = reducer(reducer_fn)
        return self.aggregate(input, output, name=name, initializer=init, aggregator=agg, **kwargs)
