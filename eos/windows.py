"""Windows for aggregations, with Kafka Streams' semantics (all times in milliseconds of event time).

    TumblingWindows(size, grace=0)           [start, start + size), starts at multiples of size
    HoppingWindows(size, advance, grace=0)   [start, start + size), starts at multiples of advance
    SlidingWindows(time_difference, grace=0) [start, end] (both inclusive): each record opens the window
                                             ending at it, and the window starting right after it
                                             once a later record falls in it
    SessionWindows(inactivity_gap, grace=0)  [first, last] record of a key, no gap above inactivity_gap

A window is closed once stream time (the largest timestamp a task has seen) reaches its end plus the
grace period (time and sliding windows: end + grace <= stream time); a session once stream time passes its
end plus the gap plus the grace period. A closed window or session takes no more records: a record that
would bridge a closed session and an open one joins the open one only. A record that only falls in closed
windows is late (sliding windows: that no open window holds, though the window after it may be open): it is
dropped and counted, or sent to the dead-letter topic (`late_records=`). With
`emit="final"` a window's result is emitted once, when it closes (Kafka Streams' `suppress(untilWindowCloses)`);
with `emit="update"`, every change is.

A window's result has the largest timestamp of the records in it, and the key `Windowed(key, start, end)`.
"""

from __future__ import annotations

import json
import numbers
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NamedTuple

from eos.serde import Serde, SerdeError

#: a binary windowed key's end and start, 8-byte big-endian each (`WindowedSerde`)
_TIMES = struct.Struct(">QQ")

__all__ = ["TumblingWindows", "HoppingWindows", "SlidingWindows", "SessionWindows", "Windowed", "WindowedSerde",
           "WindowSpec", "TimeWindow", "Windowing", "ms"]


def ms(value: int | float | timedelta, what: str = "a duration") -> int:
    """Milliseconds from an int/float (ms) or a timedelta; anything else (a string such as "1m") is refused,
    naming `what` it was given as."""
    if type(value) is int:
        return value
    if isinstance(value, timedelta):
        return int(value.total_seconds() * 1000)
    given: object = value  # (what a caller gives may not be what it says)
    if isinstance(given, bool) or not isinstance(given, numbers.Real):
        raise TypeError(f"{what} is milliseconds (an int) or a datetime.timedelta, got {value!r}")
    return int(float(given))


class TimeWindow(NamedTuple):
    start: int
    end: int  # exclusive for tumbling/hopping, inclusive for sliding


class Windowed(NamedTuple):
    """The key of a window's result."""

    key: Any
    start: int
    end: int


@dataclass(frozen=True)
class HoppingWindows:
    size: int | timedelta
    advance: int | timedelta
    grace: int | timedelta = 0

    def __post_init__(self) -> None:
        if not 0 < ms(self.advance, "a hopping window's advance") <= ms(self.size, "a hopping window's size"):
            raise ValueError(f"a hopping window's advance must be in (0, size]; got advance={ms(self.advance)}, "
                             f"size={ms(self.size)}")
        if ms(self.grace, "a window's grace") < 0:
            raise ValueError("grace must be >= 0")

    @property
    def size_ms(self) -> int:
        return ms(self.size)

    @property
    def grace_ms(self) -> int:
        return ms(self.grace)

    def first_start(self, timestamp: int) -> int:
        """The start of the earliest window a record at `timestamp` falls in (the others follow by `advance`)."""
        advance = ms(self.advance)
        return max(0, timestamp - ms(self.size) + advance) // advance * advance

    def windows_for(self, timestamp: int) -> list[TimeWindow]:
        """The windows a record at `timestamp` falls in (Kafka Streams' TimeWindows.windowsFor)."""
        size, advance = ms(self.size), ms(self.advance)
        start = self.first_start(timestamp)
        out = []
        while start <= timestamp:
            out.append(TimeWindow(start, start + size))
            start += advance
        return out

    def closed(self, window_end: int, stream_time: int) -> bool:
        return window_end + ms(self.grace) <= stream_time

    @property
    def retention_ms(self) -> int:
        return ms(self.size) + ms(self.grace)


