"""Folding a batch into the keyed aggregation it meets first, in one loop: a fast path of `run_processor`.

When every input record of a sub-topology goes first and alone to a keyed aggregation of numbers that no
other processor sees (count, sum, reduce: `eos.operators.aggregate`), directly or through a line of
stateless operators (filter, map_values, flat_map, ...: each with one child), a record's effect on the
aggregation is to fold into its key's aggregate. So instead of a record scope per record (a `Record`, the
graph's hand-offs, a store read and write), the batch is folded in one loop: each distinct key deserialized
once, the operator line built again toward the fold, the aggregates in a dict. Two kinds:
* **with a record cache**, nothing is forwarded until an update leaves the cache, so the fold forwards
  nothing: when it ends, the cache gets each key's last update, in the order of the keys' last updates,
  with the headers of its last record, as the record-at-a-time loop would have left it;
* **without one**, each update is its record's output, forwarded at once in the record's own scope (to
  stateless operators and sinks only), and each key's last aggregate reaches the store (so the changelog)
  when the fold ends, in the order the keys were first written, as the write buffer has them.
Windowed aggregations fold alike: tumbling and hopping windows (each window's aggregate under its store key),
session windows (a key's open sessions read once and held), and sliding windows (a key's records read from the
record buffer once and held, a window a record makes folded from them; the records the fold adds reach the
buffer, in their order, where the windows reach their store).
The rest is the record-at-a-time loop's:
* bad records go to the dead-letter topic with the same error and stage: a key or value that does not
  deserialize, an invalid timestamp, a record without a key, an initializer or aggregator that raises, an
  output that cannot be serialized or that its topic would refuse (the update is then not applied);
* a record that fails after some of its updates (a `flat_map` raising midway) leaves none of them;
* tombstones are ignored, and a record without outputs is "filtered" in the lineage ledger;
* stream time is the largest timestamp of the records that did not fail;
* a streamed batch's outputs and dead letters are drained as they gather, and the batch stops where a
  drain (or a processor) asks it to.

The fold stops where it could not prove the result the same, and hands the record it is on and the rest
to the record-at-a-time loop: the cache would go over its bound (its evictions forward updates in the middle
of the batch); a key of another type than those held, an aggregate that is not a number its store surely
serializes, a key the cache holds another way, a store or key serde that raises, a step before the
aggregation that passes headers on (without a cache its outputs would carry them). An aggregator may thus
run twice on the record the fold stops at. It runs again whenever a batch is retried too: aggregators
must be free of side effects in any case.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

from eos.cache import ENTRY_OVERHEAD
from eos.errors import OutputSerializationError, SerdeError
from eos.operators.aggregate import KEYLESS, AggregateFold, AggregateProcessor
from eos.operators.windows import (
    NOTHING,
    SEEN,
    UNSEEN,
    SessionWindowAggregate,
    SlidingWindowAggregate,
    TimeWindowAggregate,
)
from eos.processor import Processor
from eos.records import Record
from eos.serde import BytesSerde, Serde
from eos.time import MAX_TIMESTAMP, RECORD_TIME, InvalidTimestampError, extracted
from eos.windows import Windowed, ms
from eos.worker.context import TaskContext
from eos.worker.dead_letters import NOT_A_BAD_RECORD, DeadLetterPolicy, Stage
from recovery.windows import window_key
from transactions import Message, ProducerRecord

if TYPE_CHECKING:
    from eos.worker.processing import BatchOutcome, Drain, RecordScoped

__all__ = ["fold_target", "fold_batch", "Folded"]


def fold_target(processor: Processor) -> AggregateFold | None:
    """The aggregation a batch of `processor` can be folded into, if there is one."""
    chain_of = getattr(processor, "fold_chain", None)
    if chain_of is None:  # a processor of its own: what it forwards goes to the task's output
        target, build, stateless_after = processor, None, True
    else:
        found = chain_of()
        if found is None:
            return None
        target, build = found
        stateless_after = processor.stateless_after(target)  # type: ignore[attr-defined]
    if not isinstance(target, (AggregateProcessor, TimeWindowAggregate, SessionWindowAggregate,
                               SlidingWindowAggregate)):
        return None
    view = target.fold_view(stateless_after=stateless_after)
    if view is None:
        return None
    if build is not None:
        view = view._replace(chain=build)
    if view.emit is not None and chain_of is not None:
        direct = processor.sink_forward(target)  # type: ignore[attr-defined]
        if direct is not None:  # (the hops through the node's context and its sink, skipped)
            view = view._replace(emit=direct, sink=processor.plain_sink(target))  # type: ignore[attr-defined]
    return view


#: no punctuation due (`fold_batch`'s `due`)
NEVER = 1 << 62
#: later than any session starts (`SessionStore.find_sessions`' latest start: every session of a key)
_LATEST = 1 << 62
#: a session fold reads all the store's sessions (a sliding windows' fold all its buffer's records) in one scan
#: rather than a key's at a time once it looked up at least one key for every this many entries of the store
#: (`approximate_num_entries`: its index's included), when it has at most `_SCAN_MAX`. A lookup (a RocksDB seek,
#: the write buffer's merge) cost ~12 us in a peers task's store, a scanned entry ~0.3 us; whether enough are
#: looked up is asked after 64, 128, 256, ... lookups
_LOOKUPS_PER_SCANNED = 32
_SCAN_MAX = 100_000
_FIRST_CHECK = 64
#: an undo entry's mark of a session's first write (`_Fold.writes`)
_WRITTEN: list[Any] = []


class _Pending(NamedTuple):
    """An undo entry's mark of a session's update for the cache (`_Fold.pending`): the one it replaced, if any."""

    entry: list[Any] | None


class _Inserted(NamedTuple):
    """An undo entry's mark of a record a sliding windows' fold added to its key's records (`_Fold.records`)."""

    records: list[tuple[int, int, Any]]
    at: int


