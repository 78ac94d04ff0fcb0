"""Dead letters: a record that cannot be deserialized or processed is written, unchanged, to the
dead-letter topic in the same transaction as the batch's outputs and offsets, with the error and its
origin in headers. Nothing is dropped silently.

Headers: eos.dlq.error, eos.dlq.error.type, eos.dlq.stage (deserialize | process | serialize),
eos.dlq.topic, eos.dlq.partition, eos.dlq.offset, eos.dlq.task, plus the record's own headers and the
lineage header `eos.origin` (index 0) so the auditor can account for it.
"""

from __future__ import annotations

from typing import Literal

from confluent_kafka import Message

from eos.lineage import ORIGIN_HEADER, encode_origin

__all__ = ["Stage", "dead_letter", "BadRecordError", "DLQ_PREFIX"]

Stage = Literal["deserialize", "process", "serialize"]
DLQ_PREFIX = "eos.dlq."
_MAX_ERROR = 2000

# (topic, partition, key, value, headers, timestamp)
ProducedRecord = tuple[str, int | None, bytes | None, bytes | None, list[tuple[str, bytes]], int | None]


class BadRecordError(RuntimeError):
    """Raised instead of dead-lettering when the job's policy is on_bad_record="fail"."""


def dead_letter(msg: Message, error: BaseException, stage: Stage, *, dlq_topic: str, dlq_partition: int | None,
                task: str) -> ProducedRecord:
    text = f"{type(error).__name__}: {error}"
    headers = [(k, v) for k, v in (msg.headers() or []) if not k.startswith(DLQ_PREFIX) and k != ORIGIN_HEADER]
    headers += [
        ("eos.dlq.error", text[:_MAX_ERROR].encode("utf-8", "replace")),
        ("eos.dlq.error.type", type(error).__name__.encode()),
        ("eos.dlq.stage", stage.encode()),
        ("eos.dlq.topic", msg.topic().encode()),
        ("eos.dlq.partition", str(msg.partition()).encode()),
        ("eos.dlq.offset", str(msg.offset()).encode()),
        ("eos.dlq.task", task.encode()),
        (ORIGIN_HEADER, encode_origin(msg.topic(), msg.partition(), msg.offset(), 0)),
    ]
    ts_type, ts = msg.timestamp()
    return (dlq_topic, dlq_partition, msg.key(), msg.value(), headers, ts if ts_type else None)


def bad_record_error(msg: Message, error: BaseException, stage: Stage) -> BadRecordError:
    return BadRecordError(
        f"record {msg.topic()}[{msg.partition()}]@{msg.offset()} failed to {stage}: {type(error).__name__}: "
        f"{error}. The job stops because on_bad_record='fail'; set on_bad_record='dead_letter' to route such "
        "records to the dead-letter topic instead.")
