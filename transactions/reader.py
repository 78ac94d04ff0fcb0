"""Read an exact offset range `[start, end)` of one or more partitions with read_committed.

A range may hold transaction markers and aborted records, so it can contain fewer than `end - start`
visible records, or none. The read of a partition is finished when the consumer's **position** reaches
`end` (librdkafka moves the position past markers and aborted batches), or when a record at or beyond
`end - 1` arrives. It never waits for a record at `end - 1`: that offset is often a commit marker.

librdkafka fetches ahead of what it delivers (`queued.min.messages` records a partition), and an unassignment
drops what it fetched: a task that read `[a, b)` each batch had its input fetched again from `b` by the next
batch, and the broker served a count job's input 2-3 times over. A consumer with a `ReadAhead` keeps what its
read had fetched past a range's end, up to a bound, and the read that starts there (the task's next batch, or
its top-up) takes it instead of fetching it again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from transactions.clients import Message
from transactions.errors import KafkaEosError, RetriableKafkaError, classify

__all__ = ["OffsetRange", "read_ranges", "RangeReader", "range_reader", "prefetch_ranges", "read_together",
           "ReadAhead"]

#: How long one consume() waits for the records it asks for. A range that ends at a transaction marker (every
#: changelog and every topic another step writes) holds fewer records than offsets, so its last consume()
#: waits this out in full: at 0.05 s a changelog read past a commit marker took 53 ms, at 0.01 s 13 ms,
#: with no change to the rate of large reads (docs/measurements.md, "Reads that end at a transaction marker").
POLL_S = 0.01


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    start: int
    end: int  # exclusive

    @property
    def empty(self) -> bool:
        return self.start >= self.end

    def at_start(self) -> OffsetRange:
        """The empty range at this range's start."""
        return OffsetRange(self.topic, self.partition, self.start, self.start)


#: The most records a `ReadAhead` keeps of one partition: what librdkafka fetches ahead of a read anyway
#: (`queued.min.messages`, transactions.settings), so a read's end drops none of what was fetched for it
READ_AHEAD_RECORDS = 20_000
#: How long kept records wait for the read that starts where they start: a task's next batch comes a trigger
#: interval later; a partition no longer read here (its task moved) frees its records once this is over
READ_AHEAD_S = 30.0


@dataclass
class _Held:
    start: int  # the end of the range whose read fetched them: where the read that takes them must start
    covered: int  # every visible record of the partition from `start` up to this offset is in `records`
    records: list[Message]  # in offset order
    at: float = field(default_factory=time.monotonic)


class ReadAhead:
    """The records a consumer's reads fetched past the ends of their ranges, each partition's kept for the next
    read that starts where they start. Records of a partition at offsets `[start, covered)` are exactly what a
    read_committed fetch of that interval delivers: committed records never change, and librdkafka delivers a
    partition's records in offset order and only below the last stable offset. The consumers of one worker and
    application share one (a task's batches may read on either of its input consumers)."""

    def __init__(self, records_per_partition: int = READ_AHEAD_RECORDS, keep_for: float = READ_AHEAD_S) -> None:
        self.records_per_partition, self.keep_for = records_per_partition, keep_for
        self._held: dict[tuple[str, int], _Held] = {}
        #: records handed to reads instead of fetched again (for the worker's batch report and tests)
        self.served = 0

    def __len__(self) -> int:
        return sum(len(h.records) for h in self._held.values())

    def claim(self, r: OffsetRange) -> _Held | None:
        """What is kept of `r`'s partition, if it starts at `r.start`; it is no longer kept either way."""
        held = self._held.pop((r.topic, r.partition), None)
        if held is None or held.start != r.start or time.monotonic() - held.at > self.keep_for:
            return None
        return held

    def keep(self, topic: str, partition: int, held: _Held) -> None:
        now = time.monotonic()
        for key in [k for k, h in self._held.items() if now - h.at > self.keep_for]:
            del self._held[key]
        if held.covered > held.start:
            self._held[(topic, partition)] = held


