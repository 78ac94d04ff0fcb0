"""The loop that runs a processor over one batch of one task, one record scope per input record.

Each record is deserialized and given its event time by the sub-topology's timestamp extractor; a record
that cannot be deserialized, has no valid timestamp, or whose processing raises, leaves no partial effect
(its forwarded records and state writes are rolled back) and goes to the dead-letter topic. Errors of
the framework or its state (`FrameworkError`, `StoreError`) are never blamed on a record: they fail the
task.

Co-partitioned inputs are processed in timestamp order across partitions, never reordered within one
(Kafka Streams' rule: next comes the partition whose head record has the smallest timestamp). Stream
time is the largest timestamp seen. Punctuations run between records as soon as they are due: stream-time
ones when stream time passes their time, wall-clock ones when the clock does; then at the end of the
batch, and last the processor's batch-end `punctuate(stream_time)`.

A batch of one input partition can be streamed: its records come from an iterator as they are read, and
every `drain_at` outputs and dead letters the caller's `drain` produces them into the open transaction
(`eos.worker.attempt`), so the batch is never held whole. Outputs reach `outcome.outputs` only when their
record's scope committed, so what is drained is final for the batch.
"""

from __future__ import annotations

import heapq
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from eos.clock import wall_time
from eos.errors import FrameworkError, OutputSerializationError, SerdeError, TaskFailedError
from eos.operators.aggregate import AggregateFold
from eos.processor import Processor, PunctuationType, is_pair
from eos.records import Output, Record
from eos.serde import Serde
from eos.streamtime import EventClock, stamp_of
from eos.time import MAX_TIMESTAMP, RECORD_TIME, InvalidTimestampError, extracted
from eos.worker.context import HeldMessage, TaskContext
from eos.worker.dead_letters import NOT_A_BAD_RECORD, DeadLetterPolicy, Stage
from eos.worker.folding import NEVER, fold_batch, fold_target
from transactions import Message, ProducerRecord

if TYPE_CHECKING:
    from eos.graph.runtime import DirectStep
    from eos.topology import SubTopology

__all__ = ["BatchOutcome", "RecordScoped", "run_processor", "NOT_A_BAD_RECORD", "Entry", "entries", "InputReading",
           "Drain"]


class RecordScoped(Protocol):
    """Something with per-record transactional effects (state store write buffers)."""

    def begin_record(self) -> None: ...
    def commit_record(self) -> None: ...
    def rollback_record(self) -> None: ...


@dataclass
class BatchOutcome:
    """What processing one batch produced: outputs and dead letters to produce, and input statistics."""

    outputs: list[ProducerRecord] = field(default_factory=list)
    dead_letters: list[ProducerRecord] = field(default_factory=list)
    records_in: int = 0
    bytes_in: int = 0
    #: input records folded into a keyed aggregation at once, not one scope each (eos.worker.folding)
    records_folded: int = 0
    #: input records a function took in the direct loop (`_run_direct`), without the graph's steps between
    records_direct: int = 0
    stream_time: int = -1
    #: next offset to commit per input partition when processing stopped early (context.commit(), or an
    #: input with more records beyond the batch ran out first)
    stopped_at: dict[tuple[str, int], int] | None = None
    #: partitions whose every record of the batch was processed (they commit the planned end)
    finished: set[tuple[str, int]] = field(default_factory=set)
    #: input records that produced no output and no dead letter (recorded in the lineage ledger)
    filtered: list[Message] = field(default_factory=list)
    #: of those, the ones dropped as late (all their windows closed)
    late: list[Message] = field(default_factory=list)
    #: input records a step dropped as late, whatever else they made, each with the step (`TaskContext
    #: .late_marks`; the ledger's `late_by`: a join's audit leaves out the records its own step dropped)
    late_steps: list[tuple[Message, str]] = field(default_factory=list)
    #: of those, the ones an operator held back (`TaskContext.hold`)
    held: list[Message] = field(default_factory=list)
    punctuations: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    #: the clocks of the sources of clocked inputs after the batch (eos.streamtime), '' without any, and
    #: whether every one of those sources is idle (None: the task reads no such topic)
    clocks: str = ""
    sources_idle: bool | None = None
    #: outputs and dead letters a streamed batch already produced (no longer in the lists above), and its
    #: first dead letter (the one a report shows)
    drained_outputs: int = 0
    drained_dead_letters: int = 0
    first_dead_letter: ProducerRecord | None = None

    @property
    def output_count(self) -> int:
        return self.drained_outputs + len(self.outputs)

    @property
    def dead_letter_count(self) -> int:
        return self.drained_dead_letters + len(self.dead_letters)

    def drained(self) -> tuple[list[ProducerRecord], list[ProducerRecord]]:
        """Take the outputs and dead letters gathered so far out of the outcome (they are being produced)."""
        outputs, dead = self.outputs[:], self.dead_letters[:]
        if dead and self.first_dead_letter is None:
            self.first_dead_letter = dead[0]
        self.drained_outputs += len(outputs)
        self.drained_dead_letters += len(dead)
        self.outputs.clear()  # in place: the processing loop holds the lists
        self.dead_letters.clear()
        return outputs, dead


