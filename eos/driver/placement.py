"""The driver's placement loop: live executors from Spark, changelog ends from Kafka, decisions from
`eos.driver.assignor.TaskAssignor`, and what actually happened from task results (where a task ran is
where its state now is, whatever was planned). Also records every move of a task with its restore time."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import structlog

from eos.config import EosConfig
from eos.driver.assignor import Move, MoveReason, TaskAssignor, TaskPlacement
from eos.driver.groups import place_units_together
from eos.driver.spark import executor_locations, live_executors
from eos.topology import SubTopology, TaskId, task_count
from eos.worker.plans import StandbyPlan, StandbyResult, StandbyStatus, TaskPlan, TaskResult, TaskStatus, unit_id
from transactions import KafkaAdmin

__all__ = ["Placer", "TaskMove"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class TaskMove:
    """A task that ran on another executor than before: why, and what its restore cost."""

    task: TaskId
    batch: int
    source: str
    target: str
    reason: MoveReason
    restore_ms: float
    restored_records: int


class Placer:
    def __init__(self, sc: Any, admin: KafkaAdmin, config: EosConfig, subtopologies: Mapping[str, SubTopology],
                 partition_counts: Mapping[str, int]) -> None:
        self.sc, self.admin, self.config = sc, admin, config
        self.assignor = TaskAssignor(config.num_standby_replicas, config.acceptable_recovery_lag)
        self.tasks: list[TaskId] = []
        self.changelogs: dict[TaskId, dict[str, tuple[str, int]]] = {}  # task -> store -> changelog partition
        self.set_tasks(subtopologies, partition_counts)
        self.moves: list[TaskMove] = []
        self._planned: dict[TaskId, Move] = {}
        self._ran_on: dict[TaskId, str] = {}  # task -> executor of its last committed batch (what happened)
        self._ends: dict[TaskId, dict[str, int]] = {}  # changelog ends read for the latest plan

    def set_tasks(self, subtopologies: Mapping[str, SubTopology], partition_counts: Mapping[str, int]) -> None:
        """The tasks to place: at the start, and again when the job's topic patterns match other topics (a
        stateless step's new topic of more partitions gives it more tasks). Where tasks ran stays known."""
        self.tasks, self.changelogs = [], {}
        for sub in subtopologies.values():
            persistent = [s for s in sub.stores if s.persistent]
            for p in range(task_count(sub, partition_counts)):
                task = sub.task(p)
                self.tasks.append(task)
                if persistent:
                    self.changelogs[task] = {s.name: (s.restore_topic(self.config.application_id), p)
                                             for s in persistent}

    def ends(self) -> dict[TaskId, dict[str, int]]:
        tps = [tp for stores in self.changelogs.values() for tp in stores.values()]
        offsets = self.admin.end_offsets(tps, timeout=10) if tps else {}
        return {task: {store: offsets[tp] for store, tp in stores.items()} for task, stores in self.changelogs.items()}

    def place(self, plans: list[TaskPlan], batch: int) -> tuple[list[TaskPlan], list[StandbyPlan]]:
        alive = live_executors(self.sc)
        if not alive:
            return plans, []
        assignor = self.assignor
        for executor in assignor.forget_lost(alive):
            log.warning("executor lost: its tasks move to the copies with the least lag", executor=executor)
        known = executor_locations(self.sc)
        assignor.locations.update({e: known[e] for e in alive if e in known and e not in assignor.locations})
        ends = self._ends = self.ends()
        for move in assignor.assign(self.tasks, alive, ends):
            self._planned[move.task] = move
            if move.reason is not MoveReason.FIRST_PLACEMENT:
                log.info("task moves", task=str(move.task), source=move.source, target=move.target,
                         reason=move.reason.value, lag=move.lag)
        located = [replace(p, preferred_location=assignor.location(assignor.active.get(p.task))) for p in plans]
        if any(p.grouping > 1 for p in located):
            located = place_units_together(located, lambda plan: unit_id(plan, self.config))
        standbys = []
        for task in self.changelogs:
            for executor in assignor.standby_targets(task, alive, ends[task]):
                lag = assignor.lag(task, executor, ends[task])
                if lag > 0:
                    standbys.append(StandbyPlan(task, batch, assignor.location(executor), lag,
                                                self._standby_budget(bool(plans))))
        return located, standbys

    def _standby_budget(self, with_active_tasks: bool) -> float:
        """Standbys run beside the batch's active tasks for up to the full budget; a batch of standbys only
        is kept to about a trigger interval, so input that arrives meanwhile does not wait behind it."""
        budget = self.config.standby_refresh_budget
        return budget if with_active_tasks else min(budget, max(self.config.trigger_interval, 0.2))

    def observe(self, results: list[TaskResult | StandbyResult]) -> None:
        alive = set(live_executors(self.sc))
        for r in results:
            if isinstance(r, StandbyResult):
                if r.status is StandbyStatus.REFRESHED:
                    self.assignor.observe_copy(r.task, r.executor, r.location, r.store_offsets)
                continue
            if r.status is not TaskStatus.COMMITTED or r.executor is None:
                continue
            planned = self._planned.pop(r.task, None)
            self.assignor.observe_active(r.task, r.executor, r.location, r.store_offsets)
            moved_from = self._ran_on.get(r.task)
            self._ran_on[r.task] = r.executor
            if moved_from is not None and moved_from != r.executor:
                reason = planned.reason if planned is not None and planned.target == r.executor else (
                    MoveReason.EXECUTOR_LOST if moved_from not in alive else MoveReason.SPARK_PLACED_ELSEWHERE)
                move = TaskMove(r.task, r.batch, moved_from, r.executor, reason, round(r.restore_ms, 1),
                                r.restored_records)
                self.moves.append(move)
                log.info("task moved", task=str(move.task), batch=move.batch, source=move.source,
                         target=move.target, reason=move.reason.value, restore_ms=move.restore_ms,
                         restored_records=move.restored_records)

    def snapshot(self) -> dict[TaskId, TaskPlacement]:
        """Each task's active executor and its copies with their lag (records) against the changelog ends
        read for the latest plan: what the batch report and the "batch done" log carry."""
        return self.assignor.snapshot(self._ends)
