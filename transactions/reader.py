"""Read an exact offset range `[start, end)` of one or more partitions with read_committed.

A range may hold transaction markers and aborted records, so it can contain fewer than `end - start`
visible records, or none. The read of a partition is finished when the consumer's **position** reaches
`end` (librdkafka moves the position past markers and aborted batches), or when a record at or beyond
`end - 1` arrives. It never waits for a record at `end - 1`: that offset is often a commit marker.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from transactions.clients import Message
from transactions.errors import RetriableKafkaError, classify

__all__ = ["OffsetRange", "read_ranges", "RangeReader", "range_reader", "prefetch_ranges", "read_together",
           "CHUNK_RECORDS"]

#: How long one consume() waits for the records it asks for. A range that ends at a transaction marker (every
#: changelog and every topic another step writes) holds fewer records than offsets, so its last consume()
#: waits this out in full: at 0.05 s a changelog read past a commit marker took 53 ms, at 0.01 s 13 ms,
#: with no change to the rate of large reads (docs/measurements.md, "Reads that end at a transaction marker").
POLL_S = 0.01
#: The most records one consume() asks for: what a read hands over at a time (`read_ranges`' `batch_size`).
CHUNK_RECORDS = 10_000


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


#: Reads offset ranges read_committed: `read(ranges, timeout)` yields lists of visible records, as
#: `read_ranges` does with a consumer (a test double reads them from memory).
RangeReader = Callable[[list[OffsetRange], float], Iterator[list[Message]]]


def range_reader(consumer: Consumer, batch_size: int = CHUNK_RECORDS) -> RangeReader:
    """`read_ranges` with this consumer, in lists of at most `batch_size` records."""
    return lambda ranges, timeout: read_ranges(consumer, ranges, timeout=timeout, batch_size=batch_size)


def prefetch_ranges(consumer: Consumer, ranges: list[OffsetRange], timeout: float,
                    batch_size: int = CHUNK_RECORDS) -> RangeReader:
    """Assign `ranges` to the consumer now, so that librdkafka fetches them in the background while the caller
    does something else (runs the task before), and return the reader that reads them later: ranges that
    start where these start (their ends may have moved on since) are read from what was fetched; any others
    as `read_ranges` reads them."""
    todo = [r for r in ranges if not r.empty]
    starts = {(r.topic, r.partition): r.start for r in todo}
    if todo:
        _know_leaders(consumer, {r.topic for r in todo}, timeout)
        consumer.assign([TopicPartition(r.topic, r.partition, r.start) for r in todo])

    def read(later: list[OffsetRange], read_timeout: float) -> Iterator[list[Message]]:
        same = bool(starts) and {(r.topic, r.partition): r.start for r in later if not r.empty} == starts
        if not same:
            consumer.unassign()
        starts.clear()  # what was fetched is read once: a second read assigns again
        return read_ranges(consumer, later, timeout=read_timeout, assigned=same, batch_size=batch_size)

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
                batch_size: int = CHUNK_RECORDS, assigned: bool = False) -> Generator[list[Message], None, None]:
    """Yield lists of visible records with `start <= offset < end`, partition by partition in offset order.

    The consumer is assigned exactly these partitions for the duration of the read, then unassigned
    (`assigned`: it already is, at their starts, by `prefetch_ranges`).
    Raises `RetriableKafkaError` if the ranges are not read within `timeout` seconds; the time the caller
    spends between two lists (processing a slice of a streamed batch) does not count.
    """
    todo = {(r.topic, r.partition): r for r in ranges if not r.empty}
    if not todo:
        return
    assignment = [TopicPartition(r.topic, r.partition, r.start) for r in todo.values()]
    if not assigned:
        _know_leaders(consumer, {r.topic for r in todo.values()}, timeout)
        consumer.assign(assignment)
    deadline = time.monotonic() + timeout
    try:
        while todo:
            if time.monotonic() > deadline:
                raise RetriableKafkaError(f"reading {sorted(todo)} did not finish within {timeout:.0f}s")
            # Ask for no more than the ranges can still hold: consume() returns early only when it has
            # `num_messages`, so a larger request would wait out its whole timeout at the end of a range
            # (still, a range's markers count here and are never delivered: POLL_S keeps that wait short).
            want = max(1, min(batch_size, sum(r.end - _position(consumer, r) for r in todo.values())))
            batch = _visible(consumer.consume(want, POLL_S), todo)
            if batch:
                handed = time.monotonic()
                yield batch
                deadline += time.monotonic() - handed
            _finish_reached(consumer, todo)
    finally:
        # librdkafka keeps a partition's pause across unassign/assign: resume, or a reused consumer stalls.
        consumer.resume(assignment)
        consumer.unassign()


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


def _visible(messages: list[Any], todo: Mapping[tuple[str, int], OffsetRange]) -> list[Message]:
    out: list[Message] = []
    for msg in messages:
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                continue
            raise classify(KafkaException(err), "consume")
        r = todo.get((msg.topic(), msg.partition()))
        if r is not None and r.start <= msg.offset() < r.end:
            out.append(msg)
    return out


def _position(consumer: Consumer, r: OffsetRange) -> int:
    pos = consumer.position([TopicPartition(r.topic, r.partition)])[0].offset
    return pos if pos >= 0 else r.start


def _finish_reached(consumer: Consumer, todo: dict[tuple[str, int], OffsetRange]) -> None:
    positions = consumer.position([TopicPartition(t, p) for t, p in todo])
    done = [tp for tp in positions if tp.offset >= todo[(tp.topic, tp.partition)].end]
    if done:
        consumer.pause(done)
        for tp in done:
            del todo[(tp.topic, tp.partition)]
