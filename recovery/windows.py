"""Window and session stores: typed views over the same byte stores, write buffers and changelogs as
key-value stores (so they restore by replay and have standby copies the same way), with key layouts for
the lookups windowed operations make.

* `WindowStore`: a value per (key, window start). Time-first layout `start(8) key` (as Kafka Streams'
  time-first window key schema for emit-final aggregations): windows are found directly by key and
  start, windows that closed or expired are a scan of the store's beginning.
* `SessionStore`: a value per (key, session start, session end). Key-first layout
  `0x00 len(key)(4) key end(8) start(8)` to find a key's sessions that overlap a time range, and an index
  `0x01 end(8) len(key)(4) key start(8)` to find the sessions that ended before a time. The index is derived
  from the sessions' keys: it is not written to the changelog (`changelogged`) but rebuilt as the changelog is
  replayed (`with_derived`), so a session written costs one changelog record, as in Kafka Streams.

Timestamps are signed 64-bit big-endian, shifted so that byte order is time order for times >= 0.
"""

from __future__ import annotations

import struct
from collections.abc import Container, Iterable, Iterator, Mapping
from typing import Any, NamedTuple, cast

from recovery.store import StoreView

__all__ = ["WindowStore", "SessionStore", "Session", "RecordBuffer", "TimeOrderedBuffer", "Held", "HeldRecord",
           "SuppressionBuffer", "Suppressed", "reproducible", "window_key", "changelogged", "with_derived"]

_Q = struct.Struct(">q")
_I = struct.Struct(">I")
_DATA, _INDEX = b"\x00", b"\x01"


def _time(t: int) -> bytes:
    return _Q.pack(t)


def window_key(start: int, key: bytes) -> bytes:
    """A window store's key of the window starting at `start` of the serialized key `key` (what its changelog
    and its write buffer see)."""
    return _Q.pack(start) + key


class WindowStore(StoreView):
    """Values per key and window start (`window_start` in ms). `expire_before(t)` drops windows that start
    before t. Iterations run in (start, key) order."""

    def put(self, key: Any, window_start: int, value: Any, timestamp: int = -1) -> None:
        """Store the window's value (None deletes it)."""
        stored_key = window_key(window_start, self._key(key))
        raw = None if value is None else self._encode(value, timestamp)
        self._buf().put(stored_key, raw)
        self.last_written = (stored_key, len(stored_key) + (len(raw) if raw else 0))

    def delete(self, key: Any, window_start: int) -> None:
        self._buf().put(_time(window_start) + self._key(key), None)

    def fetch(self, key: Any, window_start: int, time_to: int | None = None) -> Any:
        """The key's value in the window that starts at `window_start` (None: no such window); with `time_to`,
        as Kafka Streams' `fetch(key, timeFrom, timeTo)`, (start, value) of the key's windows that start in
        [window_start, time_to] (`fetch_range`)."""
        if time_to is not None:
            return self.fetch_range(key, window_start, time_to)
        raw = self._buf().get(_time(window_start) + self._key(key))
        return None if raw is None else self._value(raw)

    def fetch_with_timestamp(self, key: Any, window_start: int) -> tuple[Any, int] | None:
        raw = self._buf().get(_time(window_start) + self._key(key))
        return None if raw is None else self._value_and_timestamp(raw)

    def fetch_range(self, key: Any, time_from: int, time_to: int) -> Iterator[tuple[int, Any]]:
        """(start, value) of the key's windows that start in [time_from, time_to]."""
        wanted = self._key(key)
        for start, k, raw in self._scan(time_from, time_to):
            if k == wanted:
                yield start, self._value(raw)

    def fetch_all(self, time_from: int | None = None, time_to: int | None = None,
                  ) -> Iterator[tuple[Any, int, Any, int]]:
        """(key, start, value, timestamp) of every window starting in [time_from, time_to]."""
        ks = self.spec.key_serde
        for start, k, raw in self._scan(time_from, time_to):
            value, ts = self._value_and_timestamp(raw)
            yield ks.deserialize(k), start, value, ts

    def expire_before(self, start: int, since: int | None = None) -> int:
        """Delete the windows that start before `start` (and, given `since`, not before it: those are gone
        already), as tombstones in the changelog. Returns how many."""
        doomed = [(s, k) for s, k, _ in self._scan(since, start - 1)]
        for s, k in doomed:
            self._buf().put(_time(s) + k, None)
        return len(doomed)

    def _scan(self, time_from: int | None, time_to: int | None) -> Iterator[tuple[int, bytes, bytes]]:
        lo = None if time_from is None else _time(max(0, time_from))
        hi = None if time_to is None else _time(time_to + 1)
        if time_to is not None and time_to < 0:
            return
        for raw_key, raw in self._buf().iterate(lo, hi):
            yield _Q.unpack_from(raw_key)[0], raw_key[8:], raw


