"""Grouped and windowed streams and the tables aggregations make (Kafka Streams' `KGroupedStream`,
`TimeWindowedKStream`/`SessionWindowedKStream` and the `KTable` of an aggregation), over the same
aggregation processors and stores as `app.aggregate`."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from eos.dsl.fluent import Stream
from eos.dsl.tables import Table
from eos.graph import ProcessorNode
from eos.operators.aggregate import counter, reducer, summer
from eos.operators.windows import Emit, LatePolicy
from eos.serde import Serde, serde_for
from eos.windows import HoppingWindows, SessionWindows, SlidingWindows, WindowSpec

__all__ = ["GroupedStream", "WindowedStream"]


class GroupedStream:
    """`stream.group_by_key()` / `group_by(fn)`: aggregations over all time, or `window(...)` first."""

    def __init__(self, stream: Stream, key_serde: Serde, value_serde: Serde) -> None:
        self.stream, self.key_serde, self.value_serde = stream, key_serde, value_serde

    def window(self, windows: WindowSpec, *, emit: Emit = "update", late_records: LatePolicy = "drop",
               retention: int | timedelta | None = None, windowed_key: str = "json") -> WindowedStream:
        """Aggregate per key and window (`eos.windows`: TumblingWindows, HoppingWindows, SlidingWindows,
        SessionWindows, each with its grace); `emit="final"`: each window's result once, when it closes;
        late records dropped and counted, or dead-lettered (`late_records="dead_letter"`)."""
        if not isinstance(windows, HoppingWindows | SlidingWindows | SessionWindows):
            raise TypeError("window() takes TumblingWindows, HoppingWindows, SlidingWindows or SessionWindows from "
                            f"eos.windows, e.g. window(TumblingWindows(60_000)); got {windows!r}")
        return WindowedStream(self, windows, emit, late_records, retention, windowed_key)

    def count(self, *, name: str | None = None, persistent: bool = True) -> Table:
        """Records per key (a long); tombstones are not counted."""
        init, agg, merge = counter()
        return self._aggregate("count", name, init, agg, merge, "long", persistent)

    def sum(self, value: Callable[[Any], Any] = lambda v: v, *, name: str | None = None,
            persistent: bool = True) -> Table:
        """Sum of `value(record value)` per key."""
        init, agg, merge = summer(value)
        return self._aggregate("sum", name, init, agg, merge, "json", persistent)

    def reduce(self, reducer_fn: Callable[[Any, Any], Any], *, name: str | None = None,
               aggregate_serde: Serde | str | None = None, persistent: bool = True) -> Table:
        """Fold each key's values with `reducer_fn(aggregate, value)`; the first value starts it."""
        init, agg, merge = reducer(reducer_fn)
        return self._aggregate("reduce", name, init, agg, merge, aggregate_serde or self.value_serde, persistent)

    def aggregate(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any], *,
                  merger: Callable[[Any, Any, Any], Any] | None = None, name: str | None = None,
                  aggregate_serde: Serde | str = "json", persistent: bool = True) -> Table:
        """`aggregator(key, value, aggregate) -> aggregate`, from `initializer()` (session windows also need
        `merger(key, aggregate1, aggregate2)`)."""
        return self._aggregate("aggregate", name, initializer, aggregator, merger, aggregate_serde, persistent)

    def _aggregate(self, kind: str, name: str | None, initializer: Callable[[], Any],
                   aggregator: Callable[[Any, Any, Any], Any], merger: Callable[[Any, Any, Any], Any] | None,
                   aggregate_serde: Serde | str, persistent: bool,
                   window: WindowedStream | None = None) -> Table:
        stream = self.stream
        app = stream.app
        name = app.node_name(kind, name)
        source = stream.keyed(name)  # through `<application_id>-<name>-repartition` after a key change
        w = window
        step = app.aggregation_step(name, initializer, aggregator, self.key_serde, self.value_serde, aggregate_serde,
                                    persistent, w.windows if w else None, w.emit if w else "update",
                                    w.late_records if w else "drop", merger, w.windowed_key if w else "json",
                                    w.retention if w else None)
        node = app.graph.add(ProcessorNode(name, (source.node,), step.factory, kind=step.kind,
                                           windowing=step.windowing, may_be_leaf=True))
        for spec in step.stores:
            app.graph.add_store(spec, [node.name])
        return Table(app, step.key_serde, serde_for(aggregate_serde), source.topics, node=node.name,
                     store=step.stores[0].name, windowed=w is not None)


class WindowedStream:
    """`grouped.window(...)`: the same aggregations, one result per key and window, keyed
    `Windowed(key, start, end)`."""

    def __init__(self, grouped: GroupedStream, windows: WindowSpec, emit: Emit, late_records: LatePolicy,
                 retention: int | timedelta | None, windowed_key: str) -> None:
        self.grouped, self.windows, self.emit, self.late_records = grouped, windows, emit, late_records
        self.retention, self.windowed_key = retention, windowed_key

    def count(self, *, name: str | None = None, persistent: bool = True) -> Table:
        init, agg, merge = counter()
        return self.grouped._aggregate("count", name, init, agg, merge, "long", persistent, self)

    def sum(self, value: Callable[[Any], Any] = lambda v: v, *, name: str | None = None,
            persistent: bool = True) -> Table:
        init, agg, merge = summer(value)
        return self.grouped._aggregate("sum", name, init, agg, merge, "json", persistent, self)

    def reduce(self, reducer_fn: Callable[[Any, Any], Any], *, name: str | None = None,
               aggregate_serde: Serde | str | None = None, persistent: bool = True) -> Table:
        init, agg, merge = reducer(reducer_fn)
        return self.grouped._aggregate("reduce", name, init, agg, merge, aggregate_serde or self.grouped.value_serde,
                                       persistent, self)

    def aggregate(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any], *,
                  merger: Callable[[Any, Any, Any], Any] | None = None, name: str | None = None,
                  aggregate_serde: Serde | str = "json", persistent: bool = True) -> Table:
        return self.grouped._aggregate("aggregate", name, initializer, aggregator, merger, aggregate_serde,
                                       persistent, self)