#: Produces what a streamed batch's outcome gathered (`BatchOutcome.drained`); returns True when the batch
#: should stop after the current record and commit what it processed (its transaction is open long enough).
Drain = Callable[[BatchOutcome], bool]


#: (message, record or the reason it is a bad record, its timestamp; -1 for a bad record, which is thus
#: taken as soon as it heads its partition)
Entry = tuple[Message, Record | SerdeError | InvalidTimestampError, int]


def entries(messages: Iterable[Message], key_serde: Serde, value_serde: Serde,
            timestamp: Callable[[Record], int], sizes: list[int] | None = None) -> Iterator[Entry]:
    """Deserialize and timestamp records lazily, in the order given; `sizes[0]` adds up the value bytes
    read."""
    key_of, value_of = key_serde.deserialize, value_serde.deserialize
    record_time = timestamp is RECORD_TIME
    sizes = [0] if sizes is None else sizes
    for msg in messages:
        ts = msg.timestamp()[1]
        value = msg.value()
        if value:
            sizes[0] += len(value)
        try:
            record = Record(key_of(msg.key()), value_of(value), msg.topic(), msg.partition(), msg.offset(), ts,
                            msg.headers())
        except SerdeError as exc:
            yield msg, exc, -1
            continue
        if not record_time:
            try:
                ts = record.timestamp = extracted(timestamp, record)
            except InvalidTimestampError as exc:
                yield msg, exc, -1
                continue
        if ts < 0 or ts > MAX_TIMESTAMP:
            why = "negative: missing or not event time" if ts < 0 else "after the year 9999"
            yield msg, InvalidTimestampError(f"invalid timestamp {ts} ({why})"), -1
            continue
        yield msg, record, ts


#: How one input topic is read when it differs from its sub-topology's default (joins read topics of
#: different types): key serde, value serde, timestamp extractor.
InputReading = tuple[Serde, Serde, Callable[[Record], int]]


def input_readings(sub: SubTopology) -> dict[str, tuple[Serde, Serde, Callable[[Record], int]]]:
    """How the task reads each input topic: its serdes bound to it (a Schema Registry serde's subject) and its
    timestamps."""
    default = (sub.key_serde, sub.value_serde, sub.timestamp)
    return {t: (ks.bind(t, True), vs.bind(t, False), ts or RECORD_TIME)
            for t in sub.inputs for ks, vs, ts in [sub.per_topic.get(t, default)]}


def in_time_order(parts: Mapping[tuple[str, int], Iterable[Message]], key_serde: Serde, value_serde: Serde,
                  timestamp: Callable[[Record], int],
                  per_topic: Mapping[str, InputReading] | None = None,
                  sizes: list[int] | None = None) -> Iterator[Entry]:
    """The records of `parts` (each partition's in offset order). One partition: offset order. Several
    (co-partitioned inputs): by head timestamp across partitions, offset order within each. `per_topic`
    reads some topics with their own serdes and timestamps."""
    default = (key_serde, value_serde, timestamp)
    streams = [entries(ms, *(per_topic or {}).get(tp[0], default), sizes) for tp, ms in parts.items()]
    if len(streams) == 1:
        return streams[0]
    return heapq.merge(*streams, key=_entry_time)


def by_partition(messages: Iterable[Message]) -> dict[tuple[str, int], list[Message]]:
    """`messages` split by partition, each in its original order."""
    parts: dict[tuple[str, int], list[Message]] = {}
    for msg in messages:
        tp = (msg.topic(), msg.partition())
        part = parts.get(tp)
        if part is None:
            part = parts[tp] = []
        part.append(msg)
    return parts


def _entry_time(entry: Entry) -> int:
    return entry[2]


