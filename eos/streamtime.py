"""Stream time across the topics between an application's steps: each record carries its source's clock.

A task that reads its input directly keeps Kafka Streams' stream time: the largest timestamp it has seen.
A topic written by one step of the application and read by another breaks that rule's premise (a
repartition topic, or a topic the job's own steps are chained through). Each writing task puts a whole
micro-batch into it in one transaction, and the partitioner spreads it over every partition, so a partition
of the topic holds one upstream task's stretch of event time, then another's: over a backlog, records are
minutes or hours out of order, and the largest timestamp seen calls nearly all of the second stretch late,
however well ordered each source partition was.

So such topics carry their writers' clocks (a watermark per source, as Flink and Dataflow keep per input
channel), when a step downstream uses event time (`eos.topology.clocked_topics`):

* every record a task writes to one carries `eos.st = "<source>/<sources>:<stream time>[~<judged>]"`: the
  writing task's index among all the topic's writer tasks, their count, its stream time after that record
  (which never moves back) and, when larger, the stream time the record was judged against there (its own
  source's clock, carried through every hop);
* at the end of every batch the writing task sends each partition of the topic a marker (header `eos.wm`,
  key `eos.wm`, no value) with its stream time, so that a partition no key of a source hashes to still
  learns how far that source has got; a marker ending in `:i` says the source is idle: a task reading its
  input directly had none for `source_idle_timeout` (it says so in a batch of its own), a task reading
  such a topic itself caught up and all its sources are idle. A task that said it was idle and gets input
  again first runs a batch that only tells its readers it is awake, so that tasks getting input together
  all wake before a record of any of them reaches a reader. Readers of the topic outside the application
  should skip records with an `eos.wm` header (`eos topics read` and the auditor do).

The reading task keeps the clock of every source. Its stream time, which closes windows, fires stream-time
punctuation and expires state, is the smallest clock of the sources that are not idle (of all of them when
every one is idle), never moving back; until every source has been heard from, it stays where it was. A
record is judged late against the larger of that, its source's clock and what it was judged against
upstream: a record within grace of its own source partition's stream time is never dropped, and one that
was late at its source still is, however many hops away.

Everything depends only on the records of the topic in their order, never on where batches begin and end:
a restarted or moved task, and the window audit replaying the topic, reach the same decisions.

An idle source does not hold stream time back (an empty input partition would hold it forever). One that
gets input later than the others did, older than their progress, can see records late (Flink's idleness
has the same trade-off; a longer `source_idle_timeout` narrows it); they are counted as such.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["STAMP_HEADER", "MARKER_HEADER", "MARKER_KEY", "Stamp", "encode_stamp", "decode_stamp", "EventClock",
           "stamp_of", "is_marker"]

STAMP_HEADER = "eos.st"
MARKER_HEADER = "eos.wm"
#: A marker's key (its value is null): compacted topics refuse records without a key.
MARKER_KEY = b"eos.wm"


@dataclass(frozen=True)
class Stamp:
    source: int
    sources: int
    #: the writing task's stream time (never moves back)
    stream_time: int
    idle: bool = False
    #: the stream time the record was judged against in the writing task, when larger (its own source's
    #: clock, carried on through every hop): what the next step judges it against too
    judged: int | None = None

    @property
    def lateness_time(self) -> int:
        return self.stream_time if self.judged is None else max(self.judged, self.stream_time)


def encode_stamp(source: int, sources: int, stream_time: int, idle: bool = False, judged: int | None = None) -> bytes:
    """`<source>/<sources>:<stream time>[~<judged>][:i]`."""
    extra = b"~%d" % judged if judged is not None and judged > stream_time else b""
    return b"%d/%d:%d%s%s" % (source, sources, stream_time, extra, b":i" if idle else b"")


def decode_stamp(raw: bytes | str | None) -> Stamp | None:
    """The stamp in a header value; None when it is missing or malformed."""
    if raw is None:
        return None
    try:
        text = raw.decode("ascii") if isinstance(raw, (bytes, bytearray)) else raw
        head, _, rest = text.partition(":")
        source, _, sources = head.partition("/")
        times, _, flag = rest.partition(":")
        clock, _, judged = times.partition("~")
        stamp = Stamp(int(source), int(sources), int(clock), flag == "i", int(judged) if judged else None)
    except (ValueError, UnicodeDecodeError):
        return None
    return stamp if 0 <= stamp.source < stamp.sources else None


def stamp_of(headers: list[tuple[str, bytes]] | None) -> tuple[Stamp | None, bool]:
    """(the stamp of a record's headers, whether the record is a marker)."""
    for key, value in headers or ():
        if key == STAMP_HEADER:
            return decode_stamp(value), False
        if key == MARKER_HEADER:
            return decode_stamp(value), True
    return None, False


def is_marker(headers: list[tuple[str, bytes]] | None) -> bool:
    """Whether a record with these headers is a clock marker (not a record of the job's)."""
    return any(key == MARKER_HEADER for key, _ in headers or ())


_SEP_TOPICS, _SEP_FIELDS = "+", "|"
_UNHEARD = -2  # a source's clock before its first stamp (-1: heard from, but it has no stream time yet)


class EventClock:
    """A task's stream time over its inputs: the largest timestamp of its direct inputs, and the clocks of
    the sources of its clocked inputs (`clocked`). With no clocked input it is Kafka Streams' stream
    time, unchanged."""

    def __init__(self, clocked: frozenset[str] = frozenset(), direct: bool = True, stream_time: int = -1) -> None:
        self.clocked = clocked
        self.direct = direct  # the task reads a topic that is not clocked too
        self.stream_time = stream_time
        self.direct_time = -1 if clocked else stream_time
        #: topic -> [clock per source]
        self.sources: dict[str, list[int]] = {}
        self.idle: dict[str, set[int]] = {}

    # ------------------------------------------------------------------ observing records
    def observe(self, timestamp: int) -> int:
        """A record of a direct input. Returns the stream time it is judged against."""
        if not self.clocked:
            if timestamp > self.stream_time:
                self.stream_time = timestamp
            return self.stream_time
        if timestamp > self.direct_time:
            self.direct_time = timestamp
            self._advance()
        return max(self.stream_time, timestamp)

    def observe_stamp(self, topic: str, stamp: Stamp, marker: bool = False) -> int:
        """A record (or marker) of a clocked input with its source's stamp. Returns the stream time the
        record is judged against: the larger of the task's and its source's."""
        clocks = self.sources.get(topic)
        if clocks is None or len(clocks) != stamp.sources:
            clocks = self._resize(topic, stamp.sources)
        idle = self.idle.setdefault(topic, set())
        was_idle = stamp.source in idle
        if marker and stamp.idle:
            idle.add(stamp.source)
        else:
            idle.discard(stamp.source)
        before = clocks[stamp.source]
        if stamp.stream_time > before:
            clocks[stamp.source] = stamp.stream_time
        if before <= self.stream_time or was_idle != (stamp.source in idle):
            self._advance()
        return max(self.stream_time, clocks[stamp.source], stamp.lateness_time)

    def all_idle(self) -> bool:
        """Every source of every clocked input has said it is idle (caught up with its own input)."""
        for topic in self.clocked:
            clocks = self.sources.get(topic)
            if not clocks or len(self.idle.get(topic, ())) < len(clocks):
                return False
        return True

    def save(self) -> tuple[int, int]:
        """What `observe()` changes, for `restore()` when the record turns out bad."""
        return self.stream_time, self.direct_time

    def restore(self, saved: tuple[int, int]) -> None:
        self.stream_time, self.direct_time = saved

    def _resize(self, topic: str, sources: int) -> list[int]:
        old = self.sources.get(topic, [])
        clocks = (old + [_UNHEARD] * sources)[:sources]
        self.sources[topic] = clocks
        self.idle[topic] = {s for s in self.idle.get(topic, set()) if s < sources}
        return clocks

    def _advance(self) -> None:
        """Stream time: the smallest clock of the sources not idle (all idle: the largest), and of the direct
        inputs; it waits while a clocked input has a source not heard from, and never moves back."""
        if not self.clocked:
            return
        candidates: list[int] = []
        for topic in self.clocked:
            clocks = self.sources.get(topic)
            if not clocks or _UNHEARD in clocks:
                return  # a source not heard from yet: it may still send anything
            idle = self.idle.get(topic, set())
            active = [c for s, c in enumerate(clocks) if s not in idle]
            candidates.append(min(active) if active else max(clocks))
        if self.direct:
            if self.direct_time < 0:
                return
            candidates.append(self.direct_time)
        time = min(candidates)
        if time > self.stream_time:
            self.stream_time = time

    # ------------------------------------------------------------------ kept with the committed offsets
    def encode(self) -> str:
        """The sources' clocks, for the committed offsets' metadata ('' with no clocked input)."""
        if not self.clocked:
            return ""
        parts = []
        for topic, clocks in sorted(self.sources.items()):
            idle = self.idle.get(topic, set())
            items = ",".join(f"{c}{'i' if s in idle else ''}" for s, c in enumerate(clocks))
            parts.append(f"{topic}{_SEP_FIELDS}{items}")
        if self.direct_time >= 0:
            parts.append(f"{_SEP_FIELDS}{self.direct_time}")
        return _SEP_TOPICS.join(parts)

    def adopt(self, text: str | None) -> None:
        """Take the clocks from `encode()`'s text (tolerant: anything unreadable is left out)."""
        for part in filter(None, (text or "").split(_SEP_TOPICS)):
            topic, _, items = part.partition(_SEP_FIELDS)
            try:
                if not topic:
                    self.direct_time = max(self.direct_time, int(items))
                    continue
                values = items.split(",")
                self.sources[topic] = [int(v.rstrip("i")) for v in values]
                self.idle[topic] = {s for s, v in enumerate(values) if v.endswith("i")}
            except ValueError:
                continue
