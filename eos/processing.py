"""The Processor API (process / punctuate / forward / commit, as in Kafka Streams) and the loop that runs
a processor over one batch of one task.

Every input record is processed in a **record scope**: what it forwards and what it writes to state
stores become part of the batch only if `process()` returns normally. A record that raises leaves no
partial effect and goes to the dead-letter topic (or stops the job, per `on_bad_record`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from confluent_kafka import Message

from eos.deadletter import BadRecordError, ProducedRecord, Stage, bad_record_error, dead_letter
from eos.lineage import ORIGIN_HEADER
from eos.records import Output, Record
from eos.serde import Serde, SerdeError
from recovery import StoreError

__all__ = ["Processor", "ProcessorContext", "FunctionProcessor", "BatchOutcome", "RecordScoped",
           "run_processor", "iter_outputs", "OutputSerializationError", "FrameworkError"]


class OutputSerializationError(SerdeError):
    """An output could not be serialized with the output serde (attributed to the input record)."""


class FrameworkError(RuntimeError):
    """An error of the framework or its state, never blamed on a record (the task fails instead)."""


class RecordScoped(Protocol):
    """Something with per-record transactional effects (state store write buffers)."""

    def begin_record(self) -> None: ...
    def commit_record(self) -> None: ...
    def rollback_record(self) -> None: ...


class ProcessorContext:
    """What a processor sees of its task. Created by the runtime; processors get it in `init()`."""

    def __init__(self, *, application_id: str, subtopology: str, partition: int, output_topic: str | None,
                 key_serde: Serde, value_serde: Serde, lineage: bool, stores: dict[str, Any] | None = None,
                 stream_time: int = -1) -> None:
        self.application_id = application_id
        self.subtopology = subtopology
        self.partition = partition
        self.task_id = f"{subtopology}-{partition}"
        self.stream_time = stream_time
        self._output_topic = output_topic
        self._serialize_key, self._serialize_value = key_serde.serialize, value_serde.serialize
        self._origin_prefix = ""
        self._lineage = lineage
        self._stores = stores or {}
        self._current: Message | None = None
        self._current_ts: int | None = None
        self._index = 0
        self._scope: list[ProducedRecord] = []
        self._commit_requested = False

    # ------------------------------------------------------------------ user API
    def forward(self, key: Any = None, value: Any = None, *, topic: str | None = None, partition: int | None = None,
                headers: list[tuple[str, bytes]] | None = None, timestamp: int | None = None) -> None:
        """Emit a record (or pass one `Output`). It is produced in the batch's transaction if the current
        record's processing completes."""
        if value is None and type(key) is Output:
            out = key
            key, value, topic, partition, headers, timestamp = (out.key, out.value, out.topic, out.partition,
                                                                out.headers, out.timestamp)
        target = topic or self._output_topic
        if target is None:
            raise ValueError(f"{self.task_id}: forward() needs a topic: the sub-topology has no output topic")
        try:
            k = self._serialize_key(key)
            v = self._serialize_value(value)
        except SerdeError as exc:
            raise OutputSerializationError(str(exc)) from exc
        msg = self._current
        if headers is None:
            inherited = msg.headers() if msg is not None else None
            headers = [h for h in inherited if not h[0].startswith("eos.")] if inherited else []
        else:
            headers = list(headers)
        if self._lineage and msg is not None:
            if self._index == 0:
                self._origin_prefix = f"{msg.topic()}:{msg.partition()}:{msg.offset()}:"
            headers.append((ORIGIN_HEADER, (self._origin_prefix + str(self._index)).encode()))
        self._index += 1
        self._scope.append((target, partition, k, v, headers, self._current_ts if timestamp is None else timestamp))

    def store(self, name: str) -> Any:
        """The task's instance of a declared state store."""
        try:
            return self._stores[name]
        except KeyError:
            raise KeyError(f"{self.task_id}: no store {name!r}; declared stores: {sorted(self._stores)}") from None

    def commit(self) -> None:
        """Ask for the batch to end (and commit) right after the current record."""
        self._commit_requested = True

    # ------------------------------------------------------------------ runtime side
    def _enter(self, msg: Message | None, timestamp: int | None) -> None:
        self._current, self._current_ts, self._index = msg, timestamp, 0
        self._scope = []


class Processor:
    """Base class of record processors (Kafka Streams' Processor API).

    `init(context)` once per task and batch runtime, `process(record)` per input record, `punctuate(stream_time)`
    at the end of every batch, `close()` when the task's runtime is discarded."""

    context: ProcessorContext

    def init(self, context: ProcessorContext) -> None:
        self.context = context

    def process(self, record: Record) -> None:
        raise NotImplementedError

    def punctuate(self, stream_time: int) -> None:
        pass

    def close(self) -> None:
        pass