def run_processor(processor: Processor, ctx: TaskContext,
                  messages: Sequence[Message] | Mapping[tuple[str, int], Iterable[Message]], *, key_serde: Serde,
                  value_serde: Serde, dlq: DeadLetterPolicy, scoped: Iterable[RecordScoped] = (),
                  timestamp: Callable[[Record], int] = RECORD_TIME,
                  clock: Callable[[], float] = wall_time,
                  per_topic: Mapping[str, InputReading] | None = None,
                  behind: frozenset[tuple[str, int]] = frozenset(),
                  event_clock: EventClock | None = None, drain: Drain | None = None,
                  drain_at: int = 5_000, into: BatchOutcome | None = None) -> BatchOutcome:
    """Process `messages`, one record scope each, with punctuations in between and at the end. When a
    partition of `behind` (one with more input than the batch holds) runs out while other partitions have
    records left, processing stops there: those records are later in time than what it has not read yet.

    `messages` is the batch, or its records by partition; one partition's may be an iterator of records
    still being read (a streamed batch), with `drain` to produce the outputs whenever `drain_at` outputs and
    dead letters have gathered. The outcome is gathered `into` the one given, if any: a streamed batch drains it
    itself once its read reaches the end it was cut off at (`eos.worker.attempt`).

    Stream time is the largest timestamp seen, unless `event_clock` keeps the clocks of the sources of
    inputs another step writes (eos.streamtime). A record that goes to the dead-letter topic does not move it."""
    if event_clock is not None and not event_clock.clocked:
        event_clock = None
    clocked = event_clock.clocked if event_clock is not None else frozenset()
    if event_clock is not None:
        ctx.stream_time = ctx.clock_time = event_clock.stream_time
    outcome = into if into is not None else BatchOutcome()
    outcome.stream_time = ctx.stream_time
    scoped = list(scoped)
    cache = ctx.record_cache
    process, outputs, filtered = processor.process, outcome.outputs, outcome.filtered
    enter, leave = ctx.enter_record, ctx.leave_record
    parts = messages if isinstance(messages, Mapping) else by_partition(messages)
    sizes = [0]
    records_in = 0
    punctuating = bool(ctx.schedules)
    if event_clock is None and len(parts) == 1 and not behind:
        target = fold_target(processor)
        if target is not None and punctuating and not _own_punctuations(target, ctx):
            target = None  # (a punctuation of another processor's: it may read what the fold holds)
        (tp, ms), = parts.items()
        reading = (per_topic or {}).get(tp[0], (key_serde, value_serde, timestamp))
        if target is not None:

            def punctuate(now: int) -> int:
                outcome.stream_time = ctx.stream_time = now
                _punctuate_due(ctx, scoped, outcome, clock, dlq)
                return _next_stream_due(ctx)

            folded = fold_batch(target, ctx, ms, outcome, key_serde=reading[0], value_serde=reading[1],
                                timestamp=reading[2], dlq=dlq, scoped=scoped, drain=drain, drain_at=drain_at, tp=tp,
                                due=_next_stream_due(ctx) if punctuating else NEVER,
                                punctuate=punctuate if punctuating else None)
            records_in = outcome.records_folded = folded.records
            sizes[0] = folded.size
            parts = {tp: folded.rest}
            if folded.stop_at is not None:  # stopped early, as the loop below stops
                outcome.stopped_at = {tp: folded.stop_at}
    if not records_in and event_clock is None and not punctuating and len(parts) == 1 and not behind and not scoped:
        step = direct_step(processor)
        (tp, ms), = parts.items()
        reading = (per_topic or {}).get(tp[0], (key_serde, value_serde, timestamp))
        if step is not None:
            records_in = outcome.records_direct = _run_direct(step, ctx, tp, ms, outcome, reading, dlq, drain,
                                                              drain_at, sizes)
            parts = {tp: ()}
    streamed = any(not isinstance(ms, Sequence) for ms in parts.values())
    if streamed and len(parts) > 1:
        raise FrameworkError("only a batch of one input partition can be streamed")
    processed: dict[tuple[str, int], int] = {}
    remaining = {tp: len(ms) for tp, ms in parts.items() if isinstance(ms, Sequence)} if behind else {}
    # Where processing stands in each partition is tracked per record only when several partitions (or
    # stopping when one runs out) make it necessary; with one, the current record says it.
    track = len(parts) > 1 or bool(remaining) or bool(clocked)
    unprocessed = sum(remaining.values())
    dead_letters = outcome.dead_letters
    tp = ("", -1)
    for msg, record, ts in in_time_order(parts, key_serde, value_serde, timestamp, per_topic, sizes):
        records_in += 1
        if track:
            tp = (msg.topic(), msg.partition())
            processed[tp] = msg.offset() + 1
            unprocessed -= 1
            if remaining:
                remaining[tp] -= 1
        stamp = None
        if clocked and tp[0] in clocked:
            stamp, marker = stamp_of(msg.headers())
            if marker:  # a source's clock, not a record
                records_in -= 1
                if stamp is not None and event_clock is not None:
                    event_clock.observe_stamp(tp[0], stamp, marker=True)
                    outcome.stream_time = ctx.stream_time = ctx.clock_time = event_clock.stream_time
                    _punctuate_due(ctx, scoped, outcome, clock, dlq)
                continue
        if type(record) is not Record:
            stage = Stage.DESERIALIZE if isinstance(record, SerdeError) else Stage.TIMESTAMP
            outcome.dead_letters.append(dlq.route(msg, record, stage))  # type: ignore[arg-type]
            continue
        before = outcome.stream_time
        if event_clock is None:
            if ts > before:
                outcome.stream_time = ctx.stream_time = ts
        else:  # judged against the larger of the task's stream time and its source's
            saved = event_clock.save()
            ctx.stream_time = event_clock.observe(ts) if stamp is None else event_clock.observe_stamp(tp[0], stamp)
            ctx.clock_time = event_clock.stream_time
        enter(msg, ts)
        for s in scoped:
            s.begin_record()
        try:
            process(record)
        except NOT_A_BAD_RECORD:
            raise
        except Exception as exc:
            for s in scoped:
                s.rollback_record()
            ctx.discard_record()
            if event_clock is not None:
                if stamp is None:
                    event_clock.restore(saved)  # (a stamped one moved its source's clock, which stays)
                before = ctx.clock_time = event_clock.stream_time
            outcome.stream_time = ctx.stream_time = before  # a bad record never moves stream time
            stage = Stage.SERIALIZE if isinstance(exc, OutputSerializationError) else Stage.PROCESS
            outcome.dead_letters.append(dlq.route(msg, exc, stage))
            continue
        for s in scoped:
            s.commit_record()
        if event_clock is not None:
            outcome.stream_time = ctx.stream_time = ctx.clock_time = event_clock.stream_time
        produced = leave()
        if produced:
            outputs.extend(produced)
        else:
            filtered.append(msg)
            if ctx.held:
                outcome.held.append(msg)
            if ctx.dropped_reason is not None:
                if ctx.dropped_reason == "late":
                    outcome.late.append(msg)
                ctx.dropped_reason = None
        if ctx.releases:
            _let_go(ctx, scoped, outcome, dlq)
        if cache is not None and cache.over:
            _in_scope(ctx, scoped, outcome, outcome.stream_time, cache.evict, b"cache-evict", dlq)
        if punctuating:
            _punctuate_due(ctx, scoped, outcome, clock, dlq)
        if drain is not None and len(outputs) + len(dead_letters) >= drain_at and drain(outcome):
            ctx.commit_requested = True
        if ctx.commit_requested or (remaining and not remaining[tp] and tp in behind and unprocessed):
            ctx.commit_requested = False
            if not track:
                processed = {(msg.topic(), msg.partition()): msg.offset() + 1}
            outcome.stopped_at = {**({} if streamed else _first_offsets(parts)), **processed}
            outcome.finished = {p for p, n in remaining.items() if not n}
            break
    outcome.records_in, outcome.bytes_in = records_in, sizes[0]
    _punctuate_due(ctx, scoped, outcome, clock, dlq)
    _flush(ctx, scoped, outcome, dlq)
    _in_scope(ctx, scoped, outcome, outcome.stream_time, processor.punctuate, b"end", dlq)  # the batch-end hook
    _flush(ctx, scoped, outcome, dlq, b"cache-flush-end")  # what the hook put in the cache
    outcome.dropped, ctx.dropped = ctx.dropped, {}
    if ctx.late_marks:
        outcome.late_steps += ctx.late_marks
        ctx.late_marks = []
    if event_clock is not None:
        outcome.clocks, outcome.sources_idle = event_clock.encode(), event_clock.all_idle()
    return outcome


