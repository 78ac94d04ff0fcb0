"""The task runtime's `ProcessorContext`: record scopes, lineage headers, output serialization and
punctuation schedules.

Between `enter_record()` and `leave_record()` everything a processor forwards is held in the record's
scope; `leave_record()` hands it to the batch (the record completed), `discard_record()` drops it (the
record failed and goes to the dead-letter topic). A punctuation runs in a scope without a record: what it
forwards carries `eos.derived` instead of a lineage origin: `<task>|<position>|<time>|<punctuation>|<index>`,
the task, the last input record it had processed (`topic:partition:offset`), the punctuation's time, which
punctuation (its schedule's index, or `end` for the batch-end hook) and the output's index. A retried batch
derives the same outputs under the same ids, so the lineage audit can tell a derived output committed twice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, cast

import structlog

from eos.cache import RecordCache
from eos.clock import wall_ms
from eos.errors import OutputSerializationError, SerdeError
from eos.origin import (
    DERIVED_HEADER,
    HELD_TOP,
    ORIGIN_FORMAT,
    ORIGIN_HEADER,
    lineage_source,
    origin_prefix,
    output_indices,
)
from eos.processor import Cancellable, Kept, ProcessorContext, PunctuationType, RecordMetadata
from eos.records import FORWARDABLE, forwarded
from eos.serde import Serde, refused_part
from eos.streamtime import MARKER_HEADER, MARKER_KEY, STAMP_HEADER, encode_stamp
from eos.tracing import TRACEPARENT, child_traceparent
from eos.windows import Windowed, WindowedSerde
from eos.worker.topic_rules import OutputRejectedError, TopicRule
from transactions import Message, ProducerRecord
from transactions.memory import MemoryMessage
from transactions.partitioner import partition_for

__all__ = ["TaskContext", "Schedule", "HeldMessage"]

#: `tuple.__new__` makes a `ProducerRecord` without the named tuple's Python-level constructor (a third of
#: the cost of an output record)
_new_record = tuple.__new__
_UNKNOWN: Any = object()

#: (input record, key, value, timestamp, index among the record's outputs) -> the output record
#: (`TaskContext.direct_output`)
DirectOutput = Callable[[Message, Any, Any, int, int], ProducerRecord]

log = structlog.get_logger(__name__)


@dataclass
class Schedule:
    """One `context.schedule()` call: `index` is its position among the processor's schedules (stable
    across runtimes, so the driver can carry `next_at` from one worker process to the next)."""

    index: int
    interval: int
    callback: Callable[[int], None]
    type: PunctuationType
    next_at: int
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True

    def advance(self, now: int) -> None:
        """Kafka Streams' rule: the next interval, or, if that has passed too, one interval from now."""
        self.next_at = self.next_at + self.interval if self.next_at + self.interval > now else now + self.interval


