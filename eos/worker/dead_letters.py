"""Dead letters: a record that cannot be deserialized or processed is written, unchanged, to the
dead-letter topic in the same transaction as the batch's outputs and offsets, with the error and its
origin in headers. Nothing is dropped silently.

Headers: eos.dlq.error, eos.dlq.error.type, eos.dlq.stage (deserialize | timestamp | process | serialize),
eos.dlq.topic, eos.dlq.partition, eos.dlq.offset, eos.dlq.task, eos.dlq.subtopology, plus the record's own
headers and the lineage header `eos.origin` (index 0) so the auditor can account for it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from eos.errors import BadRecordError, BufferFullError, FrameworkError, TopologyError
from eos.origin import ORIGIN_HEADER, encode_origin, lineage_source
from eos.worker.topic_rules import TopicRule, record_size
from recovery import StoreError
from transactions import Message, ProducerRecord

__all__ = ["Stage", "DeadLetterPolicy", "dead_letter", "dead_letter_error", "DLQ_PREFIX", "NOT_A_BAD_RECORD"]

#: Exceptions that fail the task instead of dead-lettering the record being processed.
NOT_A_BAD_RECORD = (MemoryError, BadRecordError, FrameworkError, StoreError, TopologyError, BufferFullError)

DLQ_PREFIX = "eos.dlq."
_MAX_ERROR = 2000


class Stage(enum.StrEnum):
    """Where a bad record failed."""

    DESERIALIZE = "deserialize"
    TIMESTAMP = "timestamp"
    PROCESS = "process"
    SERIALIZE = "serialize"


def dead_letter(msg: Message, error: BaseException, stage: Stage, *, dlq_topic: str, dlq_partition: int | None,
                task: str, transitive: frozenset[str] = frozenset()) -> ProducerRecord:
    text = f"{type(error).__name__}: {error}"
    headers = [(k, v) for k, v in (msg.headers() or []) if not k.startswith(DLQ_PREFIX) and k != ORIGIN_HEADER]
    headers += [
        ("eos.dlq.error", text[:_MAX_ERROR].encode("utf-8", "replace")),
        ("eos.dlq.error.type", type(error).__name__.encode()),
        ("eos.dlq.stage", stage.value.encode()),
        ("eos.dlq.topic", msg.topic().encode()),
        ("eos.dlq.partition", str(msg.partition()).encode()),
        ("eos.dlq.offset", str(msg.offset()).encode()),
        ("eos.dlq.task", task.encode()),
        ("eos.dlq.subtopology", task.rpartition("-")[0].encode()),
        (ORIGIN_HEADER, encode_origin(*lineage_source(msg, transitive))),
    ]
    ts_type, ts = msg.timestamp()
    return ProducerRecord(dlq_topic, dlq_partition, msg.key(), msg.value(), headers, ts if ts_type else None)


def dead_letter_error(record: ProducerRecord) -> str | None:
    """The error a dead letter carries (its `eos.dlq.error` header)."""
    for key, value in record.headers:
        if key == "eos.dlq.error":
            return value.decode("utf-8", "replace")
    return None


def bad_record_error(msg: Message, error: BaseException, stage: Stage) -> BadRecordError:
    return BadRecordError(
        f"record {msg.topic()}[{msg.partition()}]@{msg.offset()} failed to {stage.value}: {type(error).__name__}: "
        f"{error}. The job stops because on_bad_record='fail'; set on_bad_record='dead_letter' to route such "
        "records to the dead-letter topic instead.")


@dataclass(frozen=True)
class DeadLetterPolicy:
    """Where a task's bad records go (`partition=None`: the partitioner), or `fail`: stop the job.
    `topic_rules(topic)` says what the dead-letter topic accepts."""

    topic: str
    partition: int | None
    task: str
    fail: bool
    topic_rules: Callable[[str], TopicRule] | None = None
    transitive: frozenset[str] = frozenset()

    def route(self, msg: Message, error: BaseException, stage: Stage) -> ProducerRecord:
        """The dead letter for `msg`; raises `BadRecordError` instead when the policy is to fail. A record
        too large for the dead-letter topic goes there without its key and value (its headers name its
        origin, the error and its size), so it is still accounted for."""
        if self.fail:
            raise bad_record_error(msg, error, stage) from error
        letter = dead_letter(msg, error, stage, dlq_topic=self.topic, dlq_partition=self.partition, task=self.task,
                             transitive=self.transitive)
        if self.topic_rules is not None:
            limit = self.topic_rules(self.topic).max_bytes
            size = record_size(letter.key, letter.value, letter.headers)
            if size > limit:
                note = (f"key and value omitted: the record is {size:,} bytes, above the dead-letter topic's "
                        f"limit of {limit:,} bytes; it is still in {msg.topic()}[{msg.partition()}]@{msg.offset()}")
                letter = letter._replace(key=None, value=None,
                                         headers=[*letter.headers, ("eos.dlq.payload", note.encode())])
        return letter
