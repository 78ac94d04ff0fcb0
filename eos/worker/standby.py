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

__all__ = ["run_standby"]

log = structlog.get_logger(__name__)


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
                                             budget=plan.budget)
            result.store_offsets = stores.offsets()
        except StoreError:
            result.status = StandbyStatus.BUSY
        finally:
            stores.release()
    result.ms = (time.monotonic() - started) * 1000
    return result
