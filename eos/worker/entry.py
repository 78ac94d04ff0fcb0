"""The Spark task entry point: the function every Spark partition runs, and the error taxonomy around
batch attempts.

Failures of an attempt (`eos.worker.attempt`), by type:

* fenced -> stop this attempt (unless only the worker's cached producer was fenced: then initialise a new
  one and run the batch again);
* abortable -> abort the transaction and run the batch again;
* retriable or fatal client errors -> drop the clients and run the batch again; after
  `max_batch_attempts` the Spark task fails (`BatchFailedError`) and Spark retries it;
* errors that running again cannot fix (bad configuration seen only here, `on_bad_record="fail"`, the job's
  code failing outside record processing, a job that cannot be loaded) -> the task reports a `TaskFailure`
  instead of raising, so Spark does not retry it and the driver stops the job with the root cause.
"""

from __future__ import annotations

import time
import traceback
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import structlog

from eos.config import EosConfig
from eos.errors import (
    BadRecordError,
    BatchFailedError,
    ConfigError,
    FailureKind,
    ServiceUnavailableError,
    TaskFailedError,
    TaskFailure,
)
from eos.logs import configure_logging
from eos.worker.attempt import StalePlanError, UnitAttempt, result_of
from eos.worker.claims import TaskClaims, claim_order, claims_root
from eos.worker.clients import CLIENTS, TaskClients
from eos.worker.collection import fewer_collections
from eos.worker.executor import executor_location
from eos.worker.memory import cap_arenas, release_free_memory
from eos.worker.plans import (
    GroupMember,
    Job,
    StandbyPlan,
    StandbyResult,
    TaskPlan,
    TaskResult,
    TaskStatus,
    runtime_key,
    unit_id,
)
from eos.worker.progress import fenced_since
from eos.worker.runtime import RUNTIMES, RuntimeCache
from eos.worker.standby import run_standby
from eos.worker.stores import state_root
from transactions import (
    DeliveryFailedError,
    FatalKafkaError,
    IllegalStateError,
    KafkaEosError,
    OutputProducer,
    ProducerFencedError,
    RetriableKafkaError,
    TransactionAbortableError,
)

__all__ = ["SparkTaskFunction", "run_task", "run_unit", "run_member", "units_of"]

log = structlog.get_logger(__name__)

_JOBS: dict[str, Job] = {}  # job definitions unpickled in this worker process, by run token


class SparkTaskFunction:
    """What each Spark partition runs (`mapPartitions`). A module-level class, so workers import it instead
    of unpickling code; the job definition comes from a broadcast and is unpickled once per worker."""

    def __init__(self, job_broadcast: Any) -> None:
        self.job_broadcast = job_broadcast
        self.token = uuid.uuid4().hex  # identifies this run's job in the worker's cache

    def __call__(self, items: Iterator[TaskPlan | GroupMember | StandbyPlan]) -> Iterator[TaskResult | StandbyResult]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        attempt = ctx.attemptNumber() if ctx is not None else 0
        try:
            job = self._job()
        except Exception as exc:  # e.g. the job's module cannot be imported on this executor
            for item in items:
                for plan in item.group.plans if isinstance(item, GroupMember) else [item]:
                    if isinstance(plan, TaskPlan):
                        yield _failed(plan, attempt, FailureKind.JOB_LOAD, exc,
                                      "the job definition cannot be loaded on this executor "
                                      f"({executor_location() or 'local'}): {type(exc).__name__}: {exc}")
            return
        for item in items:
            if isinstance(item, StandbyPlan):
                yield run_standby(item, job)
            elif isinstance(item, GroupMember):
                yield from run_member(item, job, attempt, self.token)
            else:
                yield run_task(item, job, attempt)

    def _job(self) -> Job:
        job = _JOBS.get(self.token)
        if job is None:
            from pyspark import cloudpickle

            cap_arenas()  # (set by the framework's daemon; a worker of PySpark's own daemon: before its clients)

            job = _JOBS[self.token] = cloudpickle.loads(self.job_broadcast.value)
        return job


def run_task(plan: TaskPlan, job: Job, spark_attempt: int = 0, clients: TaskClients = CLIENTS,
             runtimes: RuntimeCache = RUNTIMES, *, in_memory: bool = False) -> TaskResult:
    """Run one planned batch of one task (of a unit, with the unit's producer, alone); see `run_unit`."""
    return run_unit((plan,), job, spark_attempt, clients, runtimes, in_memory=in_memory)[0]