@dataclass(frozen=True)
class TumblingWindows(HoppingWindows):
    """Hopping windows whose advance is their size."""

    def __init__(self, size: int | timedelta, grace: int | timedelta = 0) -> None:
        if ms(size, "a tumbling window's size") <= 0:
            raise ValueError(f"a tumbling window's size must be > 0 ms; got {ms(size)}")
        super().__init__(size, size, grace)


@dataclass(frozen=True)
class SlidingWindows:
    time_difference: int | timedelta
    grace: int | timedelta = 0

    def __post_init__(self) -> None:
        if ms(self.time_difference, "a sliding window's time_difference") <= 0 or ms(self.grace, "its grace") < 0:
            raise ValueError("a sliding window needs time_difference > 0 and grace >= 0")

    @property
    def diff_ms(self) -> int:
        return ms(self.time_difference)

    @property
    def grace_ms(self) -> int:
        return ms(self.grace)

    def closed(self, window_end: int, stream_time: int) -> bool:
        """Whether the window ending at `window_end` (its end included) takes no more records: stream time is
        past its end plus grace (Kafka Streams updates a sliding window while `end >= stream time - grace`)."""
        return window_end + ms(self.grace) < stream_time

    def late(self, timestamp: int, stream_time: int) -> bool:
        """Every window the record could be in is closed, whatever records its key has (Kafka Streams' rule);
        a record that passes may still find no open window that holds it (`takes`)."""
        return timestamp + 1 + ms(self.time_difference) + ms(self.grace) <= stream_time

    def takes(self, timestamp: int, touched: Iterable[TimeWindow], stream_time: int) -> bool:
        """Whether one of the windows a record makes or falls in (`touched`) holds it and is open: else the record
        is late, though the window after it (which does not hold it) may be open. Its own window ends at it, so a
        record more than grace behind stream time is late unless an open window of an earlier record holds it."""
        open_from = stream_time - ms(self.grace)  # (`closed`: a window ending before this)
        return any(w.start <= timestamp <= w.end and w.end >= open_from for w in touched)

    def left_window(self, timestamp: int) -> TimeWindow:
        """The window ending at the record; for a record earlier than the time difference, [0, difference]
        (windows do not start before 0, as in Kafka Streams)."""
        start = max(0, timestamp - ms(self.time_difference))
        return TimeWindow(start, start + ms(self.time_difference))

    def right_window(self, timestamp: int) -> TimeWindow:
        """The window starting right after the record (it exists once a later record falls in it)."""
        return TimeWindow(timestamp + 1, timestamp + 1 + ms(self.time_difference))

    def touched(self, timestamp: int, neighbours: Iterable[int]) -> list[TimeWindow]:
        """The windows a record at `timestamp` makes or falls in, in start order, given the times of its key's
        other records within the time difference + 1 ms of it: its own window; the window after it, where one of
        them falls in it; the window after each of them that the record falls in, and the own window of each
        later one that it falls in (closed ones among them: the caller skips those)."""
        diff = ms(self.time_difference)
        start = timestamp - diff if timestamp > diff else 0  # (`left_window` and `right_window`, inline)
        affected = {TimeWindow(start, start + diff)}
        for s in neighbours:
            if timestamp < s <= timestamp + 1 + diff:
                affected.add(TimeWindow(timestamp + 1, timestamp + 1 + diff))
            start = s - diff if s > diff else 0
            if start <= timestamp <= start + diff:
                affected.add(TimeWindow(start, start + diff))
            if s < timestamp <= s + 1 + diff:
                affected.add(TimeWindow(s + 1, s + 1 + diff))
        return sorted(affected)

    @property
    def retention_ms(self) -> int:
        return 2 * ms(self.time_difference) + ms(self.grace) + 1


