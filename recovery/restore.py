"""Restore a store by replaying its changelog partition (read_committed) from the offset the store
recorded (or the beginning) to the partition's end.

A broker answers a transaction's commit once it is decided and writes the commit markers after: for a moment
the changelog's last stable offset may still be the first offset of the transaction a store has just applied,
so the store looks ahead of its changelog. `settled_bounds` waits for the markers then; only a store ahead of
the records the changelog holds at all has lost its changelog.

Done when the consumer's position reaches the end offset (`transactions.read_ranges`); never waits for a
record at end - 1, which is often a commit marker. Each chunk of records is applied with the offset it
brings the store to, so an interrupted restore resumes where it stopped. A store that recorded an offset
beyond the changelog's end, or before its start (the changelog was recreated or truncated), is
corrupted: it is wiped and restored from the beginning.

Where changelogs are read from is a `ChangelogSource`: Kafka in a Spark task (`eos.worker.clients`), memory
in `eos.testing.TopologyTestDriver`; the replay is the same code.

A `budget` (seconds) bounds one call: the replay stops after the chunk that exceeds it, with the store at
that chunk's offset (`complete` False); standby copies use it so a far-behind copy catches up over
several batches instead of holding one batch up.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from recovery.backends import Backend
from recovery.windows import with_derived
from transactions import Message, OffsetRange, RangeReader, RetriableKafkaError

__all__ = ["RestoreResult", "restore_store", "settled_bounds", "ChangelogSource", "KnownBounds"]

TP = tuple[str, int]


class ChangelogSource(Protocol):
    """Where a task's changelogs are: their bounds and a read_committed reader of ranges."""

    def bounds(self, partitions: list[TP]) -> dict[TP, tuple[int, int]]:
        """Per changelog partition: (log start offset, last stable offset)."""
        ...

    def written_ends(self, partitions: list[TP]) -> dict[TP, int]:
        """Per changelog partition: its high watermark (records written, in transactions decided or not)."""
        ...

    def settled_ends(self, at_least: dict[TP, int], within: float) -> dict[TP, int]:
        """Per changelog partition, its last stable offset once it reaches `at_least`, or after `within`
        seconds as it is (`transactions.KafkaAdmin.settled_ends`)."""
        ...

    def read(self, ranges: list[OffsetRange], timeout: float) -> Iterator[list[Message]]: ...


class KnownBounds:
    """`source` with the bounds of some partitions already read (`known`), read with many others' at once: each
    is answered once from what was read, then from `source` again (a second open of a store after a failure
    reads them afresh). Everything else goes to `source`. Only for partitions no other writer can reach between
    the read and the restore (`eos.worker.attempt.UnitAttempt`: the changelogs of tasks whose transactional id
    this attempt holds, each written only by its own task's batch, after its restore)."""

    def __init__(self, source: ChangelogSource, known: dict[TP, tuple[int, int]]) -> None:
        self.source, self.known = source, dict(known)

    def bounds(self, partitions: list[TP]) -> dict[TP, tuple[int, int]]:
        if not partitions or not all(tp in self.known for tp in partitions):
            return self.source.bounds(partitions)
        return {tp: self.known.pop(tp) for tp in partitions}

    def written_ends(self, partitions: list[TP]) -> dict[TP, int]:
        return self.source.written_ends(partitions)

    def settled_ends(self, at_least: dict[TP, int], within: float) -> dict[TP, int]:
        return self.source.settled_ends(at_least, within)

    def read(self, ranges: list[OffsetRange], timeout: float) -> Iterator[list[Message]]:
        return self.source.read(ranges, timeout)


@dataclass
class RestoreResult:
    records: int
    seconds: float
    start: int
    end: int
    wiped: bool = False
    complete: bool = True  # False: the budget ran out before the end; the store is at `position`
    position: int = 0

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


