"""Task groups (driver side): the batch's tasks planned on one executor go to as many Spark tasks as it has
task slots, which share them out by claims (`eos.worker.claims`), instead of one Spark task per Kafka task.
The results come back one per task, whichever member ran it. A unit's tasks (`tasks_per_transaction`) always
go to one Spark task together: they commit in one transaction."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

import structlog

from eos.topology import TaskId
from eos.worker.plans import GroupMember, StandbyPlan, StandbyResult, TaskGroup, TaskPlan, TaskResult, TaskStatus

__all__ = ["share_out", "one_result_per_task", "place_units_together"]

log = structlog.get_logger(__name__)

#: which of two results of one task the batch keeps (members on executors that do not share a disk may both
#: run a task: one of them commits, the other finds it done or is fenced)
_RANK = {TaskStatus.FAILED: 0, TaskStatus.COMMITTED: 1, TaskStatus.NOOP: 2, TaskStatus.DEFERRED: 3,
         TaskStatus.FENCED: 4}


def share_out(plans: Sequence[TaskPlan | StandbyPlan], slots: Mapping[str | None, int],
              unit: Callable[[TaskPlan], str] = lambda plan: str(plan.task),
              ) -> list[TaskPlan | GroupMember | StandbyPlan]:
    """The Spark partitions of one Spark job of a batch: for each location in `slots` (an executor's location
    string, or None for a local master's), its tasks as one group with a member per slot (at most one per
    unit) and claims of its own; the tasks of other locations one partition per unit (`unit`: a task's
    transactional id), and the standbys one partition each."""
    located: dict[str | None, list[TaskPlan]] = {}
    elsewhere: dict[str, list[TaskPlan]] = {}
    rest: list[TaskPlan | GroupMember | StandbyPlan] = []
    for plan in plans:
        if isinstance(plan, TaskPlan) and plan.preferred_location in slots:
            located.setdefault(plan.preferred_location, []).append(plan)
        elif isinstance(plan, TaskPlan):
            elsewhere.setdefault(unit(plan), []).append(plan)
        else:
            rest.append(plan)
    members: list[TaskPlan | GroupMember | StandbyPlan] = []
    job = uuid.uuid4().hex[:12]  # this Spark job's claims (a failed batch is planned again under its number)
    for location, group_plans in located.items():
        units = len({unit(p) for p in group_plans})
        group = TaskGroup(tuple(group_plans), group_plans[0].batch, f"{location or 'local'}-{job}",
                          max(1, min(units, slots[location])), location)
        members.extend(GroupMember(group, m) for m in range(group.members))
    for key, unit_plans in elsewhere.items():
        if len(unit_plans) == 1:
            members.append(unit_plans[0])
        else:
            location = unit_plans[0].preferred_location
            members.append(GroupMember(TaskGroup(tuple(unit_plans), unit_plans[0].batch, f"{key}-{job}", 1, location),
                                       0))
    return members + rest


def place_units_together(plans: Sequence[TaskPlan], unit: Callable[[TaskPlan], str]) -> list[TaskPlan]:
    """The plans with each unit's tasks placed where its first planned task is (they commit in one
    transaction, so one worker runs them): what the placer decided for a unit's other tasks becomes a move,
    which the placer then records from where they ran."""
    first: dict[str, str | None] = {}
    return [replace(p, preferred_location=first.setdefault(unit(p), p.preferred_location)) for p in plans]


def one_result_per_task(plans: Sequence[TaskPlan | StandbyPlan],
                        results: Sequence[TaskResult | StandbyResult]) -> list[TaskResult | StandbyResult]:
    """One result per planned task (a failure first, then a commit, ...), and every standby result. A task
    without a result (which claims rule out on one disk) is logged: its progress is in the committed offsets,
    which the next plan reads."""
    best: dict[TaskId, TaskResult] = {}
    out: list[TaskResult | StandbyResult] = []
    for r in results:
        if isinstance(r, StandbyResult):
            out.append(r)
        elif r.task not in best or _RANK[r.status] < _RANK[best[r.task].status]:
            best[r.task] = r
    missing = [str(p.task) for p in plans if isinstance(p, TaskPlan) and p.task not in best]
    if missing:
        log.warning("tasks of the batch reported no result; the next batch reads their progress from Kafka",
                    tasks=missing)
    return [*best.values(), *out]
