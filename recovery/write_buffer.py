"""The write buffer: a batch's state writes, visible to the task, invisible to disk until the commit.

Two overlays over the backend: the batch overlay (what the batch changed so far) and, while a record is
being processed, a record overlay on top of it. `commit_record()` folds the record's writes into the
batch; `rollback_record()` drops them (the record failed and goes to the dead-letter topic).
`changes()` is what goes to the changelog and, after the Kafka commit, to the backend in one write.

Range scans (window and session lookups, `range`, `prefix_scan`) keep a sorted index of the batch
overlay's keys, built on the first scan and then brought up to date by the next scan (with the keys written
since, in one go), so that a scan per record costs O(log n + k) rather than a sort of everything the batch
wrote; stores that are never scanned never pay for it, and a store written much between its scans (a fold
writing what it held, then an expiry's scan) pays for its new keys once.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from sortedcontainers import SortedList

from recovery.backends import Backend, StoreError

__all__ = ["WriteBuffer"]


class WriteBuffer:
    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._batch: dict[bytes, bytes | None] = {}
        self._record: dict[bytes, bytes | None] | None = None
        self._sorted: SortedList | None = None  # keys of _batch, once a scan asked for them
        self._unsorted: list[bytes] = []  # keys of _batch not in _sorted yet (added by the next scan)

    # ------------------------------------------------------------------ record scopes
    def begin_record(self) -> None:
        self._record = {}

    def commit_record(self) -> None:
        if self._record:
            if self._sorted is not None:
                self._unsorted.extend(k for k in self._record if k not in self._batch)
            self._batch.update(self._record)
        self._record = None

    def rollback_record(self) -> None:
        self._record = None

    # ------------------------------------------------------------------ reads and writes (bytes)
    def get(self, key: bytes) -> bytes | None:
        if self._record is not None and key in self._record:
            return self._record[key]
        if key in self._batch:
            return self._batch[key]
        return self.backend.get(key)

    def put(self, key: bytes, value: bytes | None) -> None:
        """`value=None` deletes (a tombstone in the changelog)."""
        if not isinstance(key, bytes):
            raise StoreError(f"store keys must be bytes after serialization, got {type(key).__name__}")
        if self._record is not None:
            self._record[key] = value
            return
        if self._sorted is not None and key not in self._batch:
            self._unsorted.append(key)
        self._batch[key] = value

    def iterate(self, start: bytes | None = None, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Sorted view of backend + overlays over [start, end). The overlay is snapshotted when iteration
        starts; writes made while iterating are not seen by this iterator."""
        if self._sorted is None:
            self._sorted = SortedList(self._batch)
        elif self._unsorted:
            self._sorted.update(self._unsorted)
            self._unsorted.clear()
        batch = self._batch
        overlay = {k: batch[k] for k in self._sorted.irange(start, end, inclusive=(True, False))}
        if self._record:
            overlay.update((k, v) for k, v in self._record.items()
                           if (start is None or k >= start) and (end is None or k < end))
        if not overlay:  # (nothing of the batch's in the range: a key's first lookup, most often)
            yield from self.backend.iterate(start, end)
            return
        pending = sorted(overlay.items())
        merged = heapq.merge(((k, 0, v) for k, v in pending),
                             ((k, 1, v) for k, v in self.backend.iterate(start, end)))
        last = None
        for key, _source, value in merged:
            if key == last:
                continue  # the overlay (source 0) sorts first and wins
            last = key
            if value is not None:
                yield key, value

    # ------------------------------------------------------------------ batch boundary
    def drop_idle_deletes(self) -> int:
        """Forget the batch's deletes of keys the backend does not hold: a key written and deleted within the
        batch (a window made and expired, a record buffered and dropped, a session merged away), or deleted
        where it never was. Neither the backend nor the changelog, which replays to what the backend holds,
        has anything for their tombstones to delete. Returns how many were dropped."""
        get = self.backend.get
        idle = [k for k, v in self._batch.items() if v is None and get(k) is None]
        for k in idle:
            del self._batch[k]
        if idle:
            self._sorted = None  # (rebuilt by the next scan, if any)
            self._unsorted.clear()
        return len(idle)

    def changes(self) -> dict[bytes, bytes | None]:
        return dict(self._batch)

    def clear(self) -> None:
        self._batch.clear()
        self._record = None
        self._sorted = None
        self._unsorted.clear()
