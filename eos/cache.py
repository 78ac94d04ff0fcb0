"""The record cache: Kafka Streams' `statestore.cache.max.bytes`, per task.

Without it (`cache_max_bytes=0`, the default) a keyed aggregation, a windowed aggregation emitting updates
and a table aggregation forward every update: one output per input record. With it, an update is held in
the task's cache and only the **latest value per key** (per window) goes on, when the batch commits or
when the cache is full, evicting the least recently updated entries first. So with a busy key the output
holds fewer, later values: each committed value is one the aggregate really had, in order, and the last
one of every batch is always there. It is a change of the output's semantics, as in Kafka Streams, which
has it on by default; here it is off unless asked for.

The state stores' changelogs are not what the cache saves: a batch's store writes already reach the
changelog once per key (`recovery.WriteBuffer`). What it saves is the forwarding: serializing and producing
an output per record, and every step after the aggregation running per record. A keyed aggregation whose
aggregate is a number also leaves its store alone while the number is in the cache: the entry holds the
number as it is and writes the store when it leaves (`held`, `eos.operators.aggregate`).

Exactly-once holds as without the cache: the cache lives inside one batch of one task. It is empty when
the batch begins and flushed before the batch's outputs are produced, so what it forwards is committed in
the batch's transaction, with the state it reflects, or not at all; a batch that fails leaves nothing in
it (the task runtime is dropped). It follows record scopes: a record that fails takes its updates out of
the cache again (`begin_record` / `commit_record` / `rollback_record`).

What is flushed is not the output of one input record: it carries `eos.derived`
(`<task>|<last input>|<time>|cache-flush|<index>`, the same when a batch is retried), the timestamp of
the aggregate, and the headers of the last record that updated it; its inputs are "filtered" in the
lineage ledger. A step after the aggregation that raises on a flushed record fails the task (no input
record is to blame), where without the cache it sends the record to the dead-letter topic.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

__all__ = ["RecordCache", "updates", "held_updates", "ENTRY_OVERHEAD"]

#: bytes counted per entry on top of its key and value (Kafka Streams counts its entry objects too)
ENTRY_OVERHEAD = 64

#: how a cached processor's update is forwarded when it leaves the cache: (key, value, timestamp, headers)
Forward = Callable[[Any, Any, int, Any], None]
_Entry = tuple[Forward, Any, Any, int, Any, int]  # forward, key, value, timestamp, headers, size


class RecordCache:
    """One task's cache of pending updates, by (store, serialized key). At most `max_bytes` (a larger one
    is evicted down to the bound after the record that filled it)."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError(f"a record cache needs max_bytes > 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[str, bytes], _Entry] = OrderedDict()  # least recently updated first
        self._bytes = 0
        #: while a record is processed: what its updates replaced (None: nothing yet), to put back if it fails
        self._undo: list[tuple[tuple[str, bytes], _Entry | None]] | None = None
        self._in_record = False

    def put(self, store: str, identity: bytes, size: int, forward: Forward, key: Any, value: Any, timestamp: int,
            headers: Any) -> None:
        """Hold `value` as the latest of (`store`, `identity`); `forward` passes it on when it leaves."""
        slot = (store, identity)
        old = self._entries.pop(slot, None)
        if old is not None:
            self._bytes -= old[5]
        if self._in_record:
            if self._undo is None:
                self._undo = []
            self._undo.append((slot, old))
        entry = self._entries[slot] = (forward, key, value, timestamp, headers, size + ENTRY_OVERHEAD)
        self._bytes += entry[5]

    def held(self, store: str, identity: bytes, forward: Forward) -> tuple[Any, int] | None:
        """The value and timestamp of (`store`, `identity`) if the cache holds an update of it that leaves
        through `forward` (the caller's own, not written to its store yet: `eos.operators.aggregate`), else None."""
        entry = self._entries.get((store, identity))
        return (entry[2], entry[3]) if entry is not None and entry[0] is forward else None

    def forward_of(self, store: str, identity: bytes) -> Forward | None:
        """How the update of (`store`, `identity`) the cache holds leaves it (None: it holds none)."""
        entry = self._entries.get((store, identity))
        return None if entry is None else entry[0]

    def has(self, store: str, identity: bytes) -> bool:
        """Whether the cache holds an update of (`store`, `identity`), whoever's."""
        return (store, identity) in self._entries

    def entry_size(self, store: str, identity: bytes) -> int:
        """The bytes the entry of (`store`, `identity`) counts for (its overhead included; 0: none)."""
        entry = self._entries.get((store, identity))
        return 0 if entry is None else entry[5]

    @property
    def size(self) -> int:
        """Bytes held (keys, values and the per-entry overhead)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def over(self) -> bool:
        return self._bytes > self.max_bytes

    # ------------------------------------------------------------------ record scopes (RecordScoped)
    def begin_record(self) -> None:
        self._in_record, self._undo = True, None

    def commit_record(self) -> None:
        self._in_record, self._undo = False, None

    def rollback_record(self) -> None:
        """Put back what the record's updates replaced, latest first (an entry it added goes)."""
        for slot, old in reversed(self._undo or ()):
            entry = self._entries.pop(slot)
            self._bytes -= entry[5]
            if old is not None:
                self._entries[slot] = old  # (as the most recently updated: the order is the cache's, not output's)
                self._bytes += old[5]
        self._in_record, self._undo = False, None

    # ------------------------------------------------------------------ leaving the cache (in a scope of their own)
    def evict(self, timestamp: int) -> None:
        """Forward the least recently updated entries until the cache is within its bound."""
        self._in_record = False  # what the forwarded records cause downstream is held directly
        while self._bytes > self.max_bytes and self._entries:
            self._forward(self._entries.popitem(last=False)[1])

    def flush(self, timestamp: int) -> None:
        """Forward every entry, least recently updated first; entries a forwarded record puts into the
        cache (a cached step after a cached step) are forwarded in the same flush."""
        self._in_record = False
        while self._entries:
            self._forward(self._entries.popitem(last=False)[1])

    def _forward(self, entry: _Entry) -> None:
        forward, key, value, timestamp, headers, size = entry
        self._bytes -= size
        forward(key, value, timestamp, headers)