def run_unit(plans: Sequence[TaskPlan], job: Job, spark_attempt: int = 0, clients: TaskClients = CLIENTS,
             runtimes: RuntimeCache = RUNTIMES, *, in_memory: bool = False) -> list[TaskResult]:
    """Run one planned batch of a unit's tasks (`units_of`) in one transaction, one result per task; every log
    line inside names the application, the tasks, batch and attempt. `clients` and `runtimes`: this worker's
    (a test driver passes its own, in memory)."""
    cfg = job.config
    configure_logging(cfg.log_format, cfg.log_level)
    tasks = ",".join(str(plan.task) for plan in plans)
    with structlog.contextvars.bound_contextvars(app=cfg.application_id, task=tasks, batch=plans[0].batch,
                                                 attempt=spark_attempt):
        if not in_memory and any(_cold_retry(plan, job, spark_attempt) for plan in plans):
            # Spark retried the task (its executor was lost) on an executor without a copy of its state: let
            # the driver plan it on the copy with the least lag instead of replaying the whole changelog here.
            log.info("retry landed on an executor without the task's state; deferring to the planner",
                     planned=plans[0].preferred_location, here=executor_location())
            return [result_of(plan, TaskStatus.DEFERRED, spark_attempt, 0) for plan in plans]
        started = time.monotonic()
        try:
            with fewer_collections():
                results = _attempts(plans, job, spark_attempt, clients, runtimes, in_memory)
            if not in_memory:  # (a test driver's process is not a worker's)
                release_free_memory()  # what the batch freed, until the next one needs it (eos.worker.memory)
            for result in results:
                result.total_ms = (time.monotonic() - started) * 1000
            return results
        except ConfigError as exc:
            return [_failed(plan, spark_attempt, FailureKind.CONFIG, exc, str(exc)) for plan in plans]
        except BadRecordError as exc:
            return [_failed(plan, spark_attempt, FailureKind.BAD_RECORD, exc, str(exc)) for plan in plans]
        except TaskFailedError as exc:
            return [_failed(plan, spark_attempt, FailureKind.USER_CODE, exc, str(exc), exc.detail) for plan in plans]


def units_of(plans: Sequence[TaskPlan], config: EosConfig) -> list[tuple[TaskPlan, ...]]:
    """`plans` by the transaction that commits them (`tasks_per_transaction`), in plan order."""
    units: dict[str, list[TaskPlan]] = {}
    for plan in plans:
        units.setdefault(unit_id(plan, config), []).append(plan)
    return [tuple(unit) for unit in units.values()]


def run_member(member: GroupMember, job: Job, spark_attempt: int, token: str, clients: TaskClients = CLIENTS,
               runtimes: RuntimeCache = RUNTIMES, *, in_memory: bool = False) -> Iterator[TaskResult]:
    """One member's share of a task group (`eos.worker.claims`): every task of the group it claims, the ones
    this worker holds first. Each result is stored with the claim before it is reported. `clients`, `runtimes`
    and `in_memory` as for `run_task`."""
    try:
        claims = TaskClaims(claims_root(job.config.application_id), token, member)
    except OSError as exc:
        error = ConfigError(f"the executor cannot keep its task claims ({exc}): set TMPDIR for the executors "
                            "(spark.executorEnv.TMPDIR) to a local directory they can write")
        for plan in member.group.plans:
            yield _failed(plan, spark_attempt, FailureKind.CONFIG, error, str(error))
        return
    cfg = job.config

    def held(unit: tuple[TaskPlan, ...]) -> bool:
        txn_id = unit_id(unit[0], cfg)
        keys = [runtime_key(plan.task, cfg) for plan in unit]
        producer = clients.cached_producer(txn_id)
        if producer is not None and fenced_since(producer, [plan.last_producer for plan in unit]):
            # Another worker committed the task since this producer did, so it is fenced and the runtime
            # behind: both go now. Kept, they would make this worker claim the task first every batch, and
            # the task would move back and forth between two workers that both take it for their own.
            clients.drop_producer(txn_id)
            for key in keys:
                runtimes.drop(key)
            return False
        return producer is not None or any(runtimes.get(key, job.run_id) is not None for key in keys)

    for unit in claim_order(units_of(member.group.plans, cfg), held):
        with claims.claim(unit_id(unit[0], cfg)) as claim:
            if claim is None:
                continue  # a sibling runs it or has reported it
            if claim.earlier is not None:
                yield from claim.earlier  # this member ran it before Spark retried the member
                continue
            results = run_unit(unit, job, spark_attempt, clients, runtimes, in_memory=in_memory)
            claim.done(results)
        yield from results


