"""Where a source starts reading a partition whose group has committed nothing (Kafka Streams'
`AutoOffsetReset`), for the application (`auto_offset_reset`) or one source (`app.stream(...,
auto_offset_reset=...)`):

    "earliest"                 the partition's first record (the default)
    "latest"                   its end when the application starts: only records written from then on
    "none"                     nothing: the run refuses to start until offsets are committed (`eos reset`)
    timedelta(hours=1)         the first record at or after the start minus the duration (Kafka Streams'
    "by_duration:PT1H"         `AutoOffsetReset.byDuration`; the text is the Kafka consumer setting's)

The same policy says where reading goes on when a committed offset belongs to a topic that was deleted and
created again. A run that starts past a partition's first record records where its input starts (the
commit's metadata), so the audits leave the records before it out.
"""

from __future__ import annotations

import re
from datetime import timedelta

from eos.errors import ConfigError
from eos.windows import ms

__all__ = ["offset_reset", "reset_duration_ms"]

#: the policies named by a word
_WORDS = ("earliest", "latest", "none")
_PREFIX = "by_duration:"
#: the words of Kafka's consumers before 0.9, refused with the word they became
_OLD_WORDS = {"smallest": "earliest", "largest": "latest"}
#: an ISO-8601 duration as java.time.Duration writes it: PnDTnHnMn.nS (the Kafka setting's form)
_ISO = re.compile(r"P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d{1,3})?)S)?)?",
                  re.IGNORECASE)
_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000))


def offset_reset(value: object, what: str = "auto_offset_reset") -> str:
    """The policy `value` names, in its one text form ("earliest", "latest", "none", "by_duration:PT1H");
    anything else is refused with a ConfigError saying what `what` takes."""
    if isinstance(value, timedelta):
        if value < timedelta(0):
            raise ConfigError(f"{what}={value!r} goes forward in time: give how far back from the start to read "
                              "(a positive timedelta)")
        return _PREFIX + _iso(ms(value))
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _WORDS:
            return text
        if text.startswith(_PREFIX) and (back := _parse_iso(text[len(_PREFIX):].strip())) is not None:
            return _PREFIX + _iso(back)
        if text in _OLD_WORDS:
            raise ConfigError(f"{what}={value!r} is the old Kafka consumer's word: '{_OLD_WORDS[text]}' says the same")
    raise ConfigError(f"{what} must be 'earliest', 'latest', 'none', or how far back from the start to read: a "
                      f"datetime.timedelta, or 'by_duration:' and an ISO-8601 duration as the Kafka consumer setting "
                      f"takes it ('by_duration:PT1H', 'by_duration:P2DT12H'); got {value!r}")


def reset_duration_ms(policy: str) -> int | None:
    """The milliseconds back from now a by-duration policy reads from; None for the others."""
    if not policy.startswith(_PREFIX):
        return None
    back = _parse_iso(policy[len(_PREFIX):])
    assert back is not None, policy  # (a policy is made by `offset_reset`)
    return back


def _parse_iso(text: str) -> int | None:
    match = _ISO.fullmatch(text)
    if match is None or not any(match.groupdict().values()) or text.upper().endswith("T"):
        return None
    parts = match.groupdict()
    return sum(int(parts[unit] or 0) * size for unit, size in _UNITS) + round(float(parts["s"] or 0) * 1000)


def _iso(duration: int) -> str:
    """`duration` (ms) as java.time.Duration writes it (days as 24 hours: PT36H), the form Kafka's setting reads."""
    hours, rest = divmod(duration, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    text = "PT" + (f"{hours}H" if hours else "") + (f"{minutes}M" if minutes else "")
    if seconds or millis or text == "PT":
        text += f"{seconds}.{millis:03d}".rstrip("0").rstrip(".") + "S"
    return text