class _Stop(Exception):
    """The fold cannot go on: the record it is on and the rest are processed one at a time."""


class Folded(NamedTuple):
    """What a fold read, and where the batch goes on."""

    records: int  # input records the fold took (bad ones included)
    size: int  # their value bytes
    rest: Iterable[Message]  # records left to process one at a time: a list's rest as a list
    stop_at: int | None  # the batch stops here (the offset to commit): a drain or a processor asked for it


def fold_batch(view: AggregateFold, ctx: TaskContext, messages: Iterable[Message], outcome: BatchOutcome, *,
               key_serde: Serde, value_serde: Serde, dlq: DeadLetterPolicy,
               timestamp: Callable[[Record], int] = RECORD_TIME, scoped: Sequence[RecordScoped] = (),
               drain: Drain | None = None, drain_at: int = 0, tp: tuple[str, int] | None = None,
               due: int = NEVER, punctuate: Callable[[int], int] | None = None) -> Folded:
    """Fold `messages` (one partition's, `tp`, in offset order) into `view`'s aggregation, adding to `outcome`
    what the record-at-a-time loop adds: stream time, outputs (without a cache), filtered records and dead
    letters. `timestamp` (the topic's extractor), `scoped`, `drain` and `drain_at` as that loop has them.

    Where the aggregation forwards its updates to one plain sink, the update of a record without headers is
    made into its output record in one call (`TaskContext.direct_output`), without the record's scope: the
    stateless operators before the aggregation run without a context, and after an update nothing can fail
    but its output. A record that fails, or that the fold stops at, after some of its updates (a `flat_map`'s
    second) leaves neither them nor their outputs.

    A windowed aggregation's punctuation (its windows' expiry) is due at stream time `due`: once a record has
    moved stream time there, what the fold holds goes to the store and `punctuate(stream time)` runs it as the
    record-at-a-time loop would after that record, returning when the next is due."""
    key_of = key_serde.deserialize
    value_of = None if type(value_serde) is BytesSerde else value_serde.deserialize
    extractor = None if timestamp is RECORD_TIME else timestamp
    fold = _Fold(view, ctx)
    step = view.chain(fold.take) if view.chain is not None else fold.take
    undo, emits = fold.undo, view.emit is not None
    filtered, dead_letters, outputs, late = outcome.filtered, outcome.dead_letters, outcome.outputs, outcome.late
    direct = _direct_take(view, ctx, fold, outputs, tp)
    enter, leave, discard = ctx.enter_record, ctx.leave_record, ctx.discard_record
    keys: dict[bytes | None, Any] = {}  # a raw key: its key, or the SerdeError it raised
    stream_time = outcome.stream_time
    last: Message | None = None  # the last record that deserialized and had a valid timestamp
    last_ts = -1
    records = size = 0
    stream = iter(messages)
    retry: Message | None = None  # the record the fold stopped at without taking it
    stopped = False
    stop_at: int | None = None
    for msg in stream:
        value = msg.value()
        raw = msg.key()
        key: Any = keys.get(raw, keys)
        if key is keys:
            try:
                key = keys[raw] = key_of(raw)
            except SerdeError as exc:
                key = keys[raw] = exc
        bad: BaseException | None = None
        stage = Stage.DESERIALIZE
        ts = -1
        v = value
        if isinstance(key, SerdeError):
            bad = key
        else:
            if value_of is not None:
                try:
                    v = value_of(value)
                except SerdeError as exc:
                    bad = exc
            if bad is None:
                ts = msg.timestamp()[1]
                if extractor is not None:  # (given the record as the record-at-a-time loop's `entries` makes it)
                    try:
                        ts = extracted(extractor, Record(key, v, msg.topic(), msg.partition(), msg.offset(), ts,
                                                         msg.headers()))
                    except InvalidTimestampError as exc:
                        bad, stage = exc, Stage.TIMESTAMP
                if bad is None and (ts < 0 or ts > MAX_TIMESTAMP):
                    why = "negative: missing or not event time" if ts < 0 else "after the year 9999"
                    bad, stage = InvalidTimestampError(f"invalid timestamp {ts} ({why})"), Stage.TIMESTAMP
        made = -1  # outputs before a record's update made at once (`direct`); -1: in its scope
        if bad is None:
            fold.msg = msg
            fold.now = ts if ts > stream_time else stream_time  # (the stream time a record is judged at)
            fold.before = stream_time
            ctx.dropped_reason = None  # (as entering its scope does: a drop by the record before is not this one's)
            scope = emits
            if direct is not None and not msg.headers():
                scope, made = False, len(outputs)
                fold.made = made
            if scope:
                enter(msg, ts)
                for s in scoped:
                    s.begin_record()
            try:
                (step if direct is None or made < 0 else direct)(key, v, ts, None)
            except _Stop:
                fold.roll_back()
                if made >= 0:
                    del outputs[made:]
                if scope:
                    for s in scoped:
                        s.rollback_record()
                    discard()
                retry, stopped = msg, True
                break
            except NOT_A_BAD_RECORD:
                raise
            except Exception as exc:  # nothing of the record stays
                reorders = fold.roll_back()
                if made >= 0:
                    del outputs[made:]
                if scope:
                    for s in scoped:
                        s.rollback_record()
                    discard()
                if reorders:  # (the record-at-a-time loop takes it: its rollback moves cache entries)
                    retry, stopped = msg, True
                    break
                bad = exc
                stage = Stage.SERIALIZE if isinstance(exc, OutputSerializationError) else Stage.PROCESS
            else:
                if undo:
                    undo.clear()
                if scope:
                    for s in scoped:
                        s.commit_record()
        records += 1
        size += len(value) if value else 0
        if bad is not None:
            if stage is Stage.PROCESS or stage is Stage.SERIALIZE:  # it was a record: its scope was entered
                last, last_ts = msg, ts
            dead_letters.append(dlq.route(msg, bad, stage))
            continue
        last, last_ts = msg, ts
        if ts > stream_time:
            stream_time = ts
        if made >= 0:
            forwarded = len(outputs) > made
        else:
            produced = leave() if emits else None
            if produced:
                outputs.extend(produced)
            forwarded = bool(produced)
        if not forwarded:  # (with a cache, every record: what it changed waits in the cache)
            filtered.append(msg)
            if ctx.dropped_reason is not None:
                if ctx.dropped_reason == "late":
                    late.append(msg)
                    if view.step is not None:  # (as the record-at-a-time loop names the step: `late_steps`)
                        outcome.late_steps.append((msg, view.step))
                ctx.dropped_reason = None
        if stream_time >= due:  # (after a record that did not go to the dead letters, as the loop punctuates)
            assert punctuate is not None
            _settle(view, ctx, fold)  # what the fold holds, in the store before the punctuation reads it
            if view.merger is None:  # (sessions the fold holds stay held: `_settle_sessions`)
                fold.folded.clear()
            if made >= 0:  # (the loop left the task in this record's scope, which names what a punctuation makes)
                enter(msg, ts)
                leave()
            due = punctuate(stream_time)
            if view.cache is not None:  # (what the fold held is in the cache now)
                fold.room = view.cache.max_bytes - view.cache.size
        if drain is not None and len(outputs) + len(dead_letters) >= drain_at and drain(outcome):
            ctx.commit_requested = True
        if ctx.commit_requested:
            ctx.commit_requested = False
            stop_at = msg.offset() + 1
            break
    _settle(view, ctx, fold)
    if last is not None:  # as the record-at-a-time loop leaves it: its last record's scope entered and left
        enter(last, last_ts)
        leave()
    outcome.stream_time = ctx.stream_time = max(stream_time, outcome.stream_time)
    rest: Iterable[Message] = ()
    if stopped:
        if isinstance(messages, Sequence):
            rest = messages[records:]
        else:
            rest = stream if retry is None else itertools.chain((retry,), stream)
    return Folded(records, size, rest, stop_at)


