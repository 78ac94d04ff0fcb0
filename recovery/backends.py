"""Byte-level store backends: RocksDB (persistent, through rocksdict) and in-memory.

Both expose sorted iteration by bytewise key order and one atomic `write(changes, changelog_offset)`:
the data changes and the changelog offset they bring the store to are applied together or not at all
(RocksDB: one WriteBatch across the data and `eos_meta` column families).
"""

from __future__ import annotations

import bisect
import os
import shutil
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol, cast

from rocksdict import BlockBasedOptions, Cache, Options, Rdict, ReadOptions, WriteBatch, WriteBufferManager

__all__ = ["Backend", "RocksDBBackend", "MemoryBackend", "StoreError"]

_META_CF = "eos_meta"
_OFFSET_KEY = b"changelog_offset"
_UNREAD = object()  # (RocksDBBackend's offset not read yet)


class StoreError(RuntimeError):
    """A state store failed (I/O, lock, corruption). Never blamed on an input record."""


class Backend(Protocol):
    def get(self, key: bytes) -> bytes | None: ...
    def iterate(self, start: bytes | None = None, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]: ...
    def write(self, changes: Mapping[bytes, bytes | None], changelog_offset: int | None) -> None: ...
    def changelog_offset(self) -> int | None: ...
    def approximate_count(self) -> int: ...
    def wipe(self) -> None: ...
    def close(self) -> None: ...


#: RocksDB memory of all the stores a process holds open (kept open between batches: recovery.state_dir):
#: their memtables together, and the blocks they cache together. RocksDB's defaults (64 MiB of memtable and
#: a 32 MiB block cache per store) would grow a worker holding many tasks' stores by that much a store.
MEMTABLES_BYTES = 16 << 20
BLOCK_CACHE_BYTES = 16 << 20
_shared: dict[int, tuple[WriteBufferManager, Cache]] = {}


def _options() -> Options:
    opt = Options(raw_mode=True)
    opt.create_if_missing(True)
    opt.create_missing_column_families(True)
    # RocksDB starts a new info log (LOG) at every open and keeps up to 1,000 old ones; a task's stores are
    # opened again after another process held them, so a store directory would fill with LOG.old.* files.
    # Keep the current and one old.
    opt.set_keep_log_file_num(2)
    # An open loads its table files on up to 16 threads by default, which it starts and joins at every open: a
    # worker opening a unit's 32 stores started ~480 threads, and an open took ~30 % more CPU than on one
    # thread, with 60 table files too (docs/measurements.md). The workers share the machine's cores anyway.
    opt.set_max_file_opening_threads(1)
    pid = os.getpid()  # (made in the process that opens stores: never shared across a fork)
    if pid not in _shared:
        _shared.clear()
        _shared[pid] = (WriteBufferManager(MEMTABLES_BYTES, False), Cache(BLOCK_CACHE_BYTES))
    memtables, cache = _shared[pid]
    opt.set_write_buffer_manager(memtables)
    opt.set_write_buffer_size(MEMTABLES_BYTES // 4)
    table = BlockBasedOptions()
    table.set_block_cache(cache)
    opt.set_block_based_table_factory(table)
    return opt


class RocksDBBackend:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._db: Rdict | None = None
        self._open()

    def _open(self) -> None:
        self._offset: object = _UNREAD
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = Rdict(str(self.path), _options(), column_families={_META_CF: Options(raw_mode=True)})
        except Exception as exc:  # rocksdict raises plain Exception for I/O and lock errors
            raise StoreError(f"cannot open RocksDB store at {self.path}: {exc}") from exc
        self._meta: Any = self._db.get_column_family_handle(_META_CF)

    def _require(self) -> Rdict:
        if self._db is None:
            raise StoreError(f"store {self.path} is closed")
        return self._db

    def get(self, key: bytes) -> bytes | None:
        return self._require().get(key)

    def iterate(self, start: bytes | None = None, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        db = self._require()
        if end is None:
            it = db.iter()
        else:
            # RocksDB stops at the bound itself rather than stepping past it to the next live key: a session or
            # window store's deleted entries (merged, expired) after a key's range would each be stepped over
            # (a session lookup in a store of many such: 16 us without the bound, 5 with it)
            bound = ReadOptions()  # (kept alive by this frame as long as the iterator)
            bound.set_iterate_upper_bound(end)
            it = db.iter(bound)
        if start is None:
            it.seek_to_first()
        else:
            it.seek(start)
        while it.valid():
            yield it.key(), it.value()
            it.next()

    def write(self, changes: Mapping[bytes, bytes | None], changelog_offset: int | None) -> None:
        db = self._require()
        batch = WriteBatch(raw_mode=True)
        for key, value in changes.items():
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        if changelog_offset is not None:
            batch.put(_OFFSET_KEY, struct.pack(">q", changelog_offset), self._meta)
        try:
            db.write(batch)
        except Exception as exc:
            self._offset = _UNREAD
            raise StoreError(f"write to {self.path} failed: {exc}") from exc
        if changelog_offset is not None:
            self._offset = changelog_offset

    def changelog_offset(self) -> int | None:
        """The changelog offset the store reflects: read once per open (this process alone writes it while the
        store is open; a read costs ~1 ms, and a task's stores report it after every batch)."""
        if self._offset is _UNREAD:
            meta = self._require().get_column_family(_META_CF)
            try:
                raw = meta.get(_OFFSET_KEY)
            finally:
                del meta  # a live column-family object keeps the database open
            self._offset = None if raw is None else struct.unpack(">q", raw)[0]
        return cast(int | None, self._offset)

    def approximate_count(self) -> int:
        return int(self._require().property_int_value("rocksdb.estimate-num-keys") or 0)

    def wipe(self) -> None:
        self.close()
        shutil.rmtree(self.path, ignore_errors=True)
        self._open()

    def close(self) -> None:
        """Release the database (and its LOCK file: the next opener may be another process)."""
        if self._db is not None:
            self._meta = None  # handles keep the native database alive
            db, self._db = self._db, None
            try:
                db.close()
            except Exception as exc:  # its directory deleted under it, say: what it held is in its log or lost
                raise StoreError(f"closing the RocksDB store at {self.path} failed: {exc}") from exc


class MemoryBackend:
    """Keys in a dict plus a lazily sorted key list for ordered scans. Lives as long as its worker process."""

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._sorted: list[bytes] | None = None
        self._offset: int | None = None

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def iterate(self, start: bytes | None = None, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        if self._sorted is None:
            self._sorted = sorted(self._data)
        keys = self._sorted
        i = 0 if start is None else bisect.bisect_left(keys, start)
        j = len(keys) if end is None else bisect.bisect_left(keys, end)
        for key in keys[i:j]:
            yield key, self._data[key]

    def write(self, changes: Mapping[bytes, bytes | None], changelog_offset: int | None) -> None:
        for key, value in changes.items():
            if value is None:
                self._data.pop(key, None)
            else:
                self._data[key] = value
        if changes:
            self._sorted = None
        if changelog_offset is not None:
            self._offset = changelog_offset

    def changelog_offset(self) -> int | None:
        return self._offset

    def approximate_count(self) -> int:
        return len(self._data)

    def wipe(self) -> None:
        self._data.clear()
        self._sorted, self._offset = None, None

    def close(self) -> None:
        pass
