"""Grouped and windowed streams and the tables aggregations make (Kafka Streams' `KGroupedStream`,
`TimeWindowedKStream`/`SessionWindowedKStream`, `CogroupedKStream` and the `KTable` of an aggregation), over
the same aggregation processors and stores as `app.aggregate`.

A cogroup folds several grouped streams into one aggregate per key, each stream with its own aggregator:

    (orders.group_by_key().cogroup(lambda k, order, agg: {**agg, "spent": agg["spent"] + order["amount"]})
           .cogroup(refunds.group_by_key(), lambda k, refund, agg: {**agg, "refunded": agg["refunded"] + 1})
           .aggregate(lambda: {"spent": 0, "refunded": 0}, name="customer-totals"))

is one aggregation node with one store, in one task per partition: each stream's records reach it marked
with the stream's place (`eos.graph.operators.Cogrouped`), and one aggregator applies that stream's function
(`eos.operators.aggregate.CogroupAggregator`). A stream keyed anew goes through a repartition topic of its
own first (`<application_id>-<name>-<n>-repartition`, n its place from 1), with as many partitions as the
cogroup's first stream that is not, so that all of them are co-partitioned."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from eos.dsl.base import no_such_step
from eos.dsl.fluent import Const, Stream
from eos.dsl.tables import Table
from eos.graph import ProcessorNode
from eos.graph.operators import Cogrouped, require_functions
from eos.operators.aggregate import CogroupAggregator, CogroupValueSerde, counter, reducer, summer
from eos.operators.windows import Emit, LatePolicy
from eos.serde import Serde, serde_for
from eos.windows import HoppingWindows, SessionWindows, SlidingWindows, WindowSpec

__all__ = ["GroupedStream", "WindowedStream", "CogroupedStream", "WindowedCogroupedStream"]

Aggregator = Callable[[Any, Any, Any], Any]


class GroupedStream:
    """`stream.group_by_key()` / `group_by(fn)`: aggregations over all time, or `window(...)` first."""

    def __init__(self, stream: Stream, key_serde: Serde, value_serde: Serde) -> None:
        self.stream, self.key_serde, self.value_serde = stream, key_serde, value_serde

    def __getattr__(self, name: str) -> Any:  # (only for what the class has not)
        raise no_such_step(GroupedStream, name, {"windowedBy": "it is window(...) here", "to": (
            "a grouped stream is aggregated before it is written: grouped.count().to_stream().to(topic)"),
            "suppress": "suppress holds a table's updates back: aggregate first, grouped.count().suppress(time_limit)"})

    def window(self, windows: WindowSpec, *, emit: Emit = "update", late_records: LatePolicy = "drop",
               retention: int | timedelta | None = None, windowed_key: str = "json") -> WindowedStream:
        """Aggregate per key and window (`eos.windows`: TumblingWindows, HoppingWindows, SlidingWindows,
        SessionWindows, each with its grace); `emit="final"`: each window's result once, when it closes;
        late records dropped and counted, or dead-lettered (`late_records="dead_letter"`)."""
        if not isinstance(windows, HoppingWindows | SlidingWindows | SessionWindows):
            raise TypeError("window() takes TumblingWindows, HoppingWindows, SlidingWindows or SessionWindows from "
                            f"eos.windows, e.g. window(TumblingWindows(60_000)); got {windows!r}")
        return WindowedStream(self, windows, emit, late_records, retention, windowed_key)

    def cogroup(self, aggregator: Aggregator) -> CogroupedStream:
        """Start a cogroup (Kafka Streams' `cogroup`): this stream's values folded by `aggregator(key, value,
        aggregate)`; `.cogroup(other grouped stream, its aggregator)` adds more, then `.aggregate(initializer)`
        (or `.window(...)` first) makes the one table they all fold into."""
        return CogroupedStream(self.stream.app, ()).cogroup(self, aggregator)

    def count(self, *, name: str | None = None, persistent: bool = True) -> Table:
        """Records per key (a long); tombstones are not counted."""
        init, agg, merge = counter()
        return self._aggregate("count", name, init, agg, merge, "long", persistent)

    def sum(self, value: Callable[[Any], Any] = lambda v: v, *, name: str | None = None,
            aggregate_serde: Serde | str = "json", persistent: bool = True) -> Table:
        """Sum of `value(record value)` per key, kept and written with `aggregate_serde` ("json" by default;
        "long" or "double" for numbers alone, "decimal" for Decimals)."""
        init, agg, merge = summer(value)
        return self._aggregate("sum", name, init, agg, merge, aggregate_serde, persistent)

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
        app = self.stream.app
        name = app.node_name(kind, name)
        # through `<application_id>-<name>-repartition` after a key change, with the grouping's serdes
        source = self.stream.keyed(name, key_serde=self.key_serde, value_serde=self.value_serde)
        serdes_from = (f"key_serde= of the group_by() or group_by_key() before {name!r}",
                       f"aggregate_serde= of {name!r}" if kind != "count" else None)
        return _aggregation(app, name, (source,), self.key_serde, self.value_serde, initializer, aggregator, merger,
                            aggregate_serde, persistent, window, serdes_from=serdes_from, counts=kind == "count")


def _aggregation(app: Any, name: str, sources: tuple[Stream, ...], key_serde: Serde, value_serde: Serde,
                 initializer: Callable[[], Any], aggregator: Aggregator, merger: Aggregator | None,
                 aggregate_serde: Serde | str, persistent: bool, window: WindowedStream | None,
                 kind: str = "", serdes_from: tuple[str | None, str | None] | None = None,
                 counts: bool = False) -> Table:
    """The aggregation node `name` after `sources` (its parents), its stores, and the table of its results.
    `serdes_from`: where the job sets its store's key and aggregate serdes (`StoreSpec.serdes_from`); `counts`:
    the aggregate is a count, whose long the framework chose (JSON once a step changes it)."""
    w = window
    step = app.aggregation_step(name, initializer, aggregator, key_serde, value_serde, aggregate_serde, persistent,
                                w.windows if w else None, w.emit if w else "update", w.late_records if w else "drop",
                                merger, w.windowed_key if w else "json", w.retention if w else None, serdes_from)
    node = app.graph.add(ProcessorNode(name, tuple(s.node for s in sources), step.factory, kind=kind + step.kind,
                                       windowing=step.windowing, may_be_leaf=True))
    for spec in step.stores:
        app.graph.add_store(spec, [node.name])
    topics = tuple(dict.fromkeys(t for s in sources for t in s.topics))
    return Table(app, step.key_serde, serde_for(aggregate_serde), topics, node=node.name, store=step.stores[0].name,
                 windowed=w is not None, changed_value_serde=serde_for("json") if counts else None)


class WindowedStream:
    """`grouped.window(...)`: the same aggregations, one result per key and window, keyed
    `Windowed(key, start, end)`."""

    def __init__(self, grouped: GroupedStream, windows: WindowSpec, emit: Emit, late_records: LatePolicy,
                 retention: int | timedelta | None, windowed_key: str) -> None:
        self.grouped, self.windows, self.emit, self.late_records = grouped, windows, emit, late_records
        self.retention, self.windowed_key = retention, windowed_key

    def __getattr__(self, name: str) -> Any:  # (only for what the class has not)
        raise no_such_step(WindowedStream, name, {"suppress": (
            "each window's final result once, when it closes, is window(..., emit=\"final\") here")})

    def count(self, *, name: str | None = None, persistent: bool = True) -> Table:
        init, agg, merge = counter()
        return self.grouped._aggregate("count", name, init, agg, merge, "long", persistent, self)

    def sum(self, value: Callable[[Any], Any] = lambda v: v, *, name: str | None = None,
            aggregate_serde: Serde | str = "json", persistent: bool = True) -> Table:
        init, agg, merge = summer(value)
        return self.grouped._aggregate("sum", name, init, agg, merge, aggregate_serde, persistent, self)

    def reduce(self, reducer_fn: Callable[[Any, Any], Any], *, name: str | None = None,
               aggregate_serde: Serde | str | None = None, persistent: bool = True) -> Table:
        init, agg, merge = reducer(reducer_fn)
        return self.grouped._aggregate("reduce", name, init, agg, merge, aggregate_serde or self.grouped.value_serde,
                                       persistent, self)

    def aggregate(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any],
                  merger: Callable[[Any, Any, Any], Any] | None = None, *, name: str | None = None,
                  aggregate_serde: Serde | str = "json", persistent: bool = True) -> Table:
        """As `GroupedStream.aggregate`, per window; session windows also need `merger(key, aggregate1,
        aggregate2)`, given third as Kafka Streams' `aggregate(initializer, aggregator, sessionMerger)` or by
        name."""
        return self.grouped._aggregate("aggregate", name, initializer, aggregator, merger, aggregate_serde,
                                       persistent, self)


class CogroupedStream:
    """`grouped.cogroup(aggregator)`: grouped streams, each with its aggregator, that `aggregate(initializer)`
    folds into one table (Kafka Streams' `CogroupedKStream`)."""

    def __init__(self, app: Any, inputs: tuple[tuple[GroupedStream, Aggregator], ...]) -> None:
        self.app, self.inputs = app, inputs

    def __repr__(self) -> str:
        return f"CogroupedStream({[g.stream.node for g, _ in self.inputs]!r})"

    def cogroup(self, grouped: GroupedStream, aggregator: Aggregator) -> CogroupedStream:
        """This cogroup and `grouped`'s values, folded by `aggregator(key, value, aggregate)`."""
        if not isinstance(grouped, GroupedStream):
            raise TypeError(f"cogroup takes a grouped stream (stream.group_by_key(), stream.group_by(fn)) and its "
                            f"aggregator, got {type(grouped).__name__}")
        require_functions("cogroup", aggregator=aggregator, takes={"aggregator": ("key", "value", "aggregate")})
        if grouped.stream.app is not self.app:
            raise ValueError("cogroup: the grouped streams must come from the same Application")
        if any(g is grouped for g, _ in self.inputs):
            raise ValueError(f"cogroup: {grouped.stream!r} is already in this cogroup; give each grouped stream "
                             "once, with one aggregator")
        if self.inputs:
            first = self.inputs[0][0].key_serde
            if type(grouped.key_serde) is not type(first):
                raise ValueError(f"cogroup: the grouped streams must have keys alike, for one aggregate per key: "
                                 f"{self.inputs[0][0].stream!r} is keyed {first!r}, {grouped.stream!r} "
                                 f"{grouped.key_serde!r}; group_by_key(key_serde=...) makes them one")
        if len(self.inputs) == 255:
            raise ValueError("cogroup: at most 255 grouped streams")
        return CogroupedStream(self.app, (*self.inputs, (grouped, aggregator)))

    def window(self, windows: WindowSpec, *, emit: Emit = "update", late_records: LatePolicy = "drop",
               retention: int | timedelta | None = None, windowed_key: str = "json") -> WindowedCogroupedStream:
        """One aggregate per key and window, as `GroupedStream.window`."""
        return WindowedCogroupedStream(self, self.inputs[0][0].window(windows, emit=emit, late_records=late_records,
                                                                      retention=retention,
                                                                      windowed_key=windowed_key))

    def aggregate(self, initializer: Callable[[], Any], *, merger: Aggregator | None = None,
                  name: str | None = None, aggregate_serde: Serde | str = "json", persistent: bool = True) -> Table:
        """The table of each key's aggregate, from `initializer()`, every stream's values folded into it by that
        stream's aggregator, in the order the task processes them (by timestamp across partitions)."""
        return self._aggregate(initializer, merger, name, aggregate_serde, persistent, None)

    def _aggregate(self, initializer: Callable[[], Any], merger: Aggregator | None, name: str | None,
                   aggregate_serde: Serde | str, persistent: bool, window: WindowedStream | None) -> Table:
        app = self.app
        name = app.node_name("cogroup", name)
        plain = [g.stream.topics[0] for g, _ in self.inputs if not g.stream.rekeyed and g.stream.topics]
        like = plain[0] if plain else next((g.stream.topics[0] for g, _ in self.inputs if g.stream.topics), None)
        marked = []
        for index, (grouped, _) in enumerate(self.inputs):
            source = grouped.stream.keyed(f"{name}-{index + 1}", like=like, key_serde=grouped.key_serde,
                                          value_serde=grouped.value_serde)
            node = app.graph.add(ProcessorNode(f"{name}-{index + 1}-cogroup", (source.node,),
                                               Const(Cogrouped(index)), kind="cogroup", operator=True))
            marked.append(Stream(app, node.name, source.key_serde, source.value_serde, source.topics))
        aggregator = CogroupAggregator(tuple(a for _, a in self.inputs))
        values = CogroupValueSerde(tuple(g.value_serde for g, _ in self.inputs))
        serdes_from = (f"key_serde= of the first cogrouped stream's group_by() or group_by_key() ({name!r})",
                       f"aggregate_serde= of {name!r}")
        return _aggregation(app, name, tuple(marked), self.inputs[0][0].key_serde, values, initializer, aggregator,
                            merger, aggregate_serde, persistent, window, kind="cogrouped ", serdes_from=serdes_from)


class WindowedCogroupedStream:
    """`cogrouped.window(...)`: the cogroup's one aggregate per key and window, keyed `Windowed(key, start, end)`."""

    def __init__(self, cogrouped: CogroupedStream, window: WindowedStream) -> None:
        self.cogrouped, self.windowing = cogrouped, window

    def aggregate(self, initializer: Callable[[], Any], merger: Aggregator | None = None, *,
                  name: str | None = None, aggregate_serde: Serde | str = "json", persistent: bool = True) -> Table:
        """As `CogroupedStream.aggregate`, per window (session windows also need `merger(key, aggregate1,
        aggregate2)`, second as in Kafka Streams or by name)."""
        return self.cogrouped._aggregate(initializer, merger, name, aggregate_serde, persistent, self.windowing)
