"""Join processors (see `eos.tables` for the kinds and their semantics).

Each join runs in one sub-topology whose tasks read both sides, co-partitioned, merged in timestamp order.
Tables are materialized in key-value stores of the task (changelog-backed, restored by replay, kept by
standbys), stream-stream joins keep each side's recent records in record buffers. A table update
produces no output of its own in a stream-table join: it is recorded in the lineage ledger as consumed.

Stream-stream left and outer joins emit a record that found no partner in a stream-time punctuation, once
no on-time record can join it any more: in the transaction that also deletes it from the pending store,
so it is emitted exactly once, and never after a partner joined it (the partner deletes it first).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from eos.errors import SerdeError
from eos.operators.windows import LatePolicy, LateRecordError
from eos.processor import Processor, ProcessorContext
from eos.records import Record
from eos.tables import JoinKind, JoinWindows
from recovery import (
    NOT_PUT,
    VALID_TO_UNDEFINED,
    Held,
    KeyValueStore,
    RecordBuffer,
    TimeOrderedBuffer,
    VersionedKeyValueStore,
)

__all__ = ["StreamTableJoin", "GlobalTableJoin", "TableTableJoin", "StreamStreamJoin", "topic_set", "keep_update"]

Joiner = Callable[[Any, Any], Any]


def topic_set(topics: str | frozenset[str]) -> frozenset[str]:
    """A join tells its sides apart by the topic a record was read from: a side read through other nodes of
    the graph (a filtered table, an aggregation's result) carries its source's topics."""
    return frozenset({topics}) if isinstance(topics, str) else frozenset(topics)


def keep_update(store: KeyValueStore | VersionedKeyValueStore, record: Record,
                context: ProcessorContext | None = None) -> bool:
    """Put a table update into the store that keeps the table. False when the table's current row did not
    change, so that nothing may follow from the update (Kafka Streams' semantics for versioned tables,
    KIP-914): in a versioned store, an update older than its key's newest version (kept in the history, for
    lookups by time), or older than the history retention (not kept); the update is then counted as dropped
    in `context` (none: a store restored from its table's topic, `eos.worker.stores`)."""
    if not isinstance(store, VersionedKeyValueStore):
        store.put(record.key, record.value, record.timestamp)
        return True
    valid_to = store.put(record.key, record.value, record.timestamp)
    if valid_to == VALID_TO_UNDEFINED or context is None:
        return valid_to == VALID_TO_UNDEFINED
    context.record_dropped("table update older than the history retention" if valid_to == NOT_PUT
                           else "out-of-order table update")
    return False


class StreamTableJoin(Processor):
    """Stream records joined with the table's value for their key at the time they are processed; with a
    versioned table, with its value as of the stream record's timestamp (None where that is older than the
    table's history retention).

    With a grace period (`buffer`: a `TimeOrderedBuffer`; Kafka Streams' KIP-923), each stream record is held
    back until the stream side's observed stream time has passed its timestamp by the grace period, so that
    table updates up to that late are read first; records are let go in timestamp order, each joined with the
    table as of its timestamp then, its outputs named after it (`ProcessorContext.hold`). A stream record older
    than observed stream time minus the grace period is dropped as late."""

    def __init__(self, table_topics: str | frozenset[str], store: str, joiner: Joiner, how: JoinKind,
                 grace: int | None = None, buffer: str | None = None) -> None:
        self.table_topics = topic_set(table_topics)  # the topics the table side's records come from
        self.store_name, self.joiner, self.how = store, joiner, how
        self.grace, self.buffer_name = grace, buffer

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.table: KeyValueStore | VersionedKeyValueStore = context.store(self.store_name)
        self.versioned = isinstance(self.table, VersionedKeyValueStore)
        self.buffer: TimeOrderedBuffer | None = context.store(self.buffer_name) if self.buffer_name else None

    def process(self, record: Record) -> None:
        if record.topic in self.table_topics:
            if record.key is None:
                self.context.record_dropped("table update without a key")
                return
            keep_update(self.table, record, self.context)  # a tombstone deletes the key
            return
        if record.value is None or (record.key is None and self.how == "inner"):
            self.context.record_dropped("stream record without a key or value")
            return
        if self.buffer is not None:
            self._hold(record, self.buffer)
            return
        self._join(record.key, record.value, record.timestamp)

    def _join(self, key: Any, value: Any, timestamp: int) -> None:
        if key is None:
            current = None
        elif self.versioned:
            current = self.table.get(key, as_of=timestamp)  # type: ignore[call-arg]
        else:
            current = self.table.get(key)
        if current is None and self.how == "inner":
            return
        self.context.forward(key, self.joiner(value, current), timestamp=timestamp)

    def _hold(self, record: Record, buffer: TimeOrderedBuffer) -> None:
        """Keep the record until the grace period has passed, and let go of those it has passed for."""
        grace = self.grace
        assert grace is not None
        before, observed = buffer.observe(record.timestamp)
        deadline = observed - grace
        if record.timestamp < deadline:
            self.context.record_dropped("late")
            return
        buffer.put(Held(record.key, record.value, record.timestamp, self.context.hold()))
        # (what was due at the stream's time before was let go then)
        for held in buffer.take_until(deadline, since=None if before is None else before - grace):
            self.context.release(held.message, partial(self._join, held.key, held.value, held.timestamp))


class GlobalTableJoin(Processor):
    """Stream records joined with a global table's value for `key(record)`; with a versioned global table, its
    value as of the stream record's timestamp."""

    def __init__(self, table: str, key: Callable[[Record], Any], joiner: Joiner, how: JoinKind) -> None:
        self.table_name, self.key, self.joiner, self.how = table, key, joiner, how

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.table = context.store(self.table_name)
        self.versioned = self.table.versioned  # (a GlobalTableView)

    def process(self, record: Record) -> None:
        if record.value is None:
            self.context.record_dropped("stream record without a value")
            return
        table_key = self.key(record)
        try:
            if table_key is None:
                current = None
            elif self.versioned:  # (a versioned global table: its row as of the record's time)
                current = self.table.get(table_key, as_of=record.timestamp)
            else:
                current = self.table.get(table_key)
        except SerdeError as exc:
            try:  # (the key, or else the row, as the error says)
                self.table.table.key_serde.serialize(table_key)
            except SerdeError:
                raise SerdeError(f"the key given for global table {self.table_name!r}, {table_key!r} "
                                 f"({type(table_key).__name__}), is not one of its keys: {exc}; return a key its key "
                                 "serde takes") from exc
            raise
        if current is None and self.how == "inner":
            return
        self.context.forward(record.key, self.joiner(record.value, current))


class TableTableJoin(Processor):
    """Two tables joined per key: whenever either side changes, the joined table's new value for the key
    (or a tombstone when the key leaves it), with the larger timestamp of the two sides. An out-of-order
    update of a versioned table changes no row, so it makes no result."""

    def __init__(self, left_topics: str | frozenset[str], left_store: str, right_store: str, joiner: Joiner,
                 how: JoinKind) -> None:
        self.left_topics, self.joiner, self.how = topic_set(left_topics), joiner, how
        self.store_names = (left_store, right_store)

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.left: KeyValueStore = context.store(self.store_names[0])
        self.right: KeyValueStore = context.store(self.store_names[1])

    def _present(self, left: Any, right: Any) -> bool:
        if self.how == "inner":
            return left is not None and right is not None
        if self.how == "left":
            return left is not None
        return left is not None or right is not None

    def process(self, record: Record) -> None:
        if record.key is None:
            self.context.record_dropped("table update without a key")
            return
        is_left = record.topic in self.left_topics
        own, other = (self.left, self.right) if is_left else (self.right, self.left)
        before = own.get(record.key)
        partner = other.get_with_timestamp(record.key)
        other_value, other_ts = partner if partner is not None else (None, -1)
        if not keep_update(own, record, self.context):
            return
        old = (before, other_value) if is_left else (other_value, before)
        new = (record.value, other_value) if is_left else (other_value, record.value)
        timestamp = max(record.timestamp, other_ts)
        if self._present(*new):
            self.context.forward(record.key, self.joiner(*new), timestamp=timestamp)
        elif self._present(*old):
            self.context.forward(record.key, None, timestamp=timestamp)


class StreamStreamJoin(Processor):
    """Two streams joined within `JoinWindows`: every pair of same-key records at most `before`/`after`
    apart, as soon as the second of them arrives; with left/outer, partnerless records once their window
    closed."""

    def __init__(self, left_topics: frozenset[str], windows: JoinWindows, joiner: Joiner, how: JoinKind,
                 late: LatePolicy, buffers: tuple[str, str], pending: tuple[str, str]) -> None:
        self.left_topics, self.windows, self.joiner, self.how = left_topics, windows, joiner, how
        self.late_policy = late
        self.buffer_names, self.pending_names = buffers, pending
        self._horizon: int | None = None

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.buffers: tuple[RecordBuffer, RecordBuffer] = (context.store(self.buffer_names[0]),
                                                           context.store(self.buffer_names[1]))
        self.keeps_pending = (self.how in ("left", "outer"), self.how == "outer")
        # only the sides whose partnerless records are emitted keep them (the other store is not declared)
        self.pending: tuple[Any, Any] = tuple(context.store(name) if keep else None  # type: ignore[assignment]
                                              for name, keep in zip(self.pending_names, self.keeps_pending,
                                                                    strict=True))
        context.schedule(1, self.on_stream_time, type="stream")

    def process(self, record: Record) -> None:
        if record.key is None or record.value is None:
            self.context.record_dropped("stream record without a key or value")
            return
        w, t = self.windows, record.timestamp
        if t < self.context.stream_time - w.span:
            if self.late_policy == "dead_letter":
                raise LateRecordError(f"late record at {t}: its join window closed (stream time "
                                      f"{self.context.stream_time}, before + after + grace {w.span} ms)")
            self.context.record_dropped("late")
            return
        side = 0 if record.topic in self.left_topics else 1
        seq = self.buffers[side].next_seq(record.key, t)  # (a flat_map before the join: several at one t)
        # a left record at t joins right records in [t - before, t + after]; a right one, left records in
        # [t - after, t + before]
        lo, hi = (t - w.before, t + w.after) if side == 0 else (t - w.after, t + w.before)
        partners = self.buffers[1 - side].range(record.key, lo, hi)
        self.buffers[side].put(record.key, t, seq, record.value)
        for p_ts, p_seq, p_value in partners:
            pair = (record.value, p_value) if side == 0 else (p_value, record.value)
            self.context.forward(record.key, self.joiner(*pair), timestamp=max(t, p_ts))
            if self.keeps_pending[1 - side]:
                self.pending[1 - side].remove(record.key, p_ts, p_seq)
        if not partners and self.keeps_pending[side]:
            self.pending[side].put(record.key, t, seq, record.value)

    def on_stream_time(self, stream_time: int) -> None:
        """Emit the partnerless records no on-time record can join any more, then drop what no on-time record
        can join from the buffers. A left record at t can be joined by right records up to t + after, and
        on-time records are at least stream_time - span: it is done when t + after < stream_time - span."""
        w = self.windows
        horizon = stream_time - w.span
        if self._horizon is not None and horizon <= self._horizon:
            return
        since = None if self._horizon is None else self._horizon - max(w.before, w.after)
        for side, reach in ((0, w.after), (1, w.before)):
            done = horizon - reach  # records before this time can no longer be joined
            if self.keeps_pending[side]:
                for key, ts, _seq, value in self.pending[side].take_before(done, since):
                    pair = (value, None) if side == 0 else (None, value)
                    self.context.forward(key, self.joiner(*pair), timestamp=ts)
            self.buffers[side].expire_before(done, since)
        self._horizon = horizon