def _let_go(ctx: TaskContext, scoped: list[RecordScoped], outcome: BatchOutcome, dlq: DeadLetterPolicy) -> None:
    """Run what the last record let go of (`TaskContext.release`), each in a scope of the record held back: its
    outputs are named after it, its store writes roll back alone, and a failure sends it to the dead-letter
    topic (the record that let it go stays done). Stream time does not move. What was let go without a record
    (`release(None, run)`: buffered in a record cache's flush, say) runs in a scope without one, as a
    punctuation, at the time of the scope that let it go."""
    releases: list[tuple[HeldMessage | None, Callable[[], None], int]] = []
    while releases or ctx.releases:
        if not releases:
            releases, ctx.releases = ctx.releases[::-1], []
        held, run, at = releases.pop()
        if held is None:
            ctx.let_go_scopes += 1
            _in_scope(ctx, scoped, outcome, at, _at_any_time(run), b"let-go-%d" % ctx.let_go_scopes, dlq)
            continue
        ctx.enter_record(held, held.timestamp()[1])
        for s in scoped:
            s.begin_record()
        try:
            run()
        except NOT_A_BAD_RECORD:
            raise
        except Exception as exc:
            for s in scoped:
                s.rollback_record()
            ctx.discard_record()
            stage = Stage.SERIALIZE if isinstance(exc, OutputSerializationError) else Stage.PROCESS
            outcome.dead_letters.append(dlq.route(held, exc, stage))
            continue
        for s in scoped:
            s.commit_record()
        outcome.outputs.extend(ctx.leave_record())
        ctx.dropped_reason = None


