"""`ReadAhead`: what a read fetched past its ranges' ends is kept, and the read that starts there takes it. Every
read through one gets exactly what a plain read of the same ranges gets (each partition's visible records, in
offset order, from start to end; partitions may interleave, as a fetch's do), whatever was kept, dropped,
bounded, expired, aborted or still open in between."""

from __future__ import annotations

import random

import pytest

from transactions import OffsetRange, ReadAhead, prefetch_ranges, range_reader, read_ranges, read_together
from transactions.memory import MemoryCluster, MemoryConsumer


class CountingConsumer(MemoryConsumer):
    """A memory consumer that counts its assignments (a fetch starts with one)."""

    def __init__(self, cluster: MemoryCluster, ahead: ReadAhead) -> None:
        super().__init__(cluster, "g")
        self.read_ahead = ahead
        self.assigned: list[list[tuple[int, int]]] = []

    def assign(self, partitions):
        self.assigned.append([(tp.partition, tp.offset) for tp in partitions])
        super().assign(partitions)


def cluster_with(records: int, partitions: int = 2) -> MemoryCluster:
    cluster = MemoryCluster()
    cluster.create_topic("t", partitions)
    for i in range(records):
        cluster.append("t", i % partitions, b"k", b"%d" % i, [], None)
    return cluster


def offsets(chunks) -> list[tuple[int, int]]:
    """(partition, offset) of what was read, partition by partition (a stable sort: each in the order read)."""
    return sorted(((m.partition(), m.offset()) for chunk in chunks for m in chunk), key=lambda po: po[0])


def plain(cluster: MemoryCluster, ranges: list[OffsetRange]) -> list[tuple[int, int]]:
    return offsets(read_ranges(MemoryConsumer(cluster, "plain"), ranges, timeout=5))  # type: ignore[arg-type]


def test_the_read_that_starts_where_the_last_ended_takes_what_it_fetched_past_there_without_fetching():
    cluster = cluster_with(100)
    ahead = ReadAhead(records_per_partition=10)
    consumer = CountingConsumer(cluster, ahead)
    first = [OffsetRange("t", 0, 0, 20)]
    assert offsets(read_ranges(consumer, first, timeout=5)) == plain(cluster, first)  # type: ignore[arg-type]
    assert len(ahead) == 10  # offsets 20-29, up to the bound
    nxt = [OffsetRange("t", 0, 20, 26)]
    assert offsets(read_ranges(consumer, nxt, timeout=5)) == plain(cluster, nxt)  # type: ignore[arg-type]
    assert len(consumer.assigned) == 1 and ahead.served == 6  # no fetch: all of it was kept
    assert len(ahead) == 4  # 26-29 stay kept, for the read from 26
    longer = [OffsetRange("t", 0, 26, 45)]
    assert offsets(read_ranges(consumer, longer, timeout=5)) == plain(cluster, longer)  # type: ignore[arg-type]
    assert consumer.assigned[-1] == [(0, 30)]  # the fetch starts past what was kept
    assert ahead.served == 10


def test_a_read_that_starts_elsewhere_fetches_and_drops_what_was_kept():
    cluster = cluster_with(100)
    ahead = ReadAhead(records_per_partition=10)
    consumer = CountingConsumer(cluster, ahead)
    list(read_ranges(consumer, [OffsetRange("t", 0, 0, 20)], timeout=5))  # type: ignore[arg-type]
    for moved in ([OffsetRange("t", 0, 21, 30)], [OffsetRange("t", 0, 20, 25)]):  # (the second: nothing kept now)
        assert offsets(read_ranges(consumer, moved, timeout=5)) == plain(cluster, moved)  # type: ignore[arg-type]
        assert consumer.assigned[-1] == [(0, moved[0].start)]
    assert ahead.served == 0


def test_an_unfinished_read_keeps_nothing_and_kept_records_expire():
    cluster = cluster_with(100)
    ahead = ReadAhead(records_per_partition=10)
    consumer = CountingConsumer(cluster, ahead)
    chunks = read_ranges(consumer, [OffsetRange("t", 0, 0, 40)], timeout=5, batch_size=5)  # type: ignore[arg-type]
    next(chunks)
    chunks.close()  # (a streamed batch that stopped early)
    assert len(ahead) == 0 and not consumer.assignment()
    stale = ReadAhead(records_per_partition=10, keep_for=0.0)
    consumer = CountingConsumer(cluster, stale)
    list(read_ranges(consumer, [OffsetRange("t", 0, 0, 20)], timeout=5))  # type: ignore[arg-type]
    nxt = [OffsetRange("t", 0, 20, 25)]
    assert offsets(read_ranges(consumer, nxt, timeout=5)) == plain(cluster, nxt)  # type: ignore[arg-type]
    assert stale.served == 0 and consumer.assigned[-1] == [(0, 20)]


