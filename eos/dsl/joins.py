"""Tables, global tables and joins (see `eos.tables` for the semantics)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

from eos.dsl.aggregations import AggregationMethods
from eos.dsl.base import SerdeSpec, no_pattern
from eos.dsl.tables import Table, foreign_key_join, store_name, table_aggregation, table_store
from eos.graph import SinkNode, SourceNode
from eos.graph.operators import require_functions
from eos.offset_reset import offset_reset
from eos.operators.joins import GlobalTableJoin, StreamStreamJoin, StreamTableJoin, TableTableJoin
from eos.operators.windows import LatePolicy
from eos.processor import Processor
from eos.records import Record
from eos.serde import serde_for
from eos.tables import (
    GlobalTable,
    JoinKind,
    JoinSpec,
    JoinType,
    JoinWindows,
    TableSource,
    history_retention,
    join_grace,
)
from eos.time import TimestampSpec, timestamp_extractor
from eos.topology import SubTopology
from recovery import StoreSpec

__all__ = ["JoinMethods", "JoinStep"]

TableSide = Table | TableSource
Side = str | TableSide | GlobalTable
_HOW: dict[JoinType, tuple[str, ...]] = {"stream-table": ("inner", "left"), "stream-global": ("inner", "left"),
                                    "stream-stream": ("inner", "left", "outer"),
                                    "table-table": ("inner", "left", "outer")}


@dataclass(frozen=True)
class JoinStep:
    """A join's processor factory, stores, how it reads its other topic, the global tables it reads, its
    definition (for the audit) and the key serde of its results."""

    factory: Callable[[], Processor]
    stores: tuple[StoreSpec, ...]
    per_topic: dict[str, tuple[Any, Any, Any]]
    global_tables: tuple[GlobalTable, ...]
    spec: JoinSpec
    key_serde: Any


class JoinMethods(AggregationMethods):
    def table(self, topic: str, *, name: str | None = None, key_serde: SerdeSpec = "string",
              value_serde: SerdeSpec = "json", timestamp: TimestampSpec = None, persistent: bool = True,
              versioned: int | timedelta | None = None, auto_offset_reset: str | timedelta | None = None) -> Table:
        """A table read from `topic` (best compacted): the latest value per key, tombstones delete. Join it
        (`stream.join(table)`, `table.join(other)`, `app.join`), filter, map or re-group it
        (`eos.dsl.tables.Table`). Each join that reads it keeps it in a store `<join>-<name>` (RocksDB when
        `persistent`), changelog-backed, queryable (`app.store_view`).

        `versioned=history retention` (ms or a timedelta) makes it a versioned table, as Kafka Streams'
        versioned stores: its rows are kept by timestamp for that long behind the newest update, a stream
        joined with it gets the row as of each record's timestamp, and an update older than its key's latest
        (out of order) goes into the history without changing the table's current row.

        `auto_offset_reset`: where its source starts a partition nothing was committed for, as `app.stream`'s."""
        if not isinstance(topic, str):
            raise TypeError(no_pattern("app.table()") if isinstance(topic, re.Pattern) else
                            f"app.table() reads one topic, by its name, got {topic!r}")
        ks, vs = serde_for(key_serde), serde_for(value_serde)
        source = TableSource(topic, name or store_name(topic), ks, vs,
                             timestamp_extractor(timestamp) if timestamp is not None else None, persistent,
                             history_retention(versioned, f"table {topic!r}"),
                             offset_reset(auto_offset_reset, f"table {topic!r}: auto_offset_reset")
                             if auto_offset_reset is not None else None)
        return Table(self, ks, vs, (topic,), source=source)  # type: ignore[arg-type]

    def global_table(self, topic: str, *, name: str | None = None, key_serde: SerdeSpec = "string",
                     value_serde: SerdeSpec = "json", versioned: int | timedelta | None = None) -> GlobalTable:
        """A table every task holds whole (all partitions of `topic`), read up to offsets pinned per batch;
        joined with `app.join(stream, global_table, ..., key=fn(record) -> table key)`. Kept in memory.

        `versioned=history retention` (ms or a timedelta) keeps each row's versions by timestamp, as
        `app.table(versioned=...)` does: a stream record joins the row its table key held at the record's
        timestamp (Kafka Streams' versioned global tables, KIP-914)."""
        if not isinstance(topic, str):
            raise TypeError(no_pattern("app.global_table()") if isinstance(topic, re.Pattern) else
                            f"app.global_table() reads one topic, by its name, got {topic!r}")
        return GlobalTable(topic, name or store_name(topic), serde_for(key_serde), serde_for(value_serde),
                           history_retention(versioned, f"global table {topic!r}"))

    def join(self, left: str | TableSide, right: Side, output: str, *, name: str, joiner: Callable[[Any, Any], Any],
             how: JoinKind = "inner", windows: JoinWindows | None = None, key: Callable[[Record], Any] | None = None,
             key_serde: SerdeSpec = "string", value_serde: SerdeSpec = "json", right_value_serde: SerdeSpec = None,
             output_value_serde: SerdeSpec = "json", timestamp: TimestampSpec = None,
             late_records: LatePolicy = "drop", persistent: bool = True,
             foreign_key: Callable[[Any], Any] | None = None, grace: int | timedelta | None = None) -> SubTopology:
        """Join `left` with `right` into `output` (a sub-topology named `name`); `joiner(left value, right
        value)` makes the output value, None standing for a missing side. Which join is decided by the sides:

        * a stream topic and a `Table`: stream-table join (`how` inner or left);
        * a stream topic and a `GlobalTable`: stream-global-table join, the table key is `key(record)`;
        * two stream topics and `windows=JoinWindows(...)`: windowed stream-stream join (inner, left, outer);
        * two `Table`s: table-table join (inner, left, outer); the output is a table too;
        * two `Table`s and `foreign_key=fn(left value) -> right key`: foreign-key join (inner, left), keyed
          by the left key; the tables need not be co-partitioned (see `eos.operators.tables`).

        Stream sides are read with `key_serde`/`value_serde` (the right stream with `right_value_serde`,
        default the same) and `timestamp`; tables with their own. Late stream-stream records are dropped and
        counted, or dead-lettered with `late_records="dead_letter"`.

        `grace=` (a stream-table join with a versioned table; Kafka Streams' KIP-923): each stream record is
        held back until the stream's time has passed it by the grace period, and joined then with the table as
        of its timestamp, so that table updates that come up to that late are seen; records are let go in
        timestamp order, and one older than the stream's time minus the grace period is dropped as late."""
        left_side: str | TableSource = _read_table(left)
        right_side: str | TableSource | GlobalTable = _read_table(right)
        left, right = left_side, right_side  # what the join reads: a DSL table as declared
        kind = _kind(left, right, windows)
        if foreign_key is not None:
            if kind != "table-table":
                raise ValueError(f"join {name!r}: foreign_key= joins two tables: app.join(app.table(...), "
                                 "app.table(...), output, foreign_key=fn(left value) -> right key, ...)")
            assert isinstance(left, TableSource) and isinstance(right, TableSource)
            return self._foreign_key_join(name, left, right, output, joiner, how, foreign_key,
                                          output_value_serde, persistent)
        if kind != "stream-global" and key is not None:
            raise ValueError(f"join {name!r}: key= selects the table key of a global table join only; "
                             "re-key a stream first with app.repartition(...)")
        if kind == "stream-global" and key is None:
            key = _record_key
        ks, vs = serde_for(key_serde), serde_for(value_serde)
        extract = timestamp_extractor(timestamp) if timestamp is not None else None
        step = self.join_step(name, kind, left, right, joiner, how, windows, key, ks, vs,
                               serde_for(right_value_serde, vs), extract, late_records, persistent,
                               frozenset({_topic(left)}), grace=grace)
        inputs = (_topic(left),) if kind == "stream-global" else (_topic(left), _topic(right))
        return self._add(name, inputs, output, step.key_serde, vs, step.key_serde, output_value_serde, (),
                         timestamp=timestamp, processor_factory=step.factory, stores=step.stores,
                         per_topic=step.per_topic, global_tables=step.global_tables, join=step.spec)

    def join_step(self, name: str, kind: JoinType, left: Any, right: Any, joiner: Callable[[Any, Any], Any],
                   how: JoinKind, windows: JoinWindows | None, key: Callable[[Record], Any] | None, ks: Any, vs: Any,
                   rvs: Any, extract: Callable[[Record], int] | None, late_records: LatePolicy, persistent: bool,
                   left_topics: frozenset[str], right_topics: frozenset[str] | None = None, *,
                   grace: int | timedelta | None = None) -> JoinStep:
        """The processor, stores and readings of a join named `name` (one engine for both APIs): `left` and
        `right` are topics (streams), `TableSource`s (how a table is kept) or a `GlobalTable`; `left_topics`
        and `right_topics` the topics each side's records come from (default: the side's own topic); `grace`
        a stream-table join's grace period (`join`)."""
        right_topics = right_topics or frozenset({_topic(right)})
        require_functions(f"join {name!r}", joiner=joiner, **({"key": key} if key is not None else {}),
                          takes={"joiner": ("left value", "right value"), "key": ("record",)})
        if how not in _HOW[kind]:
            raise ValueError(f"join {name!r}: a {kind} join is one of {', '.join(_HOW[kind])}, got how={how!r}")
        if late_records not in ("drop", "dead_letter"):
            raise ValueError(f"late_records must be 'drop' or 'dead_letter', got {late_records!r}")
        grace_ms = join_grace(grace, right if kind == "stream-table" else None, name)
        if kind == "stream-table":
            assert isinstance(right, TableSource)
            kept = table_store(name, right, persistent)
            # (a grace period's buffer: Kafka Streams' `<join>-Buffer`)
            held = () if grace_ms is None else (StoreSpec(f"{name}-buffer", ks, vs, persistent,
                                                          kind="time_ordered_buffer"),)
            return JoinStep(partial(StreamTableJoin, right_topics, kept.name, joiner, how, grace_ms,
                                    held[0].name if held else None), (kept, *held),
                            {right.topic: self._reading(right)}, (),
                            JoinSpec(kind, how, _topic(left), right.topic, joiner, right_store=kept.name,
                                     grace_ms=grace_ms), ks)
        if kind == "stream-global":
            assert isinstance(right, GlobalTable) and key is not None
            return JoinStep(partial(GlobalTableJoin, right.name, key, joiner, how), (), {}, (right,),
                            JoinSpec(kind, how, _topic(left), right.topic, joiner, windows, key), ks)
        if kind == "table-table":
            assert isinstance(left, TableSource) and isinstance(right, TableSource)
            if left.topic == right.topic:
                raise ValueError(f"join {name!r}: a table cannot be joined with itself")
            left_store, right_store = table_store(name, left, persistent), table_store(name, right, persistent)
            if left_store.name == right_store.name:
                right_store = table_store(name, right, persistent, suffix="right")
            return JoinStep(partial(TableTableJoin, left_topics, left_store.name, right_store.name, joiner, how),
                            (left_store, right_store), {t.topic: self._reading(t) for t in (left, right)}, (),
                            JoinSpec(kind, how, left.topic, right.topic, joiner, left_store=left_store.name,
                                     right_store=right_store.name), left.key_serde)
        assert isinstance(right, str) and windows is not None
        if right in left_topics:
            raise ValueError(f"join {name!r}: a stream cannot be joined with itself (read it once and "
                             "repartition it to a second topic)")
        keep = windows.span + max(windows.before, windows.after)
        buffers = tuple(StoreSpec(f"{name}-{side}-buffer", ks, v, persistent, timestamped=True,
                                  kind="record_buffer", retention_ms=keep)
                        for side, v in (("left", vs), ("right", rvs)))
        pending = tuple(StoreSpec(f"{name}-{side}-pending", ks, v, persistent, timestamped=True,
                                  kind="record_buffer", retention_ms=keep)
                        for side, v in (("left", vs), ("right", rvs)))
        stores = (*buffers, *(p for p, keeps in zip(pending, (how != "inner", how == "outer"), strict=True) if keeps))
        factory = partial(StreamStreamJoin, left_topics, windows, joiner, how, late_records,
                          (buffers[0].name, buffers[1].name), (pending[0].name, pending[1].name))
        return JoinStep(factory, stores, {right: (ks, rvs, extract or self.default_timestamp)}, (),
                        JoinSpec(kind, how, _topic(left), right, joiner, windows, key), ks)

    def _foreign_key_join(self, name: str, left: TableSource, right: TableSource, output: str,
                          joiner: Callable[[Any, Any], Any], how: JoinKind, foreign_key: Callable[[Any], Any],
                          output_value_serde: SerdeSpec, persistent: bool) -> SubTopology:
        """Two sub-topologies, `name` (the left table and the responses) and `<name>.right` (the
        subscriptions and the right table), linked by two internal topics (`eos.dsl.tables.foreign_key_join`)."""
        if left.topic == right.topic:
            raise ValueError(f"join {name!r}: a table cannot be joined with itself")
        self._unused(name)
        sides = [Table(self, t.key_serde, t.value_serde, (t.topic,), node=self.graph.add(SourceNode(  # type: ignore[arg-type]
            f"{step}.source", (t.topic,), t.key_serde, t.value_serde, t.timestamp, t.offset_reset)).name,
            source=t) for step, t in ((name, left), (f"{name}.right", right))]
        node = foreign_key_join(self, name, sides[0], sides[1], joiner, how, foreign_key, persistent)  # type: ignore[arg-type]
        self.graph.add(SinkNode(f"{name}.sink", output, (node,), left.key_serde, serde_for(output_value_serde)))
        return self.subtopologies[name]

    def _reading(self, table: TableSource) -> tuple[Any, Any, Any]:
        """How a join reads a table's topic: its serdes, and its timestamps (the application's default unless
        the table has its own)."""
        return table.key_serde, table.value_serde, table.timestamp or self.default_timestamp

    def aggregate_table(self, table: Table, output: str | None, *, name: str,
                        group_by: Callable[[Any, Any], tuple[Any, Any]], initializer: Callable[[], Any],
                        adder: Callable[[Any, Any, Any], Any], subtractor: Callable[[Any, Any, Any], Any],
                        key_serde: SerdeSpec = "string", value_serde: SerdeSpec = "json",
                        aggregate_serde: SerdeSpec = "json", persistent: bool = True) -> SubTopology:
        """Aggregate a table re-grouped by `group_by(key, value) -> (new key, new value)`, as Kafka Streams'
        `KTable.groupBy(...).aggregate(initializer, adder, subtractor)`: when a row changes, its old value is
        taken out of its old group with `subtractor(group key, old value, aggregate)` and the new value put
        into its group with `adder(group key, new value, aggregate)`; a deleted row is only subtracted.
        Every aggregate update goes to `output` (a table keyed by the group key; an aggregate that becomes
        None is a tombstone). The rows travel through the repartition topic
        `<application_id>-<name>-repartition`, written by the sub-topology `<name>.repartition`, which keeps
        the table's previous values in the store `<name>-source`; the aggregates are in `<name>-store`.
        `key_serde`/`value_serde` serialize the new keys and values."""
        if not isinstance(table, Table | TableSource):
            raise TypeError(f"aggregate_table({name!r}) aggregates an app.table(...); for a stream topic use "
                            "app.aggregate(topic, ..., group_by=...)")
        source: TableSource = _read_table(table)
        self._unused(name)
        read = self.graph.add(SourceNode(f"{name}.repartition.source", (source.topic,), source.key_serde,
                                         source.value_serde, source.timestamp, source.offset_reset)).name
        node, _, _ = table_aggregation(self, name, read, source, group_by, initializer, adder,  # type: ignore[arg-type]
                                       subtractor, serde_for(key_serde), serde_for(value_serde),
                                       serde_for(aggregate_serde), persistent and source.persistent)
        if output is not None:
            self.graph.add(SinkNode(f"{name}.sink", output, (node,), serde_for(key_serde), serde_for(aggregate_serde)))
        return self.subtopologies[name]

    def count_table(self, table: Table, output: str | None, *, name: str, group_by: Callable[[Any, Any], Any],
                    **kwargs: Any) -> SubTopology:
        """Rows per group of a table: `group_by(key, value) -> group key` (a long per group; a row that
        changes group moves from one count to the other)."""
        require_functions(name, group_by=group_by, takes={"group_by": ("key", "value")})
        return self.aggregate_table(table, output, name=name, group_by=lambda k, v: (group_by(k, v), 1),
                                    initializer=lambda: 0, adder=lambda g, v, n: n + v,
                                    subtractor=lambda g, v, n: n - v, **{"aggregate_serde": "long", **kwargs})

    def sum_table(self, table: Table, output: str | None, *, name: str, group_by: Callable[[Any, Any], Any],
                  value: Callable[[Any], Any] = lambda v: v, **kwargs: Any) -> SubTopology:
        """Sum of `value(row value)` per group of a table, `group_by(key, value) -> group key`."""
        require_functions(name, group_by=group_by, value=value,
                          takes={"group_by": ("key", "value"), "value": ("value",)})
        return self.aggregate_table(table, output, name=name, group_by=lambda k, v: (group_by(k, v), value(v)),
                                    initializer=lambda: 0, adder=lambda g, v, total: total + v,
                                    subtractor=lambda g, v, total: total - v, **kwargs)


