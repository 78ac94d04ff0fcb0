"""The Processor API (process / punctuate / forward / commit, as in Kafka Streams).

A `Processor` gets a `ProcessorContext` in `init()`. Every input record is processed in a **record
scope**: what it forwards and what it writes to state stores become part of the batch only if
`process()` returns normally. A record that raises leaves no partial effect and goes to the dead-letter
topic (or stops the job, per `on_bad_record`). The task runtime that implements the context lives in
`eos.worker.context`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

from eos.records import Output, Record

__all__ = ["Processor", "ProcessorContext", "Kept",
           "FunctionProcessor", "iter_outputs", "PunctuationType", "Cancellable",
           "RecordMetadata"]

#: "stream": fires as stream time (record timestamps) passes each interval; "wall_clock": as the system
#: clock does, also while the task has no input.
PunctuationType = Literal["stream", "wall_clock"]
#: a record held back (`ProcessorContext.hold`): topic, partition, offset, key and value bytes, headers,
#: timestamp, and the index it reserved among its input record's outputs
Kept = tuple[str, int, int, bytes | None, bytes | None, list[tuple[str, bytes]], int, int]


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int


_STORE = "it is store(name) here (a store given in the processor's stores=[...])"
_METADATA = "record_metadata() gives the current record's topic, partition and offset; its headers are record.headers"
_CLOCK = ("read the system clock (time.time_ns() // 1_000_000); schedule(..., type=\"wall_clock\") runs a "
          "punctuation by it")
_CONFIG = "the job's settings are the Application's (app.config); give a processor what it needs in its constructor"
#: what a user of Kafka Streams' ProcessorContext reaches for, and what it is here
_CONTEXT_HINTS = {
    **dict.fromkeys(("get_state_store", "getStateStore", "get_store", "state_store"), _STORE),
    **dict.fromkeys(("topic", "offset", "headers", "record_context", "recordContext"), _METADATA),
    **dict.fromkeys(("current_system_time_ms", "currentSystemTimeMs"), _CLOCK),
    **dict.fromkeys(("current_stream_time_ms", "currentStreamTimeMs"), "it is the attribute stream_time here"),
    **dict.fromkeys(("app_configs", "appConfigs"), _CONFIG),
    "applicationId": "it is the attribute application_id here", "taskId": "it is the attribute task_id here",
}


class ProcessorContext:
    """What a processor sees of its task (implemented by the task runtime).

    Attributes: `application_id`, `subtopology`, `partition`, `task_id` ("<subtopology>-<partition>"),
    `stream_time` (the largest record timestamp the task has seen, -1 before the first record) and
    `timestamp` (the current record's timestamp as its sub-topology extracts it, or the time of the
    punctuation being run)."""

    application_id: str
    subtopology: str
    partition: int
    task_id: str
    stream_time: int
    timestamp: int

    if not TYPE_CHECKING:  # (a type checker still tells a missing attribute)
        def __getattr__(self, name: str) -> Any:  # (only for what the context has not: Kafka Streams' names)
            if name.startswith("__"):
                raise AttributeError(name)
            from eos.dsl.base import no_such_step

            raise no_such_step(ProcessorContext, name, _CONTEXT_HINTS)

    def forward(self, key: Any = None, value: Any = None, *, topic: str | None = None, partition: int | None = None,
                headers: list[tuple[str, bytes]] | None = None, timestamp: int | None = None) -> None:
        """Emit a record (or pass one `Output`). It is produced in the batch's transaction if the current
        record's processing completes. `topic=None`: the sub-topology's output topic; `timestamp=None`: the
        current record's timestamp; `headers=None`: the current record's headers."""
        raise NotImplementedError

    def store(self, name: str) -> Any:
        """The task's instance of a declared state store."""
        raise NotImplementedError

    def commit(self) -> None:
        """Ask for the batch to end (and commit) right after the current record."""
        raise NotImplementedError

    def schedule(self, interval: int | timedelta, callback: Callable[[int], None],
                 type: PunctuationType = "stream") -> Cancellable:
        """Call `callback(timestamp)` every `interval` (milliseconds, or a timedelta), as Kafka Streams'
        `ProcessorContext.schedule` does. Usually called in `init()`.

        "stream": the first call comes with the first record; then whenever stream time has passed the
        next interval, between two records, with the stream time (missed intervals are skipped, not
        replayed). "wall_clock": whenever the system clock has passed the next interval, also for a task
        without input (the driver runs its punctuation in a batch, and transaction, of its own).
        What a punctuation forwards has the punctuation's timestamp and is committed with its batch."""
        raise NotImplementedError

    def record_metadata(self) -> RecordMetadata | None:
        """Topic, partition and offset of the record being processed; None during a punctuation."""
        raise NotImplementedError

    def record_dropped(self, reason: str) -> None:
        """Count the current record as dropped on purpose (e.g. "late": all its windows are closed). The
        counts, by reason, are reported with the batch, logged, and summed in the run summary."""
        raise NotImplementedError

    def hold(self) -> Kept:
        """Hold the current input record back, to let it go later (`release`), in this batch or a later one:
        what a buffer of the operator keeps (the input record whole, and the index it reserves among that
        record's outputs). Its outputs are then named after it, as if it were read again, and the lineage
        ledger counts it as held rather than filtered."""
        raise NotImplementedError

    def release(self, kept: Kept | None, run: Callable[[], None]) -> None:
        """Let go of a record held back: once the current record (or punctuation) is done, `run()` is called in
        a scope of the record `kept` (what `hold` returned for it): what it forwards is named after that record,
        and if it fails, that record goes to the dead-letter topic. `kept=None` (what was buffered outside a
        record's processing: a record cache's flush, a punctuation): `run()` is called in a scope without a
        record, as a punctuation is (its outputs carry `eos.derived`; if it fails, the task fails)."""
        raise NotImplementedError


