"""Tables in the fluent DSL (Kafka Streams' `KTable` and `KGroupedTable`), over the same join and table
processors and stores as `app.join` and `app.aggregate_table` (see `eos.tables` for the semantics).

    customers = app.table("customers")                      # the latest value per key of a topic
    vip = customers.filter(lambda k, c: c["tier"] == "gold")  # a row that stops holding is deleted
    orders.join(vip, lambda order, customer: {...})          # stream x table, in the stream's task
    accounts.join(customers, joiner, foreign_key=lambda a: a["customer"])   # table x table by a foreign key
    customers.group_by(lambda k, c: (c["country"], c)).count().to_stream().to("customers-per-country")

A table is a node of the processor graph whose records are updates (a None value deletes the key). A
table read from a topic gets its source node when something first reads it; every step that reads it
shares that node, so they run in one sub-topology (co-partitioned with what they join).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from eos.dsl.base import InternalTopic, first_topic, no_such_step
from eos.graph import ProcessorNode, SinkNode, SourceNode
from eos.graph.operators import Filter, MapValues, fan_out, require_functions
from eos.operators.tables import ForeignKeyLeft, ForeignKeyRight, Suppress, TableAggregate, TableRegroup
from eos.serde import BytesSerde, Serde, serde_for
from eos.tables import JoinKind, JoinSpec, TableSource
from eos.time import RECORD_TIME
from eos.windows import ms
from recovery import StoreSpec

if TYPE_CHECKING:
    from eos.dsl.fluent import Stream
    from eos.dsl.processor_api import GraphMethods

__all__ = ["Table", "GroupedTable", "foreign_key_join", "table_aggregation", "table_store", "store_name"]


_FINAL = "each window's final result once, when it closes, is window(..., emit=\"final\") here"
_WHEN_FULL = ("emit_early", "shut_down")
_TABLE_HINTS = {**{step: f"a table is grouped anew before it is aggregated, as in Kafka Streams: "
                         f"table.group_by(lambda k, v: (group key, value)).{step}(...)"
                   for step in ("count", "aggregate", "reduce", "sum")},
                "to": "a table's changes are written with table.to_stream().to(topic), as in Kafka Streams",
                **dict.fromkeys(("queryableStoreName", "queryable_store_name"),
                                "table.store names the store a query reads (app.store_view(table.store)); a table "
                                "not kept on its own has none"),
                "transformValues": "map_values(fn) changes each row's value; a step with a store of its own is "
                                   "to_stream().process_values(ProcessorClass, stores=[...]).to_table()"}


class Table:
    """A table of the DSL: `app.table(topic)` (read from a topic), an aggregation's result, or what
    `filter`, `map_values` and table-table joins make of another table. `store` names the store a query
    reads it from (an aggregation's), None when it is not materialized on its own."""

    def __init__(self, app: GraphMethods, key_serde: Serde, value_serde: Serde, topics: tuple[str, ...], *,
                 source: TableSource | None = None, node: str | None = None, store: str | None = None,
                 windowed: bool = False, history_retention_ms: int | None = None,
                 changed_value_serde: Serde | None = None) -> None:
        self.app, self.key_serde, self.value_serde = app, key_serde, value_serde
        #: the value serde once a step changes the values, when the framework chose this one (a count's long,
        #: as `Stream.changed_value_serde`): None keeps it
        self.changed_value_serde = changed_value_serde
        #: the topics its updates were read from (a join tells its sides apart by them)
        self.topics = topics
        self.source, self._node, self.store, self.windowed = source, node, store, windowed
        #: a versioned table's history retention: the steps that keep it keep it in versioned stores
        self.history_retention_ms = source.history_retention_ms if source is not None else history_retention_ms

    def __repr__(self) -> str:
        if self.source is not None:
            return f"Table({self.source.topic!r})"
        return f"Table({self._node!r}" + (f", store={self.store!r})" if self.store else ")")

    def __getattr__(self, name: str) -> Any:  # (only for what the class has not)
        raise no_such_step(Table, name, _TABLE_HINTS)

    @property
    def node(self) -> str:
        """The graph node whose output is this table's updates (a read table's source node, made on first use)."""
        if self._node is None:
            assert self.source is not None
            self._node = self.app.table_source(self.source)
        return self._node

    def _read(self) -> TableSource:
        if self.source is None:
            raise TypeError(f"{self!r} is made by the DSL, not read from a topic: app.join and app.aggregate_table "
                            "take app.table(...) as it is; use the table's own methods (join, group_by) instead")
        return self.source

    @property
    def spec(self) -> TableSource:
        """How a join keeps this table in its own store: named after the table (a read table) or its node."""
        if self.source is not None:
            return self.source
        topic = first_topic(self.topics, f"a join of table {self.node!r}")
        return TableSource(topic, store_name(self.node), self.key_serde, self.value_serde,
                           history_retention_ms=self.history_retention_ms)

    # ------------------------------------------------------------------ stateless
    def to_stream(self, key_mapper: Callable[[Any, Any], Any] | None = None) -> Stream:
        """The table's updates as a stream (a deletion is a record with value None); `key_mapper(key, value) ->
        new key` keys them anew, as Kafka Streams' `toStream(mapper)` (`to_stream().select_key(mapper)`:
        `windowed.to_stream(lambda window, n: window.key)`)."""
        from eos.dsl.fluent import Stream

        if key_mapper is not None:
            return self.to_stream().select_key(key_mapper)
        return Stream(self.app, self.node, self.key_serde, self.value_serde, self.topics, rekeyed=self.windowed,
                      changed_value_serde=self.changed_value_serde)

    def filter(self, predicate: Callable[[Any, Any], Any], *, name: str | None = None) -> Table:
        """The rows for which `predicate(key, value)` holds; a row that stops holding is deleted (a tombstone
        is forwarded for it, as Kafka Streams' `KTable.filter`)."""
        return self._then("filter", _RowFilter(predicate), name)

    def filter_not(self, predicate: Callable[[Any, Any], Any], *, name: str | None = None) -> Table:
        """The rows for which `predicate(key, value)` does not hold."""
        return self._then("filter_not", _RowFilter(predicate, negate=True), name)

    def map_values(self, fn: Callable[[Any], Any], *, name: str | None = None,
                   value_serde: Serde | str | None = None) -> Table:
        """`fn(value)` of every row (deletions stay deletions), written with `value_serde` (by default the table's,
        or JSON after a count: `Stream.map_values`)."""
        return self._then("map_values", MapValues(_keep_none(fn)), name,
                          serde_for(value_serde, self.changed_value_serde or self.value_serde))

    def suppress(self, time_limit: int | timedelta | None = None, *, max_records: int | None = None,
                 max_bytes: int | None = None, when_full: str = "emit_early", name: str | None = None,
                 persistent: bool = True) -> Table:
        """The table's updates held back, at most one per key per `time_limit` (ms or a timedelta) of stream
        time, as Kafka Streams' `suppress(Suppressed.untilTimeLimit(time_limit, buffer_config))`: a key's
        first update waits until the stream time its step has seen is `time_limit` past that update's
        timestamp, and then its latest value goes on (a deletion too); updates in between only replace the
        value waiting. Rate-limits a table's changes per key, say an alert table's. Stream time is the largest
        timestamp of the updates reaching this step, so a key's last update waits for later updates of other
        keys (as in Kafka Streams).

        The buffer is a changelogged store, `<name>-buffer` (RocksDB unless `persistent=False`), restored and
        kept by standbys like every store: what waits is committed with the input that made it, and goes on
        exactly once, in the transaction that takes it out. `max_records` / `max_bytes` (keys' and values'
        serialized bytes) bound it per task: over the bound the keys waiting longest go on early
        (`when_full="emit_early"`, `BufferConfig.emitEarlyWhenFull`) or the job stops
        (`"shut_down"`, `shutDownWhenFull`: `eos.errors.BufferFullError`). Each window's final result, once,
        is `window(..., emit="final")` (Kafka Streams' `untilWindowCloses`)."""
        if time_limit is None:
            raise TypeError(f"{self!r}.suppress(time_limit) holds each key's updates back for a time; {_FINAL}")
        limit = ms(time_limit, "suppress(time_limit)")
        if limit < 0:
            raise ValueError(f"suppress(time_limit): a time limit is >= 0 ms, got {time_limit!r}")
        for what, bound in (("max_records", max_records), ("max_bytes", max_bytes)):
            if bound is not None and (type(bound) is not int or bound < 1):
                raise ValueError(f"suppress({what}=...): a bound is a whole number >= 1 (None: unbounded), "
                                 f"got {bound!r}")
        if when_full not in _WHEN_FULL:
            raise ValueError(f"suppress(when_full=...): one of {', '.join(map(repr, _WHEN_FULL))}, got {when_full!r}")
        app = self.app
        node_name = app.node_name("suppress", name)
        buffer = StoreSpec(f"{node_name}-buffer", self.key_serde, self.value_serde,
                           persistent, kind="suppression_buffer",
                           serdes_from=("the key serde of the table suppressed", "the value serde of the table "
                                        "suppressed (map_values(..., value_serde=...) before it)"))
        bounds = ", ".join(f"{n} {v}" for n, v in (("max_records", max_records), ("max_bytes", max_bytes)) if v)
        node = app.graph.add(ProcessorNode(
            node_name, (self.node,), partial(Suppress, buffer.name, limit, max_records, max_bytes, when_full),
            kind=f"table suppress (time limit {limit} ms" + (f", {bounds}, when full: {when_full})" if bounds
                                                             else ")"), holds=True)).name
        app.graph.add_store(buffer, [node])
        return Table(app, self.key_serde, self.value_serde, self.topics, node=node, windowed=self.windowed,
                     history_retention_ms=self.history_retention_ms, changed_value_serde=self.changed_value_serde)

    def _then(self, kind: str, operator: Any, name: str | None, value_serde: Serde | None = None) -> Table:
        """A stateless step after this table; `value_serde` given: it changes the values, written with it."""
        from eos.dsl.fluent import Const

        app = self.app
        node = app.graph.add(ProcessorNode(app.node_name(kind, name), (self.node,), Const(operator),
                                           kind=f"table {kind}", operator=True))
        return Table(app, self.key_serde, value_serde or self.value_serde, self.topics, node=node.name,
                     store=self.store, windowed=self.windowed, history_retention_ms=self.history_retention_ms,
                     changed_value_serde=None if value_serde else self.changed_value_serde)

    # ------------------------------------------------------------------ joins
    def join(self, other: Table, joiner: Callable[[Any, Any], Any], *in_order: Any, how: JoinKind = "inner",
             foreign_key: Callable[[Any], Any] | None = None, name: str | None = None,
             value_serde: Serde | str = "json", persistent: bool = True) -> Table:
        """The joined table: `joiner(left value, right value)` per key whenever either side changes (a
        tombstone when the key leaves it); inner, left or outer (`how`). The tables must be co-partitioned,
        unless `foreign_key=fn(left value) -> right key` joins each left row with the right row of that key
        (inner or left; the result is keyed by the left key; the sides meet through two internal topics).
        Kafka Streams' order is taken too: `join(other, foreign_key_extractor, joiner)`."""
        if in_order:
            if len(in_order) != 1 or not callable(in_order[0]) or foreign_key is not None:
                raise TypeError("table.join takes the other table and the joiner, then keywords (foreign_key=fn(left "
                                "value) for a foreign-key join; or Kafka Streams' order: join(other, "
                                f"foreign_key_extractor, joiner)); got {len(in_order)} more: {in_order!r:.200}")
            foreign_key, joiner = cast(Callable[[Any], Any], joiner), in_order[0]
        app = self.app
        if not isinstance(other, Table):
            raise TypeError(f"table.join takes a table (app.table(...), an aggregation's result), got "
                            f"{type(other).__name__}; a stream joins a table with stream.join(table, ...)")
        name = app.node_name("join", name)
        for side in (self, other):
            side._joinable(name)
        if set(self.topics) & set(other.topics):
            raise ValueError(f"join {name!r}: both tables come from {sorted(set(self.topics) & set(other.topics))}; "
                             "a table cannot be joined with itself")
        vs = serde_for(value_serde)
        if foreign_key is not None:
            fk = foreign_key_join(app, name, self, other, joiner, how, foreign_key, persistent)
            return Table(app, self.key_serde, vs, (*self.topics, app.internal_name(name, "response")), node=fk)
        step = app.join_step(name, "table-table", self.spec, other.spec, joiner, how, None, None, self.key_serde,
                             self.value_serde, other.value_serde, None, "drop", persistent, frozenset(self.topics),
                             frozenset(other.topics))
        node = app.graph.add(ProcessorNode(name, (self.node, other.node), step.factory,
                                           kind=f"table-table join ({how})", join=step.spec))
        for spec in step.stores:
            app.graph.add_store(spec, [node.name])
        return Table(app, self.key_serde, vs, (*self.topics, *other.topics), node=node.name)

    def left_join(self, other: Table, joiner: Callable[[Any, Any], Any], *in_order: Any, **kwargs: Any) -> Table:
        """`join(..., how="left")`: every left row, joined with None while the right has no row."""
        return self.join(other, joiner, *in_order, how="left", **kwargs)

    def outer_join(self, other: Table, joiner: Callable[[Any, Any], Any], **kwargs: Any) -> Table:
        """`join(..., how="outer")`: every key of either table, None for the side without a row."""
        return self.join(other, joiner, how="outer", **kwargs)

    def _joinable(self, join: str) -> None:
        if self.windowed:
            raise ValueError(f"join {join!r}: {self!r} is windowed (keyed by window); join its to_stream() "
                             "re-keyed instead")

    # ------------------------------------------------------------------ grouping
    def group_by(self, fn: Callable[[Any, Any], tuple[Any, Any]], *, key_serde: Serde | str | None = None,
                 value_serde: Serde | str | None = None) -> GroupedTable:
        """Re-group the rows: `fn(key, value) -> (new key, new value)`, then `count`, `sum`, `reduce` or
        `aggregate` per new key, each row counted in the group it is in now (Kafka Streams'
        `KTable.groupBy`)."""
        if self.windowed:
            raise ValueError(f"{self!r} is windowed: re-group its to_stream() instead")
        require_functions("group_by", key_value_selector=fn, takes={"key_value_selector": ("key", "value")})
        return GroupedTable(self, fn, serde_for(key_serde, self.key_serde),
                            serde_for(value_serde, self.changed_value_serde or self.value_serde))


class GroupedTable:
    """`table.group_by(fn)`: aggregations that take a row's old value out of its old group when it changes
    (`subtractor`) and put the new one in (`adder`)."""

    def __init__(self, table: Table, fn: Callable[[Any, Any], tuple[Any, Any]], key_serde: Serde,
                 value_serde: Serde) -> None:
        self.table, self.fn, self.key_serde, self.value_serde = table, fn, key_serde, value_serde

    def __getattr__(self, name: str) -> Any:  # (only for what the class has not)
        raise no_such_step(GroupedTable, name)

    def aggregate(self, initializer: Callable[[], Any], adder: Callable[[Any, Any, Any], Any],
                  subtractor: Callable[[Any, Any, Any], Any], *, name: str | None = None,
                  aggregate_serde: Serde | str = "json", persistent: bool = True) -> Table:
        """`adder(group key, value, aggregate)` when a value joins a group, `subtractor(group key, value,
        aggregate)` when it leaves, from `initializer()`; an aggregate that becomes None deletes the group."""
        return self._aggregate("aggregate", name, self.fn, initializer, adder, subtractor, aggregate_serde,
                               persistent)

    def count(self, *, name: str | None = None, persistent: bool = True) -> Table:
        """Rows per group (a long)."""
        fn = self.fn
        return self._aggregate("count", name, lambda k, v: (fn(k, v)[0], 1), lambda: 0, _add, _subtract, "long",
                               persistent)

    def sum(self, value: Callable[[Any], Any] = lambda v: v, *, name: str | None = None,
            aggregate_serde: Serde | str = "json", persistent: bool = True) -> Table:
        """Sum of `value(new value)` per group, kept and written with `aggregate_serde` (as
        `GroupedStream.sum`)."""
        require_functions("sum", value=value, takes={"value": ("value",)})
        return self._aggregate("sum", name, self.fn, lambda: 0, lambda g, v, total: total + value(v),
                               lambda g, v, total: total - value(v), aggregate_serde, persistent)

    def reduce(self, adder: Callable[[Any, Any], Any], subtractor: Callable[[Any, Any], Any], *,
               name: str | None = None, aggregate_serde: Serde | str | None = None,
               persistent: bool = True) -> Table:
        """`adder(aggregate, value)` and `subtractor(aggregate, value)`, the first value starting a group; the
        aggregate kept and written with `aggregate_serde` (the group_by()'s `value_serde` by default)."""
        require_functions("reduce", adder=adder, subtractor=subtractor,
                          takes={"adder": ("aggregate", "value"), "subtractor": ("aggregate", "value")})
        return self._aggregate("reduce", name, self.fn, lambda: None,
                               lambda g, v, agg: v if agg is None else adder(agg, v),
                               lambda g, v, agg: subtractor(agg, v), aggregate_serde or self.value_serde,
                               persistent)

    def _aggregate(self, kind: str, name: str | None, fn: Callable[[Any, Any], tuple[Any, Any]],
                   initializer: Callable[[], Any], adder: Callable[[Any, Any, Any], Any],
                   subtractor: Callable[[Any, Any, Any], Any], aggregate_serde: Serde | str,
                   persistent: bool) -> Table:
        table, app = self.table, self.table.app
        name = app.node_name(kind, name)
        vs = self.value_serde if kind != "count" else serde_for("long")
        serdes_from = (f"key_serde= of the group_by() before {name!r}",
                       f"aggregate_serde= of {name!r}" if kind != "count" else None)
        node, store, topic = table_aggregation(app, name, table.node, table.spec, fn, initializer, adder, subtractor,
                                               self.key_serde, vs, serde_for(aggregate_serde),
                                               persistent and table.spec.persistent, serdes_from)
        return Table(app, self.key_serde, serde_for(aggregate_serde), (topic,), node=node, store=store,
                     changed_value_serde=serde_for("json") if kind == "count" else None)


# ---------------------------------------------------------------- the graph of a table step (both APIs)


def table_aggregation(app: GraphMethods, name: str, parent: str, table: TableSource,
                      group_by: Callable[[Any, Any], tuple[Any, Any]], initializer: Callable[[], Any],
                      adder: Callable[[Any, Any, Any], Any], subtractor: Callable[[Any, Any, Any], Any],
                      key_serde: Serde, value_serde: Serde, aggregate_serde: Serde,
                      persistent: bool, serdes_from: tuple[str | None, str | None] | None = None,
                      ) -> tuple[str, str, str]:
    """A re-grouped table aggregation after the node `parent` (whose records are `table`'s updates): the
    re-grouping processor `<name>.repartition` (the table's previous values in `<name>-source`), the
    repartition topic `<application_id>-<name>-repartition`, the aggregating processor `name` (the aggregates
    in `<name>-store`). Returns the aggregating node, its store and the repartition topic. `serdes_from`: where
    the job sets the store's key and aggregate serdes (`StoreSpec.serdes_from`; by default `aggregate_table`'s)."""
    require_functions(name, group_by=group_by, initializer=initializer, adder=adder, subtractor=subtractor, takes={
        "group_by": ("key", "value"), "initializer": (), "adder": ("group key", "value", "aggregate"),
        "subtractor": ("group key", "value", "aggregate")})
    graph = app.graph
    topic = app.internal_name(name, "repartition")
    app.internal_topics[topic] = InternalTopic(topic, like=table.topic, purge=True)
    source = kept_table(f"{name}-source", table, persistent)
    regroup = graph.add(ProcessorNode(f"{name}.repartition", (parent,),
                                      partial(TableRegroup, source.name, group_by, value_serde),
                                      kind="table re-group")).name
    graph.add_store(source, [regroup])
    graph.add(SinkNode(f"{name}-repartition.sink", topic, (regroup,), key_serde, BytesSerde()))
    read = graph.add(SourceNode(f"{name}-repartition.source", (topic,), key_serde, BytesSerde(), RECORD_TIME)).name
    store = StoreSpec(f"{name}-store", key_serde, aggregate_serde, persistent, timestamped=True,
                      serdes_from=serdes_from or (f"key_serde= of {name!r}", f"aggregate_serde= of {name!r}"))
    node = graph.add(ProcessorNode(name, (read,), partial(TableAggregate, store.name, initializer, adder, subtractor,
                                                          value_serde),
                                   kind="table aggregation", may_be_leaf=True)).name
    graph.add_store(store, [node])
    return node, store.name, topic


def foreign_key_join(app: GraphMethods, name: str, left: Table, right: Table, joiner: Callable[[Any, Any], Any],
                     how: JoinKind, foreign_key: Callable[[Any], Any], persistent: bool) -> str:
    """A foreign-key join of two tables (`eos.operators.tables`): the left processor `name` (the left table
    and the responses) and the right processor `<name>.right` (the subscriptions and the right table), in
    two sub-topologies linked by two internal topics. Returns the left node, whose output is the result."""
    require_functions(f"join {name!r}", joiner=joiner, foreign_key=foreign_key,
                      takes={"joiner": ("left value", "right value"), "foreign_key": ("left value",)})
    if how not in ("inner", "left"):
        raise ValueError(f"join {name!r}: a foreign-key join is inner or left, got how={how!r}")
    graph, raw = app.graph, BytesSerde()
    subscriptions, responses = app.internal_name(name, "subscription"), app.internal_name(name, "response")
    # Kept for the topics' retention rather than purged: each hop is audited on its own (lineage).
    app.internal_topics[subscriptions] = InternalTopic(subscriptions, like=first_topic(right.topics, f"join {name!r}"))
    app.internal_topics[responses] = InternalTopic(responses, like=first_topic(left.topics, f"join {name!r}"))
    right_name = f"{name}.right"  # its stores are named after it: no clash with the left side's
    lspec, rspec = left.spec, right.spec
    left_store = table_store(name, lspec, persistent)
    right_store = table_store(right_name, rspec, persistent)
    subscribers = StoreSpec(f"{right_name}-subscribers", raw, raw, persistent)
    # Internal topics are read at their records' timestamps (those of the rows that caused them), never by
    # the application's extractor, which knows the user's values only.
    asked = graph.add(SourceNode(f"{name}-subscription.source", (subscriptions,), raw, raw, RECORD_TIME)).name
    graph.add(ProcessorNode(right_name, (asked, right.node),
                            partial(ForeignKeyRight, frozenset(right.topics), right_store.name, subscribers.name,
                                    responses, right.key_serde, right.value_serde),
                            kind="foreign-key join (right side)"))
    graph.add_store(right_store, [right_name])
    graph.add_store(subscribers, [right_name])
    graph.add(SinkNode(f"{name}-response.sink", responses, (right_name,), raw, raw, raw=True, named=True))
    answers = graph.add(SourceNode(f"{name}-response.source", (responses,), raw, raw, RECORD_TIME)).name
    spec = JoinSpec("foreign-key", how, lspec.topic, rspec.topic, joiner, key=foreign_key, left_store=left_store.name,
                    right_store=right_store.name, right_reader=right_name)
    node = graph.add(ProcessorNode(name, (left.node, answers),
                                   partial(ForeignKeyLeft, frozenset(left.topics), left_store.name, foreign_key, joiner,
                                           how, subscriptions, left.key_serde, left.value_serde, right.key_serde,
                                           right.value_serde),
                                   kind=f"foreign-key join ({how})", join=spec)).name
    graph.add_store(left_store, [node])
    graph.add(SinkNode(f"{name}-subscription.sink", subscriptions, (node,), raw, raw, raw=True, named=True))
    return node


def store_name(topic: str) -> str:
    """A store or table name made of a topic's or node's name."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", topic)[:60]


def table_store(join: str, table: TableSource, persistent: bool, suffix: str = "") -> StoreSpec:
    """The store a join keeps one of its tables in: `<join>-<table name>`; a versioned store for a versioned
    table (`recovery.versioned`)."""
    return kept_table(f"{join}-{table.name}" + (f"-{suffix}" if suffix else ""), table, persistent)


def kept_table(name: str, table: TableSource, persistent: bool) -> StoreSpec:
    """A store `name` that keeps a table's rows: timestamped, or versioned for a versioned table."""
    versioned = table.history_retention_ms is not None  # (a versioned store keeps timestamps its own way)
    return StoreSpec(name, table.key_serde, table.value_serde, persistent and table.persistent,
                     timestamped=not versioned, kind="versioned" if versioned else "key_value",
                     retention_ms=table.history_retention_ms)


class _RowFilter(Filter):
    """A table filter: a row failing the predicate becomes a tombstone instead of disappearing."""

    def bind(self, children: Any) -> Any:
        test, emit, negate = self.predicate, fan_out(children), self.negate

        def step(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            keep = value is not None and bool(test(key, value)) != negate
            emit(key, value if keep else None, timestamp, headers)
        return step


def _keep_none(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    require_functions("map_values", fn=fn, takes={"fn": ("value",)})
    def mapped(value: Any) -> Any:
        return None if value is None else fn(value)
    return mapped


def _add(group: Any, value: Any, count: int) -> int:
    return count + value


def _subtract(group: Any, value: Any, count: int) -> int:
    return count - value
