"""Typed stores as processors see them. `KeyValueStore`: `get`, `put`, `delete`, range and prefix scans;
window and session stores are in `recovery.windows`.

Keys are ordered by their serialized bytes (as in RocksDB and Kafka Streams). A store is a view over
the task's write buffer of the current batch; using it outside a batch is an error.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from recovery.backends import StoreError
from recovery.write_buffer import WriteBuffer

__all__ = ["StoreSpec", "StoreView", "KeyValueStore", "Serde", "StoreKind", "shared_stores"]

StoreKind = Literal["key_value", "window", "session", "record_buffer", "versioned",
                    "time_ordered_buffer", "suppression_buffer"]
DAY_MS = 86_400_000
#: kinds whose entries stay until the operator takes them out, however long: no retention
_UNBOUNDED = ("key_value", "time_ordered_buffer", "suppression_buffer")

_NAME = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
_TS = struct.Struct(">q")
_NO_KEY = object()
_IMMUTABLE = frozenset({str, bytes, int})


class Serde(Protocol):
    def serialize(self, obj: Any) -> bytes | None: ...
    def deserialize(self, data: bytes | None) -> Any: ...


@dataclass(frozen=True)
class StoreSpec:
    """A store declaration. `persistent=True`: RocksDB under the state directory; False: in memory."""

    name: str
    key_serde: Serde
    value_serde: Serde
    persistent: bool = True
    #: values are kept with a timestamp (8 bytes before the serialized value), as Kafka Streams'
    #: timestamped stores keep the largest timestamp of what an aggregate aggregates
    timestamped: bool = False
    kind: StoreKind = "key_value"
    #: window and session stores: how long (ms of stream time) an entry is kept after its window starts
    #: (sessions: ends); older ones are dropped. Versioned stores: the history retention (how far behind
    #: the store's observed stream time versions are kept and looked up; 0: the latest version only)
    retention_ms: int | None = None
    #: the store keeps exactly a table read from this input topic of its task, so the topic is its changelog
    #: (Kafka Streams' source-topic optimization, `topology_optimization`): nothing is written to a changelog
    #: of its own, and it is restored by replaying the topic up to the task's committed offset in it
    source_topic: str | None = None
    #: where the job sets the key's and the value's serde (e.g. "aggregate_serde= of 'totals'"), named when the
    #: serde refuses a key or a value put in the store (None: nowhere the job can change)
    serdes_from: tuple[str | None, str | None] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"store name {self.name!r} must be 1-100 characters of [A-Za-z0-9._-] "
                             "(it names the changelog topic <application_id>-<store>-changelog)")
        if not isinstance(self.persistent, bool):  # ("false" would be true)
            raise TypeError(f"store {self.name!r}: persistent is True (RocksDB) or False (in memory), got "
                            f"{self.persistent!r}")
        if self.kind == "versioned":
            if self.retention_ms is None or self.retention_ms < 0:
                raise ValueError(f"versioned store {self.name!r} needs a history retention >= 0 ms")
        elif self.kind not in _UNBOUNDED and (self.retention_ms or 0) <= 0:
            raise ValueError(f"{self.kind} store {self.name!r} needs a retention > 0 ms")

    def changelog_topic(self, application_id: str) -> str:
        """The store's own changelog, `<application_id>-<store>-changelog` (a store restored from its table's
        topic has none: `restore_topic`)."""
        return f"{application_id}-{self.name}-changelog"

    def restore_topic(self, application_id: str) -> str:
        """The topic the store is restored from: its table's topic (`source_topic`) or its own changelog."""
        return self.source_topic or self.changelog_topic(application_id)

    @property
    def directory(self) -> str:
        """The store's directory in its task's state directory: a store restored from its table's topic has one
        of its own (`<store>@<topic>`), since the offset it records is one of that topic, so turning the
        optimization on or off never reads one topic's offset as the other's."""
        return f"{self.name}@{self.source_topic}" if self.source_topic else self.name

    def changelog_config(self) -> dict[str, str]:
        """Key-value stores: compacted (versioned ones too: each version is an entry of its own, deleted
        by the store when no lookup reaches it; time-ordered buffers: a record is held until stream time
        passes it, however long that takes; suppression buffers alike). Window and session stores: compacted and
        deleted after
        their retention plus a day (Kafka Streams' windowstore.changelog.additional.retention.ms), so that
        expired windows leave the changelog too."""
        if self.kind in ("versioned", *_UNBOUNDED):
            return {"cleanup.policy": "compact"}
        return {"cleanup.policy": "compact,delete", "retention.ms": str((self.retention_ms or 0) + DAY_MS)}


def shared_stores(specs: Iterable[StoreSpec]) -> dict[str, str]:
    """Stores restored from the same table topic that keep it alike (kind, history, serdes, persistence) hold
    the same rows: each is kept in the first one's store (Kafka Streams keeps one store per table). Returns
    store -> the store it is kept in, for all but the first of each such group."""
    first: dict[tuple[Any, ...], str] = {}
    out: dict[str, str] = {}
    for spec in specs:
        if spec.source_topic is None:
            continue
        alike = (spec.source_topic, spec.kind, spec.retention_ms, spec.timestamped, spec.persistent,
                 id(spec.key_serde), id(spec.value_serde))
        if alike in first:
            out[spec.name] = first[alike]
        else:
            first[alike] = spec.name
    return out