def _at_any_time(run: Callable[[], None]) -> Callable[[int], None]:
    """`run` as a punctuation's callback (which is given the time)."""
    def callback(_: int) -> None:
        run()
    return callback


def direct_step(processor: Processor) -> DirectStep | None:
    """The function and its sink when `processor` is a graph of one function between them
    (`GraphProcessor.direct_step`), else None."""
    find = getattr(processor, "direct_step", None)
    return find() if find is not None else None


def _run_direct(step: DirectStep, ctx: TaskContext, tp: tuple[str, int], messages: Iterable[Message],
                outcome: BatchOutcome, reading: InputReading, dlq: DeadLetterPolicy, drain: Drain | None,
                drain_at: int, sizes: list[int]) -> int:
    """`run_processor`'s loop for a batch of one partition through a graph of one function and one sink, with
    no store or punctuation (records read and stamped as `reading` says): the function is called on each record
    and a (key, value) it returns goes straight to the task, as its sink would pass it on, without the graph's
    steps in between (for a record without headers, made into its output record in one call:
    `TaskContext.direct_output`, -10 % of the stateless job's instructions per record); anything else it
    returns is forwarded in its context as usual. Each record keeps its own scope, stream time, dead letters (the
    same errors and stages) and filtered offsets, and a streamed batch drains and stops where the other loop
    would. Returns the records read."""
    fn, to_sink, forward_result, topic = step
    enter, leave, discard = ctx.enter_record, ctx.leave_record, ctx.discard_record
    outputs, filtered, dead_letters = outcome.outputs, outcome.filtered, outcome.dead_letters
    output = ctx.direct_output(topic, tp)
    records_in = 0
    for msg, record, ts in entries(messages, *reading, sizes):
        records_in += 1
        if type(record) is not Record:
            stage = Stage.DESERIALIZE if isinstance(record, SerdeError) else Stage.TIMESTAMP
            dead_letters.append(dlq.route(msg, record, stage))  # type: ignore[arg-type]
            continue
        before = outcome.stream_time
        if ts > before:
            outcome.stream_time = ctx.stream_time = ts
        enter(msg, ts)
        direct = False
        try:
            result = fn(record)
            # a (key, value): not an Output, nor a pair of (key, value)s (`is_pair`, inline)
            if (type(result) is tuple and len(result) == 2 and type(key := result[0]) is not Output
                    and not (type(key) is tuple and len(key) == 2 and is_pair(result[1]))):
                if output is not None and not msg.headers():  # the record's one output, made at once
                    outputs.append(output(msg, key, result[1], ts, 0))
                    direct = True
                else:
                    to_sink(key, result[1], ts)
            else:
                forward_result(record, result)
        except NOT_A_BAD_RECORD:
            raise
        except Exception as exc:
            discard()
            outcome.stream_time = ctx.stream_time = before  # a bad record never moves stream time
            stage = Stage.SERIALIZE if isinstance(exc, OutputSerializationError) else Stage.PROCESS
            dead_letters.append(dlq.route(msg, exc, stage))
            continue
        if not direct:
            produced = leave()
            if produced:
                outputs.extend(produced)
            else:
                filtered.append(msg)
        if drain is not None and len(outputs) + len(dead_letters) >= drain_at and drain(outcome):
            outcome.stopped_at = {tp: msg.offset() + 1}
            break
    leave()  # (a record whose output was made at once left its scope open, empty)
    return records_in


