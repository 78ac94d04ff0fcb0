"""Global tables in a worker: one copy of each global table per worker process, shared by its tasks.

The driver pins, for every batch, the offsets up to which each global table is read (its partitions' last
stable offsets when the batch was planned). Before the batch is processed the copy is brought exactly to
those offsets: read forward from where it is, or rebuilt from the beginning if it is ahead of them (a
retried batch of an earlier plan). So every attempt at a batch joins against the same table, and the copy
never holds a record of a transaction that did not commit (it is read read_committed).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from eos.tables import GlobalTable
from transactions import OffsetRange, RangeReader

__all__ = ["GlobalCopy", "GlobalTableView", "GlobalPins"]

#: partition -> (first offset, pinned end) of one global table's topic
GlobalPins = Mapping[int, tuple[int, int]]


class GlobalCopy:
    def __init__(self, table: GlobalTable) -> None:
        self.table = table
        self.positions: dict[int, int] = {}
        self.data: dict[bytes, bytes] = {}

    def advance(self, read: RangeReader, pins: GlobalPins, timeout: float) -> int:
        """Bring the copy to exactly `pins`, reading with `read` (read_committed). Returns the records read."""
        if any(self.positions.get(p, 0) > end for p, (_, end) in pins.items()):
            self.positions.clear()
            self.data.clear()
        ranges = [OffsetRange(self.table.topic, p, max(self.positions.get(p, 0), first), end)
                  for p, (first, end) in sorted(pins.items())]
        ranges = [r if r.start <= r.end else OffsetRange(r.topic, r.partition, r.end, r.end) for r in ranges]
        records, data = 0, self.data
        for chunk in read(ranges, timeout):
            for msg in chunk:
                key, value = msg.key(), msg.value()
                if key is None:
                    continue
                if value is None:
                    data.pop(key, None)
                else:
                    data[key] = value
            records += len(chunk)
        for p, (_, end) in pins.items():
            self.positions[p] = end
        return records


class GlobalTableView:
    """What a processor gets for a global table: read-only, typed."""

    def __init__(self, table: GlobalTable) -> None:
        self.table = table
        self.name = table.name
        self.copy: GlobalCopy | None = None

    def _data(self) -> dict[bytes, bytes]:
        if self.copy is None:
            raise RuntimeError(f"global table {self.name!r} is only available while a batch is processed")
        return self.copy.data

    def get(self, key: Any, default: Any = None) -> Any:
        raw_key = self.table.key_serde.serialize(key)
        raw = self._data().get(raw_key) if raw_key is not None else None
        return default if raw is None else self.table.value_serde.deserialize(raw)

    def all(self) -> Iterator[tuple[Any, Any]]:
        ks, vs = self.table.key_serde, self.table.value_serde
        for k, v in list(self._data().items()):
            yield ks.deserialize(k), vs.deserialize(v)

    def approximate_num_entries(self) -> int:
        return len(self._data())