def _direct_take(view: AggregateFold, ctx: TaskContext, fold: _Fold, outputs: list[ProducerRecord],
                 tp: tuple[str, int] | None) -> Callable[[Any, Any, int, Any], None] | None:
    """`fold.take` with each update made into its output record at once (`TaskContext.direct_output`) and
    added to `outputs`, behind the stateless operators before the aggregation (`view.chain`), where its updates
    go to one plain sink (`view.sink`); else None."""
    if view.sink is None or view.emit is None or tp is None:
        return None
    output = ctx.direct_output(view.sink, tp)
    if output is None:
        return None
    add = outputs.append

    if view.chain is None and view.windows is None:  # one update per record: its first output
        def emit(key: Any, value: Any, timestamp: int) -> None:
            add(output(fold.msg, key, value, timestamp, 0))  # type: ignore[arg-type]  # (set before every take)
        return fold.taker(view._replace(emit=emit))

    def emit_nth(key: Any, value: Any, timestamp: int) -> None:
        # (`msg` and `made` are set before every record's take: its index among its outputs is what it made so far)
        add(output(fold.msg, key, value, timestamp, len(outputs) - fold.made))  # type: ignore[arg-type]
    take = fold.taker(view._replace(emit=emit_nth))
    return take if view.chain is None else view.chain(take)