def read_ahead_of(consumer: Any) -> ReadAhead | None:
    return getattr(consumer, "read_ahead", None)


def _take_held(ahead: ReadAhead | None, claimed: Mapping[tuple[str, int], _Held],
               todo: dict[tuple[str, int], OffsetRange]) -> list[Message]:
    """The kept records below the ends of the ranges in `todo` whose partitions have some (`claimed`), in
    partition then offset order; `todo` is left with what is still to be fetched (a range moved on to where its
    kept records stop, or gone). What is kept past a range's end stays kept, from that end."""
    taken: list[Message] = []
    for key, held in claimed.items():
        r = todo.get(key)
        if r is None:
            continue
        below = [m for m in held.records if m.offset() < r.end]
        taken.extend(below)
        if held.covered >= r.end:
            del todo[key]
            if ahead is not None:
                ahead.keep(r.topic, r.partition, _Held(r.end, held.covered, held.records[len(below):], held.at))
        else:
            todo[key] = replace(r, start=held.covered)
    if ahead is not None:
        ahead.served += len(taken)
    return taken


#: Reads offset ranges read_committed: `read(ranges, timeout)` yields lists of visible records, as
#: `read_ranges` does with a consumer (a test double reads them from memory).
RangeReader = Callable[[list[OffsetRange], float], Iterator[list[Message]]]


def range_reader(consumer: Consumer) -> RangeReader:
    """`read_ranges` with this consumer."""
    return lambda ranges, timeout: read_ranges(consumer, ranges, timeout=timeout)


def prefetch_ranges(consumer: Consumer, ranges: list[OffsetRange], timeout: float) -> RangeReader:
    """Assign `ranges` to the consumer now, so that librdkafka fetches them in the background while the caller
    does something else (runs the task before), and return the reader that reads them later: ranges that
    start where these start (their ends may have moved on since) are read from what was fetched; any others
    as `read_ranges` reads them."""
    todo = [r for r in ranges if not r.empty]
    starts = {(r.topic, r.partition): r.start for r in todo}
    ahead = read_ahead_of(consumer)
    claimed = {(r.topic, r.partition): held for r in todo if ahead is not None and (held := ahead.claim(r))}
    fetch: dict[tuple[str, int], int] = {}  # where each partition's fetch starts: past what is kept of it
    for r in todo:
        key = (r.topic, r.partition)
        at = claimed[key].covered if key in claimed else r.start
        if at < r.end:  # (none for a range its kept records cover)
            fetch[key] = at
    if fetch:
        _know_leaders(consumer, {t for t, _ in fetch}, timeout)
        consumer.assign([TopicPartition(t, p, at) for (t, p), at in fetch.items()])

    def read(later: list[OffsetRange], read_timeout: float) -> Iterator[list[Message]]:
        same = bool(starts) and {(r.topic, r.partition): r.start for r in later if not r.empty} == starts
        if not same:
            consumer.unassign()
            for (topic, partition), held in claimed.items():  # (kept for a read that does start there)
                assert ahead is not None
                ahead.keep(topic, partition, held)
        starts.clear()  # what was fetched is read once: a second read assigns again
        return read_ranges(consumer, later, timeout=read_timeout,
                           prefetched=(dict(fetch), dict(claimed)) if same else None)

    return read


