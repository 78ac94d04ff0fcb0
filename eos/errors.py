"""The framework's errors, named by what they mean for the job.

    EosError
    ├── ConfigError              bad configuration: the job cannot start (or stops); the message says what to change
    ├── SerdeError               a key or value could not be (de)serialized: the record is a bad record
    │   └── OutputSerializationError   an output could not be serialized (blamed on its input record)
    ├── BadRecordError           a bad record with on_bad_record="fail": the job stops
    ├── FrameworkError           the framework or its state failed; never blamed on a record (the task fails)
    │   └── ServiceUnavailableError   a service the job's serdes use (a Schema Registry) did not answer: the
    │                                 batch attempt runs again, as when a broker does not answer
    ├── BatchFailedError         a batch did not commit within max_batch_attempts (Spark retries the task)
    ├── TaskFailedError          a task failed in a way that re-running cannot fix (user code outside record
    │                            processing, an unimportable job module): the job stops
    └── JobFailedError           the driver gave up: max_failed_batches batches in a row failed

The driver decides whether a failure stops the job by these types (`stops_the_job`), never by message text.
Errors raised in a Spark task travel to the driver as a `TaskFailure` (kind, type, message, traceback)
and are raised there again as the same kind of error.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "EosError",
    "ConfigError",
    "SerdeError",
    "OutputSerializationError",
    "BadRecordError",
    "FrameworkError",
    "ServiceUnavailableError",
    "BatchFailedError",
    "TaskFailedError",
    "TopologyError",
    "BufferFullError",
    "LateRecordsError",
    "JobFailedError",
    "FailureKind",
    "TaskFailure",
    "stops_the_job",
]


class EosError(Exception):
    """Base class of the framework's errors."""


class ConfigError(EosError, ValueError):
    """Bad configuration; the message says which setting and what to change."""


class SerdeError(EosError, ValueError):
    """A key or value could not be serialized or deserialized."""


class OutputSerializationError(SerdeError):
    """An output could not be serialized with the output serde (attributed to the input record)."""


class BadRecordError(EosError):
    """Raised instead of dead-lettering when the job's policy is on_bad_record="fail"."""


class FrameworkError(EosError):
    """An error of the framework or its state, never blamed on a record (the task fails instead)."""


class ServiceUnavailableError(FrameworkError):
    """A service the job's serdes use besides Kafka (its Schema Registry) did not answer, or failed: never the
    record's fault, so never a dead letter; the batch attempt is aborted and run again."""


class BatchFailedError(EosError):
    """A batch could not be committed within `max_batch_attempts`; the Spark task fails (and is retried)."""


class TaskFailedError(EosError):
    """A task failed with an error that running it again cannot fix. `task` names it; `cause_type` and
    `detail` (the traceback) describe the root cause as raised in the Spark task."""

    def __init__(self, message: str, *, task: str = "", cause_type: str = "", detail: str = "") -> None:
        super().__init__(message)
        self.task, self.cause_type, self.detail = task, cause_type, detail


class TopologyError(TaskFailedError):
    """The job's topology is wrong where only a running processor shows it (it asks for a store it is not
    connected to): never a record's fault, since every record would fail alike; the task fails and the job stops,
    as Kafka Streams fails the task."""


class BufferFullError(TaskFailedError):
    """A suppressed table's buffer went over its bound with `when_full="shut_down"` (Kafka Streams'
    `BufferConfig.shutDownWhenFull`): the task fails and the job stops rather than let an update go early.
    Never a record's fault: running the batch again fills the buffer alike."""


class JobFailedError(EosError):
    """The driver gave up: `max_failed_batches` consecutive batches failed."""


class LateRecordsError(JobFailedError):
    """A step dropped more of its input as late than `late_fail_ratio` allows (the batches that dropped
    them committed: the job stops after them)."""


class FailureKind(enum.StrEnum):
    """Why a task reported a failure instead of a result (each kind stops the job)."""

    CONFIG = "config"  # bad configuration only visible inside the task (e.g. the state directory)
    BAD_RECORD = "bad_record"  # on_bad_record="fail"
    USER_CODE = "user_code"  # the job's code failed outside record processing (factory, init, punctuate)
    JOB_LOAD = "job_load"  # the job definition cannot be loaded on the executor (e.g. module not importable)


@dataclass(frozen=True)
class TaskFailure:
    """A deterministic task failure, carried from the Spark task to the driver in the task's result."""

    kind: FailureKind
    task: str
    error_type: str  # the root cause's class name, e.g. "ModuleNotFoundError"
    message: str
    traceback: str = ""

    def to_exception(self) -> EosError:
        text = f"task {self.task}: {self.message}"
        if self.kind is FailureKind.CONFIG:
            return ConfigError(text)
        if self.kind is FailureKind.BAD_RECORD:
            return BadRecordError(text)
        return TaskFailedError(text, task=self.task, cause_type=self.error_type, detail=self.traceback)


def stops_the_job(exc: BaseException) -> bool:
    """Errors that planning the batch again cannot fix."""
    return isinstance(exc, (ConfigError, BadRecordError, TaskFailedError, JobFailedError))
