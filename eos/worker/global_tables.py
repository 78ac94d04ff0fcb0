"""Global tables in a worker: one copy of each global table per worker process, shared by its tasks.

The driver pins, for every batch, the offsets up to which each global table is read (its partitions' last
stable offsets when the batch was planned). Before the batch is processed the copy is brought exactly to
those offsets: read forward from where it is, or rebuilt from the beginning if it is ahead of them (a
retried batch of an earlier plan). So every attempt at a batch joins against the same table, and the copy
never holds a record of a transaction that did not commit (it is read read_committed).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from eos.errors import SerdeError
from eos.serde import BytesSerde
from eos.tables import GlobalTable
from recovery import MemoryBackend, StoreSpec, Version, VersionedKeyValueStore, WriteBuffer
from transactions import Message, OffsetRange, RangeReader

__all__ = ["GlobalCopy", "GlobalTableView", "GlobalPins"]

_RAW = BytesSerde()  # (a copy keeps what the topic holds: the view deserializes what a lookup finds)

#: partition -> (first offset, pinned end) of one global table's topic
GlobalPins = Mapping[int, tuple[int, int]]


class GlobalCopy:
    """One worker's copy of a global table: its rows by serialized key, or, for a versioned global table, a
    versioned store in memory (`recovery.versioned`, the same store versioned tables are kept in: rows by
    timestamp, out-of-order updates into the history, the history retention's bound). Either way it holds
    keys and values as they are on the topic: a row that cannot be deserialized fails only the lookups that
    find it (their stream records go to the dead-letter topic, saying why), not every batch of the job."""

    def __init__(self, table: GlobalTable) -> None:
        self.table = table
        self.positions: dict[int, int] = {}
        self.data: dict[bytes, bytes] = {}
        self.versions: VersionedKeyValueStore | None = None
        self._reset()

    def _reset(self) -> None:
        self.positions.clear()
        self.data.clear()
        if self.table.history_retention_ms is not None:
            self._backend = MemoryBackend()
            self._writes = WriteBuffer(self._backend)
            self.versions = VersionedKeyValueStore(StoreSpec(self.table.name, _RAW, _RAW, False, kind="versioned",
                                                             retention_ms=self.table.history_retention_ms))
            self.versions.attach(self._writes)

    def advance(self, read: RangeReader, pins: GlobalPins, timeout: float) -> int:
        """Bring the copy to exactly `pins`, reading with `read` (read_committed). Returns the records read."""
        if any(self.positions.get(p, 0) > end for p, (_, end) in pins.items()):
            self._reset()
        ranges = [OffsetRange(self.table.topic, p, max(self.positions.get(p, 0), first), end)
                  for p, (first, end) in sorted(pins.items())]
        ranges = [r if r.start <= r.end else OffsetRange(r.topic, r.partition, r.end, r.end) for r in ranges]
        records = 0
        for chunk in read(ranges, timeout):
            self.take(chunk)
            records += len(chunk)
        for p, (_, end) in pins.items():
            self.positions[p] = end
        return records

    def take(self, messages: Iterable[Message]) -> None:
        """Apply the table's records `messages`, in the order read (a tombstone deletes its key's row)."""
        data, versions = self.data, self.versions
        if versions is None:
            for msg in messages:
                key, value = msg.key(), msg.value()
                if key is None:
                    continue
                if value is None:
                    data.pop(key, None)
                else:
                    data[key] = value
            return
        for msg in messages:
            if msg.key() is not None:
                versions.put(msg.key(), msg.value(), msg.timestamp()[1])
        self._backend.write(self._writes.changes(), None)  # (the copy's writes kept at once: nothing to commit)
        self._writes.clear()


class GlobalTableView:
    """What a processor gets for a global table: read-only, typed."""

    def __init__(self, table: GlobalTable) -> None:
        self.table = table
        self.name = table.name
        self.copy: GlobalCopy | None = None

    @property
    def versioned(self) -> bool:
        return self.table.history_retention_ms is not None

    def _copy(self) -> GlobalCopy:
        if self.copy is None:
            raise RuntimeError(f"global table {self.name!r} is only available while a batch is processed")
        return self.copy

    def get(self, key: Any, default: Any = None, *, as_of: int | None = None) -> Any:
        """The key's row (`as_of`: a versioned global table's row at that time)."""
        copy = self._copy()
        if copy.versions is None and as_of is not None:
            raise ValueError(f"global table {self.name!r} is not versioned: as_of= reads a versioned one "
                             "(app.global_table(..., versioned=...))")
        raw_key = self.table.key_serde.serialize(key)
        if raw_key is None:
            return default
        raw = copy.data.get(raw_key) if copy.versions is None else copy.versions.get(raw_key, as_of=as_of)
        return default if raw is None else self._value(key, raw)

    def versions(self, key: Any, time_from: int | None = None, time_to: int | None = None) -> list[Version]:
        """A versioned global table's versions of `key` (`recovery.versioned.VersionedKeyValueStore.versions`)."""
        copy = self._copy()
        if copy.versions is None:
            raise ValueError(f"global table {self.name!r} is not versioned")
        raw_key = self.table.key_serde.serialize(key)
        return [v._replace(value=self._value(key, v.value))
                for v in copy.versions.versions(raw_key, time_from, time_to)] if raw_key is not None else []

    def _value(self, key: Any, raw: bytes) -> Any:
        try:
            return self.table.value_serde.deserialize(raw)
        except SerdeError as exc:  # (the record that looked it up goes to the dead-letter topic: say it is not its own)
            raise SerdeError(f"global table {self.name!r}: the row of key {key!r} cannot be read: {exc}") from exc

    def all(self) -> Iterator[tuple[Any, Any]]:
        """Every key's current row."""
        copy = self._copy()
        rows = list(copy.data.items()) if copy.versions is None else list(copy.versions.all())
        for k, v in rows:
            key = self.table.key_serde.deserialize(k)
            yield key, self._value(key, v)

    def approximate_num_entries(self) -> int:
        copy = self._copy()
        return len(copy.data) if copy.versions is None else copy.versions.approximate_num_entries()
