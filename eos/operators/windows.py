"""Windowed aggregations: tumbling and hopping, sliding, and session windows (see `eos.windows`).

Every processor here keeps its windows in a store of its task (restored by replay, kept by standbys),
drops or dead-letters late records, and, with emit="final", emits each window's result once, when stream
time closes it: in a stream-time punctuation, so the result is committed in the same transaction as the
store's deletion of the window and is never emitted twice, and carries `eos.derived` rather than the
origin of the record that happened to move stream time. With emit="update" every change is forwarded as
the result of the record that caused it (hopping and sliding windows: one output per window it changed,
lineage indexes 0, 1, ...). A result's timestamp is the largest timestamp of the records in its window.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any, Literal

from eos.cache import RecordCache, held_updates, updates
from eos.operators.aggregate import _HELD_KEYS, AggregateFold, _holds
from eos.processor import Processor, ProcessorContext
from eos.records import Record
from eos.windows import HoppingWindows, SessionWindows, SlidingWindows, TimeWindow, Windowed
from recovery import RecordBuffer, SessionStore, WindowStore

__all__ = ["LateRecordError", "TimeWindowAggregate", "SlidingWindowAggregate", "SessionWindowAggregate",
           "Emit", "LatePolicy"]

Emit = Literal["update", "final"]
LatePolicy = Literal["drop", "dead_letter"]
Initializer = Callable[[], Any]
Aggregator = Callable[[Any, Any, Any], Any]


def expiry_step(retention: int) -> int:
    """The stream time between two drops of expired windows: half their retention, the length of Kafka Streams'
    window store segments (which it makes 60 s at least; here short windows expire in short steps). A window is
    kept for its retention, and at most half of it more (closed, taking no records)."""
    return max(1, retention // 2)


class LateRecordError(ValueError):
    """A record that falls only in closed windows (with late_records="dead_letter")."""


class _WindowedAggregate(Processor):
    retention: int  # ms of stream time an entry is kept (set by each kind)
    _cache: RecordCache | None = None  # the task's record cache, where updates wait (set by `init`)
    #: time windows': how an update written to the store goes on (`eos.cache.updates`, set by `init`)
    emit_update: Callable[[Any, Any, int], None]

    def __init__(self, store: str, initializer: Initializer, aggregator: Aggregator, emit: Emit,
                 late: LatePolicy) -> None:
        self.store_name, self.initializer, self.aggregator = store, initializer, aggregator
        self.emit, self.late_policy = emit, late
        self._expired_to = -1  # entries before this time were dropped
        self._expire_since: int | None = None  # the horizon before that (entries before it are gone)
        # emit="final": results of windows before this time were emitted; no window before it can be
        # created again (it would be closed), so the next scan starts here
        self._emitted_to: int | None = None

    def _expire_due(self, horizon: int, retention: int) -> bool:
        """Whether to drop the entries before `horizon` now, rounded down to a step of half the retention
        (`_expired_to`, `expiry_step`: Kafka Streams drops whole segments of that length), not on every move of
        stream time (a scan each time). Entries kept longer are closed windows, which take no records. The steps
        are of stream time alone, not of what this runtime did before: a runtime that replaces one (a restart, a
        batch run again) drops what its predecessor dropped at the same punctuations, so the changelog's
        tombstones are the same (its first look scans the store from the start and finds those gone)."""
        step = expiry_step(retention)
        target = horizon - horizon % step
        if target <= self._expired_to:
            return False
        self._expire_since, self._expired_to = (self._expired_to if self._expired_to >= 0 else None), target
        return True

    def _emission_range(self, horizon: int) -> tuple[int | None, int]:
        """(from, to) of the next scan for closed windows: from where the last one ended, up to `horizon`."""
        since, self._emitted_to = self._emitted_to, horizon + 1
        return since, horizon

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.store = context.store(self.store_name)
        # emit="final": whenever stream time moves on (a window closes at its exact end plus grace); "update":
        # only to drop expired entries, in their steps (a punctuation per record would cost more than the
        # aggregation; a batch folded into the windows puts what it holds into the store at each punctuation)
        interval = 1 if self.emit == "final" else expiry_step(self.retention)
        self._schedule = context.schedule(interval, self.on_stream_time, type="stream")

    def late(self, record: Record, detail: str) -> None:
        self.late_at(record.timestamp, detail, self.context.stream_time)
        self.context.record_dropped("late")

    def late_at(self, timestamp: int, detail: str, stream_time: int) -> None:
        """A record at `timestamp` that no open window takes: a LateRecordError (the dead-letter topic), or
        nothing (dropped; the caller counts it)."""
        if self.late_policy == "dead_letter":
            raise LateRecordError(f"late record at {timestamp}: {detail} (stream time {stream_time})")

    def on_stream_time(self, stream_time: int) -> None:
        raise NotImplementedError

    def _window_fold_view(self, store: WindowStore, windows: Any, holds: Callable[[Any], bool] | None,
                          stateless_after: bool, detail: str, **more: Any) -> AggregateFold | None:
        """What folding a batch into windows of `store` needs (`eos.worker.folding`), where their numbers' updates
        are all emitted (`holds`: not None): into the task's record cache, each window's update held as `updates`
        holds it (`held_updates`), or, without one, forwarded at once to nothing but stateless operators and sinks
        (`stateless_after`). A late record is dead-lettered saying `detail`. Else None."""
        cache = self._cache
        if holds is None or (cache is None and not stateless_after):
            return None

        def late(timestamp: int, stream_time: int) -> None:
            self.late_at(timestamp, detail, stream_time)
        view = AggregateFold(store, self.initializer, self.aggregator, holds, self.store_name, _HELD_KEYS, None, None,
                             None, None, None, self.emit_update, windows=windows, late=late,
                             schedules=(self._schedule,), step=getattr(self.context, "name", None), **more)
        if cache is None:
            return view
        return view._replace(cache=cache, headers_of=self.context.cached_headers, emit=None,  # type: ignore[attr-defined]
                             hold_window=held_updates(self.context, store))


class TimeWindowAggregate(_WindowedAggregate):
    """Tumbling and hopping windows over a `WindowStore` (key, window start) -> aggregate."""

    def __init__(self, store: str, windows: HoppingWindows, initializer: Initializer, aggregator: Aggregator,
                 emit: Emit = "update", late: LatePolicy = "drop", retention: int | None = None) -> None:
        super().__init__(store, initializer, aggregator, emit, late)
        self.windows = windows
        self.retention = max(retention or 0, windows.retention_ms)
        self._open_ends: list[int] | None = None  # (emit="final") heap of the ends of windows not yet emitted

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.store: WindowStore = context.store(self.store_name)
        self.emit_update = updates(context, self.store)  # through the record cache, if the task has one
        holds = _holds(self.store.spec.value_serde)
        sole_user = getattr(context, "sole_user_of", None)
        #: numbers its store surely serializes, every update emitted (emit="update"), and no other processor sees
        #: the store: a batch may be folded (`fold_view`)
        self._fold_holds = holds if (holds is not None and self.emit == "update" and sole_user is not None
                                     and sole_user(self.store_name)) else None
        self._cache = getattr(context, "record_cache", None)

    def fold_view(self, *, stateless_after: bool) -> AggregateFold | None:
        """What folding a batch into these windows needs (`eos.worker.folding`): tumbling and hopping windows
        of numbers emitting every update, into the record cache, or, without one, forwarded at once to
        nothing but stateless operators and sinks (`stateless_after`). Else None."""
        if type(self) is not TimeWindowAggregate:
            return None
        return self._window_fold_view(self.store, self.windows, self._fold_holds, stateless_after,
                                      "all its windows are closed")

    def process(self, record: Record) -> None:
        if record.value is None:
            return  # tombstones are not aggregated
        if record.key is None:
            raise ValueError("records without a key cannot be aggregated by key")
        stream_time, windows = self.context.stream_time, self.windows
        open_windows = [w for w in windows.windows_for(record.timestamp) if not windows.closed(w.end, stream_time)]
        if not open_windows:
            self.late(record, "all its windows are closed")
            return
        for window in open_windows:
            self._update(record, window)

    def _update(self, record: Record, window: TimeWindow) -> None:
        current = self.store.fetch_with_timestamp(record.key, window.start)
        if current is None:
            aggregate, timestamp = self.initializer(), record.timestamp
            if self._open_ends is not None and self.emit == "final":
                heapq.heappush(self._open_ends, window.end)
        else:
            aggregate, timestamp = current[0], max(current[1], record.timestamp)
        aggregate = self.aggregator(record.key, record.value, aggregate)
        self.store.put(record.key, window.start, aggregate, timestamp)
        if self.emit == "update":
            self.emit_update(Windowed(record.key, window.start, window.end), aggregate, timestamp)

    def on_stream_time(self, stream_time: int) -> None:
        size, grace = self.windows.size_ms, self.windows.grace_ms
        if self.emit == "final":
            if self._open_ends is None:  # the first time in this runtime: the windows the store holds
                self._open_ends = [start + size for _, start, _, _ in self.store.fetch_all()]
                heapq.heapify(self._open_ends)
            if self._open_ends and self._open_ends[0] + grace <= stream_time:
                closed = list(self.store.fetch_all(*self._emission_range(stream_time - grace - size)))
                for key, start, aggregate, timestamp in closed:
                    self.context.forward(Windowed(key, start, start + size), aggregate, timestamp=timestamp)
                    self.store.delete(key, start)
                while self._open_ends and self._open_ends[0] + grace <= stream_time:
                    heapq.heappop(self._open_ends)
        elif self._expire_due(stream_time - self.retention, self.retention):
            self.store.expire_before(self._expired_to, self._expire_since)


class SlidingWindowAggregate(_WindowedAggregate):
    """Sliding windows. The windows of a key are defined by its records (`SlidingWindows`); a window that a
    record creates gets its content folded from the key's records, kept in a `RecordBuffer` for as long as
    an open window can hold them; existing windows containing the record fold it in. Records are folded in
    timestamp order into a new window, in arrival order into existing ones (commutative aggregations, such
    as counts and sums, do not tell the two apart)."""

    def __init__(self, store: str, buffer: str, windows: SlidingWindows, initializer: Initializer,
                 aggregator: Aggregator, emit: Emit = "update", late: LatePolicy = "drop",
                 retention: int | None = None) -> None:
        super().__init__(store, initializer, aggregator, emit, late)
        self.buffer_name, self.windows = buffer, windows
        self.retention = max(retention or 0, windows.retention_ms)

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.store: WindowStore = context.store(self.store_name)
        self.buffer: RecordBuffer = context.store(self.buffer_name)
        self.emit_update = updates(context, self.store)  # through the record cache, if the task has one
        holds = _holds(self.store.spec.value_serde)
        sole_user = getattr(context, "sole_user_of", None)
        #: numbers its store surely serializes, every update emitted (emit="update"), and no other processor sees
        #: its stores: a batch may be folded (`fold_view`)
        self._fold_holds = holds if (holds is not None and self.emit == "update" and sole_user is not None
                                     and sole_user(self.store_name) and sole_user(self.buffer_name)) else None
        self._cache = getattr(context, "record_cache", None)

    def fold_view(self, *, stateless_after: bool) -> AggregateFold | None:
        """What folding a batch into these windows needs (`eos.worker.folding`): sliding windows of numbers
        emitting every update, into the record cache, or, without one, forwarded at once to nothing but
        stateless operators and sinks (`stateless_after`). Else None."""
        if type(self) is not SlidingWindowAggregate:
            return None
        return self._window_fold_view(self.store, self.windows, self._fold_holds, stateless_after,
                                      "its windows are closed", buffer=self.buffer)

    def process(self, record: Record) -> None:
        if record.value is None:
            return
        if record.key is None:
            raise ValueError("records without a key cannot be aggregated by key")
        windows, t, key = self.windows, record.timestamp, record.key
        stream_time = self.context.stream_time
        if windows.late(t, stream_time):
            self.late(record, "its windows are closed")
            return
        diff = windows.diff_ms
        near = self.buffer.range(key, t - diff - 1, t + diff + 1)
        touched = windows.touched(t, [ts for ts, _, _ in near])
        if not windows.takes(t, touched, stream_time):
            self.late(record, "its windows are closed")
            return
        # (the key's records at t told apart by their order: a flat_map before, or topics read together, give
        # several one time and input offset)
        self.buffer.put(key, t, self.buffer.next_seq(key, t, near), record.value)
        for window in touched:
            if windows.closed(window.end, stream_time):
                continue
            current = self.store.fetch_with_timestamp(key, window.start)
            if current is None:  # a new window: fold what it holds (this record included)
                aggregate, timestamp = self._fold(key, window)
            elif window.start <= t <= window.end:
                aggregate, timestamp = self.aggregator(key, record.value, current[0]), max(current[1], t)
            else:  # the record's right window, there already (a later record's left window): not the record's
                continue
            self.store.put(key, window.start, aggregate, timestamp)
            if self.emit == "update":
                self.emit_update(Windowed(key, window.start, window.end), aggregate, timestamp)

    def _fold(self, key: Any, window: TimeWindow) -> tuple[Any, int]:
        aggregate, timestamp = self.initializer(), -1
        for ts, _, value in self.buffer.range(key, window.start, window.end):
            aggregate = self.aggregator(key, value, aggregate)
            timestamp = max(timestamp, ts)
        return aggregate, timestamp

    def on_stream_time(self, stream_time: int) -> None:
        diff, grace = self.windows.diff_ms, self.windows.grace_ms
        if self.emit == "final":
            # (a window's end is in it: closed once stream time is past it, as `SlidingWindows.closed`)
            closed = list(self.store.fetch_all(*self._emission_range(stream_time - grace - diff - 1)))
            for key, start, aggregate, timestamp in closed:
                self.context.forward(Windowed(key, start, start + diff), aggregate, timestamp=timestamp)
                self.store.delete(key, start)
        horizon = stream_time - grace - 2 * diff - 1  # no open window can hold a record before this
        if self._expire_due(horizon, 2 * diff + grace):
            self.buffer.expire_before(self._expired_to, self._expire_since)
            if self.emit == "update":  # (stream time less the retention, by the same step, from where it ended)
                shift = grace + 2 * diff + 1 - self.retention
                since = None if self._expire_since is None else self._expire_since + shift
                self.store.expire_before(self._expired_to + shift, since)


def _unseen_leaves(key: Any, value: Any, timestamp: int, headers: Any) -> None:
    """How a session merged away before anything of it left the record cache leaves it: as nothing."""


#: how a session's update in the record cache leaves it (`SessionWindowAggregate._hold`): forwarded (a session seen
#: downstream, or one that is not yet: made while the cache holds it), or as nothing (the removal of an unseen one)
SEEN, UNSEEN, NOTHING = 0, 1, 2


class SessionWindowAggregate(_WindowedAggregate):
    """Session windows over a `SessionStore`: a record merges the key's sessions within the inactivity gap
    of it (their aggregates with `merger`, then the record with `aggregator`); merged-away sessions are
    forwarded as tombstones (emit="update"), as Kafka Streams does."""

    def __init__(self, store: str, windows: SessionWindows, initializer: Initializer, aggregator: Aggregator,
                 merger: Callable[[Any, Any, Any], Any], emit: Emit = "update", late: LatePolicy = "drop",
                 retention: int | None = None) -> None:
        super().__init__(store, initializer, aggregator, emit, late)
        self.windows, self.merger = windows, merger
        self.retention = max(retention or 0, windows.retention_ms)

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.store: SessionStore = context.store(self.store_name)
        cache: RecordCache | None = getattr(context, "record_cache", None)
        self._cache = cache if self.emit == "update" else None
        holds = _holds(self.store.spec.value_serde)
        sole_user = getattr(context, "sole_user_of", None)
        #: numbers its store surely serializes, every update emitted (emit="update"), and no other processor sees
        #: the store: a batch may be folded (`fold_view`)
        self._fold_holds = holds if (holds is not None and self.emit == "update"
                                     and sole_user is not None and sole_user(self.store_name)) else None
        #: with a record cache, how an update leaves it, by kind (SEEN, UNSEEN, NOTHING). A session made while the
        #: cache holds it is unseen downstream until its update leaves the cache: one a record merges away before
        #: then leaves without a tombstone (as a Kafka Streams session store's cache forwards a removal only of
        #: what it had flushed). Whether a session is unseen is told by its entry in the cache, so a record's
        #: rollback in the cache puts that back too
        forward = context.forward

        def forward_seen(key: Windowed, value: Any, timestamp: int, headers: Any) -> None:
            forward(key, value, timestamp=timestamp, headers=headers)

        def forward_unseen(key: Windowed, value: Any, timestamp: int, headers: Any) -> None:
            forward(key, value, timestamp=timestamp, headers=headers)
        self._leaves = (forward_seen, forward_unseen, _unseen_leaves)

    def fold_view(self, *, stateless_after: bool) -> AggregateFold | None:
        """What folding a batch into these sessions needs (`eos.worker.folding`): sessions of numbers emitting
        every update, into the record cache, or, without one, each update and each merged-away session's tombstone
        forwarded at once to nothing but stateless operators and sinks (`stateless_after`). Else None."""
        cache = self._cache
        if self._fold_holds is None or (cache is None and not stateless_after):
            return None

        def late(timestamp: int, stream_time: int) -> None:  # (no open session within the gap: its own is closed)
            self.late_at(timestamp, f"its session [{timestamp}, {timestamp}] is closed", stream_time)

        def forward(window: Windowed, aggregate: Any, timestamp: int) -> None:
            self.context.forward(window, aggregate, timestamp=timestamp)
        view = AggregateFold(self.store, self.initializer, self.aggregator, self._fold_holds, self.store_name,
                             _HELD_KEYS, None, None, None, None, None, forward, windows=self.windows, late=late,
                             schedules=(self._schedule,), merger=self.merger, step=getattr(self.context, "name", None))
        if cache is None:
            return view
        return view._replace(cache=cache, headers_of=self.context.cached_headers, emit=None,  # type: ignore[attr-defined]
                             hold_session=self._hold, unseen=self.unseen)

    def unseen(self, identity: bytes) -> bool:
        """Whether the session of store key `identity` is unseen downstream: the cache holds its update, made while
        the cache held it, and nothing of it has left the cache yet."""
        return self._cache is not None and self._cache.forward_of(self.store_name, identity) is self._leaves[UNSEEN]

    def _emit(self, window: Windowed, aggregate: Any, timestamp: int, made: bool = False) -> None:
        """Pass on a session's update (None: it was merged away) just written to the store, at once or through
        the record cache; `made`: the session is new."""
        cache = self._cache
        if cache is None:
            self.context.forward(window, aggregate, timestamp=timestamp)
            return
        identity, size = self.store.last_written
        unseen = self.unseen(identity)
        if aggregate is None and unseen:
            self._hold(identity, size, window, None, timestamp, None, NOTHING)
            return
        self._hold(identity, size, window, aggregate, timestamp, self.context.cached_headers(),  # type: ignore[attr-defined]
                   UNSEEN if aggregate is not None and (made or unseen) else SEEN)

    def _hold(self, identity: bytes, size: int, window: Windowed, aggregate: Any, timestamp: int, headers: Any,
              kind: int) -> None:
        """Put a session's update (its store key `identity`, `size` bytes) in the record cache, leaving it as `kind`
        says (SEEN, UNSEEN: forwarded; NOTHING: the removal of a session never forwarded)."""
        assert self._cache is not None
        self._cache.put(self.store_name, identity, size, self._leaves[kind], window, aggregate, timestamp, headers)

    def process(self, record: Record) -> None:
        if record.value is None:
            return
        if record.key is None:
            raise ValueError("records without a key cannot be aggregated by key")
        key, t, gap = record.key, record.timestamp, self.windows.gap_ms
        stream_time = self.context.stream_time
        found = [s for s in self.store.find_sessions(key, t - gap, t + gap)
                 if not self.windows.closed(s.end, stream_time)]  # a closed session takes no more records
        start, end = min([t, *(s.start for s in found)]), max([t, *(s.end for s in found)])
        if self.windows.closed(end, stream_time):
            self.late(record, f"its session [{start}, {end}] is closed")
            return
        aggregate, timestamp, made = self.initializer(), t, True
        for session in found:
            aggregate = self.merger(key, aggregate, session.value)
            timestamp = max(timestamp, session.timestamp)
            if (session.start, session.end) != (start, end):
                self.store.remove(key, session.start, session.end)
                if self.emit == "update":
                    self._emit(Windowed(key, session.start, session.end), None, timestamp)
            else:
                made = False
        aggregate = self.aggregator(key, record.value, aggregate)
        self.store.put(key, start, end, aggregate, timestamp)
        if self.emit == "update":
            self._emit(Windowed(key, start, end), aggregate, timestamp, made)

    def on_stream_time(self, stream_time: int) -> None:
        gap, grace = self.windows.gap_ms, self.windows.grace_ms
        if self.emit == "final":
            since, horizon = self._emission_range(stream_time - gap - grace - 1)
            for session in list(self.store.ending_before(horizon + 1, since)):
                self.context.forward(Windowed(session.key, session.start, session.end), session.value,
                                     timestamp=session.timestamp)
                self.store.remove(session.key, session.start, session.end)
        elif self._expire_due(stream_time - self.retention, self.retention):
            self.store.expire_before(self._expired_to, self._expire_since)
