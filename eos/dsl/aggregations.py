"""Keyed aggregations: count, sum, reduce and aggregate, by the record's key or by `group_by` (re-keyed
through a repartition topic first), over all time or in windows (`windows=`, see `eos.windows`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

from eos.dsl.base import SerdeSpec
from eos.dsl.streams import StreamMethods
from eos.graph.operators import require_functions
from eos.operators.aggregate import AggregateProcessor, Aggregation, counter, reducer, summer
from eos.operators.windows import (
    Emit,
    LatePolicy,
    SessionWindowAggregate,
    SlidingWindowAggregate,
    TimeWindowAggregate,
)
from eos.processor import Processor
from eos.records import Record
from eos.serde import serde_for
from eos.time import TimestampSpec, field, timestamp_extractor
from eos.topology import SubTopology
from eos.windows import HoppingWindows, SessionWindows, SlidingWindows, WindowedSerde, Windowing, WindowSpec, ms
from recovery import StoreSpec

__all__ = ["AggregationMethods", "GroupBy", "AggregationStep"]

GroupBy = Callable[[Record], Any]


@dataclass(frozen=True)
class AggregationStep:
    """An aggregation's processor factory and stores; `key_serde` of its results (windowed keys for windows)."""

    factory: Callable[[], Processor]
    stores: tuple[StoreSpec, ...]
    windowing: Windowing | None
    key_serde: Any
    kind: str


