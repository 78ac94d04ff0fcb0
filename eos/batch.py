"""What the planner hands to a task and what a task hands back (both cross the driver/worker boundary)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from transactions import OffsetRange

__all__ = ["TaskPlan", "TaskResult", "TaskStatus"]

TaskStatus = Literal["committed", "noop", "fenced"]


@dataclass(frozen=True)
class TaskPlan:
    subtopology: str
    partition: int
    batch: int
    #: One range per input partition: `start` is the driver's hint (the task re-reads the committed
    #: offset), `end` the last stable offset at planning time, capped by max_records_per_batch.
    ranges: tuple[OffsetRange, ...]
    #: Spark executor the planner prefers for this task (best effort), e.g. "executor_127.0.0.1_1".
    preferred_location: str | None = None

    @property
    def task(self) -> str:
        return f"{self.subtopology}-{self.partition}"


@dataclass
class TaskResult:
    task: str
    batch: int
    status: TaskStatus
    spark_attempt: int = 0
    batch_attempts: int = 1
    records_in: int = 0
    records_out: int = 0
    dead_letters: int = 0
    changelog_records: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    offsets_ms: float = 0.0  # stable read of the committed offsets
    read_ms: float = 0.0
    process_ms: float = 0.0
    produce_ms: float = 0.0  # begin, produce, send offsets
    commit_ms: float = 0.0
    restore_ms: float = 0.0
    restored_records: int = 0
    total_ms: float = 0.0
    #: Input offsets this task committed ("topic:partition" -> offset).
    committed_offsets: dict[str, int] = field(default_factory=dict)
    executor: str | None = None
    pid: int = 0
    host: str = ""
    #: Standby replicas this worker maintains: store copy -> lag in records.
    standby_lag: dict[str, int] = field(default_factory=dict)