class Session(NamedTuple):
    key: Any
    start: int
    end: int
    value: Any
    timestamp: int


class SessionStore(StoreView):
    """Sessions per key: [start, end] (both inclusive, in ms) with a value."""

    def put(self, key: Any, start: int, end: int, value: Any, timestamp: int = -1) -> None:
        """Store a session's value (None removes the session)."""
        self.put_serialized(self._key(key), start, end, value, timestamp)

    def put_serialized(self, k: bytes, start: int, end: int, value: Any, timestamp: int = -1) -> None:
        """`put` of the key serialized as this store keys it (`key_bytes`)."""
        buf = self._buf()
        data_key = self.data_key(k, start, end)
        if value is None:
            buf.put(data_key, None)
            buf.put(self._index_key(k, start, end), None)
            self.last_written = (data_key, len(data_key))
            return
        raw = self._encode(value, timestamp)
        buf.put(data_key, raw)
        buf.put(self._index_key(k, start, end), b"")
        self.last_written = (data_key, len(data_key) + len(raw))

    def remove(self, key: Any, start: int, end: int) -> None:
        self.put(key, start, end, None)

    def find_sessions(self, key: Any, earliest_end: int, latest_start: int) -> list[Session]:
        """The key's sessions that end at or after `earliest_end` and start at or before `latest_start`
        (those a record at t with inactivity gap g merges with: earliest_end = t - g, latest_start = t + g)."""
        k = self._key(key)
        prefix = _DATA + _I.pack(len(k)) + k
        out = []
        for raw_key, raw in self._buf().iterate(prefix + _time(max(0, earliest_end)), _next_prefix(prefix)):
            end, start = _Q.unpack_from(raw_key, len(prefix))[0], _Q.unpack_from(raw_key, len(prefix) + 8)[0]
            if start <= latest_start:
                value, ts = self._value_and_timestamp(raw)
                out.append(Session(key, start, end, value, ts))
        return out

    def open_sessions(self, earliest_end: int) -> dict[bytes, list[list[Any]]]:
        """Every key's sessions that end at or after `earliest_end` (`find_sessions(key, earliest_end, ...)` of
        each key), by serialized key: [start, end, value, timestamp], by end, then start. One scan of the store,
        for a caller about to look up most of its keys (a lookup costs a RocksDB seek)."""
        out: dict[bytes, list[list[Any]]] = {}
        decode = self._value_and_timestamp
        for raw_key, raw in self._buf().iterate(_DATA, _INDEX):
            length = _I.unpack_from(raw_key, 1)[0]
            end = _Q.unpack_from(raw_key, 5 + length)[0]
            if end >= earliest_end:
                value, ts = decode(raw)
                out.setdefault(raw_key[5:5 + length], []).append(
                    [_Q.unpack_from(raw_key, 13 + length)[0], end, value, ts])
        return out

    def fetch(self, key: Any) -> list[Session]:
        """All the key's sessions, by end time."""
        return self.find_sessions(key, 0, 2**62)

    def ending_before(self, end: int, since: int | None = None) -> Iterator[Session]:
        """Every session that ends before `end` (and not before `since`), in end-time order (from the index)."""
        ks = self.spec.key_serde
        low = _INDEX if since is None else _INDEX + _time(max(0, since))
        for raw_key, _ in list(self._buf().iterate(low, _INDEX + _time(max(0, end)))):
            session_end = _Q.unpack_from(raw_key, 1)[0]
            length = _I.unpack_from(raw_key, 9)[0]
            k = raw_key[13:13 + length]
            start = _Q.unpack_from(raw_key, 13 + length)[0]
            raw = self._buf().get(self.data_key(k, start, session_end))
            if raw is not None:
                value, ts = self._value_and_timestamp(raw)
                yield Session(ks.deserialize(k), start, session_end, value, ts)

    def fetch_all(self) -> Iterator[Session]:
        return self.ending_before(2**62)

    def expire_before(self, end: int, since: int | None = None) -> int:
        """Delete the sessions that ended before `end` (and not before `since`). Returns how many."""
        buf = self._buf()
        low = _INDEX if since is None else _INDEX + _time(max(0, since))
        doomed = []
        for index_key, _ in list(buf.iterate(low, _INDEX + _time(max(0, end)))):
            length = _I.unpack_from(index_key, 9)[0]
            data_key = _DATA + index_key[9:13 + length] + index_key[1:9] + index_key[13 + length:]
            if buf.get(data_key) is not None:
                doomed.append((data_key, index_key))
            else:  # (an index entry restored from a changelog that held them, its session removed since: dropped)
                buf.put(index_key, None)
        for data_key, index_key in doomed:
            buf.put(data_key, None)
            buf.put(index_key, None)
        return len(doomed)

    @staticmethod
    def data_key(k: bytes, start: int, end: int) -> bytes:
        """The store key of the session [start, end] of the serialized key `k` (what its changelog and the record
        cache see)."""
        return _DATA + _I.pack(len(k)) + k + _time(end) + _time(start)

    @staticmethod
    def _index_key(k: bytes, start: int, end: int) -> bytes:
        return _INDEX + _time(end) + _I.pack(len(k)) + k + _time(start)


