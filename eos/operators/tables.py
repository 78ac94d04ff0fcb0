"""Table operators that move updates between tasks: the foreign-key table-table join and table aggregation
with re-grouping (Kafka Streams' KTable-KTable foreign-key join and KGroupedTable.aggregate).

Foreign-key join (left table L, right table R, `foreign_key(left value) -> R key`), two sub-topologies:

* the left one reads L and the **response** topic (partitioned like L). It keeps L in a store; for each L
  update it sends a **subscription** (left key, a hash of the left value, its own partition) to the
  subscription topic, keyed by the foreign key (partitioned like R), and an unsubscription to the old
  foreign key when it changed. A response (left key, hash, R value) is joined with the left key's current
  value, and dropped when the hash says it answers an older left value: a left update that raced an R
  update never yields a result from a stale pair.
* the right one reads the subscription topic and R. It keeps R and the subscriptions (foreign key, left
  key) in stores; a subscription is answered with R's current value for its foreign key, an R update with
  one response per subscriber. Responses go straight to the subscriber's partition.

Both run in their tasks' transactions like any sub-topology: a subscription or response is produced
exactly once, with the store changes and input offsets of the batch that made it.

Suppression (`table.suppress(time_limit)`): `Suppress` below.

Table aggregation (`group_by(key, value) -> (new key, new value)`): a first sub-topology keeps the table's
previous value per key and sends, for each update, the change (old and new grouped value) to a repartition
topic keyed by the new key: one record when the grouped key stays, two (a subtraction to the old key, an
addition to the new one) when it moves. The aggregating sub-topology applies `subtractor` then `adder`.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

from eos.cache import updates
from eos.errors import BufferFullError
from eos.operators.joins import keep_update, topic_set
from eos.processor import Processor, ProcessorContext
from eos.records import Output, Record
from eos.serde import Serde
from recovery import KeyValueStore, Suppressed, SuppressionBuffer

__all__ = ["ForeignKeyLeft", "ForeignKeyRight", "TableRegroup", "TableAggregate", "Change", "encode_change",
           "decode_change", "Subscription", "encode_subscription", "decode_subscription", "encode_response",
           "decode_response", "value_hash", "Suppress"]

Joiner = Callable[[Any, Any], Any]
_UNSUBSCRIBE, _SUBSCRIBE = 0, 1
_NO_HASH = bytes(16)


def value_hash(data: bytes | None) -> bytes:
    """Which left value a subscription was sent for (16 bytes; all zeros for no value)."""
    return _NO_HASH if data is None else hashlib.blake2b(data, digest_size=16).digest()


class Subscription(NamedTuple):
    subscribe: bool
    partition: int
    hash: bytes
    left_key: bytes


def encode_subscription(s: Subscription) -> bytes:
    return struct.pack(">Bi16s", _SUBSCRIBE if s.subscribe else _UNSUBSCRIBE, s.partition, s.hash) + s.left_key


def decode_subscription(data: bytes) -> Subscription:
    kind, partition, digest = struct.unpack_from(">Bi16s", data)
    return Subscription(kind == _SUBSCRIBE, partition, digest, data[21:])


def encode_response(digest: bytes, right: bytes | None) -> bytes:
    return digest + (b"\x00" if right is None else b"\x01" + right)


def decode_response(data: bytes) -> tuple[bytes, bytes | None]:
    return data[:16], (data[17:] if data[16:17] == b"\x01" else None)


class ForeignKeyLeft(Processor):
    """The left table's side of a foreign-key join (see the module's docstring)."""

    def __init__(self, left_topics: str | frozenset[str], store: str, foreign_key: Callable[[Any], Any],
                 joiner: Joiner, how: str, subscriptions: str, left_key_serde: Serde, left_value_serde: Serde,
                 right_key_serde: Serde, right_value_serde: Serde) -> None:
        self.left_topics, self.store_name, self.foreign_key = topic_set(left_topics), store, foreign_key
        self.joiner, self.how, self.subscriptions = joiner, how, subscriptions
        self.lks, self.lvs, self.rks, self.rvs = left_key_serde, left_value_serde, right_key_serde, right_value_serde

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.left: KeyValueStore = context.store(self.store_name)

    def _emit(self, key: Any, value: Any, timestamp: int) -> None:
        self.context.forward(key, value, timestamp=timestamp)  # a result (None: a tombstone)

    def _subscribe(self, foreign_key: Any, left_key: Any, left_value: Any) -> None:
        digest = value_hash(None if left_value is None else self.lvs.serialize(left_value))
        sub = Subscription(left_value is not None, self.context.partition, digest, self.lks.serialize(left_key) or b"")
        self.context.forward(Output(self.rks.serialize(foreign_key), encode_subscription(sub),
                                    topic=self.subscriptions))

    def process(self, record: Record) -> None:
        if record.topic in self.left_topics:
            self._left_update(record)
        else:
            self._response(record)

    def _left_update(self, record: Record) -> None:
        if record.key is None:
            self.context.record_dropped("table update without a key")
            return
        before = self.left.get(record.key)
        if record.value is None and before is None:
            self.context.record_dropped("tombstone of a key the table does not hold")
            return
        if not keep_update(self.left, record, self.context):  # (an out-of-order update of a versioned table)
            return
        old_fk = None if before is None else self.foreign_key(before)
        new_fk = None if record.value is None else self.foreign_key(record.value)
        if old_fk is not None and old_fk != new_fk:
            self._subscribe(old_fk, record.key, None)  # unsubscribe from the foreign key left behind
        if new_fk is not None:
            self._subscribe(new_fk, record.key, record.value)  # answered with the right value, or None
        elif record.value is None:
            self._emit(record.key, None, record.timestamp)  # the left row is gone: so is its result
        else:  # no foreign key: nothing to join with
            self._emit(record.key, self.joiner(record.value, None) if self.how == "left" else None,
                       record.timestamp)

    def _response(self, record: Record) -> None:
        key = self.lks.deserialize(record.key)
        digest, right = decode_response(record.value)
        current = self.left.get(key)
        if current is None or value_hash(self.lvs.serialize(current)) != digest:
            self.context.record_dropped("response to an older left value")
            return
        right_value = None if right is None else self.rvs.deserialize(right)
        if right_value is None and self.how == "inner":
            self._emit(key, None, record.timestamp)
        else:
            self._emit(key, self.joiner(current, right_value), record.timestamp)


class ForeignKeyRight(Processor):
    """The right table's side of a foreign-key join: answers subscriptions and R updates."""

    def __init__(self, right_topics: str | frozenset[str], store: str, subscriptions_store: str, responses: str,
                 right_key_serde: Serde, right_value_serde: Serde) -> None:
        self.right_topics, self.store_name = topic_set(right_topics), store
        self.subs_name, self.responses = subscriptions_store, responses
        self.rks, self.rvs = right_key_serde, right_value_serde

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.right: KeyValueStore = context.store(self.store_name)
        self.subs: KeyValueStore = context.store(self.subs_name)

    def _respond(self, left_key: bytes, partition: int, digest: bytes, value: Any) -> None:
        self.context.forward(Output(left_key, encode_response(digest, None if value is None
                                                              else self.rvs.serialize(value)),
                                    topic=self.responses, partition=partition))

    def process(self, record: Record) -> None:
        if record.topic in self.right_topics:
            if record.key is None:
                self.context.record_dropped("table update without a key")
                return
            if not keep_update(self.right, record, self.context):
                return
            for _, entry in self.subs.prefix_scan(_prefix(self.rks.serialize(record.key) or b"")):
                partition, digest, left_key = _unpack_subscriber(entry)
                self._respond(left_key, partition, digest, record.value)
            return
        sub = decode_subscription(record.value)
        foreign_key = self.rks.deserialize(record.key)
        entry_key = _prefix(record.key or b"") + sub.left_key
        if not sub.subscribe:
            self.subs.delete(entry_key)
            self.context.record_dropped("unsubscription")
            return
        self.subs.put(entry_key, struct.pack(">i16s", sub.partition, sub.hash) + sub.left_key)
        self._respond(sub.left_key, sub.partition, sub.hash, self.right.get(foreign_key))


