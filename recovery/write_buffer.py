"""The write buffer: a batch's state writes, visible to the task, invisible to disk until the commit.

Two overlays over the backend: the batch overlay (what the batch changed so far) and, while a record is
being processed, a record overlay on top of it. `commit_record()` folds the record's writes into the
batch; `rollback_record()` drops them (the record failed and goes to the dead-letter topic).
`changes()` is what goes to the changelog and, after the Kafka commit, to the backend in one write.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from recovery.backends import Backend, StoreError

__all__ = ["WriteBuffer"]


class WriteBuffer:
    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._batch: dict[bytes, bytes | None] = {}
        self._record: dict[bytes, bytes | None] | None = None

    # ------------------------------------------------------------------ record scopes
    def begin_record(self) -> None:
        self._record = {}

    def commit_record(self) -> None:
        if self._record:
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
        (self._record if self._record is not None else self._batch)[key] = value

    def iterate(self, start: bytes | None = None, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Sorted view of backend + overlays over [start, end). The overlay is snapshotted when iteration
        starts; writes made while iterating are not seen by this iterator."""
        overlay = dict(self._batch)
        if self._record:
            overlay.update(self._record)
        pending = sorted((k, v) for k, v in overlay.items()
                         if (start is None or k >= start) and (end is None or k < end))
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
    def changes(self) -> dict[bytes, bytes | None]:
        return dict(self._batch)

    def clear(self) -> None:
        self._batch.clear()
        self._record = None
