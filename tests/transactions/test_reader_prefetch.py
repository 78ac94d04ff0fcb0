"""`prefetch_ranges`: a range assigned ahead of its read (while the task before runs) reads what a plain read
would: the same records when it starts where it was prefetched, whatever its end has become since; a range
that starts elsewhere is assigned again."""

from __future__ import annotations

from transactions import OffsetRange, prefetch_ranges, read_ranges
from transactions.memory import MemoryCluster, MemoryConsumer


def cluster_with(records: int) -> MemoryCluster:
    cluster = MemoryCluster()
    cluster.create_topic("t", 2)
    for i in range(records):
        cluster.append("t", i % 2, b"k", b"%d" % i, [], None)
    return cluster


def offsets(chunks) -> list[tuple[int, int]]:
    return [(m.partition(), m.offset()) for chunk in chunks for m in chunk]


def test_a_prefetched_range_reads_what_a_plain_read_reads_even_when_its_end_moved_on():
    cluster = cluster_with(40)
    consumer = MemoryConsumer(cluster, "g")
    read = prefetch_ranges(consumer, [OffsetRange("t", 0, 3, 10)], timeout=5)  # type: ignore[arg-type]
    assert consumer.assignment()  # fetching starts now
    later = [OffsetRange("t", 0, 3, 15)]  # the late cut-off read on
    assert offsets(read(later, 5)) == offsets(read_ranges(MemoryConsumer(cluster, "g"), later, timeout=5))  # type: ignore[arg-type]
    assert offsets(read(later, 5)) == [(0, o) for o in range(3, 15)]
    assert not consumer.assignment()  # unassigned after the read


def test_a_range_that_starts_elsewhere_or_is_empty_is_not_read_from_the_prefetch():
    cluster = cluster_with(40)
    consumer = MemoryConsumer(cluster, "g")
    read = prefetch_ranges(consumer, [OffsetRange("t", 0, 3, 10)], timeout=5)  # type: ignore[arg-type]
    assert offsets(read([OffsetRange("t", 1, 5, 8)], 5)) == [(1, 5), (1, 6), (1, 7)]
    read = prefetch_ranges(consumer, [OffsetRange("t", 0, 3, 10)], timeout=5)  # type: ignore[arg-type]
    assert offsets(read([OffsetRange("t", 0, 3, 3)], 5)) == [] and not consumer.assignment()
