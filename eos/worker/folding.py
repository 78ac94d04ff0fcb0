"""Folding a batch into the keyed aggregation it meets first, in one loop: a fast path of `run_processor`.

When every input record of a sub-topology goes first and alone to a keyed aggregation whose numbers wait in
the task's record cache (count and sum with a cache: `eos.operators.aggregate`), a record's whole effect
inside the batch is to fold into its key's aggregate: nothing is forwarded and nothing is written to the
store until an update leaves the cache, when the batch ends or the cache is full. So instead of a record
scope per record, the batch is folded in one loop (each distinct key deserialized once, the aggregates in a
dict), and the cache then gets each key's last update, in the order of the keys' last updates: the state
the record-at-a-time loop would have left. The rest is that loop's:
* bad records go to the dead-letter topic with the same error and stage: a key or value that does not
  deserialize, an invalid timestamp, a record without a key, an initializer or aggregator that raises;
* tombstones are ignored, and every input record is "filtered" in the lineage ledger;
* stream time is the largest timestamp of the records that did not fail;
* an update keeps the headers of the last record that made it.

The fold stops where it could not prove the result the same, and hands the record it is on and the rest
to the record-at-a-time loop:
* the cache would go over its bound (its evictions forward updates in the middle of the batch);
* a key of another type than those held, an aggregate that is not a number that may wait in the cache,
  a key the cache holds another way, a store or key serde that raises;
* in a streamed batch, as soon as the dead letters gathered are due to be produced.
An aggregator may thus run twice on the record the fold stops at. It runs again whenever a batch is
retried too: aggregators must be free of side effects in any case.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from eos.errors import SerdeError
from eos.operators.aggregate import KEYLESS, AggregateProcessor, HeldFold
from eos.processor import Processor
from eos.serde import BytesSerde, Serde
from eos.time import MAX_TIMESTAMP, InvalidTimestampError
from eos.worker.context import TaskContext
from eos.worker.dead_letters import NOT_A_BAD_RECORD, DeadLetterPolicy, Stage
from transactions import Message

if TYPE_CHECKING:
    from eos.worker.processing import BatchOutcome

__all__ = ["fold_target", "fold_batch"]


def fold_target(processor: Processor) -> HeldFold | None:
    """The aggregation a batch of `processor` can be folded into, if there is one."""
    first = getattr(processor, "first_processor", None)
    target = first() if first is not None else processor
    return target.fold_view() if isinstance(target, AggregateProcessor) else None


class _Stop(Exception):
    """The fold cannot go on: the record it is on and the rest are processed one at a time."""


def fold_batch(view: HeldFold, ctx: TaskContext, messages: Iterable[Message], outcome: BatchOutcome, *,
               key_serde: Serde, value_serde: Serde, dlq: DeadLetterPolicy,
               drain_at: int | None) -> tuple[int, int, Iterable[Message]]:
    """Fold `messages` (one partition's, in offset order) into `view`'s aggregation, adding to `outcome`'s
    stream time, filtered records and dead letters. Returns the records and value bytes it read, and the
    records left to process one at a time (empty when it folded them all): a list's rest as a list.
    `drain_at`: in a streamed batch, stop once that many dead letters have gathered."""
    key_of = key_serde.deserialize
    value_of = None if type(value_serde) is BytesSerde else value_serde.deserialize
    store, initializer, aggregator, holds = view.store, view.initializer, view.aggregator, view.holds
    held, key_types, has, name = view.held, view.key_types, view.cache.has, view.name
    filtered, dead_letters = outcome.filtered, outcome.dead_letters
    room = view.cache.max_bytes - view.cache.size
    keys: dict[bytes | None, Any] = {}  # a raw key: its (key, identity or None), or the SerdeError it raised
    folded: dict[bytes, list[Any]] = {}  # identity: [aggregate, timestamp, last update's index, its message, key]
    stream_time = outcome.stream_time
    last: Message | None = None  # the last record that deserialized and had a valid timestamp
    last_ts = -1
    records = size = 0
    stream = iter(messages)
    retry: Message | None = None  # the record the fold stopped at without taking it
    stopped = False
    for msg in stream:
        value = msg.value()
        raw = msg.key()
        known: Any = keys.get(raw)
        if known is None:
            try:
                known = keys[raw] = (key_of(raw), None)
            except SerdeError as exc:
                known = keys[raw] = exc
        bad: BaseException | None = None
        stage = Stage.DESERIALIZE
        ts = -1
        v = value
        if type(known) is not tuple:
            bad = known
        else:
            if value_of is not None:
                try:
                    v = value_of(value)
                except SerdeError as exc:
                    bad = exc
            if bad is None:
                ts = msg.timestamp()[1]
                if ts < 0 or ts > MAX_TIMESTAMP:
                    why = "negative: missing or not event time" if ts < 0 else "after the year 9999"
                    bad, stage = InvalidTimestampError(f"invalid timestamp {ts} ({why})"), Stage.TIMESTAMP
        if bad is None and v is not None:
            key, identity = known
            try:
                if key is None:
                    raise ValueError(KEYLESS)
                if identity is None:
                    identity = _identity(store, key, key_types)
                    keys[raw] = (key, identity)
                entry = folded.get(identity)
                if entry is None:
                    grows, current = _current(view, identity, key, held, has, name, room)
                    if current is None:
                        aggregate, timestamp = initializer(), ts
                    else:
                        aggregate, timestamp = current[0], max(current[1], ts)
                    updated = aggregator(key, v, aggregate)
                    if not holds(updated):
                        raise _Stop
                    room -= grows
                    folded[identity] = [updated, timestamp, records, msg, key]
                else:
                    updated = aggregator(key, v, entry[0])
                    if not holds(updated):
                        raise _Stop
                    entry[0] = updated
                    if ts > entry[1]:
                        entry[1] = ts
                    entry[2], entry[3], entry[4] = records, msg, key
            except _Stop:
                retry, stopped = msg, True
                break
            except NOT_A_BAD_RECORD:
                raise
            except Exception as exc:  # no key, or the initializer or aggregator raised: nothing changed
                bad, stage = exc, Stage.PROCESS
        records += 1
        size += len(value) if value else 0
        if bad is not None:
            if stage is Stage.PROCESS:  # it was a record: its scope was entered
                last, last_ts = msg, ts
            dead_letters.append(dlq.route(msg, bad, stage))
            if drain_at is not None and len(dead_letters) >= drain_at:
                stopped = True
                break
            continue
        # folded, or a tombstone (ignored, as by Kafka Streams' aggregations)
        last, last_ts = msg, ts
        if ts > stream_time:
            stream_time = ts
        filtered.append(msg)
    _settle(view, ctx, folded)
    if last is not None:  # as the record-at-a-time loop leaves it: its last record's scope entered and left
        ctx.enter_record(last, last_ts)
        ctx.leave_record()
    outcome.stream_time = ctx.stream_time = max(stream_time, outcome.stream_time)
    rest: Iterable[Message] = ()
    if stopped:
        if isinstance(messages, Sequence):
            rest = messages[records:]
        else:
            rest = stream if retry is None else itertools.chain((retry,), stream)
    return records, size, rest


def _identity(store: Any, key: Any, key_types: frozenset[type]) -> Any:
    """A key's serialized form, when its updates may wait in the cache."""
    if type(key) not in key_types:
        raise _Stop
    try:
        return store.key_bytes(key)
    except Exception:
        raise _Stop from None


def _current(view: HeldFold, identity: bytes, key: Any, held: Any, has: Any, name: str,
             room: int) -> tuple[int, tuple[Any, int] | None]:
    """A key the fold has not seen yet: the bytes its entry adds to the cache, and its aggregate and timestamp
    (None: none yet), waiting in the cache or in the store."""
    current = held(identity)
    if current is not None:
        return 0, current
    grows = view.entry_bytes(identity)
    if has(name, identity) or grows > room:  # an update made another way; or the cache would evict
        raise _Stop
    try:
        current = view.store.get_with_timestamp(key)
    except Exception:
        raise _Stop from None
    if current is not None and not view.holds(current[0]):
        raise _Stop
    return grows, current


def _settle(view: HeldFold, ctx: TaskContext, folded: dict[bytes, list[Any]]) -> None:
    """Each folded key's last update into the cache, in the order of the keys' last updates, with the headers
    its last record's outputs would have carried."""
    hold, headers_of = view.hold, view.headers_of
    for identity, (aggregate, timestamp, _, msg, key) in sorted(folded.items(), key=_by_last_update):
        if msg.headers():
            ctx.enter_record(msg, msg.timestamp()[1])
            headers = headers_of()
        else:
            headers = []
        hold(identity, key, aggregate, timestamp, headers)


def _by_last_update(item: tuple[bytes, list[Any]]) -> int:
    return int(item[1][2])
