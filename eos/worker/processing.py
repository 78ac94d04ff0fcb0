"""The loop that runs a processor over one batch of one task, one record scope per input record.

A record that cannot be deserialized, or whose processing raises, leaves no partial effect (its forwarded
records and state writes are rolled back) and goes to the dead-letter topic. Errors of the framework or
its state (`FrameworkError`, `StoreError`) are never blamed on a record: they fail the task.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from eos.errors import BadRecordError, FrameworkError, OutputSerializationError, SerdeError
from eos.processor import Processor
from eos.records import Record
from eos.serde import Serde
from eos.worker.context import TaskContext
from eos.worker.dead_letters import DeadLetterPolicy, Stage
from recovery import StoreError
from transactions import Message, ProducerRecord

__all__ = ["BatchOutcome", "RecordScoped", "run_processor", "NOT_A_BAD_RECORD"]

#: Exceptions that fail the task instead of dead-lettering the record being processed.
NOT_A_BAD_RECORD = (MemoryError, BadRecordError, FrameworkError, StoreError)


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
    stream_time: int = -1
    #: next offset to commit per input partition when processing stopped early (context.commit()).
    stopped_at: dict[tuple[str, int], int] | None = None
    #: input records that produced no output and no dead letter (recorded in the lineage ledger)
    filtered: list[Message] = field(default_factory=list)


def run_processor(processor: Processor, ctx: TaskContext, messages: list[Message], *, key_serde: Serde,
                  value_serde: Serde, dlq: DeadLetterPolicy, scoped: Iterable[RecordScoped] = ()) -> BatchOutcome:
    """Process `messages` in order, one record scope each; punctuate at the end."""
    outcome = BatchOutcome(stream_time=ctx.stream_time)
    scoped = list(scoped)
    key_of, value_of, process = key_serde.deserialize, value_serde.deserialize, processor.process
    outputs = outcome.outputs
    enter, leave = ctx.enter_record, ctx.leave_record
    bytes_in = 0
    i = -1
    for i, msg in enumerate(messages):
        value = msg.value()
        if value:
            bytes_in += len(value)
        ts = msg.timestamp()[1]
        try:
            record = Record(key_of(msg.key()), value_of(value), msg.topic(), msg.partition(), msg.offset(), ts,
                            msg.headers())
        except SerdeError as exc:
            outcome.dead_letters.append(dlq.route(msg, exc, Stage.DESERIALIZE))
            continue
        if ts > outcome.stream_time:
            outcome.stream_time = ctx.stream_time = ts
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
            stage = Stage.SERIALIZE if isinstance(exc, OutputSerializationError) else Stage.PROCESS
            outcome.dead_letters.append(dlq.route(msg, exc, stage))
            continue
        for s in scoped:
            s.commit_record()
        produced = leave()
        if produced:
            outputs.extend(produced)
        else:
            outcome.filtered.append(msg)
        if ctx.commit_requested:
            ctx.commit_requested = False
            outcome.stopped_at = _next_offsets(messages[: i + 1])
            break
    outcome.records_in = i + 1
    outcome.bytes_in = bytes_in
    enter(None, None)
    for s in scoped:  # punctuation is one more scope; if it raises, the whole batch fails
        s.begin_record()
    processor.punctuate(outcome.stream_time)
    for s in scoped:
        s.commit_record()
    outputs.extend(leave())
    return outcome


def _next_offsets(processed: list[Message]) -> dict[tuple[str, int], int]:
    nxt: dict[tuple[str, int], int] = {}
    for msg in processed:
        nxt[(msg.topic(), msg.partition())] = msg.offset() + 1
    return nxt