def punctuate_idle(processor: Processor, ctx: TaskContext, scoped: Iterable[RecordScoped], dlq: DeadLetterPolicy,
                   clock: Callable[[], float] = wall_time) -> BatchOutcome:
    """A batch without input: the wall-clock punctuations that are due (the driver plans such a batch for
    an idle task whose punctuation is due)."""
    outcome = BatchOutcome(stream_time=ctx.stream_time)
    scoped = list(scoped)
    _punctuate_due(ctx, scoped, outcome, clock, dlq)
    _flush(ctx, scoped, outcome, dlq)
    return outcome


def _flush(ctx: TaskContext, scoped: list[RecordScoped], outcome: BatchOutcome, dlq: DeadLetterPolicy,
           label: bytes = b"cache-flush") -> None:
    """Forward what the task's record cache holds (eos.cache), before the batch's outputs are produced."""
    if ctx.record_cache is not None and len(ctx.record_cache):
        _in_scope(ctx, scoped, outcome, outcome.stream_time, ctx.record_cache.flush, label, dlq)


def _punctuate_due(ctx: TaskContext, scoped: list[RecordScoped], outcome: BatchOutcome,
                   clock: Callable[[], float], dlq: DeadLetterPolicy) -> None:
    for kind, now in (("stream", ctx.stream_time), ("wall_clock", int(clock() * 1000))):
        if now < 0:
            continue
        for schedule in ctx.due(_kind(kind), now):
            _in_scope(ctx, scoped, outcome, now, schedule.callback, b"%d" % schedule.index, dlq)
            schedule.advance(now)
            outcome.punctuations += 1


def _own_punctuations(view: AggregateFold, ctx: TaskContext) -> bool:
    """Whether every punctuation of the task is the fold target's own, by stream time (a windowed aggregation's
    expiry: `AggregateFold.schedules`), which the fold runs where the record-at-a-time loop would."""
    return all(s.cancelled or (s.type == "stream" and any(s is own for own in view.schedules)) for s in ctx.schedules)


def _next_stream_due(ctx: TaskContext) -> int:
    """The stream time at which the task's next stream-time punctuation is due (NEVER: none)."""
    return min((s.next_at for s in ctx.schedules if s.type == "stream" and not s.cancelled), default=NEVER)


def _kind(kind: str) -> PunctuationType:
    return "stream" if kind == "stream" else "wall_clock"


def _in_scope(ctx: TaskContext, scoped: list[RecordScoped], outcome: BatchOutcome, timestamp: int,
              callback: Callable[[int], None], label: bytes, dlq: DeadLetterPolicy) -> None:
    """Run a punctuation in a scope of its own. If it raises, the task fails and the job stops: no record is
    to blame, and running the batch again runs the same punctuation at the same time (stream-time ones, and
    the framework's own: closing and expiring windows). What it let go of (`TaskContext.release`: a buffer
    emptied by time) runs after it, each in the scope of the record held back, as after a record."""
    ctx.enter_record(None, timestamp)
    ctx.punctuation_label = label
    for s in scoped:
        s.begin_record()
    try:
        callback(timestamp)
    except NOT_A_BAD_RECORD:
        raise
    except Exception as exc:
        name = getattr(callback, "__qualname__", repr(callback)).rpartition("<locals>.")[2]
        what = (f"a record the record cache forwarded ({label.decode()}: eos.cache)" if label.startswith(b"cache")
                else "an update let go of that was held without an input record (a record cache's flush or a "
                     "punctuation made it)" if label.startswith(b"let-go") else f"the punctuation {name}")
        raise TaskFailedError(f"task {ctx.task_id}: {what} of sub-topology {ctx.subtopology!r} "
                              f"failed at time {timestamp}: {type(exc).__name__}: {exc}", task=ctx.task_id,
                              cause_type=type(exc).__name__, detail=traceback.format_exc()) from exc
    for s in scoped:
        s.commit_record()
    outcome.outputs.extend(ctx.leave_record())
    if ctx.releases:
        _let_go(ctx, scoped, outcome, dlq)


def _first_offsets(parts: Mapping[tuple[str, int], Iterable[Message]]) -> dict[tuple[str, int], int]:
    """Where each partition of the batch starts: its offset to commit if none of its records was reached."""
    firsts = {tp: next(iter(ms), None) for tp, ms in parts.items()}
    return {tp: msg.offset() for tp, msg in firsts.items() if msg is not None}
