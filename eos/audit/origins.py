"""Sets of record origins as compressed bitmaps (one Roaring bitmap of offsets per topic/partition/index),
so audits of tens of millions of records fit in a few megabytes."""

from __future__ import annotations

from collections import defaultdict

from pyroaring import BitMap64

__all__ = ["OffsetSets", "OriginSet"]

Key = tuple[str, int]


class OffsetSets:
    """Offsets per (topic, partition)."""

    def __init__(self) -> None:
        self.maps: defaultdict[Key, BitMap64] = defaultdict(BitMap64)

    def add(self, topic: str, partition: int, offset: int) -> bool:
        """Add; False if it was already there."""
        bm = self.maps[(topic, partition)]
        if offset in bm:
            return False
        bm.add(offset)
        return True

    def __contains__(self, item: tuple[str, int, int]) -> bool:
        bm = self.maps.get((item[0], item[1]))
        return bm is not None and item[2] in bm

    def get(self, key: Key) -> BitMap64:
        return self.maps.get(key) or BitMap64()

    def __len__(self) -> int:
        return sum(len(bm) for bm in self.maps.values())

    def keys(self) -> list[Key]:
        return sorted(self.maps)


class OriginSet:
    """(topic, partition, offset, index) origins seen once, and the extra copies seen again."""

    def __init__(self) -> None:
        self.by_index: defaultdict[int, OffsetSets] = defaultdict(OffsetSets)
        self.duplicates = 0
        self.duplicate_origins = OffsetSets()

    def add(self, topic: str, partition: int, offset: int, index: int) -> bool:
        if self.by_index[index].add(topic, partition, offset):
            return True
        self.duplicates += 1
        self.duplicate_origins.add(topic, partition, offset)
        return False

    def first(self, key: Key) -> BitMap64:
        """Offsets of `key` that produced at least one output (index 0)."""
        return self.by_index[0].get(key) if 0 in self.by_index else BitMap64()

    def index_gaps(self) -> int:
        """Origins with output index i but not i - 1 (a lost output among several of one input)."""
        gaps = 0
        for i in sorted(self.by_index):
            if i == 0:
                continue
            prev = self.by_index.get(i - 1) or OffsetSets()
            for key, bm in self.by_index[i].maps.items():
                gaps += len(bm - prev.get(key))
        return gaps

    def __len__(self) -> int:
        return sum(len(s) for s in self.by_index.values())