def _read_table(side: Any) -> Any:
    """What the step-per-call API reads of a DSL table: where it is read from (a derived table is refused)."""
    return side._read() if isinstance(side, Table) else side


def _kind(left: Any, right: Any, windows: JoinWindows | None) -> JoinType:
    kind = _sides(left, right, windows)
    if windows is not None and kind != "stream-stream":
        raise ValueError(f"windows= is for joins of two streams; a {kind} join pairs each record with the "
                         "table's current value for its key: leave windows out")
    return kind


def _sides(left: Any, right: Any, windows: JoinWindows | None) -> JoinType:
    if isinstance(left, GlobalTable):
        raise TypeError("a global table can only be the right side of a join (stream x global table)")
    if isinstance(left, str) and isinstance(right, TableSource):
        return "stream-table"
    if isinstance(left, str) and isinstance(right, GlobalTable):
        return "stream-global"
    if isinstance(left, TableSource) and isinstance(right, TableSource):
        return "table-table"
    if isinstance(left, str) and isinstance(right, str):
        if windows is None:
            raise ValueError("joining two streams needs windows=JoinWindows(...): how far apart in time two records "
                             "may be to join (a stream has no 'current value' to join with)")
        return "stream-stream"
    if isinstance(left, TableSource) and isinstance(right, str):
        raise TypeError("a table x stream join is written stream first: app.join(stream_topic, table, ...)")
    raise TypeError(f"cannot join {type(left).__name__} with {type(right).__name__}: give topic names (streams), "
                    "app.table(...) or app.global_table(...)")


def _topic(side: str | TableSource | GlobalTable) -> str:
    return side if isinstance(side, str) else side.topic


def _record_key(record: Record) -> Any:
    return record.key
