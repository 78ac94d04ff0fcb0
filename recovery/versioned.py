"""Versioned key-value stores (Kafka Streams' `VersionedKeyValueStore`): each key keeps its values by
timestamp, so a lookup can ask what the key held at a point in time.

* `put(key, value, timestamp)` adds a version valid from `timestamp` until the key's next version by
  timestamp (a None value is a tombstone version: the key held nothing from then on). A put at a timestamp
  the key already has replaces that version. The order of puts does not matter, only their timestamps.
  It returns, as Kafka Streams' does, until when the new version is valid: `VALID_TO_UNDEFINED` when it is
  the key's latest, the next version's timestamp when it went into the history, `NOT_PUT` when refused.
* `get(key)` is the latest version by timestamp; `get(key, as_of=t)` the version valid at `t`.
* The store's **observed stream time** is the largest timestamp put into it. Versions are kept for
  `history_retention_ms` behind it: a put older than that is refused, a lookup older than that answers
  None. A key's versions that no lookup can reach any more are deleted when the key is next written, once
  they reach half the retention further back (so that a key updated in time order is not trimmed at
  every put): the history holds at most one and a half retentions of versions.

Layout over the same byte stores, write buffers and changelogs as every store (so it restores by replay
and has standby copies the same way):

* `0x02 key` -> `timestamp(8) oldest(8) flag(1) value`: the key's latest version (flag 0: a tombstone),
  read with one point lookup, and a lower bound of the timestamps of its older versions (`oldest`);
* `0x00 len(key)(4) key ~timestamp(8)` -> `flag(1) value`: each older version, its timestamp stored
  inverted so that a key's versions run newest first, each an entry of its own, so a compacted changelog
  keeps every version until the store deletes it;
* `0x01observed` -> the observed stream time.

Lookups at or after a key's latest version (a stream joined in time with its table) read one entry; older
ones scan the key's history from that time.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any, NamedTuple

from recovery.store import StoreView, _prefix_end

__all__ = ["VersionedKeyValueStore", "Version", "VALID_TO_UNDEFINED", "NOT_PUT"]

_I = struct.Struct(">I")
_Q = struct.Struct(">Q")
_q = struct.Struct(">q")
_LATEST = struct.Struct(">qq")
_HISTORY = b"\x00"
_OBSERVED = b"\x01observed"
_POINTER = b"\x02"
_TOP = (1 << 63) - 1
_NO_HISTORY = _TOP
_VALUE, _TOMBSTONE = b"\x01", b"\x00"

#: `put`'s answer for a version that is the key's latest (valid until a newer one comes)
VALID_TO_UNDEFINED = -1
#: `put`'s answer for a version older than the history retention (not stored)
NOT_PUT = -(1 << 63)


class Version(NamedTuple):
    """A value and the time range it is valid in: [valid_from, valid_to); valid_to None: still current."""

    value: Any
    valid_from: int
    valid_to: int | None


def _inverted(timestamp: int) -> bytes:
    return _Q.pack(_TOP - timestamp)


def _time_of(entry: bytes) -> int:
    return _TOP - _Q.unpack_from(entry, len(entry) - 8)[0]


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
    def put(self, key: Any, value: Any, timestamp: int) -> int:
        """Add the version (None: a tombstone) valid from `timestamp`. Returns until when it is valid:
        `VALID_TO_UNDEFINED` (the key's latest), the next version's timestamp, or `NOT_PUT` (and nothing
        stored) when `timestamp` is older than the history bound."""
        buf, retention = self._buf(), self.history_retention_ms
        bound = self.history_bound()
        if bound is not None and timestamp < bound:
            return NOT_PUT
        if bound is None or timestamp > bound + retention:
            buf.put(_OBSERVED, _q.pack(timestamp))
            bound = timestamp - retention
        raw_key = self._key(key)
        try:
            payload = _TOMBSTONE if value is None else _VALUE + (self._serialize_value(value) or b"")
        except Exception as exc:
            raise self._refused(exc, "value", value) from None
        pointer = _POINTER + raw_key
        latest = buf.get(pointer)
        valid_to = VALID_TO_UNDEFINED
        if latest is None:
            new_latest, oldest = (timestamp, payload), _NO_HISTORY
        else:
            latest_ts, oldest = _LATEST.unpack_from(latest)
            if timestamp >= latest_ts:
                # the latest so far goes into the history, unless no lookup can reach it (it ends at the bound)
                if timestamp > latest_ts and timestamp > bound:
                    buf.put(self._prefix(raw_key) + _inverted(latest_ts), latest[16:])
                    oldest = min(oldest, latest_ts)
                new_latest = (timestamp, payload)
            else:
                buf.put(self._prefix(raw_key) + _inverted(timestamp), payload)
                oldest = min(oldest, timestamp)
                new_latest = (latest_ts, latest[16:])
                valid_to = self._newest_after(self._prefix(raw_key), timestamp, latest_ts)
        if oldest < bound - retention // 2:
            oldest = self._trim(self._prefix(raw_key), bound, new_latest[0])
        record = _LATEST.pack(new_latest[0], oldest) + new_latest[1]
        buf.put(pointer, record)
        self.last_written = (pointer, len(pointer) + len(record))
        return valid_to

    def delete(self, key: Any, timestamp: int) -> int:
        """A tombstone version at `timestamp` (the key holds nothing from then on)."""
        return self.put(key, None, timestamp)

    def _trim(self, prefix: bytes, bound: int, latest_ts: int) -> int:
        """Delete the key's older versions no lookup reaches: those before the newest one at or before
        `bound` (the latest if it is), and that one too if it is a tombstone (a lookup there finds nothing
        either way). Returns a lower bound of the timestamps of those left."""
        buf = self._buf()
        doomed, kept = [], None
        for n, (entry, raw) in enumerate(buf.iterate(prefix + _inverted(bound), _prefix_end(prefix))):
            if n == 0 and latest_ts > bound and raw[:1] != _TOMBSTONE:
                kept = _time_of(entry)
            else:
                doomed.append(entry)
        for entry in doomed:
            buf.put(entry, None)
        return kept if kept is not None else bound + 1

    # ------------------------------------------------------------------ reads
    def get(self, key: Any, default: Any = None, *, as_of: int | None = None) -> Any:
        """The key's latest value by timestamp, or (`as_of`) the value it held at that time; `default` when
        it held none, or when `as_of` is older than the history bound."""
        found = self.get_with_timestamp(key, as_of)
        return default if found is None else found[0]

    def get_with_timestamp(self, key: Any, as_of: int | None = None) -> tuple[Any, int] | None:
        """(value, valid from) of what `get` finds, or None."""
        buf = self._buf()
        if as_of is not None:
            bound = self.history_bound()
            if bound is not None and as_of < bound:
                return None
        raw_key = self._key(key)
        latest = buf.get(_POINTER + raw_key)
        if latest is None:
            return None
        latest_ts = _LATEST.unpack_from(latest)[0]
        if as_of is None or as_of >= latest_ts:
            return None if latest[16:17] == _TOMBSTONE else (self._deserialize_value(latest[17:]), latest_ts)
        prefix = self._prefix(raw_key)
        for entry, raw in buf.iterate(prefix + _inverted(as_of), _prefix_end(prefix)):
            if raw[:1] == _TOMBSTONE:
                return None
            return self._deserialize_value(raw[1:]), _time_of(entry)
        return None

    def latest_timestamp(self, key: Any) -> int | None:
        """The timestamp of the key's latest version, a tombstone too (None: it has none)."""
        latest = self._buf().get(_POINTER + self._key(key))
        return None if latest is None else _LATEST.unpack_from(latest)[0]

    def versions(self, key: Any, time_from: int | None = None, time_to: int | None = None) -> list[Version]:
        """The key's versions (tombstones left out) valid at some time in [time_from, time_to] and not
        before the history bound, newest first (Kafka Streams' `MultiVersionedKeyQuery`)."""
        buf, raw_key = self._buf(), self._key(key)
        latest = buf.get(_POINTER + raw_key)
        if latest is None:
            return []
        bound = self.history_bound()
        lo = max(x for x in (time_from, bound, -_TOP) if x is not None)
        prefix = self._prefix(raw_key)
        every = [(_LATEST.unpack_from(latest)[0], latest[16:])]
        every += [(_time_of(entry), raw) for entry, raw in buf.iterate(prefix, _prefix_end(prefix))]
        out: list[Version] = []
        valid_to: int | None = None
        for valid_from, raw in every:
            if (time_to is None or valid_from <= time_to) and raw[:1] != _TOMBSTONE:
                out.append(Version(self._deserialize_value(raw[1:]), valid_from, valid_to))
            if valid_from <= lo:
                break
            valid_to = valid_from
        return out

    def _newest_after(self, prefix: bytes, time: int, latest_ts: int) -> int:
        """The timestamp of the key's oldest version after `time` (its latest's if no older one is)."""
        found = latest_ts
        for entry, _ in self._buf().iterate(prefix, prefix + _inverted(time)):
            found = _time_of(entry)
        return found

    def latest(self) -> Iterator[tuple[Any, Any, int]]:
        """(key, latest value, its timestamp) of every key whose latest version is not a tombstone, in
        serialized-key order."""
        ks = self.spec.key_serde
        for entry, raw in self._buf().iterate(_POINTER, _prefix_end(_POINTER)):
            if raw[16:17] != _TOMBSTONE:
                yield ks.deserialize(entry[1:]), self._deserialize_value(raw[17:]), _LATEST.unpack_from(raw)[0]

    def all(self) -> Iterator[tuple[Any, Any]]:
        """(key, latest value) of every key that holds one."""
        for key, value, _ in self.latest():
            yield key, value

    def _prefix(self, raw_key: bytes) -> bytes:
        return _HISTORY + _I.pack(len(raw_key)) + raw_key