#: the kinds of store whose index by time is derived from their data keys, not logged: a session store's (by end
#: time) and a record buffer's (by timestamp); both index keys are the data key's first 8 bytes after the key, then
#: the key with its length, then the rest
INDEXED = ("session", "record_buffer")


def changelogged(kind: str, changes: Mapping[bytes, bytes | None]) -> Iterable[tuple[bytes, bytes | None]]:
    """What of a batch's changes to a store of `kind` goes to its changelog: all, but the index entries of a
    session store or a record buffer (derived from their data keys; `with_derived` makes them again)."""
    if kind not in INDEXED:
        return changes.items()
    return ((k, v) for k, v in changes.items() if k[:1] != _INDEX)


def with_derived(kind: str, changes: dict[bytes, bytes | None]) -> dict[bytes, bytes | None]:
    """Changes replayed from the changelog of a store of `kind` (the last of each key in a stretch of it), with
    what they imply for the store beside them: each session's (or buffered record's) index entry, written or
    removed with it. Index entries in a changelog (written there before the index was derived) are taken as they
    are, but the data's own record decides, wherever the two disagree."""
    if kind not in INDEXED:
        return changes
    out = dict(changes)
    for k, v in changes.items():
        if k[:1] == _DATA:
            length = _I.unpack_from(k, 1)[0]
            out[_INDEX + k[5 + length:13 + length] + k[1:5 + length] + k[13 + length:]] = None if v is None else b""
    return out


def _next_prefix(prefix: bytes) -> bytes:
    """The smallest byte string greater than every string that starts with `prefix`."""
    stripped = prefix.rstrip(b"\xff")
    return stripped[:-1] + bytes([stripped[-1] + 1])


