"""The Java client's default partitioner, which Kafka Streams and the framework's producers (librdkafka's
`murmur2_random`) share: a keyed record goes to murmur2 of its key bytes, modulo the partitions. The in-memory
Kafka partitions with it, and a task with it puts a windowed result in its inner key's partition
(`eos.worker.context`), as Kafka Streams' `WindowedStreamPartitioner` does."""

from __future__ import annotations

from functools import lru_cache

__all__ = ["murmur2", "partition_for"]


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (the Java client's `Utils.murmur2`), as an unsigned 32-bit value."""
    m, length = 0x5BD1E995, len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    rest, tail = length % 4, length - length % 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h = ((h ^ data[tail]) * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    return h ^ (h >> 15)


@lru_cache(maxsize=65_536)
def partition_for(key: bytes, partitions: int) -> int:
    """The Java client's default partition of a keyed record."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
