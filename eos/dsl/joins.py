"""Tables, global tables and joins (see `eos.tables` for the semantics)."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from typing import Any

from eos.dsl.aggregations import AggregationMethods
from eos.dsl.base import SerdeSpec
from eos.operators.joins import GlobalTableJoin, StreamStreamJoin, StreamTableJoin, TableTableJoin
from eos.operators.windows import LatePolicy
from eos.processor import Processor
from eos.records import Record
from eos.serde import serde_for
from eos.tables import GlobalTable, JoinKind, JoinSpec, JoinType, JoinWindows, Table
from eos.time import TimestampSpec, timestamp_extractor
from eos.topology import SubTopology
from recovery import StoreSpec

__all__ = ["JoinMethods"]

Side = str | Table | GlobalTable
_HOW: dict[JoinType, tuple[str, ...]] = {"stream-table": ("inner", "left"), "stream-global": ("inner", "left"),
                                    "stream-stream": ("inner", "left", "outer"),
                                    "table-table": ("inner", "left", "outer")}


class JoinMethods(AggregationMethods):
    def table(self, topic: str, *, name: str | None = None, key_serde: SerdeSpec = "string",
              value_serde: SerdeSpec = "json", timestamp: TimestampSpec = None, persistent: bool = True) -> Table:
        """A table read from `topic` (best compacted): the latest value per key, tombstones delete. Pass it to
        `app.join`; each join that reads it keeps it in a store `<join>-<name>` (RocksDB when `persistent`),
        changelog-backed, queryable (`app.store_view`)."""
        return Table(topic, name or _store_name(topic), serde_for(key_serde), serde_for(value_serde),
                     timestamp_extractor(timestamp) if timestamp is not None else None, persistent)

    def global_table(self, topic: str, *, name: str | None = None, key_serde: SerdeSpec = "string",
                     value_serde: SerdeSpec = "json") -> GlobalTable:
        """A table every task holds whole (all partitions of `topic`), read up to offsets pinned per batch;
        joined with `app.join(stream, global_table, ..., key=fn(record) -> table key)`. Kept in memory."""
        return GlobalTable(topic, name or _store_name(topic), serde_for(key_serde), serde_for(value_serde))

    def join(self, left: str | Table, right: Side, output: str, *, name: str, joiner: Callable[[Any, Any], Any],
             how: JoinKind = "inner", windows: JoinWindows | None = None, key: Callable[[Record], Any] | None = None,
             key_serde: SerdeSpec = "string", value_serde: SerdeSpec = "json", right_value_serde: SerdeSpec = None,
             output_value_serde: SerdeSpec = "json", timestamp: TimestampSpec = None,
             late_records: LatePolicy = "drop", persistent: bool = True) -> SubTopology:
        """Join `left` with `right` into `output` (a sub-topology named `name`); `joiner(left value, right
        value)` makes the output value, None standing for a missing side. Which join is decided by the sides:

        * a stream topic and a `Table`: stream-table join (`how` inner or left);
        * a stream topic and a `GlobalTable`: stream-global-table join, the table key is `key(record)`;
        * two stream topics and `windows=JoinWindows(...)`: windowed stream-stream join (inner, left, outer);
        * two `Table`s: table-table join (inner, left, outer); the output is a table too.

        Stream sides are read with `key_serde`/`value_serde` (the right stream with `right_value_serde`,
        default the same) and `timestamp`; tables with their own. Late stream-stream records are dropped and
        counted, or dead-lettered with `late_records="dead_letter"`."""
        kind = _kind(left, right, windows)
        if how not in _HOW[kind]:
            raise ValueError(f"join {name!r}: a {kind} join is one of {', '.join(_HOW[kind])}, got how={how!r}")
        if kind != "stream-global" and key is not None:
            raise ValueError(f"join {name!r}: key= selects the table key of a global table join only; "
                             "re-key a stream first with app.repartition(...)")
        if kind == "stream-global" and key is None:
            key = _record_key
        if late_records not in ("drop", "dead_letter"):
            raise ValueError(f"late_records must be 'drop' or 'dead_letter', got {late_records!r}")
        ks, vs = serde_for(key_serde), serde_for(value_serde)
        extract = timestamp_extractor(timestamp) if timestamp is not None else None
        per_topic: dict[str, tuple[Any, Any, Any]] = {}
        stores: tuple[StoreSpec, ...] = ()
        global_tables: tuple[GlobalTable, ...] = ()
        factory: Callable[[], Processor]
        spec = JoinSpec(kind, how, _topic(left), _topic(right), joiner, windows, key)
        if kind == "stream-table":
            assert isinstance(left, str) and isinstance(right, Table)
            table_store = _table_store(name, right, persistent)
            stores, per_topic[right.topic] = (table_store,), (right.key_serde, right.value_serde, right.timestamp)
            factory = partial(StreamTableJoin, right.topic, table_store.name, joiner, how)
            spec = JoinSpec(kind, how, left, right.topic, joiner, right_store=table_store.name)
        elif kind == "stream-global":
            assert isinstance(left, str) and isinstance(right, GlobalTable) and key is not None
            global_tables = (right,)
            factory = partial(GlobalTableJoin, right.name, key, joiner, how)
        elif kind == "table-table":
            assert isinstance(left, Table) and isinstance(right, Table)
            if left.topic == right.topic:
                raise ValueError(f"join {name!r}: a table cannot be joined with itself")
            left_store, right_store = _table_store(name, left, persistent), _table_store(name, right, persistent)
            if left_store.name == right_store.name:
                right_store = _table_store(name, right, persistent, suffix="right")
            stores = (left_store, right_store)
            ks = left.key_serde
            for t in (left, right):
                per_topic[t.topic] = (t.key_serde, t.value_serde, t.timestamp)
            factory = partial(TableTableJoin, left.topic, left_store.name, right_store.name, joiner, how)
            spec = JoinSpec(kind, how, left.topic, right.topic, joiner, left_store=left_store.name,
                            right_store=right_store.name)
        else:
            assert isinstance(left, str) and isinstance(right, str) and windows is not None
            if left == right:
                raise ValueError(f"join {name!r}: a stream cannot be joined with itself (read it once and "
                                 "repartition it to a second topic)")
            rvs = serde_for(right_value_serde, vs)
            per_topic[right] = (ks, rvs, extract or self.default_timestamp)
            keep = windows.span + max(windows.before, windows.after)
            buffers = tuple(StoreSpec(f"{name}-{side}-buffer", ks, v, persistent, timestamped=True,
                                      kind="record_buffer", retention_ms=keep)
                            for side, v in (("left", vs), ("right", rvs)))
            pending = tuple(StoreSpec(f"{name}-{side}-pending", ks, v, persistent, timestamped=True,
                                      kind="record_buffer", retention_ms=keep)
                            for side, v in (("left", vs), ("right", rvs)))
            stores = (*buffers, *(p for p, keeps in zip(pending, (how != "inner", how == "outer"), strict=True)
                                  if keeps))
            names = (buffers[0].name, buffers[1].name)
            factory = partial(StreamStreamJoin, left, windows, joiner, how, late_records, names,
                              (pending[0].name, pending[1].name))
        inputs = (_topic(left),) if kind == "stream-global" else (_topic(left), _topic(right))
        sub = self._add(name, inputs, output, ks, vs, ks, output_value_serde, (), timestamp=timestamp,
                        processor_factory=factory, stores=stores, per_topic=per_topic, global_tables=global_tables,
                        join=spec)
        return sub


def _kind(left: Any, right: Any, windows: JoinWindows | None) -> JoinType:
    if isinstance(left, GlobalTable):
        raise TypeError("a global table can only be the right side of a join (stream x global table)")
    if isinstance(left, str) and isinstance(right, Table):
        return "stream-table"
    if isinstance(left, str) and isinstance(right, GlobalTable):
        return "stream-global"
    if isinstance(left, Table) and isinstance(right, Table):
        return "table-table"
    if isinstance(left, str) and isinstance(right, str):
        if windows is None:
            raise ValueError("joining two streams needs windows=JoinWindows(...): how far apart in time two records "
                             "may be to join (a stream has no 'current value' to join with)")
        return "stream-stream"
    if isinstance(left, Table) and isinstance(right, str):
        raise TypeError("a table x stream join is written stream first: app.join(stream_topic, table, ...)")
    raise TypeError(f"cannot join {type(left).__name__} with {type(right).__name__}: give topic names (streams), "
                    "app.table(...) or app.global_table(...)")


def _topic(side: Side) -> str:
    return side if isinstance(side, str) else side.topic


def _record_key(record: Record) -> Any:
    return record.key


def _store_name(topic: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", topic)[:60]


def _table_store(join: str, table: Table, persistent: bool, suffix: str = "") -> StoreSpec:
    name = f"{join}-{table.name}" + (f"-{suffix}" if suffix else "")
    return StoreSpec(name, table.key_serde, table.value_serde, persistent and table.persistent, timestamped=True)
