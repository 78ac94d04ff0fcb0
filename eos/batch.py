"""What the planner hands to a task and what a task hands back (both cross the driver/worker boundary)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from transactions import OffsetRange

__all__ = ["TaskPlan", "TaskResult", "TaskStatus", "StandbyPlan", "StandbyResult"]

TaskStatus = Literal["committed", "noop", "fenced", "deferred"]


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
    committed_at: float = 0.0  # wall clock (time.time()) when the transaction committed
    #: Input offsets this task committed ("topic:partition" -> offset).
    committed_offsets: dict[str, int] = field(default_factory=dict)
    executor: str | None = None
    location: str | None = None  # Spark preferred-location string of the executor it ran on
    pid: int = 0
    host: str = ""
    #: Changelog offset each store of the task reflects after this batch (its copy on this executor).
    store_offsets: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class StandbyPlan:
    """Refresh the copy of a task's stores on one executor (a standby or a warm-up copy)."""

    subtopology: str
    partition: int
    batch: int
    preferred_location: str | None
    lag: int  # records the copy was behind when planned
    budget: float  # seconds of replay at most (EosConfig.standby_refresh_budget, shorter without active work)

    @property
    def task(self) -> str:
        return f"{self.subtopology}-{self.partition}"


@dataclass
class StandbyResult:
    task: str
    batch: int
    status: Literal["refreshed", "busy", "elsewhere"]
    executor: str | None = None
    location: str | None = None
    replayed: int = 0
    ms: float = 0.0
    store_offsets: dict[str, int] = field(default_factory=dict)
