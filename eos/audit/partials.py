"""Per-partition audit scans and their partial results.

Each scan reads one partition and returns a small, picklable summary (Roaring bitmaps serialized to
bytes, counts, samples), so scans can run one after another here or in parallel as Spark tasks, and the
driver merges the summaries. Nothing holds the records themselves.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pyroaring import BitMap64

from eos.origin import DERIVED_HEADER, INDEX_LEVEL_BITS, ORIGIN_HEADER, origin_of
from eos.streamtime import is_marker
from transactions import Isolation, Message, OffsetRange, read_ranges, scan_consumer

__all__ = ["InputPartial", "OutputPartial", "scan_input_partition", "scan_output_partition", "PartitionScan",
           "MAX_BREAKS"]

#: order breaks a partition scan keeps for the merge to explain (a topic created again restarts its offsets)
MAX_BREAKS = 10_000

@dataclass(frozen=True)
class PartitionScan:
    bootstrap_servers: str
    topic: str
    partition: int
    start: int
    end: int  # exclusive


def _read(scan: PartitionScan, isolation: Isolation,
          progress: Callable[[int], None] | None) -> Iterator[list[Message]]:
    consumer = scan_consumer(scan.bootstrap_servers, isolation)
    try:
        for batch in read_ranges(consumer, [OffsetRange(scan.topic, scan.partition, scan.start, scan.end)],
                                 timeout=3600):
            if progress is not None:
                progress(len(batch))
            yield batch
    finally:
        consumer.close()


def _offsets(scan: PartitionScan, isolation: Isolation, progress: Callable[[int], None] | None,
             records_only: bool = False) -> BitMap64:
    """Offsets of the visible records; `records_only`: but clock markers (eos.streamtime), which no job
    processes as records."""
    bm = BitMap64()
    for batch in _read(scan, isolation, progress):
        if records_only:
            bm.update(msg.offset() for msg in batch if not is_marker(msg.headers()))
        else:
            bm.update(msg.offset() for msg in batch)
    return bm


@dataclass
class InputPartial:
    topic: str
    partition: int
    offsets: bytes  # serialized BitMap64 of visible input offsets below the bound
    low: int = 0  # the partition's first offset when scanned (records below it were deleted)

    def bitmap(self) -> BitMap64:
        return BitMap64.deserialize(self.offsets)


def scan_input_partition(scan: PartitionScan, progress: Callable[[int], None] | None = None) -> InputPartial:
    offsets = _offsets(scan, "read_committed", progress, records_only=True)
    return InputPartial(scan.topic, scan.partition, offsets.serialize(), scan.start)


@dataclass
class OutputPartial:
    topic: str
    partition: int
    records: int = 0
    #: (origin topic, origin partition, index) -> serialized BitMap64 of origin offsets seen once
    origins: dict[tuple[str, int, int], bytes] = field(default_factory=dict)
    #: the same for the origins seen more than once (`duplicates` counts the extra copies)
    duplicate_origins: dict[tuple[str, int, int], bytes] = field(default_factory=dict)
    duplicates: int = 0
    #: records whose origin is an input of another sub-topology (a shared dead-letter topic), not counted
    foreign: int = 0
    #: records a task derived rather than produced from one input record (punctuation, final window
    #: results: `eos.derived`), not counted by lineage
    derived: int = 0
    #: derived records whose id (`eos.derived`: task, position, time, punctuation, index) was seen before: a
    #: punctuation's output or a window's final result committed twice
    derived_duplicates: int = 0
    without_origin: int = 0
    #: records without an origin in an output topic the job reads too (a cycle, a topic others write too):
    #: written there by others, so input of the job rather than output, not counted
    written_by_others: int = 0
    #: records whose origin is an input of the job's other steps that write the topic too: theirs, not counted
    other_steps: int = 0
    #: places where an output's origin offset is below the one before it from the same input partition:
    #: (origin topic, origin partition, origin offset, previous origin offset, output offset), the first
    #: MAX_BREAKS of them; `order_breaks_beyond` counts the rest
    order_breaks: list[tuple[str, int, int, int, int]] = field(default_factory=list)
    order_breaks_beyond: int = 0
    aborted_visible: int = 0
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def sample(self, kind: str, limit: int, **detail: Any) -> None:
        bucket = self.samples.setdefault(kind, [])
        if len(bucket) < limit:
            bucket.append(detail)


def scan_output_partition(scan: PartitionScan, *, isolation: Isolation = "read_committed", max_samples: int = 10,
                          progress: Callable[[int], None] | None = None,
                          origin_topics: frozenset[str] | None = None,
                          subtopologies: frozenset[str] | None = None, read_too: bool = False,
                          others: frozenset[str] = frozenset()) -> OutputPartial:
    """Origins of one output (or dead-letter) partition, read with `isolation`.

    Whatever the isolation asked for, records that a read_committed reader cannot see (aborted or still
    open transactions) are identified by an extra read_committed pass, counted as `aborted_visible` and
    kept out of the accounting: the auditor is not fooled by a wrong isolation level. With `origin_topics`
    (a dead-letter topic shared by several sub-topologies), records whose origin is another topic belong to
    another sub-topology's audit: they are counted as `foreign` and left out. `read_too`: the job reads this
    output topic as well (a cycle of steps, a topic others write too), so a record in it without an origin was
    written by others, the job's input: counted as `written_by_others` and left out. `others`: the input topics
    of the job's other steps that write this topic too: records whose origin is one of them are those steps'
    outputs, which their own audits check, counted as `other_steps` and left out."""
    committed = _offsets(scan, "read_committed", None) if isolation == "read_uncommitted" else None
    part = OutputPartial(scan.topic, scan.partition)
    seen: defaultdict[tuple[str, int, int], BitMap64] = defaultdict(BitMap64)
    twice: defaultdict[tuple[str, int, int], BitMap64] = defaultdict(BitMap64)
    last: dict[tuple[str, int], int] = {}
    derived_ids: set[bytes] = set()
    for batch in _read(scan, isolation, progress):
        for msg in batch:
            offset = msg.offset()
            at = {"topic": scan.topic, "partition": scan.partition, "offset": offset}
            if committed is not None and offset not in committed:
                part.aborted_visible += 1
                part.sample("aborted_visible", max_samples, **at)
                continue
            headers = msg.headers()
            if is_marker(headers):
                continue  # a clock marker (eos.streamtime): no output of the job
            part.records += 1
            origin = origin_of(headers)
            if origin is None and headers and (derived := _derived_id(headers)) is not None:
                part.records -= 1
                part.derived += 1
                if b"|" in derived:  # (ids without one come from an earlier release: not checkable)
                    if derived in derived_ids:
                        part.derived_duplicates += 1
                        part.sample("derived_duplicates", max_samples, derived=derived.decode("utf-8", "replace"),
                                    **at)
                    derived_ids.add(derived)
                continue
            if origin is None and read_too:
                part.records -= 1
                part.written_by_others += 1
                continue
            if origin is None:
                part.without_origin += 1
                part.sample("unexpected", max_samples, reason=f"no valid {ORIGIN_HEADER} header", **at)
                continue
            if origin.topic in others:
                part.records -= 1
                part.other_steps += 1
                continue
            if (origin_topics is not None and origin.topic not in origin_topics) or (
                    subtopologies is not None and _dead_letter_of(headers) not in (None, *subtopologies)):
                part.records -= 1
                part.foreign += 1
                continue
            source = (origin.topic, origin.partition)
            if origin.index >> INDEX_LEVEL_BITS:
                pass  # (a record held back has outputs made when it was let go, after those of later records)
            elif origin.offset < last.get(source, -1):
                if len(part.order_breaks) < MAX_BREAKS:
                    part.order_breaks.append((origin.topic, origin.partition, origin.offset, last[source], offset))
                else:
                    part.order_breaks_beyond += 1
            last[source] = origin.offset
            where = (origin.topic, origin.partition, origin.index)
            bm = seen[where]
            if origin.offset in bm:
                part.duplicates += 1
                twice[where].add(origin.offset)
                part.sample("duplicates", max_samples, origin=":".join(map(str, origin)), **at)
            else:
                bm.add(origin.offset)
    part.origins = {k: v.serialize() for k, v in seen.items()}
    part.duplicate_origins = {k: v.serialize() for k, v in twice.items()}
    return part


def _derived_id(headers: list[tuple[str, bytes]]) -> bytes | None:
    for k, v in headers:
        if k == DERIVED_HEADER:
            return v or b""
    return None


def _dead_letter_of(headers: list[tuple[str, bytes]] | None) -> str | None:
    """The sub-topology that dead-lettered a record (a topic read by two sub-topologies has dead letters
    of each)."""
    for k, v in headers or ():
        if k == "eos.dlq.subtopology":
            return v.decode()
    return None