class RecordBuffer(StoreView):
    """Records kept per key and timestamp (sliding windows fold a new window's content from them):
    `0x00 len(key)(4) key ts(8) seq(8)` -> value, and a time index `0x01 ts(8) len(key)(4) key seq(8)` to drop
    the records no open window can hold any more."""

    def put(self, key: Any, timestamp: int, seq: int, value: Any) -> None:
        self.put_encoded(key, timestamp, seq, self._encode(value, timestamp))

    def encode(self, value: Any, timestamp: int) -> bytes:
        """`value` (of a record at `timestamp`) as this buffer holds it (`put_encoded`, `read_back`)."""
        return self._encode(value, timestamp)

    def read_back(self, raw: bytes) -> Any:
        """The value `encode` made `raw` of, as `range` gives it back."""
        return self._value(raw)

    def put_encoded(self, key: Any, timestamp: int, seq: int, raw: bytes) -> None:
        """`put` of a value `encode` made."""
        k = self._key(key)
        self._buf().put(_DATA + _I.pack(len(k)) + k + _time(timestamp) + _time(seq), raw)
        self._buf().put(_INDEX + _time(timestamp) + _I.pack(len(k)) + k + _time(seq), b"")

    def next_seq(self, key: Any, timestamp: int, near: list[tuple[int, int, Any]] | None = None) -> int:
        """The sequence number of one more record of `key` at `timestamp`: one past the largest the key has
        there (0 for its first). Records of one key and time are told apart by the order they came in, which
        a replay of the same input repeats, whatever offsets its records were read from. `near`: the key's
        records of a range holding `timestamp`, when the caller has read them already."""
        near = self.range(key, timestamp, timestamp) if near is None else near
        return 1 + max((seq for ts, seq, _ in near if ts == timestamp), default=-1)

    def range(self, key: Any, time_from: int, time_to: int) -> list[tuple[int, int, Any]]:
        """(timestamp, seq, value) of the key's records with time_from <= timestamp <= time_to, in
        (timestamp, seq) order."""
        k = self._key(key)
        prefix = _DATA + _I.pack(len(k)) + k
        out = []
        for raw_key, raw in self._buf().iterate(prefix + _time(max(0, time_from)), prefix + _time(time_to + 1)):
            ts, seq = _Q.unpack_from(raw_key, len(prefix))[0], _Q.unpack_from(raw_key, len(prefix) + 8)[0]
            out.append((ts, seq, self._value(raw)))
        return out

    def records_from(self, time_from: int) -> dict[bytes, list[tuple[int, int, Any]]]:
        """Every key's records (by its serialized key) from `time_from` on, (timestamp, seq, value) in that order, as
        `range` gives a key's: in one scan of the buffer, not a seek a key."""
        out: dict[bytes, list[tuple[int, int, Any]]] = {}
        value, unpack = self._value, _Q.unpack_from
        for raw_key, raw in self._buf().iterate(_DATA, _INDEX):
            end = 5 + _I.unpack_from(raw_key, 1)[0]
            ts = unpack(raw_key, end)[0]
            if ts >= time_from:
                held = out.get(raw_key[5:end])
                if held is None:
                    held = out[raw_key[5:end]] = []
                held.append((ts, unpack(raw_key, end + 8)[0], value(raw)))
        return out

    def expire_before(self, timestamp: int, since: int | None = None) -> int:
        low = _INDEX if since is None else _INDEX + _time(max(0, since))
        doomed = list(self._buf().iterate(low, _INDEX + _time(max(0, timestamp))))
        for raw_key, _ in doomed:
            ts = raw_key[1:9]
            length = _I.unpack_from(raw_key, 9)[0]
            k, seq = raw_key[13:13 + length], raw_key[13 + length:]
            self._buf().put(_DATA + _I.pack(length) + k + ts + seq, None)
            self._buf().put(raw_key, None)
        return len(doomed)

    def remove(self, key: Any, timestamp: int, seq: int) -> None:
        """Delete one record (nothing happens if it is not there)."""
        k = self._key(key)
        self._buf().put(_DATA + _I.pack(len(k)) + k + _time(timestamp) + _time(seq), None)
        self._buf().put(_INDEX + _time(timestamp) + _I.pack(len(k)) + k + _time(seq), None)

    def take_before(self, timestamp: int, since: int | None = None) -> list[tuple[Any, int, int, Any]]:
        """Remove and return (key, timestamp, seq, value) of every record before `timestamp` (and not before
        `since`), in time order."""
        ks = self.spec.key_serde
        low = _INDEX if since is None else _INDEX + _time(max(0, since))
        taken = []
        for raw_key, _ in list(self._buf().iterate(low, _INDEX + _time(max(0, timestamp)))):
            ts = _Q.unpack_from(raw_key, 1)[0]
            length = _I.unpack_from(raw_key, 9)[0]
            k, seq = raw_key[13:13 + length], _Q.unpack_from(raw_key, 13 + length)[0]
            data_key = _DATA + _I.pack(length) + k + _time(ts) + _time(seq)
            raw = self._buf().get(data_key)
            self._buf().put(data_key, None)
            self._buf().put(raw_key, None)
            if raw is not None:
                taken.append((ks.deserialize(k), ts, seq, self._value(raw)))
        return taken