def _prefix(foreign_key: bytes) -> bytes:
    return struct.pack(">i", len(foreign_key)) + foreign_key


def _unpack_subscriber(entry: bytes) -> tuple[int, bytes, bytes]:
    partition, digest = struct.unpack_from(">i16s", entry)
    return partition, digest, entry[20:]


# ---------------------------------------------------------------- table aggregation


class Change(NamedTuple):
    """A grouped value leaving (`old`) and/or joining (`new`) a group; None: no such side."""

    old: bytes | None
    new: bytes | None


def encode_change(change: Change) -> bytes:
    old = b"" if change.old is None else change.old
    flags = (change.old is not None) | (change.new is not None) << 1
    return struct.pack(">Bi", flags, len(old)) + old + (b"" if change.new is None else change.new)


def decode_change(data: bytes) -> Change:
    flags, size = struct.unpack_from(">Bi", data)
    return Change(data[5:5 + size] if flags & 1 else None, data[5 + size:] if flags & 2 else None)


class TableRegroup(Processor):
    """The table's side of a re-grouping aggregation: its previous value per key, and each update's change
    sent to the new key (see the module's docstring)."""

    def __init__(self, store: str, group_by: Callable[[Any, Any], tuple[Any, Any]], value_serde: Serde) -> None:
        self.store_name, self.group_by, self.vs = store, group_by, value_serde

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.table: KeyValueStore = context.store(self.store_name)

    def _grouped(self, key: Any, value: Any) -> tuple[Any, bytes] | None:
        if value is None:
            return None
        pair = self.group_by(key, value)
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise TypeError(f"group_by must return (new key, new value), got {pair!r}")
        data = self.vs.serialize(pair[1])
        return None if pair[0] is None or data is None else (pair[0], data)  # no key or value: no group

    def process(self, record: Record) -> None:
        if record.key is None:
            self.context.record_dropped("table update without a key")
            return
        before = self.table.get(record.key)
        if record.value is None and before is None:
            self.context.record_dropped("tombstone of a key the table does not hold")
            return
        if not keep_update(self.table, record, self.context):  # (an out-of-order update of a versioned table)
            return
        old, new = self._grouped(record.key, before), self._grouped(record.key, record.value)
        if old is not None and new is not None and old[0] == new[0]:
            self.context.forward(new[0], encode_change(Change(old[1], new[1])))
            return
        if old is not None:
            self.context.forward(old[0], encode_change(Change(old[1], None)))
        if new is not None:
            self.context.forward(new[0], encode_change(Change(None, new[1])))
        if old is None and new is None:
            self.context.record_dropped("update grouped to no key")