class Processor:
    """Base class of record processors (Kafka Streams' Processor API).

    `init(context)` once per task runtime, `process(record)` per input record, `punctuate(stream_time)`
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


_SHAPE = ("a processing function must return None, an Output, a (key, value) tuple, or a list/iterable of "
          "Outputs and (key, value) tuples")


def is_pair(item: Any) -> bool:
    """A 2-tuple: one (key, value) among a function's results."""
    return type(item) is tuple and len(item) == 2


def iter_outputs(result: Any) -> Iterator[Output]:
    """Normalize what a function returns: None, an Output, a (key, value) tuple, or an iterable of those.

    A tuple of pairs, e.g. `return (k1, v1), (k2, v2)`, is several records, never one record whose key and
    value are tuples (return `Output(key, value)` for that)."""
    if result is None:
        return
    if isinstance(result, Output):
        yield result
        return
    if type(result) is tuple and len(result) == 2 and not (is_pair(result[0]) and is_pair(result[1])):
        yield Output(result[0], result[1])
        return
    if type(result) is tuple and not all(is_pair(i) or isinstance(i, Output) for i in result):
        raise TypeError(f"{_SHAPE}; got a {len(result)}-tuple")
    if isinstance(result, (str, bytes, dict)) or not isinstance(result, Iterable):
        raise TypeError(f"{_SHAPE}; got {type(result).__name__}")
    for item in result:
        if isinstance(item, Output):
            yield item
        elif is_pair(item):
            yield Output(item[0], item[1])
        elif type(item) is tuple:
            raise TypeError(f"{_SHAPE}; the returned iterable holds a {len(item)}-tuple")
        else:
            raise TypeError(f"{_SHAPE}; the returned iterable holds a {type(item).__name__}")


class FunctionProcessor(Processor):
    """Adapts `fn(record) -> None | Output | (key, value) | Iterable[...]` to the Processor API."""

    def __init__(self, fn: Callable[[Record], Any]) -> None:
        self.fn = fn

    def process(self, record: Record) -> None:
        self.emit(self.fn(record))

    def emit(self, result: Any) -> None:
        """Forward what the function returned for the current record."""
        if type(result) is tuple and len(result) == 2 and not (is_pair(result[0]) and is_pair(result[1])):
            self.context.forward(result[0], result[1])  # the common case, without a generator
            return
        for out in iter_outputs(result):
            self.context.forward(out)