def iter_outputs(result: Any) -> Iterator[Output]:
    """Normalize what a function returns: None, an Output, a (key, value) tuple, or an iterable of those."""
    if result is None:
        return
    if isinstance(result, Output):
        yield result
        return
    if isinstance(result, tuple) and len(result) == 2:
        yield Output(result[0], result[1])
        return
    if isinstance(result, (str, bytes, dict)) or not isinstance(result, Iterable):
        raise TypeError(f"a processing function must return None, an Output, a (key, value) tuple or an iterable "
                        f"of those; got {type(result).__name__}")
    for item in result:
        if isinstance(item, Output):
            yield item
        elif isinstance(item, tuple) and len(item) == 2:
            yield Output(item[0], item[1])
        else:
            raise TypeError(f"expected Output or (key, value) in the returned iterable, got {type(item).__name__}")


class FunctionProcessor(Processor):
    """Adapts `fn(record) -> None | Output | (key, value) | Iterable[...]` to the Processor API."""

    def __init__(self, fn: Callable[[Record], Any]) -> None:
        self.fn = fn

    def process(self, record: Record) -> None:
        result = self.fn(record)
        if type(result) is tuple and len(result) == 2:  # the common case, without a generator
            self.context.forward(result[0], result[1])
            return
        for out in iter_outputs(result):
            self.context.forward(out)


@dataclass
class BatchOutcome:
    outputs: list[ProducedRecord] = field(default_factory=list)
    dead_letters: list[ProducedRecord] = field(default_factory=list)
    records_in: int = 0
    bytes_in: int = 0
    stream_time: int = -1
    #: next offset to commit per input partition when processing stopped early (context.commit()).
    stopped_at: dict[tuple[str, int], int] | None = None


@dataclass(frozen=True)
class DeadLetterPolicy:
    topic: str
    partition: int | None
    task: str
    fail: bool

    def handle(self, msg: Message, error: BaseException, stage: Stage, outcome: BatchOutcome) -> None:
        if self.fail:
            raise bad_record_error(msg, error, stage) from error
        outcome.dead_letters.append(dead_letter(msg, error, stage, dlq_topic=self.topic, dlq_partition=self.partition,
                                                task=self.task))


_NOT_A_BAD_RECORD = (MemoryError, BadRecordError, FrameworkError, StoreError)


def run_processor(processor: Processor, ctx: ProcessorContext, messages: Iterable[Message], *,
                  key_serde: Serde, value_serde: Serde, dlq: DeadLetterPolicy,
                  scoped: Iterable[RecordScoped] = ()) -> BatchOutcome:
    """Process `messages` in order, one record scope each; punctuate at the end."""
    outcome = BatchOutcome(stream_time=ctx.stream_time)
    scoped = list(scoped)
    remaining: list[Message] = list(messages) if not isinstance(messages, list) else messages
    key_of, value_of, process, outputs = key_serde.deserialize, value_serde.deserialize, processor.process, outcome.outputs
    bytes_in = 0
    for i, msg in enumerate(remaining):
        value = msg.value()
        if value:
            bytes_in += len(value)
        ts = msg.timestamp()[1]
        try:
            record = Record(key_of(msg.key()), value_of(value), msg.topic(), msg.partition(), msg.offset(), ts,
                            msg.headers())
        except SerdeError as exc:
            dlq.handle(msg, exc, "deserialize", outcome)
            continue
        if ts > outcome.stream_time:
            outcome.stream_time = ctx.stream_time = ts
        ctx._current, ctx._current_ts, ctx._index = msg, ts, 0
        if ctx._scope:
            ctx._scope = []
        for s in scoped:
            s.begin_record()
        try:
            process(record)
        except _NOT_A_BAD_RECORD:
            raise
        except Exception as exc:
            for s in scoped:
                s.rollback_record()
            dlq.handle(msg, exc, "serialize" if isinstance(exc, OutputSerializationError) else "process", outcome)
            continue
        for s in scoped:
            s.commit_record()
        outputs.extend(ctx._scope)
        if ctx._commit_requested:
            outcome.stopped_at = _next_offsets(remaining[: i + 1])
            break
    outcome.records_in = i + 1 if remaining else 0
    outcome.bytes_in = bytes_in
    ctx._enter(None, None)
    for s in scoped:  # punctuation is one more scope; if it raises, the whole batch fails
        s.begin_record()
    processor.punctuate(outcome.stream_time)
    for s in scoped:
        s.commit_record()
    outcome.outputs.extend(ctx._scope)
    ctx._scope = []
    return outcome


def _next_offsets(processed: list[Message]) -> dict[tuple[str, int], int]:
    nxt: dict[tuple[str, int], int] = {}
    for msg in processed:
        nxt[(msg.topic(), msg.partition())] = msg.offset() + 1
    return nxt