#: an input record held back, whole: topic, partition, offset, key and value bytes, headers, timestamp, and the
#: index it reserved among its input's outputs (`eos.processor.ProcessorContext.hold`)
HeldRecord = tuple[str, int, int, bytes | None, bytes | None, list[tuple[str, bytes]], int, int]


class Held(NamedTuple):
    """A record a `TimeOrderedBuffer` holds: what reached the operator (key, value, timestamp) and the input
    record it was made of, whole (`message`: topic, partition, offset, key and value bytes, headers,
    timestamp), so that it can still be dead-lettered or named as an output's origin when it is let go."""

    key: Any
    value: Any
    timestamp: int
    #: topic, partition, offset, key and value bytes, headers, timestamp, and the index the record reserved
    #: among its input's outputs
    message: HeldRecord


_HELD_META = b"\x01"
_HELD_META_FORMAT = struct.Struct(">qq")  # observed stream time, next sequence number
_FIELD = struct.Struct(">i")  # a field's length (-1: None)


_NO_FIELD = _FIELD.pack(-1)


def _pack(fields: list[bytes | None]) -> bytes:
    out: list[bytes] = []
    add, length = out.append, _FIELD.pack
    for f in fields:
        if f is None:
            add(_NO_FIELD)
        else:
            add(length(len(f)))
            add(f)
    return b"".join(out)


def _unpack(raw: bytes) -> list[bytes | None]:
    fields: list[bytes | None] = []
    at = 0
    while at < len(raw):
        n = _FIELD.unpack_from(raw, at)[0]
        at += 4
        if n < 0:
            fields.append(None)
        else:
            fields.append(raw[at:at + n])
            at += n
    return fields


def _message_fields(message: HeldRecord) -> list[bytes | None]:
    """A held input record (`Held.message`) as fields for `_pack`."""
    topic, partition, offset, key, value, headers, ts, index = message
    fields: list[bytes | None] = [topic.encode(), b"%d" % partition, b"%d" % offset, key, value, b"%d" % ts,
                                  b"%d" % index, b"%d" % len(headers)]
    for name, header in headers:
        fields += [name.encode(), header]
    return fields


def _message(fields: list[bytes | None]) -> HeldRecord:
    """`_message_fields` read back."""
    topic, partition, offset, mkey, mvalue, ts, index, count = fields[:8]
    rest = fields[8:]
    # (a header's value may be None, as Kafka's may)
    headers = cast(list[tuple[str, bytes]], [(rest[2 * i].decode(), rest[2 * i + 1])  # type: ignore[union-attr]
                                             for i in range(int(count or b"0"))])
    assert topic is not None and partition is not None and offset is not None and ts is not None
    return topic.decode(), int(partition), int(offset), mkey, mvalue, headers, int(ts), int(index or 0)