def settled_bounds(source: ChangelogSource, tp: TP, recorded: int, bounds: tuple[int, int], *, timeout: float,
                   log: Any = None) -> tuple[int, int]:
    """The bounds of changelog partition `tp` for a store that reflects it up to `recorded`, past the last stable
    offset in `bounds`: read again until the last stable offset reaches the store, where the changelog holds
    records that far (the markers of the transaction the store applied last are still being written: on a
    broker of Kafka 4 the consumer group's offsets of the same transaction may be stable already). Where it
    holds fewer records than the store reflects (recreated, truncated), `bounds` as they are: the store is
    wiped (`restore_store`). Raises `RetriableKafkaError` when the markers are not written within `timeout`
    seconds; the store is kept."""
    if recorded <= bounds[1] or source.written_ends([tp])[tp] < recorded:
        return bounds
    if log is not None:
        log.debug("the changelog's last stable offset is behind the store: waiting for the markers of its last "
                  "commit", changelog=f"{tp[0]}[{tp[1]}]", recorded=recorded, end=bounds[1])
    end = source.settled_ends({tp: recorded}, within=timeout)[tp]
    if end < recorded:
        raise RetriableKafkaError(f"changelog {tp[0]}[{tp[1]}]: its last stable offset ({end}) has not reached "
                                  f"the offset its store reflects ({recorded}) within {timeout:.0f} s, though the "
                                  "records are written: the markers of a committed transaction are not written yet")
    return bounds[0], end


def restore_store(backend: Backend, read: RangeReader, topic: str, partition: int, *, start_offset: int,
                  end_offset: int, log: Any = None, progress_every: float = 2.0,
                  on_progress: Callable[[int, int, int], None] | None = None, timeout: float = 3600.0,
                  budget: float | None = None,
                  changes_of: Callable[[list[Message]], Mapping[bytes, bytes | None]] | None = None,
                  kind: str = "key_value") -> RestoreResult:
    """Replay `[recorded offset, end_offset)` of the changelog partition into `backend`.

    `start_offset` is the partition's log start offset; `on_progress(records, position, end)` is called
    every `progress_every` seconds. `read` reads ranges read_committed (`transactions.range_reader`).
    `changes_of(records)`: the store's writes for a chunk of records that are not its own changelog's (a
    table's topic: `StoreSpec.source_topic`), read from `backend` as the chunk's earlier records left it;
    by default each record is a write of its key and value, with what it implies for a store of `kind` beside it
    (`recovery.windows.with_derived`: a session store's index)."""
    if not 0 <= start_offset <= end_offset:
        # Never act on such a range: a store "ahead" of a bogus end would be wiped and left empty.
        raise RetriableKafkaError(f"changelog {topic}[{partition}]: invalid offset range [{start_offset}, "
                                  f"{end_offset}) from the broker; restore not started")
    recorded = backend.changelog_offset()
    wiped = False
    if recorded is not None and (recorded > end_offset or recorded < start_offset):
        if log is not None:
            log.warning("store is ahead of or behind its changelog's range: wiping it and restoring from the start",
                        changelog=f"{topic}[{partition}]", recorded=recorded, start=start_offset, end=end_offset)
        backend.wipe()
        recorded, wiped = None, True
    begin = recorded if recorded is not None else start_offset
    started = last_report = time.monotonic()
    result = RestoreResult(0, 0.0, begin, end_offset, wiped, position=max(begin, end_offset))
    if begin >= end_offset:
        return result
    chunks = read([OffsetRange(topic, partition, begin, end_offset)], timeout)
    for batch in chunks:
        # In offset order: the last write of a key wins. Compacted topics refuse null keys.
        changes = (with_derived(kind, {msg.key() or b"": msg.value() for msg in batch}) if changes_of is None
                   else changes_of(batch))
        backend.write(changes, changelog_offset=batch[-1].offset() + 1)
        result.records += len(batch)
        now = time.monotonic()
        if budget is not None and now - started >= budget and batch[-1].offset() + 1 < end_offset:
            getattr(chunks, "close", lambda: None)()  # (a consumer's reader unassigns it)
            result.complete, result.position = False, batch[-1].offset() + 1
            result.seconds = now - started
            return result
        if now - last_report >= progress_every:
            last_report = now
            position = batch[-1].offset() + 1
            if on_progress is not None:
                on_progress(result.records, position, end_offset)
            if log is not None:
                log.info("restoring", changelog=f"{topic}[{partition}]", records=result.records, position=position,
                         end=end_offset, records_per_s=round(result.records / (now - started)))
    backend.write({}, changelog_offset=end_offset)  # past trailing markers and aborted records
    result.seconds = time.monotonic() - started
    return result