def updates(context: Any, store: Any) -> Callable[[Any, Any, int], None]:
    """How a table-like processor passes on an update it has just written to `store` (with `store.put`):
    `emit(key, value, timestamp)`. Through the task's record cache when it has one (`context.record_cache`),
    else forwarded at once."""
    forward = context.forward
    cache: RecordCache | None = getattr(context, "record_cache", None)
    if cache is None:
        def emit_now(key: Any, value: Any, timestamp: int) -> None:
            forward(key, value, timestamp=timestamp)
        return emit_now

    name, put, headers_of, forward_later = store.name, cache.put, context.cached_headers, _later(forward)

    def emit_cached(key: Any, value: Any, timestamp: int) -> None:
        identity, size = store.last_written
        put(name, identity, size, forward_later, key, value, timestamp, headers_of())
    return emit_cached


def held_updates(context: Any, store: Any) -> Callable[[bytes, int, Any, Any, int, Any], None]:
    """What `updates`' emitter does with an update already written to `store`, for one that a batch's fold
    (`eos.worker.folding`) writes later: `hold(identity, size, key, value, timestamp, headers)` into the task's
    record cache, `identity` and `size` as `store.last_written` gives them after its write."""
    cache: RecordCache = context.record_cache
    name, put, forward_later = store.name, cache.put, _later(context.forward)

    def hold(identity: bytes, size: int, key: Any, value: Any, timestamp: int, headers: Any) -> None:
        put(name, identity, size, forward_later, key, value, timestamp, headers)
    return hold


def _later(forward: Callable[..., None]) -> Forward:
    """`forward` as the cache calls it when an update leaves (key, value, timestamp, headers)."""
    def forward_later(key: Any, value: Any, timestamp: int, headers: Any) -> None:
        forward(key, value, timestamp=timestamp, headers=headers)
    return forward_later