class StoreView:
    """A typed view of one store over the batch's write buffer."""

    def __init__(self, spec: StoreSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self._buffer: WriteBuffer | None = None
        self._serialize_key = spec.key_serde.serialize
        self._serialize_value, self._deserialize_value = spec.value_serde.serialize, spec.value_serde.deserialize
        self._timestamped = spec.timestamped
        #: the serialized key and the bytes (key and value) of this view's last `put` (the record cache's)
        self.last_written: tuple[bytes, int] = (b"", 0)
        self._last_key: Any = _NO_KEY  # the last key serialized, and its bytes
        self._last_raw = b""

    def attach(self, buffer: WriteBuffer | None) -> None:
        """Called by the task runtime: the batch's write buffer this view reads and writes (None: detached)."""
        self._buffer = buffer

    def _buf(self) -> WriteBuffer:
        if self._buffer is None:
            raise StoreError(f"store {self.name!r} is only available while a batch is processed")
        return self._buffer

    def key_bytes(self, key: Any) -> bytes:
        """`key` serialized as this store keys it (what the record cache and the changelog see)."""
        return self._key(key)

    def _key(self, key: Any) -> bytes:
        if key is self._last_key:  # an aggregation reads, then writes, the same key object
            return self._last_raw
        try:
            raw = self._serialize_key(key)
        except (ValueError, TypeError) as exc:  # (what a serde refusing an object raises; anything else is not
            raise self._refused(exc, "key", key) from None  # the object's fault, e.g. a registry that did not answer)
        if raw is None:
            raise ValueError(f"store {self.name!r}: keys cannot be None")
        if type(key) in _IMMUTABLE:  # (a dict key may change between two calls; holding the object keeps its id)
            self._last_key, self._last_raw = key, raw
        return raw

    def encoded_size(self, value: Any, timestamp: int) -> int:
        """The bytes `value` (written at `timestamp`) takes in this store, as `put` would write it."""
        return len(self._encode(value, timestamp))

    def _encode(self, value: Any, timestamp: int) -> bytes:
        try:
            raw = self._serialize_value(value) or b""
        except (ValueError, TypeError) as exc:
            raise self._refused(exc, "value", value) from None
        return _TS.pack(timestamp) + raw if self._timestamped else raw

    def _refused(self, exc: Exception, part: str, obj: Any) -> Exception:
        """`exc`, of the serde that refused a key or a value of this store (a ValueError or TypeError, as a
        `SerdeError` is), saying which store and which part (its type kept, for whoever tells a serde's errors
        from others). Other errors pass as they are: a Schema Registry that did not answer is no fault of the
        object, and the advice to change its serde would be wrong."""
        shown, where = repr(obj), (self.spec.serdes_from or (None, None))[part == "value"]
        change = f"; give {where} a serde that takes it" if where else ""
        exc.args = (f"store {self.name!r} cannot take the {part} {shown[:80] + '...' if len(shown) > 80 else shown}"
                    f" ({type(obj).__name__}): {exc}{change}", *exc.args[1:])
        return exc

    def _value(self, raw: bytes) -> Any:
        return self._deserialize_value(raw[8:] if self._timestamped else raw)

    def _value_and_timestamp(self, raw: bytes) -> tuple[Any, int]:
        if self._timestamped:
            return self._deserialize_value(raw[8:]), _TS.unpack_from(raw)[0]
        return self._deserialize_value(raw), -1

    def approximate_num_entries(self) -> int:
        return self._buf().backend.approximate_count()


class KeyValueStore(StoreView):
    def get(self, key: Any, default: Any = None) -> Any:
        raw = self._buf().get(self._key(key))
        return default if raw is None else self._value(raw)

    def get_with_timestamp(self, key: Any) -> tuple[Any, int] | None:
        """(value, timestamp) of a key, or None; the timestamp is -1 in a store that keeps none."""
        raw = self._buf().get(self._key(key))
        return None if raw is None else self._value_and_timestamp(raw)

    def put(self, key: Any, value: Any, timestamp: int = -1) -> None:
        """Store `value` (None deletes the key), with `timestamp` in a timestamped store."""
        raw_key = self._key(key)
        raw = None if value is None else self._encode(value, timestamp)
        self._buf().put(raw_key, raw)
        self.last_written = (raw_key, len(raw_key) + (len(raw) if raw else 0))

    def put_if_absent(self, key: Any, value: Any) -> Any:
        current = self.get(key)
        if current is None:
            self.put(key, value)
        return current

    def delete(self, key: Any) -> Any:
        old = self.get(key)
        self._buf().put(self._key(key), None)
        return old

    def range(self, start: Any = None, end: Any = None) -> Iterator[tuple[Any, Any]]:
        """Entries with start <= key < end in serialized-key order (None: unbounded)."""
        lo = None if start is None else self._key(start)
        hi = None if end is None else self._key(end)
        return self._decode(self._buf().iterate(lo, hi))

    def prefix_scan(self, prefix: Any) -> Iterator[tuple[Any, Any]]:
        """Entries whose serialized key starts with the serialized `prefix`."""
        lo = self._key(prefix)
        return self._decode(self._buf().iterate(lo, _prefix_end(lo)))

    def all(self) -> Iterator[tuple[Any, Any]]:
        return self._decode(self._buf().iterate())

    def _decode(self, items: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[Any, Any]]:
        ks, value = self.spec.key_serde, self._value
        for k, v in items:
            yield ks.deserialize(k), value(v)


def _prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key with this prefix (None if there is none)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])