def test_a_prefetch_fetches_from_past_what_is_kept_or_not_at_all():
    cluster = cluster_with(100)
    ahead = ReadAhead(records_per_partition=10)
    consumer = CountingConsumer(cluster, ahead)
    list(read_ranges(consumer, [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 0, 10)], timeout=5))  # type: ignore[arg-type]
    read = prefetch_ranges(consumer, [OffsetRange("t", 0, 10, 30), OffsetRange("t", 1, 10, 15)], timeout=5)  # type: ignore[arg-type]
    assert consumer.assigned[-1] == [(0, 20)]  # partition 1's range is all kept: not fetched
    later = [OffsetRange("t", 0, 10, 30), OffsetRange("t", 1, 10, 25)]  # (its end moved on since)
    assert offsets(read(later, 5)) == plain(cluster, later)
    assert not consumer.assignment()


@pytest.mark.parametrize("seed", range(25))
def test_reads_through_a_read_ahead_get_what_plain_reads_get(seed: int) -> None:
    """Random writes (plain, committed and aborted transactions, some left open across reads) and random reads
    of both partitions: most start where the last read of their partition ended; read plainly in slices, after a
    prefetch whose end moves on, together, or stopped early."""
    rng = random.Random(seed)
    cluster = MemoryCluster()
    cluster.create_topic("t", 2)
    ahead = ReadAhead(records_per_partition=rng.choice([1, 3, 8, 1_000]))
    consumer = CountingConsumer(cluster, ahead)
    ended = {0: 0, 1: 0}
    open_txns: list[tuple[str, int]] = []
    for step in range(80):
        for _ in range(rng.randint(0, 3)):
            p, kind = rng.randrange(2), rng.random()
            if kind < 0.4:
                cluster.append("t", p, b"k", b"%d" % step, [], None)
            else:
                tid = f"w{step}-{rng.random()}"
                txn = cluster.begin(tid)
                for _ in range(rng.randint(1, 4)):
                    cluster.append("t", p, b"k", b"%d" % step, [], None, txn)
                if kind < 0.85:
                    cluster.end(tid, txn, commit=rng.random() < 0.7)
                else:
                    open_txns.append((tid, txn))
        if open_txns and rng.random() < 0.4:
            tid, txn = open_txns.pop(rng.randrange(len(open_txns)))
            cluster.end(tid, txn, commit=rng.random() < 0.7)
        ranges = []
        for p in sorted(rng.sample([0, 1], rng.randint(1, 2))):
            stable = cluster.last_stable("t", p)
            start = ended[p] if rng.random() < 0.75 else rng.randint(0, stable)
            start = min(start, stable)
            ranges.append(OffsetRange("t", p, start, rng.randint(start, stable)))
        way = rng.choice(["read", "prefetch", "together", "stopped"])
        want = plain(cluster, ranges)
        if way == "read":
            got = offsets(read_ranges(consumer, ranges, timeout=5, batch_size=rng.choice([1, 4, 10_000])))  # type: ignore[arg-type]
        elif way == "prefetch":
            read = prefetch_ranges(consumer, ranges, timeout=5)  # type: ignore[arg-type]
            cluster.append("t", ranges[0].partition, b"k", b"late", [], None)  # the late cut-off reads on
            ranges = [OffsetRange(r.topic, r.partition, r.start, cluster.last_stable("t", r.partition))
                      if rng.random() < 0.5 else r for r in ranges]
            want = plain(cluster, ranges)
            got = offsets(read(ranges, 5))
        elif way == "together":
            together = read_together(range_reader(consumer), ranges, timeout=5)  # type: ignore[arg-type]
            got = [o for r in ranges for o in offsets(together([r], 5))]
        else:
            chunks = read_ranges(consumer, ranges, timeout=5, batch_size=2)  # type: ignore[arg-type]
            next(chunks, None)
            chunks.close()
            assert not consumer.assignment()
            continue
        assert got == want, (step, way, ranges)
        assert not consumer.assignment()
        ended.update({r.partition: r.end for r in ranges})
    assert ahead.served > 0