def read_together(read: RangeReader, ranges: list[OffsetRange], timeout: float) -> RangeReader:
    """Read `ranges` now, all in one read (one assignment, the partitions fetched side by side rather than one
    after another), and return the reader that hands a later read of exactly some of these ranges what was
    read for them, each partition in offset order, once; any other read (a range that starts or ends
    elsewhere, a second read of one) is `read`'s. Holds what was read until it is handed over."""
    held: dict[tuple[str, int], tuple[OffsetRange, list[Message]]] = {
        (r.topic, r.partition): (r, []) for r in ranges if not r.empty}
    if held:
        for chunk in read(list(ranges), timeout):
            for msg in chunk:
                held[(msg.topic(), msg.partition())][1].append(msg)

    def hand_over(later: list[OffsetRange], read_timeout: float) -> Iterator[list[Message]]:
        todo = [r for r in later if not r.empty]
        if not todo:
            return iter([])
        if any(held.get((r.topic, r.partition), (None,))[0] != r for r in todo):
            return read(later, read_timeout)
        messages = [msg for r in todo for msg in held.pop((r.topic, r.partition))[1]]
        return iter([messages] if messages else [])

    return hand_over


def read_ranges(consumer: Consumer, ranges: list[OffsetRange], *, timeout: float = 60.0,
                batch_size: int = 10_000,
                prefetched: tuple[dict[tuple[str, int], int], dict[tuple[str, int], _Held]] | None = None,
                ) -> Generator[list[Message], None, None]:
    """Yield lists of visible records with `start <= offset < end`, partition by partition in offset order.

    The consumer is assigned exactly these partitions for the duration of the read, then unassigned
    (`prefetched`: `prefetch_ranges` assigned it already, at these offsets, and claimed these kept records).
    With a `ReadAhead` (`consumer.read_ahead`), a range starts with what it keeps of its partition, and what
    the read fetched past a range's end is kept when the read completes.
    Raises `RetriableKafkaError` if the ranges are not read within `timeout` seconds; the time the caller
    spends between two lists (processing a slice of a streamed batch) does not count.
    """
    todo = {(r.topic, r.partition): r for r in ranges if not r.empty}
    if not todo:
        return
    ahead = read_ahead_of(consumer)
    assigned_at, claimed = prefetched if prefetched is not None else ({}, {})
    if prefetched is None and ahead is not None:
        claimed = {key: held for key, r in todo.items() if (held := ahead.claim(r))}
    assignment: list[TopicPartition] = []
    completed = False
    past: _PastEnds | None = None
    try:
        taken = _take_held(ahead, claimed, todo)
        for i in range(0, len(taken), batch_size):
            yield taken[i:i + batch_size]
        if not todo:
            completed = True
            return
        assignment = [TopicPartition(r.topic, r.partition, r.start) for r in todo.values()]
        if {key: r.start for key, r in todo.items()} != assigned_at:
            if assigned_at:
                consumer.unassign()
            _know_leaders(consumer, {r.topic for r in todo.values()}, timeout)
            consumer.assign(assignment)
        assigned_at = {key: r.start for key, r in todo.items()}
        past = _PastEnds(ahead, {key: r.end for key, r in todo.items()}) if ahead is not None else None
        deadline = time.monotonic() + timeout
        while todo:
            if time.monotonic() > deadline:
                raise RetriableKafkaError(f"reading {sorted(todo)} did not finish within {timeout:.0f}s")
            # Ask for no more than the ranges can still hold: consume() returns early only when it has
            # `num_messages`, so a larger request would wait out its whole timeout at the end of a range
            # (still, a range's markers count here and are never delivered: POLL_S keeps that wait short).
            want = max(1, min(batch_size, sum(r.end - _position(consumer, r) for r in todo.values())))
            batch = _visible(consumer.consume(want, POLL_S), todo, past, consumer)
            if batch:
                handed = time.monotonic()
                yield batch
                deadline += time.monotonic() - handed
            _finish_reached(consumer, todo, pause=past is None)
        completed = True
    finally:
        if past is not None and completed:
            past.keep(consumer, batch_size)
        if assigned_at:
            # librdkafka keeps a partition's pause across unassign/assign: resume, or a reused consumer stalls.
            consumer.resume(assignment or [TopicPartition(t, p, at) for (t, p), at in assigned_at.items()])
            consumer.unassign()


