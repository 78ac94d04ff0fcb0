"""Event time: where a record's timestamp comes from (Kafka Streams' `TimestampExtractor`).

A sub-topology processes each record at the timestamp its extractor gives, in milliseconds since the
epoch: stream time (the largest timestamp a task has seen), windows, punctuation and the timestamps of
outputs all follow it. Extractors, by name or as objects:

    "record"            the record's own timestamp (the default)
    "wall_clock"        the time the record is processed (processing time)
    "field:created_at"  a field of the (deserialized) value; numbers are milliseconds, use
                        field("created_at", unit="s") for seconds or unit="iso" for ISO-8601 strings
    "header:ts"         a header holding the milliseconds as decimal text (header("ts", unit="iso"), ...)
    any callable        fn(record) -> int milliseconds

A timestamp that is missing, negative, not a number (a boolean is not one), or later than the year 9999
(`MAX_TIMESTAMP`: window arithmetic stays within 64 bits) makes the record a bad record (dead-letter topic,
stage "timestamp"), as Kafka Streams' default extractor refuses them. A bad record never moves stream time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from eos.clock import wall_ms
from eos.errors import EosError
from eos.records import Record

__all__ = ["TimestampExtractor", "InvalidTimestampError", "RecordTime", "WallClockTime", "field", "header",
           "timestamp_extractor", "RECORD_TIME", "TimestampSpec", "parse_time", "check_timestamp", "extracted",
           "MAX_TIMESTAMP"]

#: The latest timestamp a record may have: 9999-12-31T23:59:59.999Z in ms. Windows add their size, grace
#: and retention to it, and store it as a signed 64-bit number.
MAX_TIMESTAMP = 253_402_300_799_999

Unit = Literal["ms", "s", "iso"]


class InvalidTimestampError(EosError, ValueError):
    """A record's timestamp is missing, negative or not a number (the record is a bad record)."""


class TimestampExtractor:
    """Base class: `__call__(record) -> milliseconds`."""

    def __call__(self, record: Record) -> int:
        raise NotImplementedError


@dataclass(frozen=True)
class RecordTime(TimestampExtractor):
    """The record's own timestamp (producer or log-append time)."""

    def __call__(self, record: Record) -> int:
        return record.timestamp


@dataclass(frozen=True)
class WallClockTime(TimestampExtractor):
    """Processing time: the moment the record is processed."""

    def __call__(self, record: Record) -> int:
        return wall_ms()