def _attempts(plans: Sequence[TaskPlan], job: Job, spark_attempt: int, clients: TaskClients,
              runtimes: RuntimeCache, in_memory: bool) -> list[TaskResult]:
    cfg = job.config
    txn_id = unit_id(plans[0], cfg)

    def drop_runtimes() -> None:
        for plan in plans:
            runtimes.drop(runtime_key(plan.task, cfg))

    def each(status: TaskStatus, batch_attempt: int) -> list[TaskResult]:
        return [result_of(plan, status, spark_attempt, batch_attempt) for plan in plans]

    last: Exception | None = None
    for batch_attempt in range(1, cfg.max_batch_attempts + 1):
        attempt = UnitAttempt(plans, job, clients, runtimes, spark_attempt, batch_attempt, in_memory=in_memory)
        try:
            return attempt.run()
        except StalePlanError as exc:
            log.info("the plan is stale; the batch goes back to the planner", reason=str(exc))
            if attempt.txn.begun_at is not None:  # (a streamed batch's slices, or another task's batch)
                _abort_quietly(attempt.txn.producer, clients, txn_id)
            drop_runtimes()
            return each(TaskStatus.DEFERRED, batch_attempt)
        except ProducerFencedError as exc:
            clients.drop_producer(txn_id)
            drop_runtimes()
            if attempt.txn.fresh:
                log.warning("fenced: a newer attempt owns this task; this attempt stops", error=str(exc))
                return each(TaskStatus.FENCED, batch_attempt)
            log.info("cached producer was fenced (another worker ran this task); initialising a new one")
            last = exc
        except TransactionAbortableError as exc:
            log.warning("transaction aborted; running the batch again", error=str(exc))
            if isinstance(exc, DeliveryFailedError):  # a topic's rules may have changed: read again
                clients.topic_rules(cfg).forget()
            _abort_quietly(attempt.txn.producer, clients, txn_id)
            drop_runtimes()
            last = exc
        except ServiceUnavailableError as exc:  # (a Schema Registry that did not answer: its client retried already)
            log.warning("batch attempt failed; running the batch again", error=str(exc))
            _abort_quietly(attempt.txn.producer, clients, txn_id)
            drop_runtimes()
            last = exc
        except (RetriableKafkaError, FatalKafkaError, IllegalStateError) as exc:
            log.warning("batch attempt failed; recreating the clients", error=str(exc), kind=type(exc).__name__)
            _abort_quietly(attempt.txn.producer, clients, txn_id)
            clients.drop_producer(txn_id)
            drop_runtimes()
            clients.drop_consumers(cfg)
            last = exc
        except BaseException:
            _abort_quietly(attempt.txn.producer, clients, txn_id)
            drop_runtimes()
            raise
    tasks = ", ".join(str(plan.task) for plan in plans)
    raise BatchFailedError(f"task {tasks} batch {plans[0].batch} failed after {cfg.max_batch_attempts} attempts: "
                           f"{last}")


def _cold_retry(plan: TaskPlan, job: Job, spark_attempt: int) -> bool:
    sub = job.subtopologies[plan.task.subtopology]
    if spark_attempt == 0 or not plan.preferred_location or not any(s.persistent for s in sub.stores):
        return False
    here = executor_location()
    if here is None or here == plan.preferred_location:
        return False
    return not (state_root(job.config) / str(plan.task)).is_dir()


def _abort_quietly(producer: OutputProducer | None, clients: TaskClients, txn_id: str) -> None:
    if producer is None:
        return
    try:
        producer.abort(timeout=10)
    except (KafkaEosError, IllegalStateError):
        clients.drop_producer(txn_id)


def _failed(plan: TaskPlan, spark_attempt: int, kind: FailureKind, exc: BaseException, message: str,
            detail: str = "") -> TaskResult:
    log.error("task failed; the job stops", kind=kind.value, error=message)
    result = result_of(plan, TaskStatus.FAILED, spark_attempt, 0)
    result.failure = TaskFailure(kind, str(plan.task), type(exc.__cause__ or exc).__name__, message,
                                 detail or "".join(traceback.format_exception(exc)))
    return result
