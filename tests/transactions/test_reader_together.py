"""`read_together`: the ranges of several partitions read in one read, then handed over range by range: each
later read of exactly one of them (or several) gets what a plain read of it gets, once; a range that starts
or ends elsewhere, or is read a second time, is read from the consumer."""

from __future__ import annotations

from transactions import OffsetRange, range_reader, read_ranges, read_together
from transactions.memory import MemoryCluster, MemoryConsumer


def cluster_with(records: int, partitions: int = 3) -> MemoryCluster:
    cluster = MemoryCluster()
    cluster.create_topic("t", partitions)
    for i in range(records):
        cluster.append("t", i % partitions, b"k", b"%d" % i, [], None)
    return cluster


def offsets(chunks) -> list[tuple[int, int]]:
    return [(m.partition(), m.offset()) for chunk in chunks for m in chunk]


def counted(reader):
    """The reader, and the ranges of each of its reads."""
    reads: list[list[OffsetRange]] = []

    def read(ranges, timeout):
        reads.append(list(ranges))
        return reader(ranges, timeout)

    return read, reads


def test_each_range_read_together_is_handed_what_a_plain_read_of_it_reads_once():
    cluster = cluster_with(60)
    plain = MemoryConsumer(cluster, "g")
    ranges = [OffsetRange("t", 0, 2, 15), OffsetRange("t", 1, 0, 20), OffsetRange("t", 2, 5, 5)]
    read, reads = counted(range_reader(MemoryConsumer(cluster, "g")))  # type: ignore[arg-type]
    together = read_together(read, ranges, timeout=5)
    assert len(reads) == 1  # all read now, in one read
    for r in ranges:
        assert offsets(together([r], 5)) == offsets(read_ranges(plain, [r], timeout=5))  # type: ignore[arg-type]
    assert offsets(together([ranges[0]], 5)) == [(0, o) for o in range(2, 15)]  # a second read: the consumer's
    assert len(reads) == 2


def test_several_ranges_at_once_come_partition_by_partition_in_offset_order():
    cluster = cluster_with(60)
    ranges = [OffsetRange("t", 0, 0, 6), OffsetRange("t", 1, 3, 9)]
    read, reads = counted(range_reader(MemoryConsumer(cluster, "g")))  # type: ignore[arg-type]
    together = read_together(read, [*ranges, OffsetRange("t", 2, 0, 4)], timeout=5)
    assert offsets(together(ranges, 5)) == [(0, o) for o in range(6)] + [(1, o) for o in range(3, 9)]
    assert len(reads) == 1


def test_a_range_that_starts_or_ends_elsewhere_is_read_from_the_consumer():
    cluster = cluster_with(60)
    read, reads = counted(range_reader(MemoryConsumer(cluster, "g")))  # type: ignore[arg-type]
    together = read_together(read, [OffsetRange("t", 0, 2, 10), OffsetRange("t", 1, 0, 5)], timeout=5)
    assert offsets(together([OffsetRange("t", 0, 2, 12)], 5)) == [(0, o) for o in range(2, 12)]
    assert offsets(together([OffsetRange("t", 1, 1, 5)], 5)) == [(1, o) for o in range(1, 5)]
    assert offsets(together([OffsetRange("t", 2, 0, 3)], 5)) == [(2, o) for o in range(3)]  # never read together
    assert len(reads) == 4


def test_empty_ranges_read_nothing():
    cluster = cluster_with(10)
    read, reads = counted(range_reader(MemoryConsumer(cluster, "g")))  # type: ignore[arg-type]
    together = read_together(read, [OffsetRange("t", 0, 3, 3)], timeout=5)
    assert offsets(together([OffsetRange("t", 0, 3, 3)], 5)) == [] and reads == []
