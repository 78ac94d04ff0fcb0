"""Versioned key-value stores (Kafka Streams' `VersionedKeyValueStore`): each key keeps its values by
timestamp, so a lookup can ask what the key held at a point in time.

* `put(key, value, timestamp)` adds a version valid from `timestamp` until the key's next version by
  timestamp (a None value is a tombstone version: the key held nothing from then on). A put at a timestamp
  the key already has replaces that version. The order of puts does not matter, only their timestamps.
* `get(key)` is the latest version by timestamp; `get(key, as_of=t)` the version valid at `t`.
* The store's **observed stream time** is the largest timestamp put into it. Versions are kept for
  `history_retention_ms` behind it: a put older than that is refused (returns False), a lookup older
  than that answers None, and a key's versions that no lookup can reach any more are deleted when the key
  is next written (the newest version at or before the bound is kept: it is valid at the bound).

Layout over the same byte stores, write buffers and changelogs as every store (so it restores by replay
and has standby copies the same way): a version is the entry `0x00 len(key)(4) key ~timestamp(8)` ->
`flag(1) value` (flag 0: a tombstone version), its timestamp stored inverted so that a key's versions
run newest first; the observed stream time is the entry `0x01 observed`. Each version is its own entry,
so a compacted changelog keeps every version until the store deletes it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any, NamedTuple

from recovery.store import StoreView, _prefix_end

__all__ = ["VersionedKeyValueStore", "Version"]

_I = struct.Struct(">I")
_Q = struct.Struct(">Q")
_q = struct.Struct(">q")
_DATA = b"\x00"
_OBSERVED = b"\x01observed"
_TOP = (1 << 63) - 1
_VALUE, _TOMBSTONE = b"\x01", b"\x00"


class Version(NamedTuple):
    """A value and the time range it is valid in: [valid_from, valid_to); valid_to None: still current."""

    value: Any
    valid_from: int
    valid_to: int | None


def _inverted(timestamp: int) -> bytes:
    return _Q.pack(_TOP - timestamp)


class VersionedKeyValueStore(StoreView):
    """Values per key and timestamp, kept `spec.retention_ms` (the history retention) behind the store's
    observed stream time (see the module's docstring)."""

    # ------------------------------------------------------------------ time
    @property
    def history_retention_ms(self) -> int:
        return self.spec.retention_ms or 0

    def observed_stream_time(self) -> int | None:
        """The largest timestamp put into the store (None: nothing yet)."""
        raw = self._buf().get(_OBSERVED)
        return None if raw is None else _q.unpack(raw)[0]

    def history_bound(self) -> int | None:
        """The oldest time lookups answer and puts are taken at: observed stream time - history retention."""
        observed = self.observed_stream_time()
        return None if observed is None else observed - self.history_retention_ms

    # ------------------------------------------------------------------ writes
    def put(self, key: Any, value: Any, timestamp: int) -> bool:
        """Add the version (None: a tombstone) valid from `timestamp`. False (and nothing stored) when
        `timestamp` is older than the history bound."""
        bound = self.history_bound()
        if bound is not None and timestamp < bound:
            return False
        prefix = self._prefix(key)
        raw = _TOMBSTONE if value is None else _VALUE + (self._serialize_value(value) or b"")
        entry = prefix + _inverted(timestamp)
        buf = self._buf()
        buf.put(entry, raw)
        self.last_written = (entry, len(entry) + len(raw))
        if bound is None or timestamp > bound + self.history_retention_ms:
            buf.put(_OBSERVED, _q.pack(timestamp))
            bound = timestamp - self.history_retention_ms
        self._trim(prefix, bound)
        return True

    def delete(self, key: Any, timestamp: int) -> bool:
        """A tombstone version at `timestamp` (the key holds nothing from then on)."""
        return self.put(key, None, timestamp)

    def _trim(self, prefix: bytes, bound: int) -> None:
        """Delete the key's versions no lookup reaches: older than the newest one at or before `bound`, and
        that one too if it is a tombstone (a lookup there finds nothing either way)."""
        buf = self._buf()
        doomed = []
        for n, (entry, raw) in enumerate(buf.iterate(prefix + _inverted(bound), _prefix_end(prefix))):
            if n or raw[:1] == _TOMBSTONE:
                doomed.append(entry)
        for entry in doomed:
            buf.put(entry, None)

    # ------------------------------------------------------------------ reads
    def get(self, key: Any, default: Any = None, *, as_of: int | None = None) -> Any:
        """The key's latest value by timestamp, or (`as_of`) the value it held at that time; `default` when
        it held none, or when `as_of` is older than the history bound."""
        found = self.get_with_timestamp(key, as_of)
        return default if found is None else found[0]

    def get_with_timestamp(self, key: Any, as_of: int | None = None) -> tuple[Any, int] | None:
        """(value, valid from) of what `get` finds, or None."""
        if as_of is not None:
            bound = self.history_bound()
            if bound is not None and as_of < bound:
                return None
        prefix = self._prefix(key)
        start = prefix if as_of is None else prefix + _inverted(as_of)
        for entry, raw in self._buf().iterate(start, _prefix_end(prefix)):
            if raw[:1] == _TOMBSTONE:
                return None
            return self._deserialize_value(raw[1:]), _TOP - _Q.unpack_from(entry, len(entry) - 8)[0]
        return None

    def latest_timestamp(self, key: Any) -> int | None:
        """The timestamp of the key's newest version, a tombstone too (None: it has none)."""
        prefix = self._prefix(key)
        for entry, _ in self._buf().iterate(prefix, _prefix_end(prefix)):
            return _TOP - _Q.unpack_from(entry, len(entry) - 8)[0]
        return None

    def versions(self, key: Any, time_from: int | None = None, time_to: int | None = None) -> list[Version]:
        """The key's versions (tombstones left out) valid at some time in [time_from, time_to], newest first
        (Kafka Streams' `MultiVersionedKeyQuery`)."""
        prefix = self._prefix(key)
        start = prefix if time_to is None else prefix + _inverted(time_to)
        out: list[Version] = []
        valid_to: int | None = None
        if time_to is not None:  # the first version in range may have been replaced after time_to
            newer = self._newest_after(prefix, time_to)
            valid_to = newer
        for entry, raw in self._buf().iterate(start, _prefix_end(prefix)):
            valid_from = _TOP - _Q.unpack_from(entry, len(entry) - 8)[0]
            if raw[:1] != _TOMBSTONE:
                out.append(Version(self._deserialize_value(raw[1:]), valid_from, valid_to))
            if time_from is not None and valid_from <= time_from:
                break
            valid_to = valid_from
        return out

    def _newest_after(self, prefix: bytes, time: int) -> int | None:
        """The timestamp of the key's oldest version after `time`, if any."""
        found = None
        for entry, _ in self._buf().iterate(prefix, prefix + _inverted(time)):
            found = _TOP - _Q.unpack_from(entry, len(entry) - 8)[0]
        return found

    def latest(self) -> Iterator[tuple[Any, Any, int]]:
        """(key, latest value, its timestamp) of every key whose latest version is not a tombstone, in
        serialized-key order."""
        ks = self.spec.key_serde
        last = None
        for entry, raw in self._buf().iterate(_DATA, _prefix_end(_DATA)):
            size = _I.unpack_from(entry, 1)[0]
            key = entry[5:5 + size]
            if key == last:
                continue
            last = key
            if raw[:1] != _TOMBSTONE:
                yield ks.deserialize(key), self._deserialize_value(raw[1:]), _TOP - _Q.unpack_from(entry, 5 + size)[0]

    def all(self) -> Iterator[tuple[Any, Any]]:
        """(key, latest value) of every key that holds one."""
        for key, value, _ in self.latest():
            yield key, value

    def _prefix(self, key: Any) -> bytes:
        raw = self._key(key)
        return _DATA + _I.pack(len(raw)) + raw
