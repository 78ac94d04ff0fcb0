"""Read whole topics as they are committed (or not) right now, with fresh consumers that never commit; of a
job's outputs, what it wrote since its last `eos reset` (`since_reset`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar

from eos.ledger import reset_outputs_from
from transactions import Isolation, KafkaAdmin, Message, OffsetRange, admin_for, read_ranges, scan_consumer

__all__ = ["scan_topic", "since_reset", "before_reset", "first_offsets"]

TP = tuple[str, int]

#: (ledger topic, where each output partition's records start since the job's last reset) of the audit running
_SINCE_RESET: ContextVar[tuple[str, Mapping[TP, int]] | None] = ContextVar("eos_audit_since_reset", default=None)


@contextlib.contextmanager
def since_reset(bootstrap_servers: str, ledger_topic: str, admin: KafkaAdmin) -> Iterator[Mapping[TP, int]]:
    """While it lasts, every scan of a topic the job writes starts where the job's last `eos reset` found its
    end (the first record of the ledger the reset created again, `eos.ledger.ledger_reset`): the outputs of the
    runs before it answer to input as it was read then, which the ledger no longer describes. Nothing changes
    for a job never reset."""
    current = _SINCE_RESET.get()
    if current is not None and current[0] == ledger_topic:
        yield current[1]
        return
    floors: Mapping[TP, int] = {}
    if admin.partition_counts([ledger_topic])[ledger_topic] is not None:
        first = admin.earliest_offsets([(ledger_topic, 0)])[(ledger_topic, 0)]
        for batch in scan_topic(bootstrap_servers, ledger_topic, admin=admin, until={(ledger_topic, 0): first + 1}):
            floors = next((f for f in map(reset_outputs_from, (m.value() for m in batch)) if f is not None), floors)
    token = _SINCE_RESET.set((ledger_topic, floors))
    try:
        yield floors
    finally:
        _SINCE_RESET.reset(token)


def first_offsets(admin: KafkaAdmin, tps: list[TP]) -> dict[TP, int]:
    """Where the audit running reads each of `tps` from: its earliest offset, or where the job's last reset
    found it when later (`since_reset`)."""
    low = admin.earliest_offsets(tps)
    current = _SINCE_RESET.get()
    for tp, start in (current[1] if current else {}).items():
        if tp in low:
            low[tp] = max(low[tp], start)
    return low


def before_reset(admin: KafkaAdmin, topics: list[str]) -> int:
    """How many offsets of `topics` lie before where the audit running reads them from (`since_reset`)."""
    current = _SINCE_RESET.get()
    floors = {tp: o for tp, o in (current[1] if current else {}).items() if tp[0] in topics}
    if not floors:
        return 0
    low = admin.earliest_offsets(list(floors))
    return sum(max(0, o - low[tp]) for tp, o in floors.items())


def scan_topic(bootstrap_servers: str, topic: str, *, isolation: Isolation = "read_committed",
               admin: KafkaAdmin | None = None, until: dict[tuple[str, int], int] | None = None,
               progress: Callable[[int], None] | None = None, timeout: float = 600.0,
               since: Mapping[tuple[str, int], int] | None = None) -> Iterator[list[Message]]:
    """Yield batches of the records of every partition of `topic` from its earliest offset (or from `since`, or
    where the job's last reset found it, `since_reset`: where later) to `until` (at most the partition's end;
    default: the partition's end for this isolation level, taken when the scan starts; read_committed, once the
    transactions written by then are decided: `KafkaAdmin.settled_ends`)."""
    admin = admin or admin_for(bootstrap_servers)
    tps = admin.topic_partitions(topic)
    low = first_offsets(admin, tps)
    for tp, start in (since or {}).items():
        if tp in low:
            low[tp] = max(low[tp], start)
    if until:  # (capped at the ends: an offset committed for an earlier topic of the name may lie past them)
        written = admin.end_offsets(tps, committed=False)
        ends = {tp: min(end, written[tp]) for tp, end in until.items() if tp in written}
    else:
        ends = (admin.settled_ends(tps) if isolation == "read_committed"
                else admin.end_offsets(tps, committed=False))
    ranges = [OffsetRange(t, p, min(low[(t, p)], end), end) for t, p in tps
              for end in [ends.get((t, p), low[(t, p)])]]
    consumer = scan_consumer(bootstrap_servers, isolation)
    try:
        for batch in read_ranges(consumer, ranges, timeout=timeout):
            if progress is not None:
                progress(len(batch))
            yield batch
    finally:
        consumer.close()