@dataclass(frozen=True)
class SessionWindows:
    inactivity_gap: int | timedelta
    grace: int | timedelta = 0

    def __post_init__(self) -> None:
        if ms(self.inactivity_gap, "a session window's inactivity_gap") <= 0 or ms(self.grace, "its grace") < 0:
            raise ValueError("a session window needs inactivity_gap > 0 and grace >= 0")

    @property
    def gap_ms(self) -> int:
        return ms(self.inactivity_gap)

    @property
    def grace_ms(self) -> int:
        return ms(self.grace)

    def closed(self, session_end: int, stream_time: int) -> bool:
        return session_end + ms(self.inactivity_gap) + ms(self.grace) < stream_time

    @property
    def retention_ms(self) -> int:
        return ms(self.inactivity_gap) + ms(self.grace) + 1


WindowSpec = HoppingWindows | SlidingWindows | SessionWindows


@dataclass(frozen=True)
class Windowing:
    """What a windowed aggregation computes: kept with its sub-topology for the auditor (`eos audit window`)
    and for queries of its store."""

    windows: WindowSpec
    emit: str
    late_records: str
    initializer: Any
    aggregator: Any
    merger: Any
    store: str
    #: the stateless operators (eos.graph.operators) between the input topic and the aggregation, in order:
    #: the window audit passes each input record through them, as the task did
    prefix: tuple[Any, ...] = ()
    #: the topic its results are written to (None: its sub-topology's output topic)
    topic: str | None = None
    #: the stateless operators between the aggregation and that topic (`map(lambda window, n: (window.key, n))`):
    #: the window audit passes each expected result through them, as the task did
    suffix: tuple[Any, ...] = ()
    #: results routed among topics (`to(fn, topics=[...])`, `eos.graph.operators.Route`) after `suffix`: the
    #: window audit routes each expected result alike and reads every one of those topics (`topic` is None then)
    route: Any = None


class WindowedSerde(Serde):
    """Serializes `Windowed(key, start, end)`: "json" as {"key": ..., "start": ..., "end": ...} (the key
    deserialized with `inner` when it is bytes-like), "binary" as Kafka Streams' session-windowed layout
    (inner key bytes, end and start as 8-byte big-endian)."""

    def __init__(self, inner: Serde, format: str = "json") -> None:
        if format not in ("json", "binary"):
            raise ValueError(f"windowed key format must be 'json' or 'binary', got {format!r}")
        self.inner, self.format = inner, format
        self.name = f"windowed {format} of {inner.name}"

    def bind(self, topic: str, is_key: bool) -> Serde:
        """The inner key's serde bound too (a Schema Registry key names its subject after the topic)."""
        inner = self.inner.bind(topic, is_key)
        return self if inner is self.inner else WindowedSerde(inner, self.format)

    def serialize(self, obj: Any) -> bytes | None:
        if self.format == "binary" and type(obj) is Windowed:  # (`_dumps`'s layout, in fewer calls)
            try:
                times = _TIMES.pack(obj.end, obj.start)
            except struct.error:
                return super().serialize(obj)  # (which says what is wrong)
            return (self.inner.serialize(obj.key) or b"") + times
        return super().serialize(obj)

    def _dumps(self, obj: Any) -> bytes:
        if not isinstance(obj, Windowed):
            raise SerdeError(f"expected a Windowed key, got {type(obj).__name__}")
        if self.format == "binary":
            return (self.inner.serialize(obj.key) or b"") + obj.end.to_bytes(8, "big") + obj.start.to_bytes(8, "big")
        key = obj.key.decode("utf-8", "backslashreplace") if isinstance(obj.key, (bytes, bytearray)) else obj.key
        return json.dumps({"key": key, "start": obj.start, "end": obj.end}, separators=(",", ":")).encode()

    def _loads(self, data: bytes) -> Windowed:
        if self.format == "binary":
            return Windowed(self.inner.deserialize(data[:-16]), int.from_bytes(data[-8:], "big"),
                            int.from_bytes(data[-16:-8], "big"))
        obj = json.loads(data)
        return Windowed(obj["key"], int(obj["start"]), int(obj["end"]))
