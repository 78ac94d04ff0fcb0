"""Standby copies (worker side): bring this executor's copy of a task's persistent stores up to the
changelogs' end by replaying them (read_committed), as `StoreChangelogReader` does for Kafka Streams'
standby tasks. A copy that another process holds right now (the active task, here by chance) is skipped."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from eos.batch import StandbyPlan, StandbyResult
from eos.logs import configure_logging, get_logger
from eos.placement import current_executor, executor_location
from eos.stateful import TaskStores
from eos.worker import CLIENTS, WorkerClients
from recovery import StoreError

if TYPE_CHECKING:
    from eos.task import Job

__all__ = ["run_standby"]


def run_standby(plan: StandbyPlan, job: "Job", clients: WorkerClients = CLIENTS) -> StandbyResult:
    cfg = job.config
    configure_logging(cfg.log_format, cfg.log_level)
    location = executor_location()
    result = StandbyResult(plan.task, plan.batch, "refreshed", current_executor(), location)
    if plan.preferred_location is not None and location != plan.preferred_location:
        result.status = "elsewhere"  # Spark ran it on another executor: that copy is not the one planned
        return result
    log = get_logger("eos.standby", app=cfg.application_id, task=plan.task, batch=plan.batch)
    stores = TaskStores(cfg, job.subtopologies[plan.subtopology], plan.partition)
    started = time.monotonic()
    try:
        _, result.replayed = stores.open(clients, log, lock_timeout=0.0, persistent_only=True,
                                         budget=plan.budget)
        result.store_offsets = stores.offsets()
    except StoreError:
        result.status = "busy"
    finally:
        stores.release()
    result.ms = (time.monotonic() - started) * 1000
    return result