class _Fold:
    """The aggregates of a fold, and `take(key, value, timestamp, headers)`: one update, as the aggregation's
    `process` would make it of a record it is handed (forwarded at once without a cache), undone with the
    rest of its record's if the record fails."""

    __slots__ = ("added", "before", "cached", "ctx", "folded", "made", "msg", "now", "pending", "records", "room",
                 "take", "undo", "updates", "writes")

    def __init__(self, view: AggregateFold, ctx: TaskContext) -> None:
        self.ctx = ctx
        #: identity: [aggregate, timestamp, update number, its record, key, headers], in first-update order
        self.folded: dict[bytes, list[Any]] = {}
        #: the current record's updates (identity, what they replaced, bytes added), to undo if it fails; kept
        #: only where something can fail after an update (a step after it, or its forwarding)
        self.undo: list[tuple[bytes, list[Any] | _Pending | _Inserted | None, int]] = []
        self.room = view.cache.max_bytes - view.cache.size if view.cache is not None else 1 << 62
        self.msg: Message | None = None  # the record being folded
        self.made = 0  # of a record whose updates are made into outputs at once: the outputs listed before it
        self.now = -1  # the stream time the record being folded is judged at (windows: which are closed)
        self.before = -1  # the stream time before the record being folded (no record after it is judged earlier)
        #: windows with a cache: whether it holds an entry of an identity (`roll_back`)
        self.cached: Callable[[bytes], bool] | None = None
        self.updates = 0
        #: sessions: (serialized key, start, end) of every session written or removed, in first-write order (the
        #: write buffer's, so the changelog's: `_settle_sessions`)
        self.writes: dict[tuple[bytes, int, int], None] = {}
        #: sessions with a record cache: each session's (its store key's) last update for the cache, [update number,
        #: window, aggregate (None: removed), timestamp, its record, headers passed on, bytes it counts for, how it
        #: leaves the cache (`eos.operators.windows.SEEN`, ...)], put in the cache when the fold settles
        self.pending: dict[bytes, list[Any]] = {}
        #: sliding windows: each key's records (by its serialized key) that a window it makes can hold, read from
        #: the record buffer the first time the fold meets the key, then held: (timestamp, seq, value) in that
        #: order; and the records the fold added, (key, timestamp, seq, encoded value) in their order, for the buffer
        self.records: dict[bytes, list[tuple[int, int, Any]]] = {}
        self.added: list[tuple[Any, int, int, Any]] = []
        self.take = self.taker(view)

    def taker(self, view: AggregateFold) -> Callable[[Any, Any, int, Any], None]:
        """`take` as `view` has it (a fold may take with another `emit`: `_direct_take`)."""
        if view.merger is not None:
            return self._session_taker(view)
        if view.buffer is not None:
            return self._sliding_taker(view)
        if view.windows is not None:
            return self._window_taker(view)
        logged = view.chain is not None or view.emit is not None
        fold, folded, undo = self, self.folded, self.undo
        ids: dict[Any, bytes] = {}  # a key: its serialized form
        key_types, store, initializer, aggregator = view.key_types, view.store, view.initializer, view.aggregator
        holds, emit = view.holds, view.emit

        # (inline, not `_aggregated` and `_update` as for windows: a call per record is 1 % of the count's
        # instructions per record, `python -m benchmarks.instructions --jobs count`)

        def take(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            if value is None:
                return  # a tombstone: ignored by aggregations, as in Kafka Streams
            if key is None:
                raise ValueError(KEYLESS)
            if type(key) not in key_types or (headers is not None and emit is not None):
                raise _Stop  # (a step before that passes headers on: its outputs would carry them)
            identity = ids.get(key)
            if identity is None:
                identity = ids[key] = _identity(store, key)
            entry = folded.get(identity)
            if entry is None:
                grows, current = _current(view, identity, key, fold.room)
                if current is None:
                    aggregate, ts = initializer(), timestamp
                else:
                    aggregate, ts = current[0], current[1] if current[1] > timestamp else timestamp
            else:
                aggregate, ts = entry[0], entry[1] if entry[1] > timestamp else timestamp
            updated = aggregator(key, value, aggregate)
            if not holds(updated):
                raise _Stop
            fold.updates = number = fold.updates + 1
            if entry is None:
                fold.room -= grows
                folded[identity] = [updated, ts, number, fold.msg, key, headers]
                if logged:
                    undo.append((identity, None, grows))
            else:
                if logged:
                    undo.append((identity, entry[:], 0))
                entry[:] = updated, ts, number, fold.msg, key, headers
            if emit is not None:
                emit(key, updated, ts)  # the largest timestamp aggregated
        return take

    def _window_taker(self, view: AggregateFold) -> Callable[[Any, Any, int, Any], None]:
        """`take` into tumbling or hopping windows (`TimeWindowAggregate.process`): the record's update of each
        open window it falls in (by the stream time it is judged at, `now`), forwarded keyed `Windowed` at once;
        a record in closed windows only is late (dropped and counted, or a LateRecordError)."""
        fold, folded, ctx = self, self.folded, self.ctx
        windows = view.windows
        size, advance, grace, first_start = windows.size_ms, ms(windows.advance), windows.grace_ms, windows.first_start
        key_types, store, initializer, aggregator = view.key_types, view.store, view.initializer, view.aggregator
        holds, emit, late = view.holds, view.emit, view.late
        assert late is not None and (emit is not None or view.cache is not None)
        raws: dict[Any, bytes] = {}  # a key: its serialized form
        put = self._window_putter(view)
        emits = emit is not None

        def take(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            if not _aggregated(key, value, headers, key_types, emits):
                return
            now = fold.now
            start = first_start(timestamp)
            while start <= timestamp and start + size + grace <= now:  # (closed: the earlier ones end first)
                start += advance
            if start > timestamp:
                late(timestamp, now)  # (raises where late records go to the dead letters)
                _dropped_late(ctx)
                return
            raw = raws.get(key)
            if raw is None:
                raw = raws[key] = _identity(store, key)
            while start <= timestamp:
                identity = window_key(start, raw)
                entry = folded.get(identity)
                if entry is None:
                    try:
                        current = store.fetch_with_timestamp(key, start)
                    except Exception:
                        raise _Stop from None
                    if current is not None and not holds(current[0]):
                        raise _Stop
                    updated, ts = _update(initializer, aggregator, holds, key, value, timestamp, current)
                else:
                    updated, ts = _update(initializer, aggregator, holds, key, value, timestamp, entry)
                put(identity, entry, updated, ts, key, start, headers)
                if emit is not None:
                    emit(Windowed(key, start, start + size), updated, ts)  # the largest timestamp aggregated
                start += advance
        return take

    def _window_putter(self, view: AggregateFold) -> Callable[[bytes, list[Any] | None, Any, int, Any, int, Any], None]:
        """How a windowed taker keeps a window's update (`put(identity, its entry in the fold or None, aggregate,
        timestamp, key, window start, headers)`), to undo if its record fails; with a record cache, the bytes its
        entry counts for in the cache taken from the room the fold has left (an update for which the cache would
        evict stops the fold)."""
        fold, folded, undo, cache, name = self, self.folded, self.undo, view.cache, view.name
        stored_size = view.store.encoded_size
        if cache is not None:
            self.cached = partial(cache.has, name)

        def put(identity: bytes, entry: list[Any] | None, aggregate: Any, ts: int, key: Any, start: int,
                headers: Any) -> None:
            counted = grows = 0  # with a cache: the bytes its entry counts for, and what that adds
            if cache is not None:
                counted = len(identity) + stored_size(aggregate, ts) + ENTRY_OVERHEAD
                grows = counted - (entry[6] if entry is not None else cache.entry_size(name, identity))
                if grows > fold.room:
                    raise _Stop  # the cache would evict
                fold.room -= grows
            fold.updates = number = fold.updates + 1
            if entry is None:
                folded[identity] = [aggregate, ts, number, fold.msg, (key, start), headers, counted]
                undo.append((identity, None, grows))
            else:
                undo.append((identity, entry[:], grows))
                entry[:] = aggregate, ts, number, fold.msg, entry[4], headers, counted
        return put

    def _sliding_taker(self, view: AggregateFold) -> Callable[[Any, Any, int, Any], None]:
        """`take` into sliding windows (`SlidingWindowAggregate.process`): the record joins its key's records, then
        each open window it makes or falls in (by the stream time it is judged at, `now`) is updated, a window it
        makes folded from the key's records between its bounds, and forwarded keyed `Windowed` at once; a record
        whose windows are all closed is late. A key's records are read from the record buffer the first time the
        fold meets it, from the earliest time a window of a record not late can hold on (`_Fold.records`)."""
        fold, folded, undo, ctx, records, added = self, self.folded, self.undo, self.ctx, self.records, self.added
        windows, buffer, store = view.windows, view.buffer, view.store
        diff, grace = windows.diff_ms, windows.grace_ms
        key_types, initializer, aggregator = view.key_types, view.initializer, view.aggregator
        holds, emit, late = view.holds, view.emit, view.late
        assert late is not None and (emit is not None or view.cache is not None)
        touched = windows.touched
        # (`SlidingWindows.late`, `takes` and `closed`, inline: a window ending at `end` is closed where
        # `end + grace < now`; every window a record at `t` can be in is closed where `t + 1 + diff + grace <= now`)
        reach = 1 + diff + grace
        encode, read_back = buffer.encode, buffer.read_back
        put = self._window_putter(view)
        emits = emit is not None
        raws: dict[Any, bytes] = {}  # a key: its serialized form
        after = float("inf")  # (sorts after every seq)
        # a key met first is looked up in the buffer, until the lookups are many for the buffer's size: then every
        # key's records are read in one scan (`RecordBuffer.records_from`), which the keys met after take theirs from
        lookups, check_at = 0, _FIRST_CHECK
        scanned: dict[bytes, list[tuple[int, int, Any]]] | None = None

        def load(key: Any, raw: bytes) -> list[tuple[int, int, Any]]:
            # (the windows of a record before this time are closed to this record and every later one, each judged
            # at a stream time no earlier than the stream time before this record: it neither makes an open window
            # nor is in one; `now` is not that: a record that fails does not move stream time. Records before it
            # that a scan reads too change nothing: they are in closed windows only)
            nonlocal lookups, check_at, scanned
            since = fold.before - grace - diff - 1
            if scanned is not None:
                return scanned.pop(raw, [])
            lookups += 1
            if lookups == check_at:
                check_at *= 2
                entries = buffer.approximate_num_entries()
                if entries <= _SCAN_MAX and lookups * _LOOKUPS_PER_SCANNED >= entries:
                    scanned = buffer.records_from(since)  # (the keys held already are never loaded again)
                    return scanned.pop(raw, [])
            return buffer.range(key, since, MAX_TIMESTAMP)

        def take(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            if not _aggregated(key, value, headers, key_types, emits):
                return
            now, t = fold.now, timestamp
            if t + reach <= now:  # (`SlidingWindows.late`)
                late(t, now)  # (raises where late records go to the dead letters)
                _dropped_late(ctx)
                return
            raw = raws.get(key)
            if raw is None:
                raw = raws[key] = _identity(store, key)
            held = records.get(raw)
            if held is None:
                try:
                    held = records[raw] = load(key, raw)
                except Exception:
                    raise _Stop from None
            low, at = bisect.bisect_left(held, (t - diff - 1,)), bisect.bisect_right(held, (t, after))
            high = bisect.bisect_right(held, (t + diff + 1, after), at)
            windows_of = touched(t, [r[0] for r in held[low:high]])
            for window in windows_of:  # (`SlidingWindows.takes`: an open window holds it, else it is late)
                if window.start <= t <= window.end and window.end + grace >= now:
                    break
            else:
                late(t, now)
                _dropped_late(ctx)
                return
            seq = held[at - 1][1] + 1 if at > low and held[at - 1][0] == t else 0  # (as `RecordBuffer.next_seq`)
            encoded = encode(value, t)
            held.insert(at, (t, seq, read_back(encoded)))  # (as a window folded from the buffer reads it)
            added.append((key, t, seq, encoded))
            undo.append((b"", _Inserted(held, at), 0))
            for window in windows_of:
                start, end = window.start, window.end
                if end + grace < now:  # (`SlidingWindows.closed`)
                    continue
                identity = window_key(start, raw)
                entry = folded.get(identity)
                current = entry
                if entry is None:
                    try:
                        current = store.fetch_with_timestamp(key, start)
                    except Exception:
                        raise _Stop from None
                    if current is not None and not holds(current[0]):
                        raise _Stop
                if current is None:  # a new window: fold what it holds (this record included)
                    aggregate, ts = initializer(), -1
                    for r in held[bisect.bisect_left(held, (start,)):bisect.bisect_right(held, (end, after))]:
                        aggregate = aggregator(key, r[2], aggregate)
                        if r[0] > ts:
                            ts = r[0]
                    if not holds(aggregate):
                        raise _Stop
                elif start <= t <= end:
                    aggregate, ts = _update(initializer, aggregator, holds, key, value, t, current)
                else:  # the record's right window, there already (a later record's left window): not the record's
                    continue
                put(identity, entry, aggregate, ts, key, start, headers)
                if emit is not None:
                    emit(Windowed(key, start, end), aggregate, ts)
        return take

    def _session_taker(self, view: AggregateFold) -> Callable[[Any, Any, int, Any], None]:
        """`take` into session windows (`SessionWindowAggregate.process`): the record joins the key's open sessions
        within the gap of it (by the stream time it is judged at, `now`) into one, each merged-away session
        forwarded as a tombstone, then the session's update, keyed `Windowed`, at once; a record whose own session
        would be closed is late. A key's sessions that can take records are read from the store the first time
        the fold meets it, then held (a list by end, then start, as the store orders them: [start, end,
        aggregate, timestamp]) until the fold settles."""
        fold, folded, undo, ctx, writes = self, self.folded, self.undo, self.ctx, self.writes
        windows = view.windows
        gap = windows.gap_ms
        reach = gap + windows.grace_ms  # a session is closed once stream time is past its end plus this
        key_types, store, initializer, aggregator = view.key_types, view.store, view.initializer, view.aggregator
        holds, emit, late, merger, cache = view.holds, view.emit, view.late, view.merger, view.cache
        assert late is not None and merger is not None and (emit is not None or cache is not None)
        raws: dict[Any, bytes] = {}  # a key: its serialized form
        if cache is not None:
            assert view.unseen is not None
            hold, is_unseen = self._session_holder(view, cache, view.unseen)
        # a key met first is looked up in the store, until the lookups are many for the store's size: then the
        # sessions of every key are read in one scan (`SessionStore.open_sessions`), which the keys met after
        # take theirs from
        lookups, check_at = 0, _FIRST_CHECK
        scanned: dict[bytes, list[list[Any]]] | None = None

        def load(key: Any, raw: bytes, now: int) -> list[list[Any]]:
            nonlocal lookups, check_at, scanned
            if scanned is not None:  # (a key's lists are never changed: one rolled back may take them again)
                return scanned.get(raw, [])
            lookups += 1
            if lookups == check_at:
                check_at *= 2
                entries = store.approximate_num_entries()
                if entries <= _SCAN_MAX and lookups * _LOOKUPS_PER_SCANNED >= entries:
                    scanned = store.open_sessions(now - reach)
                    return scanned.get(raw, [])
            return [[s.start, s.end, s.value, s.timestamp] for s in store.find_sessions(key, now - reach, _LATEST)]

        emits = emit is not None

        def take(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            if not _aggregated(key, value, headers, key_types, emits):
                return
            now = fold.now
            raw = raws.get(key)
            if raw is None:
                raw = raws[key] = _identity(store, key)
            entry = folded.get(raw)
            if entry is None:
                try:
                    held = load(key, raw, now)
                except Exception:
                    raise _Stop from None
                if not all(holds(s[2]) for s in held):
                    raise _Stop
            else:
                held = entry[0]
            low, high, open_from = timestamp - gap, timestamp + gap, now - reach
            if low < open_from:
                low = open_from
            found = [s for s in held if s[1] >= low and s[0] <= high] if held else held
            start = end = timestamp
            for s in found:
                if s[0] < start:
                    start = s[0]
                if s[1] > end:
                    end = s[1]
            if end < open_from:  # (closed: no open session took it, and its own would be)
                late(timestamp, now)  # (raises where late records go to the dead letters)
                _dropped_late(ctx)
                return
            aggregate, ts, made = initializer(), timestamp, True
            gone = []
            for s in found:
                aggregate = merger(key, aggregate, s[2])
                if s[3] > ts:
                    ts = s[3]
                if s[0] != start or s[1] != end:
                    gone.append((raw, s[0], s[1]))
                    if cache is None:
                        emit(Windowed(key, s[0], s[1]), None, ts)  # type: ignore[misc]  # (the largest timestamp so far)
                    else:  # (one never forwarded leaves the cache as nothing: `SessionWindowAggregate._emit`)
                        identity = data_key(raw, s[0], s[1])
                        if is_unseen(identity):
                            hold(identity, Windowed(key, s[0], s[1]), None, ts, None, NOTHING)
                        else:
                            hold(identity, Windowed(key, s[0], s[1]), None, ts, headers, SEEN)
                else:
                    made = False
            updated = aggregator(key, value, aggregate)
            if not holds(updated):
                raise _Stop
            if not found:
                kept = held[:]
            elif len(found) == 1:
                one = found[0]
                kept = [s for s in held if s is not one]
            else:
                kept = [s for s in held if not any(s is f for f in found)]
            at = len(kept)
            while at:  # (by end, then start)
                before = kept[at - 1]
                if before[1] < end or (before[1] == end and before[0] <= start):
                    break
                at -= 1
            kept.insert(at, [start, end, updated, ts])
            fold.updates = number = fold.updates + 1
            if entry is None:
                folded[raw] = [kept, None, number, fold.msg, key, headers]
                undo.append((raw, None, 0))
            else:
                undo.append((raw, entry[:], 0))
                entry[:] = kept, None, number, fold.msg, key, headers
            gone.append((raw, start, end))
            for written in gone:
                if written not in writes:
                    writes[written] = None
                    undo.append((written, _WRITTEN, 0))  # type: ignore[arg-type]
            if cache is None:
                emit(Windowed(key, start, end), updated, ts)  # type: ignore[misc]
                return
            identity = data_key(raw, start, end)
            hold(identity, Windowed(key, start, end), updated, ts, headers,
                 UNSEEN if made or is_unseen(identity) else SEEN)
        data_key = store.data_key
        return take

    def _session_holder(self, view: AggregateFold, cache: Any, unseen: Callable[[bytes], bool]) -> tuple[
            Callable[[bytes, Windowed, Any, int, Any, int], None], Callable[[bytes], bool]]:
        """With a record cache, what a session fold does where the aggregation's `_emit` puts an update in the
        cache: `hold(identity, window, aggregate, timestamp, headers passed on, how it leaves)`, the update kept for
        it (`pending`) and counted against its room (the fold stops where it would evict); `is_unseen(identity)`:
        whether the session is unseen downstream, by its update the fold holds, else the cache's."""
        fold, pending, undo = self, self.pending, self.undo
        name, stored_size, entry_size = view.name, view.store.encoded_size, cache.entry_size
        self.cached = partial(cache.has, name)

        def hold(identity: bytes, window: Windowed, value: Any, timestamp: int, headers: Any, kind: int) -> None:
            counted = len(identity) + (0 if value is None else stored_size(value, timestamp)) + ENTRY_OVERHEAD
            old = pending.get(identity)
            grows = counted - (old[6] if old is not None else entry_size(name, identity))
            if grows > fold.room:
                raise _Stop  # the cache would evict
            fold.room -= grows
            fold.updates = number = fold.updates + 1
            undo.append((identity, _Pending(old), grows))
            pending[identity] = [number, window, value, timestamp, fold.msg, headers, counted, kind]

        def is_unseen(identity: bytes) -> bool:
            held = pending.get(identity)
            return unseen(identity) if held is None else held[7] == UNSEEN
        return hold, is_unseen

    def roll_back(self) -> bool:
        """Undo the current record's updates, latest first. An update put back counts as the latest, as the
        cache's own rollback puts an entry back (`RecordCache.rollback_record`). True where that rollback would
        also have moved an entry the fold does not hold (a window the cache got at an earlier punctuation of
        the batch: `cached`), which the fold cannot do: the caller hands the record to the record-at-a-time
        loop."""
        reorders = False
        cached = self.cached
        for identity, old, grows in reversed(self.undo):
            if old is _WRITTEN:  # (a session's first write)
                del self.writes[identity]
            elif type(old) is _Inserted:  # (a record a sliding windows' fold added)
                del old.records[old.at]
                self.added.pop()
            elif type(old) is _Pending:  # (a session's update for the cache)
                self.room += grows
                if old.entry is None:
                    del self.pending[identity]
                    reorders = reorders or bool(self.cached is not None and self.cached(identity))
                else:
                    self.pending[identity] = old.entry
                    self.updates += 1
                    old.entry[0] = self.updates
            elif old is None:
                del self.folded[identity]
                self.room += grows
                reorders = reorders or (cached is not None and cached(identity))
            else:
                entry = self.folded[identity]
                entry[:] = old
                self.updates += 1
                entry[2] = self.updates
                self.room += grows
        self.undo.clear()
        return reorders


def _update(initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any], holds: Callable[[Any], bool],
            key: Any, value: Any, timestamp: int, current: Sequence[Any] | None) -> tuple[Any, int]:
    """The aggregate `value` (at `timestamp`) makes of `current` (its aggregate and timestamp; None: none yet, the
    initializer's), and the largest timestamp aggregated. A result that is no number the store surely serializes
    stops the fold."""
    if current is None:
        aggregate, ts = initializer(), timestamp
    else:
        aggregate, ts = current[0], current[1] if current[1] > timestamp else timestamp
    updated = aggregator(key, value, aggregate)
    if not holds(updated):
        raise _Stop
    return updated, ts


def _aggregated(key: Any, value: Any, headers: Any, key_types: frozenset[type], emits: bool) -> bool:
    """Whether an aggregation takes (`key`, `value`): not a tombstone (ignored, as in Kafka Streams). A record
    without a key raises as the aggregation's `process` does; a key of a type the fold does not take, or headers
    a step before passed on where the update is forwarded at once (its output would carry them), stop the fold."""
    if value is None:
        return False
    if key is None:
        raise ValueError(KEYLESS)
    if type(key) not in key_types or (headers is not None and emits):
        raise _Stop
    return True


def _dropped_late(ctx: TaskContext) -> None:
    """A late record dropped by a windowed fold, counted as `TaskContext.record_dropped` counts one (which marks
    only a record whose scope was entered: a record whose outputs are made at once has none)."""
    ctx.dropped["late"] = ctx.dropped.get("late", 0) + 1
    ctx.dropped_reason = "late"


def _identity(store: Any, key: Any) -> Any:
    """A key's serialized form."""
    try:
        return store.key_bytes(key)
    except Exception:
        raise _Stop from None


def _current(view: AggregateFold, identity: bytes, key: Any, room: int) -> tuple[int, tuple[Any, int] | None]:
    """A key the fold has not seen yet: the bytes its entry adds to the cache, and its aggregate and timestamp
    (None: none yet), waiting in the cache or in the store."""
    grows = 0
    if view.cache is not None:
        assert view.held is not None and view.entry_bytes is not None
        current = view.held(identity)
        if current is not None:
            return 0, current
        grows = view.entry_bytes(identity)
        if grows > room or view.cache.has(view.name, identity):
            raise _Stop  # the cache would evict; or it holds an update of the key made another way
    try:
        current = view.store.get_with_timestamp(key)
    except Exception:
        raise _Stop from None
    if current is not None and not view.holds(current[0]):
        raise _Stop
    return grows, current


def _settle(view: AggregateFold, ctx: TaskContext, fold: _Fold) -> None:
    """Each folded key's last update into the cache, in the order of the keys' last updates, with the headers
    its last record's outputs would have carried; without a cache, into the store, in the order the keys
    were first written (the write buffer's, so the changelog's)."""
    folded = fold.folded
    if view.merger is not None:
        _settle_sessions(view, fold)
        return
    if view.buffer is not None:  # sliding windows: the records the fold added, in their order, then the windows
        put_record = view.buffer.put_encoded
        for key, timestamp, seq, raw in fold.added:
            put_record(key, timestamp, seq, raw)
        fold.added.clear()
    if view.windows is not None:
        _settle_windows(view, ctx, folded)
        return
    if view.cache is None:
        put = view.store.put
        for aggregate, timestamp, _, _, key, _ in folded.values():
            put(key, aggregate, timestamp)
        return
    hold, headers_of = view.hold, view.headers_of
    assert hold is not None and headers_of is not None
    for identity, (aggregate, timestamp, _, msg, key, passed) in sorted(folded.items(), key=_by_last_update):
        hold(identity, key, aggregate, timestamp, _headers(ctx, msg, passed, headers_of))


def _settle_windows(view: AggregateFold, ctx: TaskContext, folded: dict[bytes, list[Any]]) -> None:
    """Each folded window's last update into the store, in the order the windows were first written (the write
    buffer's, so the changelog's), as the record-at-a-time loop writes every update; with a cache, then into it
    too, in the order of their last updates, with the headers their last records' updates were held with."""
    put = view.store.put
    for aggregate, timestamp, _, _, (key, start), _, _ in folded.values():
        put(key, start, aggregate, timestamp)
    if view.cache is None:
        return
    hold, headers_of = view.hold_window, view.headers_of
    # (a window's end: a sliding window's its start + the time difference, its end included)
    size = view.windows.diff_ms if view.buffer is not None else view.windows.size_ms
    assert hold is not None and headers_of is not None
    for identity, entry in sorted(folded.items(), key=_by_last_update):
        aggregate, timestamp, _, msg, (key, start), passed, counted = entry
        hold(identity, counted - ENTRY_OVERHEAD, Windowed(key, start, start + size), aggregate, timestamp,
             _headers(ctx, msg, passed, headers_of))


def _settle_sessions(view: AggregateFold, fold: _Fold) -> None:
    """Every session the fold wrote into the store, in the order the sessions were first written (the write
    buffer's, so the changelog's), as the record-at-a-time loop writes each: the last value of those that
    remain, a removal of those merged away (made in the batch or read from the store).

    The keys' sessions stay held (a punctuation of the fold's aggregation expires sessions in steps of stream
    time: at each, the fold would otherwise read every key it meets again), but for those closed by now: the
    expiry removes only closed sessions (`SessionWindowAggregate.on_stream_time`), which take no more records."""
    put, folded, pending = view.store.put_serialized, fold.folded, fold.pending
    for raw, start, end in fold.writes:
        value = timestamp = None
        for s in folded[raw][0]:
            if s[0] == start and s[1] == end:
                value, timestamp = s[2], s[3]
                break
        put(raw, start, end, value, -1 if timestamp is None else timestamp)
    fold.writes.clear()
    if pending:  # with a cache: each session's last update, in the order of the last updates
        assert view.hold_session is not None and view.headers_of is not None
        for identity, update in sorted(pending.items(), key=_by_first):
            _, window, value, timestamp, msg, passed, counted, kind = update
            view.hold_session(identity, counted - ENTRY_OVERHEAD, window, value, timestamp,
                              None if kind == NOTHING else _headers(fold.ctx, msg, passed, view.headers_of), kind)
        pending.clear()
    open_from = fold.now - view.windows.gap_ms - view.windows.grace_ms
    for entry in folded.values():
        held = entry[0]
        if held and held[0][1] < open_from:  # (by end: the closed ones first)
            entry[0] = [s for s in held if s[1] >= open_from]


def _headers(ctx: TaskContext, msg: Message, passed: Any, headers_of: Callable[[], Any]) -> Any:
    """The headers an update held in the cache keeps: those a step before the aggregation passed on, else its
    record's as its outputs inherit them (none for a record without)."""
    if passed is not None:
        return list(passed)
    if msg.headers():
        ctx.enter_record(msg, msg.timestamp()[1])
        return headers_of()
    return []


def _by_last_update(item: tuple[bytes, list[Any]]) -> int:
    return int(item[1][2])


def _by_first(item: tuple[bytes, list[Any]]) -> int:
    return int(item[1][0])