class TimeOrderedBuffer(StoreView):
    """Records held back in timestamp order (the stream side of a stream-table join with a grace period,
    Kafka Streams' time-ordered buffer, KIP-923): `0x00 ts(8) seq(8)` -> the record, and `0x01` -> the
    observed stream time (the largest timestamp put) and the next sequence number. Records of one timestamp
    are let go in the order they came in, which a replay of the same input repeats."""

    def observed_stream_time(self) -> int | None:
        raw = self._buf().get(_HELD_META)
        return None if raw is None else _HELD_META_FORMAT.unpack(raw)[0]

    def observe(self, timestamp: int) -> tuple[int | None, int]:
        """Move the observed stream time to `timestamp` if that is later; returns it as it was (None: nothing
        observed yet) and as it is."""
        raw = self._buf().get(_HELD_META)
        if raw is None:
            self._buf().put(_HELD_META, _HELD_META_FORMAT.pack(timestamp, 0))
            return None, timestamp
        observed, seq = _HELD_META_FORMAT.unpack(raw)
        if timestamp > observed:
            self._buf().put(_HELD_META, _HELD_META_FORMAT.pack(timestamp, seq))
        return observed, max(observed, timestamp)

    def put(self, held: Held) -> None:
        raw = self._buf().get(_HELD_META)
        observed, seq = (held.timestamp, 0) if raw is None else _HELD_META_FORMAT.unpack(raw)
        self._buf().put(_HELD_META, _HELD_META_FORMAT.pack(max(observed, held.timestamp), seq + 1))
        fields: list[bytes | None] = [self._key(held.key) if held.key is not None else None,
                                      self._serialize_value(held.value), *_message_fields(held.message)]
        self._buf().put(_DATA + _time(held.timestamp) + _time(seq), _pack(fields))

    def take_until(self, timestamp: int, since: int | None = None) -> list[Held]:
        """Remove and return the records at or before `timestamp`, in (timestamp, arrival) order. `since`: a
        time before which none is left (the last `timestamp` taken until), where the scan starts rather than
        at the first of the records taken before, whose deletions the batch's write buffer still holds."""
        if timestamp < 0:  # (keys sort by time for times >= 0)
            return []
        buf = self._buf()
        taken = list(buf.iterate(_DATA + _time(max(0, since)) if since is not None else _DATA,
                                 _DATA + _time(timestamp + 1)))
        for k, _ in taken:
            buf.put(k, None)
        return [self._held(k, raw) for k, raw in taken]

    def all(self) -> list[Held]:
        """Every record held, in the order they will be let go."""
        return [self._held(k, raw) for k, raw in self._buf().iterate(_DATA, _HELD_META)]

    def _held(self, stored_key: bytes, raw: bytes) -> Held:
        fields = _unpack(raw)
        key, value = fields[:2]
        return Held(None if key is None else self.spec.key_serde.deserialize(key), self._deserialize_value(value),
                    _Q.unpack_from(stored_key, 1)[0], _message(fields[2:]))


class Suppressed(NamedTuple):
    """A key's latest update a `SuppressionBuffer` holds: its value (None: a deletion) and timestamp, the time
    the key was first buffered since it was last let go (`buffer_time`), and the input record the update was
    made of (`message`, as `Held.message`; None for an update made outside a record's processing, such as a
    record cache's flush)."""

    key: Any
    value: Any
    timestamp: int
    buffer_time: int
    message: HeldRecord | None


_SUPPRESS_DATA, _SUPPRESS_INDEX, _SUPPRESS_META = b"\x00", b"\x01", b"\x02"
#: observed stream time, entries, their bytes, and a time no entry was first buffered before
_SUPPRESS_META_FORMAT = struct.Struct(">qqqq")
_EMPTY_META = (-1, 0, 0, 2**63 - 1)
_UTIME = struct.Struct(">Q")  # a time shifted by 2**63: byte order is time order for every time
_ENTRY_HEAD = struct.Struct(">Qqi")  # an entry's buffer time (shifted), its update's timestamp and value's length
#: a held record's partition, offset, timestamp, and the lengths of its topic, key, value (-1: None) and index
#: (in digits), and its headers' count; then those, and each header's name length, value length and both
_HELD_HEAD = struct.Struct(">iqqHiiBH")
_HEADER_HEAD = struct.Struct(">Hi")


def _encode_held(message: HeldRecord) -> bytes:
    """A held record (`Held.message`) in one piece: a suppression buffer writes one per update, so it is made
    with one struct rather than a field per part (`_pack`, the time-ordered buffer's older layout)."""
    topic, partition, offset, key, value, headers, ts, index = message
    name, digits = topic.encode(), b"%d" % index
    parts = [_HELD_HEAD.pack(partition, offset, ts, len(name), -1 if key is None else len(key),
                             -1 if value is None else len(value), len(digits), len(headers)),
             name, key or b"", value or b"", digits]
    for header, data in headers:
        h = header.encode()
        parts += [_HEADER_HEAD.pack(len(h), -1 if data is None else len(data)), h, data or b""]
    return b"".join(parts)