def check_timestamp(value: Any, what: str = "the timestamp") -> int:
    """`value` as a timestamp in ms: an int (or an integral float) in [0, MAX_TIMESTAMP]; anything else
    raises InvalidTimestampError (negative values pass through as -1 and below, for the caller to refuse)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidTimestampError(f"{what} is not a number of milliseconds: {value!r}")
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise InvalidTimestampError(f"{what} is not a number of milliseconds: {value!r}")
        value = int(value)
    if value > MAX_TIMESTAMP:
        raise InvalidTimestampError(f"{what} {value} is out of range (after the year 9999; is it in "
                                    "microseconds or nanoseconds?)")
    return value


def extracted(extractor: Callable[[Record], int], record: Record) -> int:
    """`extractor`'s timestamp of `record`, checked (`check_timestamp`: a negative one passes, for the caller to
    refuse); any other error of the extractor's as an InvalidTimestampError that names it. Every loop of a task
    stamps its records here, so a record is refused alike whichever loop reads it."""
    try:
        return check_timestamp(extractor(record))
    except InvalidTimestampError:
        raise
    except Exception as exc:  # the user's extractor failed on this record
        raise InvalidTimestampError(f"the timestamp extractor failed: {type(exc).__name__}: {exc}") from exc


def _convert(raw: Any, unit: Unit, what: str) -> int:
    if raw is None:
        raise InvalidTimestampError(f"{what} is missing")
    if isinstance(raw, bool):
        raise InvalidTimestampError(f"{what} is a boolean, not a time: {raw!r}")
    if unit == "iso":
        try:
            return int(datetime.fromisoformat(str(raw)).timestamp() * 1000)
        except ValueError:
            raise InvalidTimestampError(f"{what} is not an ISO-8601 time: {raw!r}") from None
    try:
        number = float(raw.decode() if isinstance(raw, bytes) else raw)
    except (TypeError, ValueError, UnicodeDecodeError):
        raise InvalidTimestampError(f"{what} is not a number: {raw!r}") from None
    if number != number or number in (float("inf"), float("-inf")) or abs(number) > 2**63:
        raise InvalidTimestampError(f"{what} is out of range: {raw!r}")
    return check_timestamp(int(number * 1000) if unit == "s" else int(number), what)


_RELATIVE = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_time(text: str, now_ms: int) -> int:
    """Milliseconds since the epoch from "1767225600000", an ISO-8601 time, or a time relative to `now_ms`
    ("now", "-90s", "-5m", "+2h", "-1d", "-250ms")."""
    text = text.strip()
    if text == "now":
        return now_ms
    if text.isdigit():
        return int(text)
    if text[:1] in "+-":
        for suffix in ("ms", "s", "m", "h", "d"):
            number = text[1:].removesuffix(suffix)
            if text.endswith(suffix) and number.replace(".", "", 1).isdigit():
                delta = int(float(number) * _RELATIVE[suffix])
                return now_ms + (delta if text[0] == "+" else -delta)
    try:
        return _convert(text, "iso", "timestamp")
    except InvalidTimestampError:
        raise ValueError(f"{text!r} is not a timestamp: give milliseconds since the epoch, an ISO-8601 time "
                         "(2026-05-01T10:00:00Z) or a time relative to now (now, -90s, -5m, -2h, -1d)") from None


@dataclass(frozen=True)
class field(TimestampExtractor):
    """A field of the deserialized value (a dict); `path` may be dotted ("meta.created_at"). A tombstone (a
    record without a value: a table's deletion) has no fields: it keeps the record's own timestamp."""

    path: str
    unit: Unit = "ms"

    def __post_init__(self) -> None:
        object.__setattr__(self, "_parts", tuple(self.path.split(".")))

    def __call__(self, record: Record) -> int:
        value: Any = record.value
        if value is None:
            return record.timestamp
        for part in self._parts:  # type: ignore[attr-defined]
            if not isinstance(value, dict):
                raise InvalidTimestampError(f"field {self.path!r}: the value is not an object with that field")
            value = value.get(part)
        if type(value) is int and self.unit == "ms" and 0 <= value <= MAX_TIMESTAMP:
            return value  # (milliseconds already: what `_convert` would make of them)
        return _convert(value, self.unit, f"field {self.path!r}")


@dataclass(frozen=True)
class header(TimestampExtractor):
    """A header of the record (the last one of that name)."""

    name: str
    unit: Unit = "ms"

    def __call__(self, record: Record) -> int:
        found = None
        for key, value in record.headers or ():
            if key == self.name:
                found = value
        return _convert(found, self.unit, f"header {self.name!r}")


RECORD_TIME = RecordTime()
TimestampSpec = str | Callable[[Record], int] | None


def timestamp_extractor(spec: TimestampSpec) -> Callable[[Record], int]:
    """An extractor from a name ("record", "wall_clock", "field:<path>", "header:<name>") or a callable."""
    if spec is None or spec == "record":
        return RECORD_TIME
    if callable(spec):
        return spec
    if spec == "wall_clock":
        return WallClockTime()
    kind, _, name = spec.partition(":")
    if kind == "field" and name:
        return field(name)
    if kind == "header" and name:
        return header(name)
    raise ValueError(f"unknown timestamp {spec!r}: use 'record', 'wall_clock', 'field:<name>', 'header:<name>', "
                     "eos.time.field(...)/header(...) or a function of the record")
