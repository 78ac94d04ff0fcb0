"""What a run reports: one `BatchReport` per batch and a `RunSummary` at the end (JSON-ready), and the
watch on records dropped as late (`LatenessWatch`)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

import structlog

from eos.config import EosConfig
from eos.driver.assignor import TaskPlacement
from eos.driver.placement import TaskMove
from eos.errors import LateRecordsError
from eos.topology import TaskId
from eos.worker.plans import SkipReason, TaskResult, TaskStatus

__all__ = ["BatchReport", "RunSummary", "LatenessWatch", "to_json"]

log = structlog.get_logger(__name__)


@dataclass
class BatchReport:
    batch: int
    started: float  # unix time
    duration_s: float
    tasks: int
    committed: int
    noop: int
    fenced: int
    records_in: int
    records_out: int
    dead_letters: int
    max_commit_ms: float
    restored_records: int = 0
    standbys_refreshed: int = 0
    max_standby_lag: int = 0  # records the most lagging copy was behind before its refresh
    input_lag: int = 0  # records the inputs were behind (stable end minus committed) when the batch was planned
    #: where each task and its copies are after this batch (placement on, executors only)
    placement: dict[TaskId, TaskPlacement] = field(default_factory=dict)

    @classmethod
    def of(cls, batch: int, wall: float, duration: float, results: list[TaskResult]) -> BatchReport:
        def count(status: TaskStatus) -> int:
            return sum(r.status is status for r in results)

        return cls(batch=batch, started=wall, duration_s=round(duration, 4), tasks=len(results),
                   committed=count(TaskStatus.COMMITTED), noop=count(TaskStatus.NOOP), fenced=count(TaskStatus.FENCED),
                   records_in=sum(r.records_in for r in results), records_out=sum(r.records_out for r in results),
                   dead_letters=sum(r.dead_letters for r in results),
                   max_commit_ms=round(max((r.commit_ms for r in results), default=0.0), 2),
                   restored_records=sum(r.restored_records for r in results))


@dataclass
class RunSummary:
    application_id: str
    batches: int = 0
    transactions: int = 0
    noop_tasks: int = 0
    fenced_tasks: int = 0
    records_in: int = 0
    records_out: int = 0
    dead_letters: int = 0
    changelog_records: int = 0
    #: of records_in, those folded into a keyed aggregation in one loop (eos.worker.folding)
    records_folded: int = 0
    #: of records_in, those a function took in the direct loop, without the graph's steps (eos.worker.processing)
    records_direct: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    restored_records: int = 0
    #: input offsets skipped because retention deleted them before they were processed
    skipped_by_retention: int = 0
    #: input partitions that started over because their topic was deleted and created again
    topic_resets: int = 0
    #: records dropped on purpose, by reason (e.g. "late": all their windows were closed)
    dropped: dict[str, int] = field(default_factory=dict)
    #: the same per step (sub-topology), and each step's input records, for the share dropped
    dropped_by_step: dict[str, dict[str, int]] = field(default_factory=dict)
    records_in_by_step: dict[str, int] = field(default_factory=dict)
    #: task batches that sent more than dead_letter_warn_ratio of their input to the dead-letter topic
    dead_letter_warnings: int = 0
    dead_letter_topic: str = ""
    first_dead_letter_error: str | None = None
    elapsed_s: float = 0.0
    batch_reports: list[BatchReport] = field(default_factory=list)
    task_results: list[TaskResult] = field(default_factory=list)
    #: Every time a task ran on another executor than before: why, and what its restore cost.
    moves: list[TaskMove] = field(default_factory=list)

    def add(self, report: BatchReport, results: list[TaskResult], keep_results: bool) -> None:
        self.batches += 1
        self.batch_reports.append(report)
        for r in results:
            self.transactions += r.status is TaskStatus.COMMITTED
            self.noop_tasks += r.status is TaskStatus.NOOP
            self.fenced_tasks += r.status is TaskStatus.FENCED
            self.records_in += r.records_in
            self.records_folded += r.records_folded
            self.records_direct += r.records_direct
            self.records_out += r.records_out
            self.dead_letters += r.dead_letters
            self.changelog_records += r.changelog_records
            self.bytes_in += r.bytes_in
            self.bytes_out += r.bytes_out
            self.restored_records += r.restored_records
            step = r.task.subtopology
            self.records_in_by_step[step] = self.records_in_by_step.get(step, 0) + r.records_in
            for reason, n in r.dropped.items():
                self.dropped[reason] = self.dropped.get(reason, 0) + n
                by = self.dropped_by_step.setdefault(step, {})
                by[reason] = by.get(reason, 0) + n
            for reset in r.resets.values():
                if reset.reason is SkipReason.RETENTION:
                    self.skipped_by_retention += reset.start - reset.committed
                else:
                    self.topic_resets += 1
            if self.first_dead_letter_error is None and r.first_dead_letter_error:
                self.first_dead_letter_error = r.first_dead_letter_error
        if keep_results:
            self.task_results.extend(results)

    def late_share(self, step: str) -> tuple[int, float]:
        """(records `step` dropped as late, their share of its input) over the run so far."""
        late = self.dropped_by_step.get(step, {}).get("late", 0)
        return late, late / max(1, self.records_in_by_step.get(step, 0))

    def to_dict(self) -> dict[str, Any]:
        return {f.name: to_json(getattr(self, f.name)) for f in fields(self) if f.name != "task_results"}


def to_json(value: Any) -> Any:
    """JSON-ready form of reports: dataclasses as objects, task ids and partition tuples as strings."""
    if isinstance(value, TaskId):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, dict):
        return {_key(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


def _key(key: Any) -> str:
    if isinstance(key, tuple) and len(key) == 2:
        return f"{key[0]}:{key[1]}"
    return str(key)


class LatenessWatch:
    """A step that has dropped more than `late_warn_ratio` of its input as late (over the run so far) is
    warned about, once per run; above `late_fail_ratio` (when set) the job stops: a windowed result missing
    much of its input is worse than none."""

    def __init__(self, config: EosConfig) -> None:
        self.config = config
        self.warned: set[str] = set()

    def check(self, summary: RunSummary, results: list[TaskResult]) -> None:
        cfg = self.config
        for step in sorted({r.task.subtopology for r in results if r.dropped.get("late")}):
            late, share = summary.late_share(step)
            if cfg.late_fail_ratio is not None and share > cfg.late_fail_ratio:
                raise LateRecordsError(
                    f"step {step} dropped {late:,} of {summary.records_in_by_step.get(step, 0):,} input records "
                    f"({share:.1%}) as late, above late_fail_ratio={cfg.late_fail_ratio}: raise the windows' (or "
                    "the join's) grace, or late_fail_ratio if such lateness is expected")
            if share > cfg.late_warn_ratio and step not in self.warned:
                self.warned.add(step)
                log.warning(f"step {step} drops records as late: {late:,} so far, {share:.1%} of its input "
                            f"(late_warn_ratio={cfg.late_warn_ratio}); their windows, or a join's grace period, had "
                            "closed. If they are on "
                            "time at their source, the grace period is too short for their disorder",
                            step=step, late=late, share=round(share, 4))
