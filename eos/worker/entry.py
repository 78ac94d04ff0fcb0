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
from collections.abc import Iterator
from typing import Any

import structlog

from eos.errors import (
    BadRecordError,
    BatchFailedError,
    ConfigError,
    FailureKind,
    TaskFailedError,
    TaskFailure,
)
from eos.logs import configure_logging
from eos.worker.attempt import BatchAttempt, StalePlanError, result_of
from eos.worker.claims import TaskClaims, claim_order, claims_root
from eos.worker.clients import CLIENTS, TaskClients
from eos.worker.collection import fewer_collections
from eos.worker.executor import executor_location
from eos.worker.plans import GroupMember, Job, StandbyPlan, StandbyResult, TaskPlan, TaskResult, TaskStatus
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

__all__ = ["SparkTaskFunction", "run_task", "run_member"]

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

            job = _JOBS[self.token] = cloudpickle.loads(self.job_broadcast.value)
        return job


def run_task(plan: TaskPlan, job: Job, spark_attempt: int = 0, clients: TaskClients = CLIENTS,
             runtimes: RuntimeCache = RUNTIMES, *, in_memory: bool = False) -> TaskResult:
    """Run one planned batch of one task; every log line inside names the application, task, batch and attempt.
    `clients` and `runtimes`: this worker's (a test driver passes its own, in memory)."""
    cfg = job.config
    configure_logging(cfg.log_format, cfg.log_level)
    with structlog.contextvars.bound_contextvars(app=cfg.application_id, task=str(plan.task), batch=plan.batch,
                                                 attempt=spark_attempt):
        if not in_memory and _cold_retry(plan, job, spark_attempt):
            # Spark retried the task (its executor was lost) on an executor without a copy of its state: let
            # the driver plan it on the copy with the least lag instead of replaying the whole changelog here.
            log.info("retry landed on an executor without the task's state; deferring to the planner",
                     planned=plan.preferred_location, here=executor_location())
            return result_of(plan, TaskStatus.DEFERRED, spark_attempt, 0)
        started = time.monotonic()
        try:
            with fewer_collections():
                result = _attempts(plan, job, spark_attempt, clients, runtimes, in_memory)
            result.total_ms = (time.monotonic() - started) * 1000
            return result
        except ConfigError as exc:
            return _failed(plan, spark_attempt, FailureKind.CONFIG, exc, str(exc))
        except BadRecordError as exc:
            return _failed(plan, spark_attempt, FailureKind.BAD_RECORD, exc, str(exc))
        except TaskFailedError as exc:
            return _failed(plan, spark_attempt, FailureKind.USER_CODE, exc, str(exc), exc.detail)


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
    app = job.config.application_id

    def held(plan: TaskPlan) -> bool:
        txn_id = plan.task.transactional_id(app)
        producer = clients.cached_producer(txn_id)
        if producer is not None and fenced_since(producer, [plan.last_producer]):
            # Another worker committed the task since this producer did, so it is fenced and the runtime
            # behind: both go now. Kept, they would make this worker claim the task first every batch, and
            # the task would move back and forth between two workers that both take it for their own.
            clients.drop_producer(txn_id)
            runtimes.drop(txn_id)
            return False
        return producer is not None or runtimes.get(txn_id, job.run_id) is not None

    for plan in claim_order(member.group.plans, held):
        with claims.claim(plan) as claim:
            if claim is None:
                continue  # a sibling runs it or has reported it
            if claim.earlier is not None:
                yield claim.earlier  # this member ran it before Spark retried the member
                continue
            result = run_task(plan, job, spark_attempt, clients, runtimes, in_memory=in_memory)
            claim.done(result)
        yield result


def _attempts(plan: TaskPlan, job: Job, spark_attempt: int, clients: TaskClients, runtimes: RuntimeCache,
              in_memory: bool) -> TaskResult:
    cfg = job.config
    txn_id = plan.task.transactional_id(cfg.application_id)
    last: Exception | None = None
    for batch_attempt in range(1, cfg.max_batch_attempts + 1):
        attempt = BatchAttempt(plan, job, clients, runtimes, spark_attempt, batch_attempt, in_memory=in_memory)
        try:
            return attempt.run()
        except StalePlanError as exc:
            log.info("the plan is stale; the batch goes back to the planner", reason=str(exc))
            runtimes.drop(txn_id)
            return result_of(plan, TaskStatus.DEFERRED, spark_attempt, batch_attempt)
        except ProducerFencedError as exc:
            clients.drop_producer(txn_id)
            runtimes.drop(txn_id)
            if attempt.fresh:
                log.warning("fenced: a newer attempt owns this task; this attempt stops", error=str(exc))
                return result_of(plan, TaskStatus.FENCED, spark_attempt, batch_attempt)
            log.info("cached producer was fenced (another worker ran this task); initialising a new one")
            last = exc
        except TransactionAbortableError as exc:
            log.warning("transaction aborted; running the batch again", error=str(exc))
            if isinstance(exc, DeliveryFailedError):  # a topic's rules may have changed: read again
                clients.topic_rules(cfg).forget()
            _abort_quietly(attempt.producer, clients, txn_id)
            runtimes.drop(txn_id)
            last = exc
        except (RetriableKafkaError, FatalKafkaError, IllegalStateError) as exc:
            log.warning("batch attempt failed; recreating the clients", error=str(exc), kind=type(exc).__name__)
            _abort_quietly(attempt.producer, clients, txn_id)
            clients.drop_producer(txn_id)
            runtimes.drop(txn_id)
            clients.drop_consumers(cfg)
            last = exc
        except BaseException:
            _abort_quietly(attempt.producer, clients, txn_id)
            runtimes.drop(txn_id)
            raise
    raise BatchFailedError(f"task {plan.task} batch {plan.batch} failed after {cfg.max_batch_attempts} attempts: "
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