class AggregationMethods(StreamMethods):
    def aggregate(self, input: str | Sequence[str], output: str | None, *, name: str,
                  initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any],
                  key_serde: SerdeSpec = "string", value_serde: SerdeSpec = "json",
                  aggregate_serde: SerdeSpec = "json", persistent: bool = True, group_by: GroupBy | None = None,
                  timestamp: TimestampSpec = None, windows: WindowSpec | None = None, emit: Emit = "update",
                  late_records: LatePolicy = "drop", merger: Callable[[Any, Any, Any], Any] | None = None,
                  windowed_key: str = "json", retention: int | timedelta | None = None) -> SubTopology:
        """Per-key aggregate: `aggregator(key, value, aggregate) -> new aggregate`, starting from `initializer()`,
        kept in the store `<name>-store`. Tombstones are ignored; a record without a key is a bad record.

        Without `windows`, every update is forwarded to `output`, with the largest timestamp of the records
        it aggregates. With `windows` (TumblingWindows, HoppingWindows, SlidingWindows, SessionWindows), one
        aggregate per key and window, keyed `Windowed(key, start, end)` (serialized as `windowed_key`: "json"
        or "binary"); `emit="update"` forwards every change, `emit="final"` each window's result once, when
        it closes; late records are dropped and counted, or sent to the dead-letter topic
        (`late_records="dead_letter"`). Session windows also need `merger(key, aggregate1, aggregate2)`.
        `retention` keeps windows longer than they stay open (for queries).

        `group_by(record) -> key` aggregates by another key: records go through the repartition topic
        `<application_id>-<name>-repartition` first (the sub-topology `<name>.repartition` writes it), so
        each new key is aggregated in one task."""
        if group_by is not None:
            input = self.repartition(input, name=name, key=group_by, key_serde=key_serde, value_serde=value_serde,
                                     output_key_serde=key_serde, timestamp=timestamp,
                                     subtopology=f"{name}.repartition")
            timestamp = None  # the repartitioned records carry the extracted timestamps
        step = self.aggregation_step(name, initializer, aggregator, key_serde, value_serde, aggregate_serde, persistent,
                                 windows, emit, late_records, merger, windowed_key, retention)
        return self._add(name, input, output, key_serde, value_serde, step.key_serde, aggregate_serde, (),
                         timestamp=timestamp, stores=step.stores, processor_factory=step.factory,
                         windowing=step.windowing)

    def aggregation_step(self, name: str, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any],
                     key_serde: SerdeSpec, value_serde: SerdeSpec, aggregate_serde: SerdeSpec, persistent: bool,
                     windows: WindowSpec | None, emit: Emit, late_records: LatePolicy,
                     merger: Callable[[Any, Any, Any], Any] | None, windowed_key: str,
                     retention: int | timedelta | None,
                     serdes_from: tuple[str | None, str | None] | None = None) -> AggregationStep:
        """The processor and stores of an aggregation named `name` (one engine for both APIs). `serdes_from`: the
        parameters that set its store's key and aggregate serdes (`StoreSpec.serdes_from`; by default this API's)."""
        serdes_from = serdes_from or (f"key_serde= of {name!r}", f"aggregate_serde= of {name!r}")
        require_functions(name, initializer=initializer, aggregator=aggregator,
                          **({"merger": merger} if merger is not None else {}), takes={
                              "initializer": (), "aggregator": ("key", "value", "aggregate"),
                              "merger": ("key", "aggregate1", "aggregate2")})
        if emit not in ("update", "final"):
            raise ValueError(f"{name}: emit must be 'update' or 'final', got {emit!r}")
        if windows is None and emit == "final":
            raise ValueError(f"{name}: emit='final' needs windows= (a result per window when it closes); an "
                             "aggregation over all time has no final result: leave emit out")
        if windows is not None and not isinstance(windows, (HoppingWindows, SlidingWindows, SessionWindows)):
            raise TypeError(f"{name}: windows must be TumblingWindows, HoppingWindows, SlidingWindows or "
                            f"SessionWindows from eos.windows, e.g. windows=TumblingWindows(60_000); got "
                            f"{windows!r}")
        ks, agg_serde = serde_for(key_serde), serde_for(aggregate_serde)
        if windows is None:
            if retention is not None:
                raise ValueError(f"{name}: retention is how long windows are kept; an aggregation without windows "
                                 "keeps each key until it is deleted: leave retention out")
            spec = StoreSpec(f"{name}-store", ks, agg_serde, persistent, timestamped=True, serdes_from=serdes_from)
            return AggregationStep(partial(AggregateProcessor, spec.name, initializer, aggregator), (spec,), None, ks,
                                   "aggregation")
        if late_records not in ("drop", "dead_letter"):
            raise ValueError(f"late_records must be 'drop' or 'dead_letter', got {late_records!r}")
        if retention is not None and ms(retention) < windows.retention_ms:
            raise ValueError(f"{name}: retention must be at least {windows.retention_ms} ms, as long as a window "
                             f"stays open (its size and grace), got {ms(retention)}; leave it out to keep windows "
                             "that long, or give more to query closed windows longer")
        keep = max(ms(retention or 0), windows.retention_ms)
        factory, stores = self._windowed(name, windows, keep, ks, serde_for(value_serde), agg_serde, persistent,
                                         Aggregation(initializer, aggregator, merger or _no_merger), emit,
                                         late_records, serdes_from)
        windowing = Windowing(windows, emit, late_records, initializer, aggregator, merger, f"{name}-store")
        return AggregationStep(factory, stores, windowing, WindowedSerde(ks, windowed_key),
                               f"windowed aggregation ({type(windows).__name__}, emit={emit})")

    def _windowed(self, name: str, windows: WindowSpec, retention: int, key_serde: Any, value_serde: Any,
                  aggregate_serde: Any, persistent: bool, functions: Aggregation, emit: Emit,
                  late: LatePolicy, serdes_from: tuple[str | None, str | None],
                  ) -> tuple[Callable[[], Processor], tuple[StoreSpec, ...]]:
        init, agg = functions.initializer, functions.aggregator
        if isinstance(windows, SessionWindows):
            if functions.merger is _no_merger:
                raise ValueError(f"{name}: session windows need merger=fn(key, aggregate1, aggregate2) to merge "
                                 "the sessions a record joins")
            spec = StoreSpec(f"{name}-store", key_serde, aggregate_serde, persistent, timestamped=True,
                             kind="session", retention_ms=retention, serdes_from=serdes_from)
            return partial(SessionWindowAggregate, spec.name, windows, init, agg, functions.merger, emit, late,
                           retention), (spec,)
        spec = StoreSpec(f"{name}-store", key_serde, aggregate_serde, persistent, timestamped=True, kind="window",
                         retention_ms=retention, serdes_from=serdes_from)
        if isinstance(windows, SlidingWindows):
            buffer = StoreSpec(f"{name}-records", key_serde, value_serde, persistent, timestamped=True,
                               kind="record_buffer", retention_ms=retention)
            return partial(SlidingWindowAggregate, spec.name, buffer.name, windows, init, agg, emit, late,
                           retention), (spec, buffer)
        if not isinstance(windows, HoppingWindows):
            raise TypeError(f"windows must be TumblingWindows, HoppingWindows, SlidingWindows or SessionWindows, "
                            f"got {type(windows).__name__}")
        return partial(TimeWindowAggregate, spec.name, windows, init, agg, emit, late, retention), (spec,)

    def count(self, input: str | Sequence[str], output: str | None, *, name: str, **kwargs: Any) -> SubTopology:
        """Records per key (as a long). Values are not deserialized (`value_serde` defaults to bytes), so any
        value counts; tombstones do not, as in Kafka Streams. Where event time is a field of the value
        (`timestamp="field:<path>"`, here or the application's), they are read as JSON unless told otherwise."""
        init, agg, merge = counter()
        stamp = kwargs.get("timestamp")
        extract = timestamp_extractor(stamp) if stamp is not None else self.default_timestamp
        values = "json" if isinstance(extract, field) else "bytes"
        return self.aggregate(input, output, name=name, initializer=init, aggregator=agg,
                              **{"aggregate_serde": "long", "value_serde": values, "merger": merge, **kwargs})

    def sum(self, input: str | Sequence[str], output: str | None, *, name: str,
            value: Callable[[Any], Any] = lambda v: v, **kwargs: Any) -> SubTopology:
        """Sum of `value(record value)` per key."""
        init, agg, merge = summer(value)
        return self.aggregate(input, output, name=name, initializer=init, aggregator=agg,
                              **{"merger": merge, **kwargs})

    def reduce(self, input: str | Sequence[str], output: str | None, *, name: str,
               reducer_fn: Callable[[Any, Any], Any], **kwargs: Any) -> SubTopology:
        """Fold the values of a key with `reducer_fn(aggregate, value)`; the first value starts the aggregate."""
        init, agg, merge = reducer(reducer_fn)
        return self.aggregate(input, output, name=name, initializer=init, aggregator=agg,
                              **{"merger": merge, **kwargs})


def _no_merger(key: Any, a: Any, b: Any) -> Any:
    raise TypeError("no merger")