def _decode_held(raw: bytes | memoryview, at: int) -> HeldRecord:
    """`_encode_held` read back from `raw[at:]`."""
    partition, offset, ts, n_topic, n_key, n_value, n_index, n_headers = _HELD_HEAD.unpack_from(raw, at)
    at += _HELD_HEAD.size
    topic = bytes(raw[at:at + n_topic]).decode()
    at += n_topic
    key = None if n_key < 0 else bytes(raw[at:at + n_key])
    at += max(0, n_key)
    value = None if n_value < 0 else bytes(raw[at:at + n_value])
    at += max(0, n_value)
    index = int(bytes(raw[at:at + n_index]))
    at += n_index
    headers: list[tuple[str, bytes]] = []
    for _ in range(n_headers):
        n_name, n_data = _HEADER_HEAD.unpack_from(raw, at)
        at += _HEADER_HEAD.size
        name = bytes(raw[at:at + n_name]).decode()
        at += n_name
        headers.append((name, None if n_data < 0 else bytes(raw[at:at + n_data])))  # type: ignore[arg-type]
        at += max(0, n_data)
    return topic, partition, offset, key, value, headers, ts, index


class SuppressionBuffer(StoreView):
    """The latest update per key of a suppressed table (Kafka Streams' `KTable.suppress(untilTimeLimit)`
    buffer, changelogged): `0x00 key` -> the key's buffer time and the update (its timestamp, value and the
    record it was held with), an index `0x01 buffer_time(8) key` in the order keys are let go, and `0x02` ->
    the observed stream time (the largest timestamp put), the entries' count and bytes (each entry's
    serialized key and value), and a time no key was first buffered before, so that none of them needs a
    scan and a look for keys due scans only the index's times past those taken before (their deletions stay
    in the batch's write buffer until it commits)."""

    def _meta(self) -> tuple[int, int, int, int]:
        raw = self._buf().get(_SUPPRESS_META)
        return _EMPTY_META if raw is None else _SUPPRESS_META_FORMAT.unpack(raw)

    def _write_meta(self, observed: int, entries: int, size: int, low: int) -> None:
        self._buf().put(_SUPPRESS_META, _SUPPRESS_META_FORMAT.pack(observed, entries, size, low))

    def observe(self, timestamp: int) -> int:
        """Move the observed stream time to `timestamp` if that is later; returns it."""
        observed, entries, size, low = self._meta()
        if timestamp > observed:
            self._write_meta(timestamp, entries, size, low)
            return timestamp
        return observed

    def observed_stream_time(self) -> int:
        """The largest timestamp put (-1: none yet)."""
        return self._meta()[0]

    def size(self) -> tuple[int, int]:
        """How many keys are held, and their serialized keys' and values' bytes."""
        _, entries, size, _ = self._meta()
        return entries, size

    def put(self, key: Any, value: Any, timestamp: int, message: HeldRecord | None) -> int:
        """Hold `value` as the key's latest update, and move the observed stream time to `timestamp` if that is
        later; returns the observed stream time. A key already held keeps its buffer time (the time limit counts
        from its first update: Kafka Streams' "does not re-start the timer")."""
        buf, k = self._buf(), self._key(key)
        data = None if value is None else self._encode(value, -1)
        before = buf.get(_SUPPRESS_DATA + k)
        observed, entries, size, low = self._meta()
        if before is None:
            buffer_time = timestamp
            buf.put(_SUPPRESS_INDEX + _UTIME.pack(buffer_time + 2**63) + k, b"")
            entries, size, low = entries + 1, size + len(k), min(low, buffer_time)
        else:
            buffer_time = _ENTRY_HEAD.unpack_from(before)[0] - 2**63
            size -= _value_size(before)
        head = _ENTRY_HEAD.pack(buffer_time + 2**63, timestamp, -1 if data is None else len(data))
        buf.put(_SUPPRESS_DATA + k, head + (data or b"") + (b"" if message is None else _encode_held(message)))
        observed = max(observed, timestamp)
        self._write_meta(observed, entries, size + len(data or b""), low)
        return observed

    def take_until(self, time: int) -> list[Suppressed]:
        """Remove and return the keys first buffered at or before `time`, in buffer-time order (keys of one
        time in their bytes' order)."""
        low = self._meta()[3]
        if low > time:
            return []
        return self._take(low, _SUPPRESS_INDEX + _UTIME.pack(time + 2**63 + 1), after=time + 1)

    def take_oldest(self) -> Suppressed | None:
        """Remove and return the key buffered first (None: none is held)."""
        taken = self._take(self._meta()[3], _SUPPRESS_META, limit=1)
        return taken[0] if taken else None

    def _take(self, low: int, end: bytes, limit: int | None = None, after: int | None = None) -> list[Suppressed]:
        """Take the index's keys from time `low` up to `end` (at most `limit`); `after`: a time no key left is
        first buffered before (else the last key taken's)."""
        buf = self._buf()
        taken: list[tuple[bytes, bytes]] = []
        start = _SUPPRESS_INDEX + _UTIME.pack(max(low, -2**63) + 2**63) if low < 2**63 - 1 else _SUPPRESS_INDEX
        for index_key, _ in buf.iterate(start, end):
            raw = buf.get(_SUPPRESS_DATA + index_key[9:])
            assert raw is not None, f"store {self.name!r}: an index entry without its key"
            taken.append((index_key, raw))
            if limit is not None and len(taken) >= limit:
                break
        observed, entries, size, low = self._meta()
        for index_key, raw in taken:
            buf.put(_SUPPRESS_DATA + index_key[9:], None)
            buf.put(index_key, None)
            size -= len(index_key) - 9 + _value_size(raw)
        if taken or after is not None:
            last = _UTIME.unpack_from(taken[-1][0], 1)[0] - 2**63 if taken else low
            entries -= len(taken)
            low = _EMPTY_META[3] if not entries else after if after is not None else last
            self._write_meta(observed, entries, size, low)
        return [self._entry(index_key[9:], raw) for index_key, raw in taken]

    def all(self) -> list[Suppressed]:
        """Every key held, in the order they will be let go."""
        buf = self._buf()
        return [self._entry(k[9:], buf.get(_SUPPRESS_DATA + k[9:]) or b"")
                for k, _ in buf.iterate(_SUPPRESS_INDEX, _SUPPRESS_META)]

    def _entry(self, k: bytes, raw: bytes) -> Suppressed:
        buffer_time, timestamp, size = _ENTRY_HEAD.unpack_from(raw)
        at = _ENTRY_HEAD.size + max(0, size)
        value = None if size < 0 else self._deserialize_value(raw[_ENTRY_HEAD.size:at])
        return Suppressed(self.spec.key_serde.deserialize(k), value, timestamp, buffer_time - 2**63,
                          _decode_held(raw, at) if len(raw) > at else None)


