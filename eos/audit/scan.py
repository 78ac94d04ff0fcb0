"""Read whole topics as they are committed (or not) right now, with fresh consumers that never commit."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from transactions import Isolation, KafkaAdmin, Message, OffsetRange, admin_for, read_ranges, scan_consumer

__all__ = ["scan_topic"]


def scan_topic(bootstrap_servers: str, topic: str, *, isolation: Isolation = "read_committed",
               admin: KafkaAdmin | None = None, until: dict[tuple[str, int], int] | None = None,
               progress: Callable[[int], None] | None = None, timeout: float = 600.0,
               since: Mapping[tuple[str, int], int] | None = None) -> Iterator[list[Message]]:
    """Yield batches of the records of every partition of `topic` from its earliest offset (or from `since`, where
    later) to `until` (at most the partition's end; default: the partition's end for this isolation level, taken
    when the scan starts; read_committed, once the transactions written by then are decided:
    `KafkaAdmin.settled_ends`)."""
    admin = admin or admin_for(bootstrap_servers)
    tps = admin.topic_partitions(topic)
    low = admin.earliest_offsets(tps)
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