class TableAggregate(Processor):
    """Applies the changes of a re-grouped table: `subtractor` for the old value, then `adder` for the new;
    every update of an aggregate is forwarded (the output is the aggregated table's changelog)."""

    def __init__(self, store: str, initializer: Callable[[], Any], adder: Callable[[Any, Any, Any], Any],
                 subtractor: Callable[[Any, Any, Any], Any], value_serde: Serde) -> None:
        self.store_name, self.initializer, self.adder, self.subtractor = store, initializer, adder, subtractor
        self.vs = value_serde

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.store: KeyValueStore = context.store(self.store_name)
        self.emit = updates(context, self.store)  # through the record cache, if the task has one

    def process(self, record: Record) -> None:
        change = decode_change(record.value)
        current = self.store.get_with_timestamp(record.key)
        aggregate, timestamp = ((self.initializer(), record.timestamp) if current is None
                                else (current[0], max(current[1], record.timestamp)))
        if change.old is not None:
            aggregate = self.subtractor(record.key, self.vs.deserialize(change.old), aggregate)
        if change.new is not None:
            aggregate = self.adder(record.key, self.vs.deserialize(change.new), aggregate)
        self.store.put(record.key, aggregate, timestamp)
        self.emit(record.key, aggregate, timestamp)  # None: the group is gone


# ---------------------------------------------------------------- suppression


class Suppress(Processor):
    """A table's updates held back (Kafka Streams' `KTable.suppress(Suppressed.untilTimeLimit(...))`): each
    key's latest update waits in a buffer (`recovery.SuppressionBuffer`) until the buffer's observed stream
    time (the largest timestamp of the updates it was given) is `time_limit` past the time the key was first
    buffered, and goes on then; a later update of a buffered key replaces the value and keeps the time. Over
    `max_records` keys or `max_bytes` (keys' and values' bytes) the keys buffered first go on early
    (`when_full="emit_early"`), or the task fails (`"shut_down"`, `BufferFullError`).

    Each update is held with the input record it was made of (`ProcessorContext.hold`): what goes on is
    forwarded in that record's scope (`release`), named after it in the lineage, with its timestamp and
    headers, and committed in the transaction that takes it out of the buffer. An update replaced before it
    went on leaves its record held and filtered. An update made outside a record's processing (a record
    cache's flush) goes on in a scope without a record (`eos.derived`)."""

    def __init__(self, store: str, time_limit_ms: int, max_records: int | None, max_bytes: int | None,
                 when_full: str) -> None:
        self.store_name, self.time_limit_ms = store, time_limit_ms
        self.max_records, self.max_bytes, self.when_full = max_records, max_bytes, when_full

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.buffer: SuppressionBuffer = context.store(self.store_name)

    def process(self, record: Record) -> None:
        if record.key is None:
            self.context.record_dropped("table update without a key")
            return
        buffer = self.buffer
        kept = self.context.hold() if self.context.record_metadata() is not None else None
        observed = buffer.put(record.key, record.value, record.timestamp, kept)
        for entry in buffer.take_until(observed - self.time_limit_ms):
            self._let_go(entry)
        if self.max_records is None and self.max_bytes is None:
            return
        while self._over(*buffer.size()):
            if self.when_full == "shut_down":
                entries, size = buffer.size()
                raise BufferFullError(
                    f"task {self.context.task_id}: the suppression buffer {self.store_name!r} holds {entries} keys "
                    f"({size} bytes), over its bound ({self._bound()}) with when_full=\"shut_down\": raise the "
                    "bound, shorten the time limit, or let the oldest keys go early (when_full=\"emit_early\")",
                    task=self.context.task_id, cause_type="BufferFullError")
            oldest = buffer.take_oldest()
            assert oldest is not None
            self._let_go(oldest)

    def _over(self, entries: int, size: int) -> bool:
        return ((self.max_records is not None and entries > self.max_records)
                or (self.max_bytes is not None and size > self.max_bytes))

    def _bound(self) -> str:
        return ", ".join(f"{n}={v}" for n, v in (("max_records", self.max_records), ("max_bytes", self.max_bytes))
                         if v is not None)

    def _let_go(self, entry: Suppressed) -> None:
        self.context.release(entry.message, partial(self.context.forward, entry.key, entry.value,
                                                    timestamp=entry.timestamp))