class TaskContext(ProcessorContext):
    def __init__(self, *, application_id: str, subtopology: str, partition: int, output_topic: str | None,
                 key_serde: Serde, value_serde: Serde, lineage: bool, stores: dict[str, Any] | None = None,
                 stream_time: int = -1, topic_rules: Callable[[str], TopicRule] | None = None,
                 transitive_topics: frozenset[str] = frozenset(), raw_topics: frozenset[str] = frozenset(),
                 stamped_topics: frozenset[str] = frozenset(),
                 serdes: Mapping[str, tuple[Serde, Serde]] | None = None,
                 record_cache: RecordCache | None = None) -> None:
        self.application_id = application_id
        #: the task's record cache (eos.cache), None without one
        self.record_cache = record_cache
        self._raw = raw_topics  # topics whose keys and values the processor serializes itself
        #: each sink's serializers by topic (other topics: the sub-topology's output serdes)
        self._serializers = {t: (k.bind(t, True).serialize, v.bind(t, False).serialize)
                             for t, (k, v) in (serdes or {}).items()}
        self.subtopology = subtopology
        self.partition = partition
        self.task_id = f"{subtopology}-{partition}"
        #: the task's stream time; while a record of a repartition topic is processed, the stream time it is
        #: judged against (the larger of the task's and its source's: eos.streamtime)
        self.stream_time = stream_time
        #: a task that reads topics carrying their sources' clocks: its own stream time (which never moves
        #: back), while `stream_time` is a record's judged time; None: the same as stream_time
        self.clock_time: int | None = None
        #: topics this task writes whose records carry its clock (eos.streamtime), and per topic the task's
        #: source index and the topic's source count (set for each batch)
        self._stamped = stamped_topics
        self.stamp_sources: dict[str, tuple[int, int]] = {}
        self._output_topic = output_topic
        if output_topic is not None:
            key_serde, value_serde = key_serde.bind(output_topic, True), value_serde.bind(output_topic, False)
        self._serialize_key, self._serialize_value = key_serde.serialize, value_serde.serialize
        #: the key serde of each topic whose keys are `Windowed` (a sink's, or the output serde's for the topics
        #: without a sink's): an output there goes to its inner key's partition, as Kafka Streams'
        #: `WindowedStreamPartitioner` puts it, so that a key's windows stay in order in the key's partition
        #: (murmur2 of the whole key, times included, would scatter them over the partitions)
        self._windowed: dict[str, WindowedSerde] = {t: cast(WindowedSerde, k.bind(t, True))
                                                    for t, (k, _v) in (serdes or {}).items()
                                                    if isinstance(k, WindowedSerde)}
        self._windowed_default = key_serde if isinstance(key_serde, WindowedSerde) else None
        self._any_windowed = bool(self._windowed) or self._windowed_default is not None
        self._counts: dict[str, int] = {}  # those topics' partition counts, read again each batch
        self._partitioners: dict[str, Callable[[Any, bytes | None], int | None] | None] = {}  # (`_partitioner`)
        #: the current record's lineage origin: b"topic:partition:", offset, and its outputs' indices: the n-th
        #: is `_index_base + (n << _index_shift)` (eos.origin.output_indices)
        self._origin_prefix = b""
        self._origin_offset = 0
        self._index_base = 0
        self._index_shift = 0
        self._prefixes: dict[tuple[str, int], bytes] = {}
        self._lineage = lineage
        self._stores = stores or {}
        self._current: Message | None = None
        self._current_ts: int | None = None
        self._index = 0
        self._scope: list[ProducerRecord] = []
        self._rules = topic_rules
        #: each output topic's rules as the worker knew them when the batch began (`begin_batch`)
        self._rule_of: dict[str, TopicRule] = {}
        self._transitive = transitive_topics
        self._task_bytes = self.task_id.encode()
        self._last_input: Message | None = None  # the last input record a scope was entered for
        #: how many records the current input record made were held back (`hold`), and what was let go
        #: meanwhile (`release`)
        self.held = 0
        self._holds: dict[int, int] = {}  # (`hold`)
        #: the input records a step dropped as late, with the step (`record_dropped`), until the batch's loop takes
        #: them (marked where a drop is counted, so that a record's scope costs nothing more)
        self.late_marks: list[tuple[Message, str]] = []
        self.releases: list[tuple[HeldMessage | None, Callable[[], None], int]] = []
        #: scopes without a record opened this batch for what was let go with `release(None, ...)`: each is
        #: labelled with its number, so that their outputs' `eos.derived` ids differ
        self.let_go_scopes = 0
        self.punctuation_label = b"end"  # which punctuation runs (set by the runtime before each)
        self.timestamp = -1
        self.commit_requested = False
        self.schedules: list[Schedule] = []
        self.dropped: dict[str, int] = {}  # records dropped on purpose, by reason (reset every batch)
        self.dropped_reason: str | None = None  # why the current record was dropped, if it was

    # ------------------------------------------------------------------ the processor's side
    def forward(self, key: Any = None, value: Any = None, *, topic: str | None = None, partition: int | None = None,
                headers: list[tuple[str, bytes]] | None = None, timestamp: int | None = None) -> None:
        if value is None and type(key) in FORWARDABLE:
            key, value, topic, partition, headers, timestamp = forwarded(key, topic, partition, headers, timestamp)
        target = topic or self._output_topic
        if target is None:
            raise ValueError(f"{self.task_id}: forward() needs a topic: the sub-topology has no output topic")
        self.emit(target, key, value, partition, headers, timestamp)

    def emit(self, target: str, key: Any, value: Any, partition: int | None = None,
             headers: list[tuple[str, bytes]] | None = None, timestamp: int | None = None) -> None:
        """`forward` to `target` (a topic), its arguments positional: a sink's path, once per output."""
        try:
            if target in self._raw:
                k, v = key, value
            else:
                serialize = self._serializers.get(target)
                if serialize is None:
                    k = self._serialize_key(key)
                    v = self._serialize_value(value)
                else:
                    k = serialize[0](key)
                    v = serialize[1](value)
        except SerdeError as exc:
            raise _unserializable(target, key, serialize[0] if serialize else self._serialize_key, exc) from exc
        msg = self._current
        if headers is not None:
            headers = list(headers)
        else:  # `cached_headers`, inline: most records have no headers
            inherited = msg.headers() if msg is not None else None
            headers = self._inherit(msg, inherited) if inherited else []
        if self._lineage:
            if msg is None:
                headers.append((DERIVED_HEADER, self._derived_id()))
            else:
                if self._index == 0:
                    self._start_origin(msg)
                headers.append((ORIGIN_HEADER, ORIGIN_FORMAT % (self._origin_prefix, self._origin_offset,
                                                              self._index_base + (self._index << self._index_shift))))
        if target in self._stamped:
            headers.append((STAMP_HEADER, self._stamp(target, judged=self.stream_time)))
        ts = self._current_ts if timestamp is None else timestamp
        if partition is None and self._any_windowed:
            partition = self._inner_partition(target, key, k)
        rule = self._rule_of.get(target)
        if rule is None and self._rules is not None:
            rule = self._rule_of[target] = self._rules(target)
        if rule is not None and (why := rule.violation(k, v, headers, ts)) is not None:
            if msg is not None:
                raise _rejected(msg, target, why)
            if rule.violation(k, v, headers, None) is not None:
                raise OutputRejectedError(f"an output of {self.task_id}'s punctuation to topic {target} {why}")
            log.warning("a punctuation's output has a timestamp its topic refuses; it takes the producer's clock",
                        task=self.task_id, topic=target, reason=why)
            ts = None
        self._index += 1
        self._scope.append(_new_record(ProducerRecord, (target, partition, k, v, headers, ts)))

    def direct_output(self, target: str, tp: tuple[str, int]) -> DirectOutput | None:
        """`emit` of (key, value) to `target` at a timestamp as an output of an input record of `tp` that has no
        headers, its index among the record's outputs given (0: the first), made in one call that returns the
        record rather than adding it to the scope (the direct loop's common case: eos.worker.processing; the
        fold's, eos.worker.folding). None where `emit` does more: the topic is stamped, or an input's lineage
        comes through a repartition topic. The topic's rule is the batch's."""
        if target in self._stamped or (self._lineage and tp[0] in self._transitive):
            return None
        raw = target in self._raw
        key_of, value_of = self._serializers.get(target) or (self._serialize_key, self._serialize_value)
        rule = self._rule_of.get(target)
        if rule is None and self._rules is not None:
            rule = self._rule_of[target] = self._rules(target)
        prefix, lineage, origin = self._prefix(tp), self._lineage, ORIGIN_FORMAT
        partition_of = self._partitioner(target)

        def output(msg: Message, key: Any, value: Any, ts: int, index: int) -> ProducerRecord:
            try:
                k, v = (key, value) if raw else (key_of(key), value_of(value))
            except SerdeError as exc:
                raise _unserializable(target, key, key_of, exc) from exc
            # the lineage header as `emit` writes it: the record itself is the origin
            headers = [(ORIGIN_HEADER, origin % (prefix, msg.offset(), index))] if lineage else []
            if rule is not None and (why := rule.violation(k, v, headers, ts)) is not None:
                raise _rejected(msg, target, why)
            partition = None if partition_of is None else partition_of(key, k)
            return _new_record(ProducerRecord, (target, partition, k, v, headers, ts))
        return output

    def hold(self, slot: int = 0, slots: int = 1) -> Kept:
        """Hold the current input record back (an operator keeps it, as a stream-table join with a grace period
        does): its outputs come when it is let go (`release`), in this batch or a later one of the task, named
        after it with an index of their own (the n-th `output_indices(i)[0] + (n << shift)`, i the index the
        record reserves now: the k-th record the step in `slot` of the sub-topology's `slots` steps that may hold
        (`eos.graph.nodes.hold_slots`) holds of the current input reserves `HELD_TOP - (k * slots + slot)` on the
        level its outputs are numbered on, from the top down, apart from its own outputs and what they become
        behind a repartition topic; each step's places apart from another's). The lineage ledger counts it as held
        (and filtered) when it made nothing else. Returns what to keep: the input record whole (topic, partition,
        offset, key and value bytes, headers, timestamp) and the reserved index."""
        msg = self._current
        if msg is None:
            raise ValueError(f"{self.task_id}: hold() needs an input record (it was called in a punctuation)")
        self._start_origin(msg)
        # (numbered apart from the record's own outputs, which stay 0, 1, ...: the k-th record a step holds
        # reserves HELD_TOP - (k * slots + slot), and its outputs are one level above that)
        holds = self._holds  # (the current input's holds by slot, from its first)
        if not self.held:
            holds.clear()
        k = holds.get(slot, 0)
        holds[slot] = k + 1
        index = self._index_base + ((HELD_TOP - (k * slots + slot)) << self._index_shift)
        self.held += 1
        return (msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), list(msg.headers() or ()),
                msg.timestamp()[1], index)

    def release(self, kept: Kept | None, run: Callable[[], None]) -> None:
        """Let go of a record held back (`kept`: what `hold` returned): once the current scope has ended, the
        task runs `run()` in a scope of that record, as if it were read again: what it forwards is named
        after it, and if it fails, that record goes to the dead-letter topic. `kept=None`: in a scope without
        a record, at the current scope's time (`eos.worker.processing._let_go`)."""
        self.releases.append((None if kept is None else HeldMessage(*kept), run,
                              self._current_ts if self._current_ts is not None else self.stream_time))

    def cached_headers(self) -> list[tuple[str, bytes]]:
        """The headers an output of the current record inherits: the record's own but the framework's, with a
        child span of its trace context (none in a scope without a record). The record cache keeps them with
        an update, for when it is forwarded."""
        msg = self._current
        inherited = msg.headers() if msg is not None else None
        return self._inherit(msg, inherited) if inherited else []

    def _inherit(self, msg: Message | None, inherited: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
        """`inherited` (the headers of `msg`, not empty) as an output of it takes them (`cached_headers`)."""
        headers = [h for h in inherited if not h[0].startswith("eos.")]
        if any(h[0] == TRACEPARENT for h in headers):
            headers = [(n, child_traceparent(v, self._span_seed(msg)) if n == TRACEPARENT else v) for n, v in headers]
        return headers

    def _span_seed(self, msg: Message | None) -> bytes:
        """What an output's span id is made of: its task, the input record it comes from (the application's
        source record, with lineage on: a repartition topic's offsets move when a batch writing it aborts)
        and its index among that record's outputs; the same when a batch is retried."""
        assert msg is not None
        if self._lineage:
            if self._index == 0:
                self._start_origin(msg)
            return b"%s|%b%d|%d" % (self._task_bytes, self._origin_prefix, self._origin_offset,
                                    self._index_base + (self._index << self._index_shift))
        return b"%s|%s:%d:%d|%d" % (self._task_bytes, msg.topic().encode(), msg.partition(), msg.offset(),
                                    self._index)

    def _windowed_serde(self, topic: str) -> WindowedSerde | None:
        """The `WindowedSerde` that serializes the keys of `topic`, if one does."""
        serde = self._windowed.get(topic)
        return serde if serde is not None or topic in self._serializers else self._windowed_default

    def _inner_partition(self, topic: str, key: Any, serialized: bytes | None) -> int | None:
        """The partition of a `Windowed` key's inner key in `topic` (murmur2 of the inner key's bytes, as Kafka
        Streams' `WindowedStreamPartitioner`), when `topic`'s keys are windowed; else None (the producer's
        partitioner: murmur2 of the serialized key)."""
        partition = self._partitioner(topic)
        return None if partition is None else partition(key, serialized)

    def _partitioner(self, topic: str) -> Callable[[Any, bytes | None], int | None] | None:
        """`_inner_partition` of one topic (None where its keys are not windowed), made once: `direct_output`
        takes it for a batch's outputs."""
        partition = self._partitioners.get(topic, _UNKNOWN)
        if partition is _UNKNOWN:
            partition = self._partitioners[topic] = self._windowed_partitioner(topic)
        return partition

    def _windowed_partitioner(self, topic: str) -> Callable[[Any, bytes | None], int | None] | None:
        serde = self._windowed_serde(topic)
        if serde is None or topic in self._raw:
            return None
        binary, inner_of, counts, partition_count = serde.format == "binary", serde.inner.serialize, self._counts, \
            self.partition_count

        def partition(key: Any, serialized: bytes | None) -> int | None:
            if type(key) is not Windowed or serialized is None:
                return None
            inner: bytes | None
            if binary:  # (the inner key's bytes, then the end and the start: 8 bytes each)
                inner = serialized[:-16]
            else:
                try:
                    inner = inner_of(key.key)
                except SerdeError:
                    return None
                if inner is None:
                    return None
            count = counts.get(topic)
            if count is None:
                count = counts[topic] = partition_count(topic)
            return partition_for(inner, count)
        return partition

    def partition_count(self, topic: str) -> int:
        """How many partitions an output topic has (read once per worker process)."""
        counts = getattr(self._rules, "partitions", None)
        if counts is None:
            raise ValueError(f"{self.task_id}: the partitions of {topic!r} are not known here")
        return int(counts(topic))

    def _derived_id(self) -> bytes:
        last = self._last_input
        position = b"%s:%d:%d" % (last.topic().encode(), last.partition(), last.offset()) if last is not None else b""
        return b"%s|%s|%d|%s|%d" % (self._task_bytes, position, self._current_ts if self._current_ts is not None
                                    else -1, self.punctuation_label, self._index)

    def _start_origin(self, msg: Message) -> None:
        """The lineage prefix of the current record's outputs (computed at its first output)."""
        tp = (msg.topic(), msg.partition())
        if tp[0] in self._transitive:
            source = lineage_source(msg, self._transitive)
            tp, self._origin_offset = (source.topic, source.partition), source.offset
            self._index_base, self._index_shift = output_indices(source.index)
        else:
            self._origin_offset, self._index_base, self._index_shift = msg.offset(), 0, 0
        if type(msg) is HeldMessage:  # a record let go: its outputs extend the index it reserved
            self._index_base, self._index_shift = output_indices(msg.index)
        self._origin_prefix = self._prefix(tp)

    def _prefix(self, tp: tuple[str, int]) -> bytes:
        """The `origin_prefix` of partition `tp` (made once)."""
        prefix = self._prefixes.get(tp)
        if prefix is None:
            prefix = self._prefixes[tp] = origin_prefix(*tp)
        return prefix

    def store(self, name: str) -> Any:
        try:
            return self._stores[name]
        except KeyError:
            raise KeyError(f"{self.task_id}: no store {name!r}; declared stores: {sorted(self._stores)}") from None

    def commit(self) -> None:
        self.commit_requested = True

    def schedule(self, interval: int | timedelta, callback: Callable[[int], None],
                 type: PunctuationType = "stream") -> Cancellable:
        ms = int(interval.total_seconds() * 1000) if isinstance(interval, timedelta) else int(interval)
        if ms <= 0:
            raise ValueError(f"{self.task_id}: a punctuation interval must be > 0 ms, got {interval!r}")
        if type not in ("stream", "wall_clock"):
            named = {"stream_time": "stream", "wall_clock_time": "wall_clock"}.get(str(type).lower())
            hint = f" (Kafka Streams' PunctuationType.{named.upper()}_TIME is {named!r})" if named else ""
            raise ValueError(f"{self.task_id}: punctuation type must be 'stream' or 'wall_clock', got {type!r}{hint}")
        first = 0 if type == "stream" else wall_ms() + ms  # stream: with the first record
        schedule = Schedule(len(self.schedules), ms, callback, type, first)
        self.schedules.append(schedule)
        return schedule

    def record_dropped(self, reason: str, step: str | None = None) -> None:
        """Count a record dropped on purpose; one dropped as "late" by a named step (a node's context names its
        own) is marked late for that step (`late_marks`: the lineage ledger's `late_by`)."""
        self.dropped[reason] = self.dropped.get(reason, 0) + 1
        if self._current is not None:
            self.dropped_reason = reason
            if step is not None and reason == "late":
                self.late_marks.append((self._current, step))

    def record_metadata(self) -> RecordMetadata | None:
        msg = self._current
        return None if msg is None else RecordMetadata(msg.topic(), msg.partition(), msg.offset())

    # ------------------------------------------------------------------ punctuation (the runtime's side)
    def due(self, type: PunctuationType, now: int) -> list[Schedule]:
        """The schedules of `type` whose time has come, earliest first."""
        return sorted((s for s in self.schedules if s.type == type and not s.cancelled and s.next_at <= now),
                      key=lambda s: (s.next_at, s.index))

    def punctuation_state(self) -> dict[int, int]:
        """Next due time of every live schedule, by index (reported to the driver with each batch)."""
        return {s.index: s.next_at for s in self.schedules if not s.cancelled}

    def adopt_punctuation_state(self, state: dict[int, int]) -> None:
        """Take the schedule times the driver last heard of (this runtime may be newer or older than the
        worker that ran the task's last batch)."""
        for s in self.schedules:
            if s.index in state:
                s.next_at = state[s.index]

    def next_wall_clock(self) -> int | None:
        times = [s.next_at for s in self.schedules if s.type == "wall_clock" and not s.cancelled]
        return min(times) if times else None
    def markers(self, partitions: dict[str, int], idle: bool) -> list[ProducerRecord]:
        """The end of a batch: this task's clock for every partition of each topic it stamps (`partitions`:
        topic -> partition count), so that a partition no key of this task hashes to still learns how far the
        task has got; `idle`: the task has caught up with its input. Markers have a key (a compacted topic
        refuses records without one) and no value."""
        out = []
        for topic, count in sorted(partitions.items()):
            if topic in self._stamped:
                stamp = [(MARKER_HEADER, self._stamp(topic, idle=idle))]
                out += [_new_record(ProducerRecord, (topic, p, MARKER_KEY, None, stamp, None)) for p in range(count)]
        return out

    def stamp_at(self, topic: str, clock: int) -> bytes | None:
        """The stamp a record of `topic` carries when this task's clock is `clock` (a vectorized step's row,
        by its origin record: `eos.worker.vectorized`); None when the topic carries no clocks."""
        if topic not in self._stamped:
            return None
        source, sources = self.stamp_sources.get(topic, (self.partition, self.partition + 1))
        return encode_stamp(source, sources, clock)

    def _stamp(self, topic: str, idle: bool = False, judged: int | None = None) -> bytes:
        """This task's clock as its records of `topic` carry it (eos.streamtime)."""
        source, sources = self.stamp_sources.get(topic, (self.partition, self.partition + 1))
        clock = self.stream_time if self.clock_time is None else self.clock_time
        return encode_stamp(source, sources, clock, idle, judged)

    # ------------------------------------------------------------------ the runtime's side
    def begin_batch(self) -> None:
        """A batch starts: output topics' rules and partition counts are looked up again (they may have changed
        since)."""
        self._rule_of.clear()
        self._counts.clear()
        self.let_go_scopes = 0
        self.late_marks = []

    def enter_record(self, msg: Message | None, timestamp: int | None) -> None:
        """Start the scope of `msg` (None: a scope without an input record, e.g. punctuation)."""
        self._current, self._current_ts, self._index = msg, timestamp, 0
        if msg is not None:
            self._last_input = msg
        self.dropped_reason = None
        self.held = 0
        if timestamp is not None:
            self.timestamp = timestamp
        if self._scope:
            self._scope = []

    def leave_record(self) -> list[ProducerRecord]:
        """End the current scope; returns what it forwarded."""
        out, self._scope = self._scope, []
        self._current = None
        return out

    def discard_record(self) -> None:
        """End the current scope, dropping what it forwarded (and what it let go: its store writes that took
        those records out of their buffer are rolled back)."""
        marks, current = self.late_marks, self._current
        while marks and marks[-1][0] is current:  # (a record that failed was not dropped)
            marks.pop()
        self._scope = []
        self._current = None
        self.held = 0
        self.releases = []


class HeldMessage(MemoryMessage):
    """A record an operator held back, as it is let go (`TaskContext.release`): the input record it was, and
    the index it reserved among that record's outputs."""

    __slots__ = ("index",)

    def __init__(self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None,
                 headers: list[tuple[str, bytes]], timestamp: int, index: int) -> None:
        super().__init__(topic, partition, offset, key, value, headers or None, timestamp)
        self.index = index


def _unserializable(target: str, key: Any, key_of: Callable[[Any], Any], exc: SerdeError) -> OutputSerializationError:
    """An output to topic `target` that its serdes refused (`exc`), saying whether its key or its value, of which
    type, and what to change."""
    part = refused_part(key_of, key)
    if target.endswith("-repartition"):  # (the framework's topic after a key change: the stream's serdes)
        advice = (f"a repartition topic after a key change takes the stream's serdes: give the new {part}'s serde "
                  f"where the stream is grouped (group_by(..., {part}_serde=...)) or before the step that "
                  f"repartitions it (.repartition({part}_serde=...))")
    else:
        advice = (f"give the step that writes {target} a {part}_serde that takes it (in the DSL: .to({target!r}, "
                  f"{part}_serde=...)), or return a {part} its serde takes")
    if part == "key" and isinstance(key, Windowed):
        advice += ("; a step that changes keys (map, select_key) writes them with the grouping's key serde, so a "
                   "Windowed key it keeps needs key_serde=WindowedSerde(that serde) (map_values keeps keys and "
                   "their serde)")
    return OutputSerializationError(f"the {part} of an output to topic {target} cannot be serialized: {exc}; {advice}")


def _rejected(msg: Message, target: str, why: str) -> OutputRejectedError:
    """An output of `msg` that topic `target` would refuse, `why`."""
    return OutputRejectedError(f"the output of {_where(msg)} to topic {target} {why}")


def _where(msg: Message | None) -> str:
    return f"{msg.topic()}[{msg.partition()}]@{msg.offset()}" if msg is not None else "a punctuation"