class _PastEnds:
    """What a read with a `ReadAhead` is delivered past its ranges' ends, partition by partition, up to the
    ahead's bound: a partition that reaches it is paused, and its records are kept up to the first dropped."""

    def __init__(self, ahead: ReadAhead, ends: dict[tuple[str, int], int]) -> None:
        self.ahead, self.ends = ahead, ends
        self.records: dict[tuple[str, int], list[Message]] = {key: [] for key in ends}
        self.dropped: dict[tuple[str, int], int] = {}  # a partition's first record not kept

    def add(self, key: tuple[str, int], msg: Message, consumer: Consumer) -> None:
        if key not in self.ends or key in self.dropped:
            return
        if len(self.records[key]) >= self.ahead.records_per_partition:
            self.dropped[key] = msg.offset()
            consumer.pause([TopicPartition(*key)])
        else:
            self.records[key].append(msg)

    def keep(self, consumer: Consumer, batch_size: int) -> None:
        """Take what the consumer holds already, without waiting for a fetch, then keep each partition's past
        its range's end: all its visible records below its position (or its first dropped record)."""
        try:
            while len(self.dropped) < len(self.ends):
                got = consumer.consume(batch_size, 0)
                if not got:
                    break
                _visible(got, {}, self, consumer)
        except KafkaEosError:
            return  # (a failing consumer: keep nothing; the next read fetches and reports it)
        positions = consumer.position([TopicPartition(t, p) for t, p in self.ends])
        for tp in positions:
            key = (tp.topic, tp.partition)
            covered = min(tp.offset, self.dropped.get(key, tp.offset))
            if covered >= self.ends[key]:
                self.ahead.keep(tp.topic, tp.partition, _Held(self.ends[key], covered, self.records[key]))


def _know_leaders(consumer: Consumer, topics: set[str], timeout: float) -> None:
    """Fetch the metadata of topics this consumer has not read yet. Assigned a partition whose leader it does
    not know, librdkafka learns it from its once-a-second topic scan: a new consumer's first read took
    0.95 s for 5,000 records, 0.02 s after this. A consumer that cannot remember (not a `RangeConsumer`)
    asks every time; a failure is left to the read itself, which reports it."""
    known: set[str] | None = getattr(consumer, "known_topics", None)
    for topic in sorted(topics - known if known is not None else topics):
        try:
            consumer.list_topics(topic, timeout=min(timeout, 10.0))
        except KafkaException:
            return
        if known is not None:
            known.add(topic)


def _visible(messages: list[Any], todo: Mapping[tuple[str, int], OffsetRange], past: _PastEnds | None = None,
             consumer: Consumer | None = None) -> list[Message]:
    out: list[Message] = []
    for msg in messages:
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                continue
            raise classify(KafkaException(err), "consume")
        key = (msg.topic(), msg.partition())
        r = todo.get(key)
        if r is not None and r.start <= msg.offset() < r.end:
            out.append(msg)
        elif past is not None and consumer is not None and msg.offset() >= past.ends.get(key, msg.offset() + 1):
            past.add(key, msg, consumer)
    return out


def _position(consumer: Consumer, r: OffsetRange) -> int:
    pos = consumer.position([TopicPartition(r.topic, r.partition)])[0].offset
    return pos if pos >= 0 else r.start


def _finish_reached(consumer: Consumer, todo: dict[tuple[str, int], OffsetRange], pause: bool = True) -> None:
    """Take the ranges whose partitions' positions reached their ends off `todo`; `pause` them (without a
    `ReadAhead`: what they deliver from now on is dropped anyway)."""
    positions = consumer.position([TopicPartition(t, p) for t, p in todo])
    done = [tp for tp in positions if tp.offset >= todo[(tp.topic, tp.partition)].end]
    if done:
        if pause:
            consumer.pause(done)
        for tp in done:
            del todo[(tp.topic, tp.partition)]