def _value_size(raw: bytes) -> int:
    """The bytes of the serialized value in a `SuppressionBuffer` entry."""
    return max(0, _ENTRY_HEAD.unpack_from(raw)[2])


def reproducible(kind: str, stored_key: bytes, raw: bytes | None, moving: Container[str]) -> bytes | None:
    """A changelog value of a store that holds input records whole (`time_ordered_buffer`,
    `suppression_buffer`) without what a run that aborted batches does not reproduce: where a held record of
    a topic in `moving` was read (a record of an internal topic, or of a topic the job writes and reads, takes
    another offset when a batch that wrote it before aborts), and the framework's headers, which name such
    offsets. What a test of exactly-once compares; other values are returned as they are."""
    if raw is None or kind not in ("time_ordered_buffer", "suppression_buffer") or stored_key[:1] != _DATA:
        return raw

    def stable(message: HeldRecord) -> HeldRecord:
        topic, partition, offset, key, value, headers, ts, index = message
        kept = [(name, header) for name, header in headers if not name.startswith("eos.")]
        return (topic, 0, 0, key, value, kept, ts, index) if topic in moving else (topic, partition, offset, key,
                                                                                  value, kept, ts, index)
    if kind == "suppression_buffer":
        at = _ENTRY_HEAD.size + max(0, _value_size(raw))
        return raw if len(raw) <= at else raw[:at] + _encode_held(stable(_decode_held(raw, at)))
    fields = _unpack(raw)
    return _pack([*fields[:2], *_message_fields(stable(_message(fields[2:])))])
