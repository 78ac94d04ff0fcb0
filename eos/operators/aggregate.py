"""Keyed aggregations on state stores: count, sum, reduce and aggregate with an initializer.

Records are grouped by their key as it is on the input topic: a task holds the aggregates of the keys of
its partition. Tombstones (null values) are ignored, as Kafka Streams' aggregations ignore them; records
without a key are bad records (dead-letter topic). To aggregate by another key, first write the records
re-keyed to a topic (a stateless sub-topology) and aggregate that topic. Every update is emitted (the
output is the aggregate's changelog stream, like a KTable's), so the committed output holds each key's
running value in order; with a record cache (`cache_max_bytes`, `eos.cache`), the latest one per key per
batch.

With a record cache, an aggregate that is a number (an exact `int` or `float`, as count and sum make) of a
key that is a `str`, `bytes` or `int` waits in the cache as it is, not serialized, and reaches the store
(its write buffer, so the changelog) only when it leaves the cache, just before it is forwarded: per record
there is no store read after the key's first in a batch, no serialization and no store write. What the
batch forwards, writes and commits is what it is without this: each key's latest aggregate when the cache
flushes or evicts it. It holds only where nothing else could see the store in between: the store is
connected to this processor alone, and its aggregate serde surely serializes the number (JSON: any; "long" and
"int": an `int` in their range; "double": a `float`), so that no update can fail later than its record. A
number waiting in the cache counts for its key's bytes and `HELD_NUMBER_BYTES`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from eos.cache import ENTRY_OVERHEAD, RecordCache, updates
from eos.errors import SerdeError
from eos.graph.operators import require_functions
from eos.processor import Processor, ProcessorContext
from eos.records import Record
from eos.serde import DoubleSerde, IntegerSerde, JsonSerde, LongSerde, Serde

__all__ = ["AggregateProcessor", "Aggregation", "counter", "summer", "reducer", "HELD_NUMBER_BYTES", "AggregateFold",
           "KEYLESS", "CogroupAggregator", "CogroupValueSerde"]

#: bytes a number waiting in the record cache counts for besides its key: its timestamp and the longest
#: JSON of a 64-bit integer or a float
HELD_NUMBER_BYTES = 8 + 24
_HELD_KEYS = frozenset({str, bytes, int})  # (exact types: equal keys of these serialize alike, never bool)
_NUMBERS = frozenset({int, float})
_KEY_MEMO = 16_384  # serialized keys remembered for held updates, then forgotten all at once (~2 MiB)
#: why a record without a key goes to the dead-letter topic
KEYLESS = "records without a key cannot be aggregated by key"


class AggregateFold(NamedTuple):
    """What folding a batch into a keyed aggregation of numbers needs (`eos.worker.folding`). With a record
    cache (`cache`), updates wait in it as the aggregation's `process` puts them there; without one (`emit`),
    each update goes on as its record's output, and each key's last one reaches the store when the fold ends."""

    store: Any  # the aggregation's store: `get_with_timestamp(key)`, `key_bytes(key)`, `put(key, value, ts)`
    initializer: Callable[[], Any]
    aggregator: Callable[[Any, Any, Any], Any]
    holds: Callable[[Any], bool]  # whether an aggregate is a number its store's serde surely serializes
    name: str  # the store's name (the cache's entries are by store and serialized key)
    key_types: frozenset[type]  # the keys the fold takes (exact types: equal ones serialize alike)
    cache: RecordCache | None
    # with a cache (else None): a key's aggregate and timestamp waiting in it; (identity, key, aggregate,
    # timestamp, headers) into it; what a key's entry counts for in it; the headers an update keeps
    held: Callable[[bytes], tuple[Any, int] | None] | None
    hold: Callable[[bytes, Any, Any, int, Any], None] | None
    entry_bytes: Callable[[bytes], int] | None
    headers_of: Callable[[], Any] | None
    emit: Callable[[Any, Any, int], None] | None  # without a cache: forward an update (key, value, timestamp)
    #: the stateless steps between the source and the aggregation, built toward a given last step (None: none)
    chain: Callable[[Callable[[Any, Any, int, Any], None]], Callable[[Any, Any, int, Any], None]] | None = None
    #: the topic of the one plain sink `emit` forwards to (`GraphProcessor.sink_forward`), if it is one
    sink: str | None = None
    #: a windowed aggregation's (`eos.operators.windows.TimeWindowAggregate`): its windows (each record updates
    #: the aggregate of its key in every open window it falls in, forwarded keyed `Windowed`), what a record
    #: in closed windows only is (`late(timestamp, stream time)`: raises for the dead-letter topic), and its
    #: punctuation (expiring windows by stream time), which the fold runs as the record-at-a-time loop would
    windows: Any = None
    late: Callable[[int, int], None] | None = None
    schedules: tuple[Any, ...] = ()
    #: with a cache, how a window's update goes into it once written (`eos.cache.held_updates`)
    hold_window: Callable[[bytes, int, Any, Any, int, Any], None] | None = None
    #: session windows' (`eos.operators.windows.SessionWindowAggregate`, `windows` their `SessionWindows`): how
    #: the aggregates of the sessions a record joins are merged (a record replaces them with one session)
    merger: Callable[[Any, Any, Any], Any] | None = None
    #: sessions with a cache: how a session's update goes into it once written (`SessionWindowAggregate._hold`:
    #: identity, bytes, window, aggregate, timestamp, headers, how it leaves), and whether a session is unseen
    #: downstream as the cache has it (`SessionWindowAggregate.unseen`)
    hold_session: Callable[[bytes, int, Any, Any, int, Any, int], None] | None = None
    unseen: Callable[[bytes], bool] | None = None
    #: sliding windows' (`eos.operators.windows.SlidingWindowAggregate`, `windows` their `SlidingWindows`): the
    #: records of each key that a window it makes is folded from (`recovery.RecordBuffer`)
    buffer: Any = None
    #: a windowed aggregation's node: the lineage ledger names the records it drops as late by it (`late_by`)
    step: str | None = None


class AggregateProcessor(Processor):
    _holds: Callable[[Any], bool]  # which aggregates are numbers the store's serde surely serializes

    def __init__(self, store: str, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any]) -> None:
        self.store_name = store
        self.initializer = initializer
        self.aggregator = aggregator

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.store = context.store(self.store_name)
        self.emit = updates(context, self.store)
        cache: RecordCache | None = getattr(context, "record_cache", None)
        sole_user = getattr(context, "sole_user_of", None)
        holds = _holds(self.store.spec.value_serde)
        self._cache: RecordCache | None = None
        #: numbers its store surely serializes, and no other processor sees the store: a batch may be folded
        self._foldable = holds is not None and sole_user is not None and sole_user(self.store_name)
        if holds is not None:
            self._holds = holds
        if cache is not None and self._foldable:
            self._cache = cache
            self._keys: dict[Any, bytes] = {}
            self._headers_of = context.cached_headers  # type: ignore[attr-defined]
            self._held = self._write_and_forward  # one bound method: the cache tells its entries by it

    def process(self, record: Record) -> None:
        if record.value is None:
            return  # a tombstone: ignored by aggregations, as in Kafka Streams
        key = record.key
        if key is None:
            raise ValueError(KEYLESS)
        cache = self._cache
        if cache is None:
            current = self.store.get_with_timestamp(key)
        else:
            identity = self._identity(key)
            current = cache.held(self.store_name, identity, self._held)
            if current is None:
                current = self.store.get_with_timestamp(key)
        if current is None:
            aggregate, timestamp = self.initializer(), record.timestamp
        else:
            aggregate, timestamp = current[0], max(current[1], record.timestamp)
        updated = self.aggregator(key, record.value, aggregate)
        if cache is not None and type(key) in _HELD_KEYS and self._holds(updated):
            cache.put(self.store_name, identity, len(identity) + HELD_NUMBER_BYTES, self._held, key, updated,
                      timestamp, self._headers_of())
            return
        self.store.put(key, updated, timestamp)
        self.emit(key, updated, timestamp)  # the largest timestamp aggregated

    def fold_view(self, *, stateless_after: bool) -> AggregateFold | None:
        """What a batch fold needs, when this aggregation's aggregates are numbers no other processor sees:
        held in the record cache, or, without one, forwarded at once to nothing but stateless operators and
        sinks (`stateless_after`). Else None (a subclass, too, may process records otherwise)."""
        if not self._foldable or type(self) is not AggregateProcessor:
            return None
        cache, name = self._cache, self.store_name
        if cache is None:
            if not stateless_after:
                return None
            return AggregateFold(self.store, self.initializer, self.aggregator, self._holds, name, _HELD_KEYS, None,
                                 None, None, None, None, self.emit)
        held_tag = self._held

        def held(identity: bytes) -> tuple[Any, int] | None:
            return cache.held(name, identity, held_tag)

        def hold(identity: bytes, key: Any, value: Any, timestamp: int, headers: Any) -> None:
            cache.put(name, identity, len(identity) + HELD_NUMBER_BYTES, held_tag, key, value, timestamp, headers)

        def entry_bytes(identity: bytes) -> int:
            return len(identity) + HELD_NUMBER_BYTES + ENTRY_OVERHEAD

        return AggregateFold(self.store, self.initializer, self.aggregator, self._holds, name, _HELD_KEYS, cache,
                             held, hold, entry_bytes, self._headers_of, None)

    def _identity(self, key: Any) -> bytes:
        """The key as the store and the cache know it (remembered for keys of the held types)."""
        if type(key) not in _HELD_KEYS:
            return self.store.key_bytes(key)
        identity = self._keys.get(key)
        if identity is None:
            if len(self._keys) >= _KEY_MEMO:
                self._keys.clear()
            identity = self._keys[key] = self.store.key_bytes(key)
        return identity

    def _write_and_forward(self, key: Any, value: Any, timestamp: int, headers: Any) -> None:
        """A held aggregate leaving the cache: into the store (the batch's write buffer), then on."""
        self.store.put(key, value, timestamp)
        self.context.forward(key, value, timestamp=timestamp, headers=headers)


def _holds(serde: Serde) -> Callable[[Any], bool] | None:
    """Which aggregates may wait in the record cache unserialized: those `serde` surely serializes."""
    kind = type(serde)
    if kind is JsonSerde:
        return lambda value: type(value) in _NUMBERS
    if kind is LongSerde or kind is IntegerSerde:
        low, high = (-(1 << 63), 1 << 63) if kind is LongSerde else (-(1 << 31), 1 << 31)
        return lambda value: type(value) is int and low <= value < high
    if kind is DoubleSerde:
        return lambda value: type(value) is float
    return None


class Aggregation(NamedTuple):
    """An aggregation's functions: start, fold a value in, and merge two aggregates (session windows)."""

    initializer: Callable[[], Any]
    aggregator: Callable[[Any, Any, Any], Any]
    merger: Callable[[Any, Any, Any], Any]


def counter() -> Aggregation:
    return Aggregation(lambda: 0, lambda key, value, count: count + 1, lambda key, a, b: a + b)


def summer(value: Callable[[Any], Any]) -> Aggregation:
    require_functions("sum", value=value, takes={"value": ("value",)})
    return Aggregation(lambda: 0, lambda key, v, total: total + value(v), lambda key, a, b: a + b)


_FIRST = object()


def reducer(reduce: Callable[[Any, Any], Any]) -> Aggregation:
    """The first value of a key is its aggregate; later values are folded in with `reduce(aggregate, value)`."""
    require_functions("reduce", reducer=reduce, takes={"reducer": ("aggregate", "value")})
    return Aggregation(lambda: _FIRST, lambda key, v, agg: v if agg is _FIRST else reduce(agg, v),
                       lambda key, a, b: b if a is _FIRST else a if b is _FIRST else reduce(a, b))


class CogroupAggregator:
    """The aggregator of a cogroup (Kafka Streams' `cogroup`): several grouped streams fold into one aggregate
    per key, each with its own aggregator. Their values arrive marked `(index, value)`
    (`eos.graph.operators.Cogrouped`); the `index`-th aggregator folds the value."""

    def __init__(self, aggregators: tuple[Callable[[Any, Any, Any], Any], ...]) -> None:
        self.aggregators = aggregators

    def __call__(self, key: Any, marked: tuple[int, Any], aggregate: Any) -> Any:
        index, value = marked
        return self.aggregators[index](key, value, aggregate)


class CogroupValueSerde(Serde):
    """A cogroup's marked values `(index, value)` as one byte of index and the value in its stream's serde (the
    records a sliding window keeps)."""

    name = "cogrouped value"

    def __init__(self, serdes: tuple[Serde, ...]) -> None:
        self.serdes = serdes

    def _dumps(self, obj: Any) -> bytes:
        index, value = obj
        data = self.serdes[index].serialize(value)
        if data is None:
            raise SerdeError("a cogrouped value cannot be None")
        return bytes((index,)) + data

    def _loads(self, data: bytes) -> Any:
        return data[0], self.serdes[data[0]].deserialize(data[1:])

    def bind(self, topic: str, is_key: bool) -> Serde:
        return CogroupValueSerde(tuple(s.bind(topic, is_key) for s in self.serdes))

    def __repr__(self) -> str:
        return f"CogroupValueSerde({list(self.serdes)!r})"
