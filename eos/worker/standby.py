"""Standby copies (worker side): bring this executor's copy of a task's persistent stores up to the
changelogs' end by replaying them (read_committed), as `StoreChangelogReader` does for Kafka Streams'
standby tasks. A copy that another process holds right now (the active task, here by chance) is skipped."""

from __future__ import annotations

import time

import structlog

from eos.logs import configure_logging
from eos.worker.clients import CLIENTS, WorkerClients
from eos.worker.executor import current_executor, executor_location
from eos.worker.plans import Job, StandbyPlan, StandbyResult, StandbyStatus
from eos.worker.stores import TaskStores
from recovery import StoreError
from transactions import RetriableKafkaError, RetryPolicy, stable_committed

__all__ = ["run_standby"]

log = structlog.get_logger(__name__)

_ONE_TRY = RetryPolicy(attempts=1)


def _table_progress(stores: TaskStores, job: Job, clients: WorkerClients) -> dict[tuple[str, int], int]:
    """The task's committed offsets in the table topics its stores are restored from (`StoreSpec.source_topic`):
    a copy replays them that far only, never past what the active task has processed. A partition whose
    offsets cannot be read stably now is left out (its stores stay as they are until the next refresh)."""
    cfg, sub = job.config, stores.task.subtopology
    by_group: dict[str, list[tuple[str, int]]] = {}
    for topic in stores.readings:
        by_group.setdefault(job.groups.get((sub, topic), cfg.group_id), []).append((topic, stores.partition))
    out: dict[tuple[str, int], int] = {}
    for group, tps in by_group.items():
        consumer = clients.consumer(cfg) if group == cfg.group_id else clients.consumer(cfg, group=group)
        try:
            committed = stable_committed(consumer, tps, timeout=min(5.0, cfg.batch_timeout), policy=_ONE_TRY)
        except RetriableKafkaError as exc:
            log.info("standby: the task's offsets in its table topics are not stable now; refreshed next time",
                     error=str(exc))
            continue
        out.update({tp: c.offset for tp, c in committed.items() if c.offset is not None})
    return out


def run_standby(plan: StandbyPlan, job: Job, clients: WorkerClients = CLIENTS) -> StandbyResult:
    cfg = job.config
    configure_logging(cfg.log_format, cfg.log_level)
    location = executor_location()
    result = StandbyResult(plan.task, plan.batch, StandbyStatus.REFRESHED, current_executor(), location)
    if plan.preferred_location is not None and location != plan.preferred_location:
        result.status = StandbyStatus.ELSEWHERE  # Spark ran it on another executor: not the copy planned
        return result
    stores = TaskStores(cfg, job.subtopologies[plan.task.subtopology], plan.task.partition)
    started = time.monotonic()
    with structlog.contextvars.bound_contextvars(app=cfg.application_id, task=str(plan.task), batch=plan.batch,
                                                 standby=True):
        try:
            _, result.replayed = stores.open(clients.changelogs(cfg), lock_timeout=0.0, persistent_only=True,
                                             budget=plan.budget, committed=_table_progress(stores, job, clients))
            result.store_offsets = stores.offsets()
        except StoreError:
            result.status = StandbyStatus.BUSY
        finally:
            stores.release()
    result.ms = (time.monotonic() - started) * 1000
    return result
