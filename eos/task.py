"""The task side of the micro-batch protocol (DESIGN section 4). Runs inside a Spark task.

One batch of one task, in this order:

1. Get the task's transactional producer: the worker's cached one, or a new one after
   `init_transactions()`, which fences every older attempt of this task and completes its transaction.
2. Read the committed input offsets again (stable read). Where they are already >= the planned end,
   an earlier attempt did the work: no-op.
3. Open the task's state stores and bring them up to their changelog's end (stateful tasks).
4. Read the input records in [committed, end) with read_committed.
5. Process them; state writes go to an in-memory write buffer.
6. begin; produce outputs, changelog records and dead letters; add the offsets (always the planned end,
   never "last record + 1"); commit.
7. Only after the commit: apply the write buffer to the local stores atomically with the changelog offset.
8. Return metrics.

Failures follow the error taxonomy: fenced -> stop this attempt (unless it was only the worker's cached
producer that was fenced: then initialise a new one and run again); abortable -> abort and run the batch
again; retriable/fatal -> drop the producer and run again; after `max_batch_attempts` the Spark task fails.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from typing import Any

from confluent_kafka import TopicPartition

from eos.batch import TaskPlan, TaskResult
from eos.config import EosConfig
from eos.faults import FaultHooks, FaultPoint
from eos.logs import configure_logging, get_logger
from eos.placement import current_executor, executor_location
from eos.runtime import TaskRuntime
from eos.topology import SubTopology, TaskId
from eos.worker import CLIENTS, WorkerClients
from transactions import (
    FatalKafkaError,
    IllegalStateError,
    KafkaEosError,
    OffsetRange,
    ProducerFencedError,
    RetriableKafkaError,
    RetryPolicy,
    TransactionAbortableError,
    TransactionalProducer,
    read_ranges,
    stable_committed,
)

__all__ = ["Job", "run_task", "BatchFailedError", "encode_commit_metadata", "decode_commit_metadata"]

_METADATA_VERSION = "eos1"

#: How long a task with a cached producer waits for pending offsets before suspecting that another attempt
#: opened a transaction since (then it initialises a fresh producer, which aborts that transaction). The
#: task's own last commit can leave its offsets pending only until the commit markers are written.
CACHED_PRODUCER_STABLE_WAIT = 3.0
_ONE_TRY = RetryPolicy(attempts=1)


class BatchFailedError(RuntimeError):
    """A batch could not be committed within `max_batch_attempts`; the Spark task fails (and is retried)."""


class Job:
    """Everything a task needs, shipped to workers once per run (as a broadcast)."""

    def __init__(self, config: EosConfig, subtopologies: dict[str, SubTopology], fault_hooks: FaultHooks,
                 extras: dict[str, Any] | None = None) -> None:
        self.run_id = uuid.uuid4().hex  # task runtimes cached by workers belong to one run
        self.config = config
        self.subtopologies = subtopologies
        self.fault_hooks = fault_hooks
        self.extras = extras or {}


def run_task(plan: TaskPlan, job: Job, spark_attempt: int = 0, clients: WorkerClients = CLIENTS) -> TaskResult:
    cfg = job.config
    configure_logging(cfg.log_format, cfg.log_level)
    sub = job.subtopologies[plan.subtopology]
    task = TaskId(sub.name, plan.partition)
    txn_id = task.transactional_id(cfg.application_id)
    log = get_logger("eos.task", app=cfg.application_id, task=str(task), batch=plan.batch, attempt=spark_attempt)
    started = time.monotonic()
    if _cold_retry(plan, job, sub, spark_attempt):
        # Spark retried the task (its executor was lost) on an executor without a copy of its state: let the
        # driver plan it on the copy with the least lag instead of replaying the whole changelog here.
        log.info("retry landed on an executor without the task's state; deferring to the planner",
                 planned=plan.preferred_location, here=executor_location())
        return _result(plan, task, "deferred", spark_attempt, 0)
    last: Exception | None = None
    for batch_attempt in range(1, cfg.max_batch_attempts + 1):
        producer: TransactionalProducer | None = None
        fresh = False
        try:
            producer, fresh = clients.producer(txn_id, cfg)
            result = _run_batch(plan, job, sub, task, producer, fresh, clients, spark_attempt, batch_attempt, log)
            result.total_ms = (time.monotonic() - started) * 1000
            return result
        except ProducerFencedError as exc:
            clients.drop_producer(txn_id)
            clients.drop_runtime(txn_id)
            if fresh:
                log.warning("fenced: a newer attempt owns this task; this attempt stops", error=str(exc))
                return _result(plan, task, "fenced", spark_attempt, batch_attempt)
            log.info("cached producer was fenced (another worker ran this task); initialising a new one")
            last = exc
        except TransactionAbortableError as exc:
            log.warning("transaction aborted; running the batch again", error=str(exc))
            _abort_quietly(producer, clients, txn_id)
            clients.drop_runtime(txn_id)
            last = exc
        except (RetriableKafkaError, FatalKafkaError, IllegalStateError) as exc:
            log.warning("batch attempt failed; recreating the clients", error=str(exc), kind=type(exc).__name__)
            _abort_quietly(producer, clients, txn_id)
            clients.drop_producer(txn_id)
            clients.drop_runtime(txn_id)
            clients.drop_consumers(cfg)
            last = exc
        except BaseException:
            _abort_quietly(producer, clients, txn_id)
            clients.drop_runtime(txn_id)
            raise
    raise BatchFailedError(f"task {task} batch {plan.batch} failed after {cfg.max_batch_attempts} attempts: {last}")


def _cold_retry(plan: TaskPlan, job: Job, sub: SubTopology, spark_attempt: int) -> bool:
    if spark_attempt == 0 or not plan.preferred_location or not any(s.persistent for s in sub.stores):
        return False
    here = executor_location()
    if here is None or here == plan.preferred_location:
        return False
    from eos.stateful import state_root

    return not (state_root(job.config) / plan.task).is_dir()


def _abort_quietly(producer: TransactionalProducer | None, clients: WorkerClients, txn_id: str) -> None:
    if producer is None:
        return
    try:
        producer.abort(timeout=10)
    except (KafkaEosError, IllegalStateError):
        clients.drop_producer(txn_id)


def _result(plan: TaskPlan, task: TaskId, status: str, spark_attempt: int, batch_attempt: int) -> TaskResult:
    return TaskResult(task=str(task), batch=plan.batch, status=status,  # type: ignore[arg-type]
                      spark_attempt=spark_attempt, batch_attempts=batch_attempt, executor=current_executor(),
                      location=executor_location(), pid=os.getpid(), host=socket.gethostname())


def encode_commit_metadata(stream_time: int, producer_token: str) -> str:
    """Offset-commit metadata: the task's stream time (as Kafka Streams keeps partition time there) and the
    token of the producer that committed."""
    return f"{_METADATA_VERSION};st={stream_time};p={producer_token}"


def decode_commit_metadata(metadata: str | None) -> tuple[int, str | None]:
    """(stream time or -1, producer token or None); tolerant of metadata written by others."""
    fields = dict(part.split("=", 1) for part in (metadata or "").split(";")[1:] if "=" in part)
    if not (metadata or "").startswith(_METADATA_VERSION):
        return -1, None
    try:
        stream_time = int(fields.get("st", "-1"))
    except ValueError:
        stream_time = -1
    return stream_time, fields.get("p")


def _run_batch(plan: TaskPlan, job: Job, sub: SubTopology, task: TaskId, producer: TransactionalProducer, fresh: bool,
               clients: WorkerClients, spark_attempt: int, batch_attempt: int, log: Any) -> TaskResult:
    cfg = job.config
    txn_id = task.transactional_id(cfg.application_id)
    consumer = clients.consumer(cfg)
    result = _result(plan, task, "committed", spark_attempt, batch_attempt)

    def fire(point: str) -> None:
        job.fault_hooks.fire(FaultPoint(point, str(task), task.partition, plan.batch, spark_attempt, batch_attempt))

    # 2. Stable read: the committed offsets are the only source of truth for progress.
    t0 = time.monotonic()
    wait = min(cfg.batch_timeout, 20.0) if fresh else min(cfg.batch_timeout, CACHED_PRODUCER_STABLE_WAIT)
    try:
        committed = stable_committed(consumer, [(r.topic, r.partition) for r in plan.ranges], timeout=wait,
                                     **({} if fresh else {"policy": _ONE_TRY}))
    except RetriableKafkaError as exc:
        if fresh:
            raise
        # Only attempts of this task write offsets of these partitions. A cached producer's own transactions
        # are finished, so the pending offsets are another attempt's, one that initialised after this
        # producer (and died, or hangs): this producer is fenced, and a fresh init_transactions() aborts that
        # transaction now rather than after the broker's transaction timeout.
        raise ProducerFencedError(f"{txn_id}: offsets still pending in another attempt's transaction after "
                                  f"{wait:.0f}s; the cached producer is stale") from exc
    ranges = tuple(OffsetRange(r.topic, r.partition,
                               c.offset if (c := committed[(r.topic, r.partition)]).offset is not None else r.start,
                               r.end) for r in plan.ranges)
    result.offsets_ms = (time.monotonic() - t0) * 1000
    decoded = [decode_commit_metadata(c.metadata) for c in committed.values()]
    stream_time = max((st for st, _ in decoded), default=-1)
    if producer.commits and any(token not in (None, producer.token) for _, token in decoded):
        # Another worker committed this task since this cached producer's last commit, so it was fenced.
        raise ProducerFencedError(f"{txn_id}: another worker committed this task since; the cached producer is stale")

    if all(r.empty for r in ranges):
        result.status = "noop"
        return result

    # 3. Open the stores and restore them to their changelogs' end (runtime cached while the task stays here).
    runtime: TaskRuntime | None = clients.runtime(txn_id, job.run_id)
    if runtime is None:
        runtime = TaskRuntime(job, sub, task.partition)
        clients.set_runtime(txn_id, job.run_id, runtime)
    try:
        result.restore_ms, result.restored_records = runtime.ensure_restored(clients, log)
        outcome, changelog = _process_and_commit(runtime, ranges, stream_time, producer, consumer, cfg, result,
                                                 fire)
    finally:
        runtime.release()
    result.records_in, result.bytes_in = outcome.records_in, outcome.bytes_in
    result.records_out, result.dead_letters = len(outcome.outputs), len(outcome.dead_letters)
    result.changelog_records = len(changelog)
    log.debug("batch committed", records_in=result.records_in, records_out=result.records_out,
              dead_letters=result.dead_letters, commit_ms=round(result.commit_ms, 1))
    return result


def _process_and_commit(runtime: TaskRuntime, ranges: tuple[OffsetRange, ...], stream_time: int,
                        producer: TransactionalProducer, consumer: Any, cfg: EosConfig, result: TaskResult,
                        fire: Any) -> tuple[Any, list[Any]]:
    """Steps 4-7: read, process, one transaction, then the local state."""
    # 4. Read [committed, end) with read_committed.
    t0 = time.monotonic()
    messages = [m for chunk in read_ranges(consumer, list(ranges), timeout=cfg.batch_timeout) for m in chunk]
    if len(ranges) > 1:  # co-partitioned inputs: process in timestamp order, like Kafka Streams
        messages.sort(key=lambda m: (m.timestamp()[1], m.offset()))
    result.read_ms = (time.monotonic() - t0) * 1000
    fire("after_read")

    # 5. Process: outputs and state changes stay in memory until the commit.
    t0 = time.monotonic()
    outcome = runtime.process(messages, stream_time)
    result.process_ms = (time.monotonic() - t0) * 1000
    changelog = runtime.changelog_records()

    # 6. One transaction: outputs, changelog records, dead letters and the input offsets.
    t0 = time.monotonic()
    producer.begin()
    bytes_out = 0
    for topic, partition, key, value, headers, ts in outcome.outputs:
        producer.produce(topic, value, key, partition=partition, headers=headers, timestamp=ts)
        bytes_out += (len(value) if value else 0) + (len(key) if key else 0)
    for records in (changelog, outcome.dead_letters):
        for topic, partition, key, value, headers, ts in records:
            producer.produce(topic, value, key, partition=partition, headers=headers, timestamp=ts)
    fire("after_produce")
    metadata = encode_commit_metadata(max(stream_time, outcome.stream_time), producer.token)
    offsets = [TopicPartition(r.topic, r.partition, _commit_offset(r, outcome.stopped_at), metadata) for r in ranges]
    producer.send_offsets(offsets, consumer.consumer_group_metadata(), timeout=cfg.batch_timeout)
    result.produce_ms = (time.monotonic() - t0) * 1000
    fire("before_commit")
    result.commit_ms = producer.commit(timeout=cfg.batch_timeout) * 1000
    result.committed_at = time.time()
    fire("after_commit")

    # 7. Only now does local state change (atomically with the changelog offsets it reflects).
    runtime.after_commit(producer.last_offsets)
    result.store_offsets = runtime.store_offsets()
    result.committed_offsets = {f"{tp.topic}:{tp.partition}": tp.offset for tp in offsets}
    result.bytes_out = bytes_out
    return outcome, changelog


def _commit_offset(r: OffsetRange, stopped_at: dict[tuple[str, int], int] | None) -> int:
    """The planned end (never "last record + 1": a trailing commit marker would be re-read forever), or,
    when the processor asked to commit early, the next unprocessed offset."""
    if stopped_at is None:
        return r.end
    return stopped_at.get((r.topic, r.partition), r.start)
