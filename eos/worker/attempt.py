"""One attempt at one batch of a unit: the micro-batch protocol (docs/design.md, section 4), in order.

A unit is the tasks that share one transaction (`tasks_per_transaction`; one task alone is a unit of one).
`UnitAttempt.run()` takes the unit's producer, reads every task's progress (2, one read for the unit), runs
each task's `BatchAttempt` through steps 3-6a in turn (each task's outputs go into the one transaction as it
goes; the next task's input is prefetched meanwhile), then commits all of them at once:

1. `Transaction.acquire()`  the worker's cached producer of the unit's transactional id, or a new one after
                            `init_transactions()`, which fences every older attempt and completes its
                            transaction;
2. `read_progress()`     a stable read of the task's committed input offsets: where they already reach the
                         planned end, an earlier attempt did the work (no-op);
3. `restore_state()`     open the task's stores and bring them up to their changelogs' end;
4. `read_input()`        read `[committed, end)` with read_committed, finishing on consumer position;
5. `process()`           run the processor; state writes go to in-memory write buffers;
   or, for a task reading one partition through a processor, 4 and 5 together:
4-5. `stream()`          read, process and produce in slices: the transaction begins with the first slice's
                         outputs, so the batch is never held whole (at most `batch_slice_records` outputs
                         and one consumer chunk of records are);
6a. `stage()`            the task's outputs, changelog records, dead letters and ledger entry into the
                         transaction, and the offsets it commits (always the planned end, never "last record
                         + 1", or where a streamed batch stopped to keep its transaction short);
6b. `UnitAttempt.commit()`  every task's offsets, then one `commit_transaction()`;
7. `apply_state()`       only after the commit: the write buffers reach the local stores, atomically with
                         the changelog offsets they reflect;
8. `report()`            each task's result and metrics for the driver.

What happens when a step fails (fenced, abortable, retriable, fatal) is decided by `eos.worker.entry`, for the
unit as a whole: its tasks commit together or not at all.
"""

from __future__ import annotations

import operator
import os
import socket
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import structlog
from pyroaring import BitMap64

from eos.config import EosConfig
from eos.hooks import FaultPoint, HookPoint
from eos.ledger import LedgerEntry, LedgerInput, ledger_opening
from eos.origin import lineage_source
from eos.topology import SubTopology
from eos.tracing import batch_span, link_inputs
from eos.worker.clients import UNIT_PURPOSE, TaskClients
from eos.worker.dead_letters import dead_letter_error
from eos.worker.executor import current_executor, executor_location
from eos.worker.plans import Job, TaskPlan, TaskResult, TaskStatus, runtime_key, unit_id
from eos.worker.processing import BatchOutcome
from eos.worker.progress import CommitMetadata, fenced_since
from eos.worker.runtime import RuntimeCache, TaskRuntime, said_idle
from recovery import KnownBounds
from transactions import (
    Committed,
    Consumer,
    KafkaEosError,
    Message,
    OffsetOutOfRangeError,
    OffsetRange,
    OutputProducer,
    ProducerFencedError,
    ProducerRecord,
    RangeReader,
    RetriableKafkaError,
    RetryPolicy,
    TopicPartition,
    TransactionAbortableError,
    read_together,
    stable_committed,
    unknown_topic,
)

__all__ = ["BatchAttempt", "UnitAttempt", "Transaction", "StalePlanError", "CACHED_PRODUCER_STABLE_WAIT"]

log = structlog.get_logger(__name__)

#: How long a task with a cached producer waits for pending offsets before suspecting that another attempt
#: opened a transaction since (then it initialises a fresh producer, which aborts that transaction). The
#: task's own last commit can leave its offsets pending only until the commit markers are written.
CACHED_PRODUCER_STABLE_WAIT = 3.0
#: The longest a batch's top-up waits to keep its task's cadence (`BatchAttempt._keep_cadence`), as a share of
#: the trigger interval
CADENCE_WAIT_SHARE = 0.25
_ONE_TRY = RetryPolicy(attempts=1)


class StalePlanError(Exception):
    """The plan no longer matches the committed offsets (e.g. a topic was created again since): the batch goes
    back to the planner."""


def together_groups(sizes: Sequence[int], cap: int) -> list[tuple[int, int]]:
    """`sizes` (each task's offsets to read, in the order the tasks run) cut into runs of consecutive tasks,
    `(first, end)` indexes, each at most `cap` offsets in all or a single task: the tasks whose input is read
    in one read (`UnitAttempt._read_together`)."""
    groups: list[tuple[int, int]] = []
    first, total = 0, 0
    for i, size in enumerate(sizes):
        if i > first and total + size > cap:
            groups.append((first, i))
            first, total = i, 0
        total += size
    if sizes:
        groups.append((first, len(sizes)))
    return groups


@contextmanager
def planned_input() -> Iterator[None]:
    """Around a read of planned input: input that is no longer there (deleted by retention, the topic created
    again) makes the plan stale, and the batch is planned again."""
    try:
        yield
    except OffsetOutOfRangeError as exc:
        raise StalePlanError(f"the planned input is gone ({exc}); planning again") from exc


class Transaction:
    """The one transaction of a unit's batch attempt: the producer of the unit's transactional id (cached by
    the worker, or initialised for this attempt) and when the transaction began."""

    def __init__(self, txn_id: str, clients: TaskClients, config: EosConfig, *, unit: bool = False) -> None:
        """`unit`: the id commits several tasks at once (`tasks_per_transaction` > 1)."""
        self.txn_id, self.clients, self.config, self.unit = txn_id, clients, config, unit
        self.producer: OutputProducer | None = None
        self.fresh = False  # the producer was initialised by this attempt (not taken from the cache)
        self.begun_at: float | None = None
        self.fenced: set[str] = set()  # transactional ids of other groupings this attempt fenced

    def acquire(self) -> OutputProducer:
        """The cached producer of the unit's transactional id, or a fresh one: `init_transactions()` fences
        every older attempt and completes (aborts) a transaction it left open."""
        if self.producer is None:
            self.producer, self.fresh = self.clients.producer(self.txn_id, self.config, unit=self.unit)
        return self.producer

    def begin(self) -> None:
        assert self.producer is not None
        if self.begun_at is None:
            self.producer.begin()
            self.begun_at = time.monotonic()

    def open_for(self) -> float:
        """Seconds since the transaction began (0 before it did)."""
        return 0.0 if self.begun_at is None else time.monotonic() - self.begun_at


class BatchAttempt:
    """One task's part of a unit's batch attempt: steps 2-6a and 7-8 of the protocol for its task."""

    def __init__(self, plan: TaskPlan, job: Job, clients: TaskClients, runtimes: RuntimeCache, spark_attempt: int,
                 batch_attempt: int, txn: Transaction, *, alone: bool = False, in_memory: bool = False) -> None:
        """`clients`: Kafka (`eos.worker.clients`) or memory (`eos.testing`); `runtimes`: the worker's cache;
        `txn`: the unit's transaction; `alone`: the task has it to itself; `in_memory`: a runtime this attempt
        builds keeps every store in memory (a test driver's worker)."""
        self.plan, self.job, self.clients, self.runtimes = plan, job, clients, runtimes
        self.in_memory = in_memory
        self.config = job.config
        self.task = plan.task
        self.sub: SubTopology = job.subtopologies[plan.task.subtopology]
        self.txn = txn
        self.txn_id = self.txn.txn_id
        self.spark_attempt, self.batch_attempt = spark_attempt, batch_attempt
        self.result = result_of(plan, TaskStatus.COMMITTED, spark_attempt, batch_attempt)
        self.span: Any = None
        #: what reads the task's input: the worker's consumer for `slot`, or one that prefetched it
        self.slot = "input"
        self.cut_off = False  # whether the late cut-off was applied (`extend_to_stable_end`)
        self.alone = alone
        self._topped_up: Iterator[list[Message]] | None = None  # the top-up's read, closed with the stream's
        self._gathering: BatchOutcome | None = None  # a streamed batch's outcome while it is processed
        self.reader: RangeReader | None = None
        self.ranges: tuple[OffsetRange, ...] = plan.ranges
        self.stream_time = -1
        self.punctuation: dict[int, int] = {}  # the schedule as last committed
        self.clocks = ""  # the clocks of the repartition inputs' sources as last committed (eos.streamtime)
        self.runtime: TaskRuntime | None = None
        #: the task's committed progress as the batch found it (`progress_key`)
        self.committed: object = None
        self.messages: list[Message] = []
        self.outcome = BatchOutcome()
        self.changelog: list[ProducerRecord] = []
        #: the bounds of the task's changelogs, read with the rest of its unit's (`UnitAttempt._read_bounds`)
        self.known_bounds: dict[tuple[str, int], tuple[int, int]] = {}

    @property
    def producer(self) -> OutputProducer | None:
        return self.txn.producer

    @property
    def fresh(self) -> bool:
        return self.txn.fresh

    def progress(self, read: Mapping[tuple[str, int], Committed] | None = None) -> bool:
        """Step 2: whether the task has a batch to run (input, or an idle plan's due punctuations). `read`: as
        for `read_progress`."""
        if not self.read_progress(read) and not self.plan.idle:
            self.result.status = TaskStatus.NOOP
            return False
        return True

    def work(self, scope: ExitStack) -> bool:
        """Steps 3-5: True when the batch has something to commit (then `stage` comes next). The task's runtime
        is released, and its batch span ends, when `scope` closes (after the unit's commit)."""
        runtime = self.restore_state()
        scope.callback(runtime.release)
        self.span = span = scope.enter_context(batch_span(self.config.tracing, str(self.task), self.plan.batch,
                                                          self.batch_attempt))
        scope.callback(self._end_span)
        one_partition = len(self.ranges) == 1 and not self.plan.idle
        if one_partition and not self.cut_off:
            self.extend_to_stable_end()
        if runtime.streams and one_partition:
            self.stream(span)
        else:
            self.read_input()
            link_inputs(span, (m.headers() for m in self.messages) if span is not None else ())
            self.process()
        if self.plan.idle and not (self.outcome.outputs or self.changelog):
            self.result.status = TaskStatus.NOOP  # punctuations ran (or were not due) and produced nothing
            return False
        return True

    def _end_span(self) -> None:
        if self.span is not None:
            self.span.set_attributes({"eos.records_in": self.outcome.records_in,
                                      "eos.records_out": self.outcome.output_count,
                                      "eos.dead_letters": self.outcome.dead_letter_count})

    # ------------------------------------------------------------------ 2
    def read_progress(self, read: Mapping[tuple[str, int], Committed] | None = None) -> bool:
        """Stable read of the committed offsets: the only source of truth for progress. Sets the ranges to
        read (from the committed offsets to the planned ends) and the task's stream time. False when an
        earlier attempt already committed everything planned. `read`: the offsets the unit read for all its
        tasks at once (`UnitAttempt.read_committed`; none but the unit's attempts commit them meanwhile)."""
        assert self.producer is not None
        t0 = time.monotonic()
        partitions = [(r.topic, r.partition) for r in self.plan.ranges]
        if read is None:
            self._fence_other_groupings(self.plan.last_groupings)
            committed = self.read_committed(partitions)
        else:
            committed = {tp: read[tp] for tp in partitions}
        if self.plan.last_producer is not None and all(c.offset is None for c in committed.values()):
            # The plan's read found the task's offsets committed, and committed offsets do not vanish while a
            # job runs: librdkafka 2.16 answers a read during a coordinator move as "nothing committed", with
            # no error (README, "Known limits"). Believed, the batch would start from the plan's start without
            # the task's stream time, punctuation schedule and clocks, which the commit's metadata carries.
            raise RetriableKafkaError(f"{self.txn_id}: the offsets of {sorted(partitions)} were answered as never "
                                      f"committed, where the plan found them committed by {self.plan.last_producer}")
        decoded = [CommitMetadata.decode(c.metadata) for c in committed.values()]
        if self._fence_other_groupings(m.grouping for c, m in zip(committed.values(), decoded, strict=True)
                                       if c.offset is not None and m.producer):
            return self.read_progress()  # committed since the plan was made: what it committed counts
        self.ranges = tuple(self._range(r, committed[(r.topic, r.partition)]) for r in self.plan.ranges)
        self.committed = progress_key({tp: c.offset for tp, c in committed.items()}, (m.producer for m in decoded))
        self.result.offsets_ms = (time.monotonic() - t0) * 1000
        self.stream_time = max((m.stream_time for m in decoded), default=-1)
        self.punctuation = next((m.punctuation for m in decoded if m.punctuation), {})
        self.clocks = next((m.clocks for m in decoded if m.clocks), "")
        if fenced_since(self.producer, (m.producer for m in decoded)):
            # Another worker committed this task since this cached producer's last commit, so it was fenced.
            raise ProducerFencedError(f"{self.txn_id}: another worker committed this task since; the cached "
                                      "producer is stale")
        return not all(r.empty for r in self.ranges)

    def read_committed(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], Committed]:
        """The committed offsets of `partitions`, stably: waiting while a transaction holds pending ones."""
        wait = min(self.config.batch_timeout, 20.0 if self.fresh else CACHED_PRODUCER_STABLE_WAIT)
        committed: dict[tuple[str, int], Committed] = {}
        try:
            for consumer, tps in self._by_group(partitions):
                committed.update(stable_committed(consumer, tps, timeout=wait,
                                                  **({} if self.fresh else {"policy": _ONE_TRY})))
        except RetriableKafkaError as exc:
            if self.fresh:
                raise
            # Only attempts of this unit write offsets of these partitions. A cached producer's own
            # transactions are finished, so the pending offsets are another attempt's, one that initialised
            # after this producer (and died, or hangs): this producer is fenced, and a fresh
            # init_transactions() aborts that transaction now rather than after the transaction timeout.
            raise ProducerFencedError(f"{self.txn_id}: offsets still pending in another attempt's transaction "
                                      f"after {wait:.0f}s; the cached producer is stale") from exc
        return committed

    def _fence_other_groupings(self, groupings: Iterable[int]) -> bool:
        """Fence the transactional ids that committed the task under another `tasks_per_transaction` (another
        unit's id, or the task's own): each is fenced as a new attempt of it would be, `init_transactions()`
        bumping its epoch and aborting what it left open, which would otherwise hold the task's offsets
        pending until the transaction timeout. True when one was fenced. Each id once per attempt; exactly
        once only (at least once keeps no transactions). A change of grouping is exactly-once when no attempt
        of the previous run is still alive (docs/design.md, section 3)."""
        if self.config.processing_guarantee != "exactly_once":
            return False
        stale = {self.task.transactional_id(self.config.application_id, g) for g in groupings
                 if g != self.plan.grouping} - self.txn.fenced - {self.txn_id}
        for txn_id in sorted(stale):
            log.info("fencing the transactional id that last committed the task under another "
                     "tasks_per_transaction", fenced=txn_id, unit=self.txn_id)
            self.clients.drop_producer(txn_id)
            self.clients.producer(txn_id, self.config)  # init_transactions(): the id can commit no more
            self.clients.drop_producer(txn_id)
            self.txn.fenced.add(txn_id)
        return bool(stale)

    def _by_group(self, partitions: list[tuple[str, int]]) -> list[tuple[Consumer, list[tuple[str, int]]]]:
        """The partitions grouped by the consumer group their progress is committed under (a topic another
        sub-topology reads first has this one's own group), each with a consumer of that group."""
        by: dict[str, list[tuple[str, int]]] = {}
        for tp in partitions:
            by.setdefault(self.job.groups.get((self.sub.name, tp[0]), self.config.group_id), []).append(tp)
        return [(self.clients.consumer(self.config) if g == self.config.group_id
                 else self.clients.consumer(self.config, group=g), tps) for g, tps in by.items()]

    def _range(self, planned: OffsetRange, committed: Committed) -> OffsetRange:
        """The range to read: from the committed offset (the planner's start when nothing is committed) to
        the planned end, or from where the planner moved the start when the committed offset no longer
        points into the partition (retention, a recreated topic). A committed offset of another topic
        incarnation that the plan does not account for means the plan is stale."""
        tp = (planned.topic, planned.partition)
        offset = committed.offset
        if offset is None:
            return planned
        reset = self.plan.resets.get(tp)
        if reset is not None and reset.committed == offset:
            self.result.resets[tp] = reset
            return OffsetRange(planned.topic, planned.partition, reset.start, max(reset.start, planned.end))
        recorded_id = CommitMetadata.decode(committed.metadata).topic_id
        planned_id = self.plan.topic_ids.get(planned.topic)
        if recorded_id and planned_id and recorded_id != planned_id:
            raise StalePlanError(f"{planned.topic}[{planned.partition}]: the committed offset {offset} belongs to "
                                 f"another incarnation of the topic than the plan's; planning again")
        return OffsetRange(planned.topic, planned.partition, offset, planned.end)

    # ------------------------------------------------------------------ 3
    def restore_state(self) -> TaskRuntime:
        """The task's runtime (kept by the worker while the task stays here) with its stores open and
        restored to their changelogs' end. The caller releases it when the batch ends."""
        key = runtime_key(self.task, self.config)
        runtime = self.runtimes.get(key, self.job.run_id)
        if runtime is None:
            runtime = TaskRuntime(self.job, self.sub, self.task.partition, self.clients.topic_rules(self.config),
                                  in_memory=self.in_memory)
            self.runtimes.put(key, self.job.run_id, runtime)
        self.runtime = runtime
        cfg, clients = self.config, self.clients
        changelogs, known = clients.changelogs(cfg), self.known_bounds
        self.known_bounds = {}  # (read once: a second restore in this attempt reads them afresh)
        try:
            self.result.restore_ms, self.result.restored_records = runtime.ensure_restored(
                KnownBounds(changelogs, known) if known else changelogs, self.committed,
                {(r.topic, r.partition): r.start for r in self.ranges})
            if self.sub.global_tables:
                self.result.restored_records += runtime.refresh_globals(
                    lambda table: clients.global_copy(cfg, table), clients.reader(cfg, "global"),
                    self.plan.global_pins, cfg.batch_timeout)
        except BaseException:
            runtime.release()
            raise
        return runtime

    def changelogs_to_bound(self) -> list[tuple[str, int]]:
        """The task's changelog partitions when its stores read their bounds in this batch for sure: this worker
        holds no runtime of the task yet, or its stores are all in memory (kept persistent stores that are
        current read none: `TaskStores.open`). Else none."""
        runtime = self.runtimes.get(runtime_key(self.task, self.config), self.job.run_id)
        if not self.sub.stores or (runtime is not None and runtime.stores is not None and runtime.stores.persistent):
            return []
        return [(spec.changelog_topic(self.config.application_id), self.task.partition) for spec in self.sub.stores
                if spec.source_topic is None]

    # ------------------------------------------------------------------ 4
    def extend_to_stable_end(self) -> None:
        """The late cut-off of a batch of one partition: it reads it up to the last stable offset as it is
        when the task begins reading, not only as it was when the driver planned the batch (and never more
        than `max_records_per_batch` from its start). Records that arrived while the batch's Spark job
        reached the worker, or while the worker ran its other tasks, are in this batch rather than the next.
        The batch commits the end it read to, as it would the planned one. Not when the plan was capped (no
        records to gain), reset a partition, or carries stream-time stamps, which speak of the planned end
        (eos.streamtime); a failed look-up leaves the planned end."""
        cut_off_late([self], self.clients, self.config)

    def late_range(self) -> OffsetRange | None:
        """The one range the late cut-off may extend (`extend_to_stable_end`), or None; marks it applied."""
        self.cut_off = True
        (r,) = self.ranges
        if not self._may_read_on():
            return None
        return r if r.end < r.start + self.config.max_records_per_batch else None

    def _may_read_on(self) -> bool:
        """Whether the batch (of one partition) may read past its planned end: not when the plan was capped
        (behind), reset a partition or carries stream-time stamps, which speak of the planned end."""
        plan, (r,) = self.plan, self.ranges
        return not (plan.behind or plan.resets or plan.stamps is not None or r.topic in self.job.clocked_topics)

    def extend_to(self, stable: int) -> OffsetRange | None:
        """Read on to `stable` (at most `max_records_per_batch` from the start); returns the range added, if any."""
        (r,) = self.ranges
        end = min(stable, r.start + self.config.max_records_per_batch)
        if end <= r.end:
            return None
        self.result.extended += end - r.end
        self.ranges = (OffsetRange(r.topic, r.partition, r.start, end),)
        return OffsetRange(r.topic, r.partition, r.end, end)

    def _may_top_up(self) -> bool:
        """Whether the batch tops up (`_top_up`): once per batch (a read that ends after the top-up's is not
        topped up again), where the late cut-off may read on (`_may_read_on`), below the batch's cap, and where
        the task has its unit's transaction to itself (a unit's tasks would each wait for their look-up in
        turn)."""
        (r,) = self.ranges
        return (self.alone and self._topped_up is None and self._may_read_on()
                and r.end < r.start + self.config.max_records_per_batch)

    def _send_gathered(self) -> bool:
        """Before the top-up's look-up: produce the outputs and dead letters gathered so far, put the ledger's
        partition and the task's consumer group in the transaction (`_join_early`) and wait for the deliveries,
        so that the commit after the top-up waits only for what the top-up read. librdkafka sends one produce
        request per partition, and the broker checks a partition's first request in a transaction against the
        transaction: a task's commit after its top-up waited for those checks in turn (in the peers' latency
        run, the window from the top-up's look-up to the commit fell from 33 to 27-29 ms;
        docs/measurements.md). False (no top-up) when the transaction has been open as long as the batch may
        keep it open."""
        outcome = self._gathering
        if outcome is None:
            return True
        if (outcome.outputs or outcome.dead_letters) and self._drain(outcome):
            return False
        joined = self._join_early()
        if joined or outcome.drained_outputs or outcome.drained_dead_letters:
            assert self.producer is not None
            t0 = time.monotonic()
            self.producer.flush(self.config.batch_timeout)
            self.result.produce_ms += (time.monotonic() - t0) * 1000
        return True

    def _join_early(self) -> bool:
        """Before the top-up, what the commit would otherwise add to the transaction in its window, each with a
        round trip to the transaction coordinator of its own (librdkafka asks for them explicitly): the ledger's
        partition, with an opening record (`eos.ledger.ledger_opening`: the entry itself says what the batch read,
        known only at its commit), and the task's consumer group, with the offset the batch started from
        (the commit sends the batch's own after the top-up, into the same transaction: that one never
        commits). At 2,000 records a second on 4 partitions the window from a task's top-up to its commit
        fell from 15.8 to 11.2 ms at the median, from 37.2 to 29.6 at its p99, and the peers' p99 latency by
        3 ms (docs/measurements.md). True when the ledger's record was produced (then flushed before the
        top-up)."""
        assert self.producer is not None
        if self.config.processing_guarantee != "exactly_once":
            return False  # (no transaction: the offsets are committed apart, after the outputs)
        (r,) = self.ranges
        self.txn.begin()
        opened = self.config.lineage and not self.plan.idle
        if opened:
            self.producer.produce(self.job.ledger_topic, ledger_opening(str(self.task)), str(self.task).encode(),
                                  partition=0, track=False)
        t0 = time.monotonic()
        for consumer, _ in self._by_group([(r.topic, r.partition)]):
            self.producer.send_offsets([TopicPartition(r.topic, r.partition, r.start)],
                                       consumer.consumer_group_metadata(), timeout=self.config.batch_timeout)
        self.result.produce_ms += (time.monotonic() - t0) * 1000
        return opened

    def _top_up(self) -> Iterator[list[Message]] | None:
        """The records that became stable while a streamed batch read and processed the rest: once its read
        reached the end it was cut off at, the batch reads on to the partition's last stable offset as it is
        now (at most `max_records_per_batch` from its start), so that what arrived meanwhile commits with it
        rather than a trigger interval later. At 2,000 records a second on 4 partitions a task's commit came
        57 ms (median) after its late cut-off, the read and processing of its ~500 records among them; 38 ms
        after its top-up's look-up, which found ~9 records more (docs/measurements.md). A failed look-up ends
        the batch where it was. The caller checks `_may_top_up` and sends what the batch gathered
        first (`_send_gathered`). The consumer starts fetching from the end it was cut off at before the
        look-up, so that the records are fetched while the look-up runs."""
        (r,) = self.ranges
        self._fire(HookPoint.BEFORE_TOP_UP)
        self._keep_cadence()
        ahead = OffsetRange(r.topic, r.partition, r.end, r.start + self.config.max_records_per_batch)
        read = self.clients.prefetch(self.config, [ahead], self.slot)
        self.result.topped_up_at = time.time()
        try:
            stable = self.clients.stable_ends(self.config, [(r.topic, r.partition)],
                                              timeout=min(5.0, self.config.batch_timeout))
        except KafkaEosError as exc:
            log.debug("the last stable offset could not be read again; the batch ends where it was cut off",
                      error=str(exc))
            stable = {}
        added = self.extend_to(stable[(r.topic, r.partition)]) if (r.topic, r.partition) in stable else None
        if added is None:
            read([], 0.0)  # (a read of nothing ends the prefetch: the consumer is unassigned)
            return None
        self.result.topped_up = added.end - added.start
        self._topped_up = read([added], self.config.batch_timeout)
        return self._topped_up

    def _keep_cadence(self) -> None:
        """Before the top-up: wait until the plan's `top_up_at` (the task's last top-up plus the trigger
        interval) if the batch got here sooner, at most `CADENCE_WAIT_SHARE` of the interval and never past the
        time the transaction may stay open. A record's wait for its commit is the time from its arrival to the
        next top-up, so a top-up that comes early shortens one interval and lengthens the next: the Spark job's
        dispatch moved a task's start by ~100 ms from batch to batch (p50 104-134, p90 188-227 ms), and the
        intervals between a task's top-ups spread to 0.85-1.12 s, the tail of latency (docs/measurements.md)."""
        wait = min(self.plan.top_up_at - time.time(), CADENCE_WAIT_SHARE * self.config.trigger_interval,
                   self._open_budget() - self.txn.open_for())
        if wait > 0:
            time.sleep(wait)
            self.result.cadence_wait_ms += wait * 1000

    def read_input(self) -> list[Message]:
        """The visible records of `[committed, end)`, read_committed, each partition in offset order
        (processing merges co-partitioned inputs in timestamp order, never reordering one partition)."""
        t0 = time.monotonic()
        read = self.reader or self.clients.reader(self.config, self.slot)
        with planned_input():
            self.messages = [m for chunk in read(list(self.ranges), self.config.batch_timeout) for m in chunk]
        self.result.read_ms = (time.monotonic() - t0) * 1000
        self._fire(HookPoint.AFTER_READ)
        return self.messages

    # ------------------------------------------------------------------ 5
    def process(self) -> BatchOutcome:
        """Run the processor: outputs and state changes stay in memory until the commit."""
        assert self.runtime is not None
        t0 = time.monotonic()
        self.outcome = self.runtime.process(self.messages, self.stream_time, self.punctuation, self.plan.behind,
                                            self.clocks, self.plan.stamps)
        self.changelog = self.runtime.changelog_records()
        self.result.process_ms = (time.monotonic() - t0) * 1000
        return self.outcome

    # ------------------------------------------------------------------ 4-5
    def stream(self, span: object) -> None:
        """Read, process and produce the batch in slices (one input partition, a processor): each chunk the
        consumer hands over is processed at once, and whenever `batch_slice_records` outputs have gathered they are
        produced into the transaction, which begins with the first of them. A range without a visible record
        is an empty batch (`process` with no records)."""
        assert self.runtime is not None
        read = self.reader or self.clients.reader(self.config, self.slot)
        chunks = read(list(self.ranges), self.config.batch_timeout)
        try:
            t0 = time.monotonic()
            first = self._next_chunk(chunks)
            self.result.read_ms = (time.monotonic() - t0) * 1000
            if first is None:
                self._fire(HookPoint.AFTER_READ)
                self.process()
                return
            seen: set[bytes] = set()
            link_inputs(span, (m.headers() for m in first), seen)
            tp = (self.ranges[0].topic, self.ranges[0].partition)
            first_read, t0 = self.result.read_ms, time.monotonic()
            self._gathering = BatchOutcome()
            self.outcome = self.runtime.process({tp: self._records(first, chunks, span, seen)}, self.stream_time,
                                                self.punctuation, self.plan.behind, self.clocks, self.plan.stamps,
                                                drain=self._drain, into=self._gathering)
        finally:
            self._gathering = None
            for reading in (chunks, self._topped_up):
                close = getattr(reading, "close", None)  # a batch that stopped early leaves the rest unread: closing
                if close is not None:  # the reader (a generator: read_ranges) unassigns the consumer now
                    close()
        self.changelog = self.runtime.changelog_records()
        self.result.process_ms = ((time.monotonic() - t0) * 1000 - (self.result.read_ms - first_read)
                                  - self.result.produce_ms)
        self._fire(HookPoint.AFTER_READ)

    def _next_chunk(self, chunks: Iterator[list[Message]]) -> list[Message] | None:
        with planned_input():
            return next(chunks, None)

    def _records(self, first: list[Message], chunks: Iterator[list[Message]], span: object,
                 seen: set[bytes]) -> Iterator[Message]:
        """The streamed batch's records, chunk by chunk as the consumer hands them over (read time measured)."""
        chunk: list[Message] | None = first
        while chunk is not None:
            yield from chunk
            t0 = time.monotonic()
            chunk = self._next_chunk(chunks)
            if chunk is None and self._may_top_up():
                self.result.read_ms += (time.monotonic() - t0) * 1000
                sent = self._send_gathered()  # (counted as producing)
                t0 = time.monotonic()
                if sent and (more := self._top_up()) is not None:
                    chunks = more
                    chunk = self._next_chunk(chunks) or []  # (a top-up of markers and aborted records holds none)
            self.result.read_ms += (time.monotonic() - t0) * 1000
            if chunk is not None and span is not None:
                link_inputs(span, (m.headers() for m in chunk), seen)

    def _drain(self, outcome: BatchOutcome) -> bool:
        """Produce a streamed batch's outputs and dead letters so far into the open transaction. True (stop
        after this record, commit what was processed) once the transaction has been open for as long as the
        transaction timeout allows before the commit's own `batch_timeout`."""
        assert self.producer is not None
        t0 = time.monotonic()
        self.txn.begin()
        outputs, dead_letters = outcome.drained()
        self.result.bytes_out += self.producer.produce_all(outputs)
        self.producer.produce_all(dead_letters)
        self.result.produce_ms += (time.monotonic() - t0) * 1000
        self._fire(HookPoint.AFTER_SLICE)
        return self.txn.open_for() > self._open_budget()

    def _open_budget(self) -> float:
        """How long a streamed batch may keep its transaction open while it processes: the transaction
        timeout less the commit's `batch_timeout`, or half the timeout when the two are close."""
        timeout = self.config.transaction_timeout_ms / 1000
        return max(timeout - self.config.batch_timeout, timeout / 2)

    # ------------------------------------------------------------------ 6a
    def stage(self, changelog: bool = True) -> list[TopicPartition]:
        """The task's share of the unit's transaction: outputs, dead letters, ledger entry and (with `changelog`;
        else `stage_changelog` later) changelog records produced into it. Returns the input offsets (with their
        metadata) the commit is to carry."""
        assert self.producer is not None
        producer, outcome = self.producer, self.outcome
        t0 = time.monotonic()
        self.txn.begin()
        self.result.bytes_out += producer.produce_all(outcome.outputs)
        producer.produce_all(outcome.dead_letters)
        if self.config.lineage and not self.plan.idle:  # an idle batch consumed nothing: nothing for the ledger
            producer.produce(self.job.ledger_topic, self._ledger_entry().encode(), str(self.task).encode(),
                             partition=0, track=False)
        stream_time = max(self.stream_time, outcome.stream_time)
        punctuation = self.runtime.punctuation_state() if self.runtime is not None else {}
        idle = said_idle(self.plan.stamps, outcome)
        grouping = self.plan.grouping
        offsets = [TopicPartition(r.topic, r.partition, self._commit_offset(r),
                                  CommitMetadata(stream_time, producer.token, self.plan.topic_ids.get(r.topic),
                                                 punctuation, outcome.clocks, idle, grouping).encode())
                   for r in self.ranges]
        self.result.produce_ms += (time.monotonic() - t0) * 1000
        if changelog:
            self.stage_changelog()
        return offsets

    def stage_changelog(self) -> None:
        """The batch's changelog records into the transaction (the stores record their offsets); then every
        record of the task is produced (`AFTER_PRODUCE`)."""
        assert self.producer is not None
        t0 = time.monotonic()
        self.producer.produce_all(self.changelog, track=True)
        self.result.produce_ms += (time.monotonic() - t0) * 1000
        self._fire(HookPoint.AFTER_PRODUCE)

    def _ledger_entry(self) -> LedgerEntry:
        """What this batch consumed, per input partition, and which of its records produced nothing."""
        transitive = self.job.transitive_topics
        # one input partition, not a repartition topic: its records' own offsets (read without a lookup each)
        only = ((self.ranges[0].topic, self.ranges[0].partition)
                if len(self.ranges) == 1 and self.ranges[0].topic not in transitive else None)
        through: dict[tuple[str, int], BitMap64] = {}  # (of the filtered, those read from a repartition topic)
        # (the same by the path each took, kept by a task that reads a repartition topic)
        paths: dict[tuple[str, int], dict[int, BitMap64]] | None = (
            {} if any(r.topic in transitive for r in self.ranges) else None)
        filtered = _offsets_by_partition(self.outcome.filtered, transitive, only, through, paths)
        late = _offsets_by_partition(self.outcome.late, frozenset(), only)  # (each by its own place: ledger.late)
        by_step: dict[str, list[Message]] = {}
        for msg, step in self.outcome.late_steps:
            by_step.setdefault(step, []).append(msg)
        late_by = {step: _offsets_by_partition(msgs, frozenset(), only) for step, msgs in by_step.items()}
        held = _offsets_by_partition(self.outcome.held, transitive, only)
        inputs = []
        for r in self.ranges:
            reset = self.result.resets.get((r.topic, r.partition))
            inputs.append(LedgerInput(r.topic, r.partition, self.plan.topic_ids.get(r.topic), r.start,
                                      self._commit_offset(r), reset.committed if reset else None,
                                      reset.reason.value if reset else None, reset.not_read_from if reset else None))
        pins = {topic: {p: end for p, (_, end) in ends.items()} for topic, ends in self.plan.global_pins.items()}
        return LedgerEntry(str(self.task), self.plan.batch, tuple(inputs), filtered, late, through, held, pins,
                           paths=paths, late_by=late_by)

    def _commit_offset(self, r: OffsetRange) -> int:
        """The planned end (never "last record + 1": a trailing commit marker would be re-read forever), or,
        when the processor asked to commit early, the next unprocessed offset."""
        stopped_at = self.outcome.stopped_at
        if stopped_at is None or (r.topic, r.partition) in self.outcome.finished:
            return r.end
        return stopped_at.get((r.topic, r.partition), r.start)

    # ------------------------------------------------------------------ 7
    def apply_state(self) -> None:
        """Called only after the commit: local state changes, atomically with the changelog offsets it reflects
        (invariant I3: a store never holds a write whose transaction did not commit)."""
        assert self.runtime is not None and self.producer is not None
        self.runtime.after_commit(self.producer.last_offsets,
                                  {(r.topic, r.partition): self._commit_offset(r) for r in self.ranges})
        self.runtime.applied = progress_key(self.result.committed_offsets, [self.producer.token])
        self.result.store_offsets = self.runtime.store_offsets()

    # ------------------------------------------------------------------ 8
    def report(self) -> TaskResult:
        r, outcome = self.result, self.outcome
        r.records_in, r.bytes_in, r.records_folded = outcome.records_in, outcome.bytes_in, outcome.records_folded
        r.records_direct = outcome.records_direct
        r.records_out, r.dead_letters = outcome.output_count, outcome.dead_letter_count
        r.changelog_records = len(self.changelog)
        r.punctuations = outcome.punctuations
        r.dropped = outcome.dropped
        if self.runtime is not None:
            r.punctuation = self.runtime.punctuation_state()
            r.next_wall_clock = self.runtime.next_wall_clock()
        first = outcome.first_dead_letter or (outcome.dead_letters[0] if outcome.dead_letters else None)
        if first is not None:
            r.first_dead_letter_error = dead_letter_error(first)
        if r.status is TaskStatus.COMMITTED:
            log.debug("batch committed", records_in=r.records_in, records_out=r.records_out,
                      dead_letters=r.dead_letters, commit_ms=round(r.commit_ms, 1))
        return r

    def _fire(self, point: HookPoint) -> None:
        hooks = self.job.fault_hooks
        if hooks.hooks:
            hooks.fire(FaultPoint(point, str(self.task), self.task.partition, self.plan.batch, self.spark_attempt,
                                  self.batch_attempt))


class UnitAttempt:
    """One attempt at one batch of a unit: step 2 for all its tasks, then each through steps 3-6a in turn,
    then one commit for all.

    A task's outputs go into the transaction as it goes, so the unit holds no more than one task's outputs at a
    time; its input is read for several of its tasks at once, at most `unit_read_records` offsets a read
    (`_read_together`). Once the transaction has been open for as long as `_open_budget` allows, the tasks not
    yet run are left for the next batch (DEFERRED: the planner plans them again), as a streamed batch stops
    early; so are all but the first task with input in a run's first batch."""

    def __init__(self, plans: Sequence[TaskPlan], job: Job, clients: TaskClients, runtimes: RuntimeCache,
                 spark_attempt: int, batch_attempt: int, *, in_memory: bool = False) -> None:
        self.config = job.config
        self.clients = clients
        self.together_ms = 0.0
        self.txn = Transaction(unit_id(plans[0], self.config), clients, self.config, unit=plans[0].grouping > 1)
        self.members = [BatchAttempt(plan, job, clients, runtimes, spark_attempt, batch_attempt, self.txn,
                                     alone=len(plans) == 1, in_memory=in_memory) for plan in plans]

    def run(self) -> list[TaskResult]:
        self.txn.acquire()
        shared = len(self.members) > 1  # (a unit of one is a task alone: it reads and stages as one)
        t0 = time.monotonic()  # step 2 for all the unit's tasks at once: which have work, where their input starts
        read = self.read_committed() if shared else None  # (a task alone reads its own)
        read_ms = (time.monotonic() - t0) * 1000
        runnable = self._runnable([m for m in self.members if m.progress(read)])
        self._read_bounds(runnable)
        together = self._read_together(runnable)
        with ExitStack() as scope:
            staged: list[tuple[BatchAttempt, list[TopicPartition]]] = []
            for i, member in enumerate(runnable):
                if self.txn.open_for() > member._open_budget():
                    member.result.status = TaskStatus.DEFERRED
                    continue
                if i + 1 < len(runnable) and not together:
                    self._prefetch(runnable[i + 1], member)
                if member.work(scope):
                    staged.append((member, member.stage(changelog=not shared)))
            if staged:
                if shared:
                    # A unit's changelog records last, all together: librdkafka adds a partition to the
                    # transaction when its first record is produced, and a unit's tasks, staged one after
                    # another, each added its changelog partition in a request of its own (~19 a transaction
                    # against Kafka Streams' ~5 on 64 partitions; docs/measurements.md).
                    for member, _ in staged:
                        member.stage_changelog()
                self.commit(staged)
                for member, _ in staged:
                    member.apply_state()
        self.members[0].result.offsets_ms += read_ms  # (the unit's one read, counted once)
        self.members[0].result.read_ms += self.together_ms  # (and its one read of input, if it read it together)
        return [member.report() for member in self.members]

    @staticmethod
    def _runnable(members: list[BatchAttempt]) -> list[BatchAttempt]:
        """The tasks with work to run now. In a run's first batch a unit commits after its first task with
        input: the first outputs come as soon as one task's would, not after all the unit's tasks have
        started their clients and read. The others (not a punctuation-only task) go to the next batch, which
        follows at once."""
        runnable: list[BatchAttempt] = []
        for member in members:
            if member.plan.first_batch and not member.plan.idle and any(not m.plan.idle for m in runnable):
                member.result.status = TaskStatus.DEFERRED
            else:
                runnable.append(member)
        return runnable

    def _read_bounds(self, runnable: list[BatchAttempt]) -> None:
        """Step 3's changelog bounds, in one read for all the unit's tasks whose stores read them in this batch (a
        unit of 32 new tasks spent ~1 s a worker reading them task after task: docs/measurements.md). Read
        here they are what each task would read at its restore: the attempt holds the unit's transactional id
        and has fenced the ids of other groupings (steps 1 and 2), and a task's changelog partitions are
        written by its own batch alone, after its restore."""
        new = {m: tps for m in runnable if (tps := m.changelogs_to_bound())}
        if len(new) < 2:
            return
        bounds = self.clients.changelogs(self.config).bounds([tp for tps in new.values() for tp in tps])
        for member, tps in new.items():
            member.known_bounds = {tp: bounds[tp] for tp in tps}

    def _read_together(self, runnable: list[BatchAttempt]) -> bool:
        """Read the input of the unit's tasks that have some in reads of several tasks each, at most
        `unit_read_records` offsets a read (`together_groups`; 50,000 by default, where a unit of 32 tasks at
        ~120,000 records a second on two workers has ~60,000 a batch): the partitions of a read are fetched side by
        side, where a task after task read meant an assignment, a fetch and an unassignment each (a unit of 32
        tasks spent more on those than on its records: docs/measurements.md). The first read happens now,
        before the first task runs; each later one when the first task of its group asks for its input. Each
        task then processes what was read for it (`read_together`); the late cut-off is applied to all of them
        first, so a later read reads ranges fixed now. True when every task with input reads so."""
        reading = [m for m in runnable if not m.plan.idle and not all(r.empty for r in m.ranges)]
        if len(reading) < 2:
            return False
        cut_off_late([m for m in reading if len(m.ranges) == 1], self.clients, self.config)
        groups = together_groups([sum(r.end - r.start for r in m.ranges) for m in reading],
                                 self.config.unit_read_records)
        if len(groups) == len(reading):  # (no two tasks fit in one read: each reads alone, the next prefetched)
            return False
        for first, end in groups:
            group = reading[first:end]
            read = self._together([r for m in group for r in m.ranges])
            if first == 0:  # (the first group's read now, counted as the unit's; a later one in its first task's)
                t0 = time.monotonic()
                read([], self.config.batch_timeout)
                self.together_ms = (time.monotonic() - t0) * 1000
            for member in group:
                member.reader = read
        return True

    def _together(self, ranges: list[OffsetRange]) -> RangeReader:
        """The reader of `ranges` read together (`read_together`) on the unit's consumer, which reads them once
        it is first asked for any (a read of none only reads them)."""
        together: RangeReader | None = None

        def read(later: list[OffsetRange], timeout: float) -> Iterator[list[Message]]:
            nonlocal together
            if together is None:
                with planned_input():
                    together = read_together(self.clients.reader(self.config, UNIT_PURPOSE), ranges,
                                             self.config.batch_timeout)
            return together(later, timeout) if later else iter([])

        return read

    def _prefetch(self, member: BatchAttempt, running: BatchAttempt) -> None:
        """Start fetching `member`'s input on the worker's other input consumer while `running` runs, so that
        its read does not begin with a fetch's round trip (a unit's tasks read one after another)."""
        if member.plan.idle or all(r.empty for r in member.ranges):
            return
        member.slot = "input-ahead" if running.slot == "input" else "input"
        member.reader = member.clients.prefetch(self.config, list(member.ranges), member.slot)

    def read_committed(self) -> dict[tuple[str, int], Committed]:
        """Step 2 for all the unit's tasks at once: one stable read of their committed offsets (per consumer
        group) rather than one per task, after fencing the ids of other groupings their plans name."""
        first = self.members[0]
        for member in self.members:
            member._fence_other_groupings(member.plan.last_groupings)
        return first.read_committed([(r.topic, r.partition) for m in self.members for r in m.plan.ranges])

    # ------------------------------------------------------------------ 6b
    def commit(self, staged: list[tuple[BatchAttempt, list[TopicPartition]]]) -> None:
        """Every staged task's input offsets into the transaction (one request per consumer group), then the
        one commit: all of the unit's batches become visible together, or none does."""
        producer, cfg = self.txn.producer, self.config
        assert producer is not None
        t0 = time.monotonic()
        by_tp = {(tp.topic, tp.partition): tp for _, offsets in staged for tp in offsets}
        for consumer, tps in staged[0][0]._by_group(list(by_tp)):
            try:
                producer.send_offsets([by_tp[tp] for tp in tps], consumer.consumer_group_metadata(),
                                      timeout=cfg.batch_timeout)
            except TransactionAbortableError as exc:
                if not unknown_topic(exc):
                    raise
                # an input deleted after the batch was planned (a topic a pattern matched): no attempt of this
                # plan can commit; the planner plans the next batch without it
                raise StalePlanError(f"an input of the batch is gone: {exc}") from exc
        staged[0][0].result.produce_ms += (time.monotonic() - t0) * 1000  # (the unit's one request, counted once)
        for member, _ in staged:
            member._fire(HookPoint.BEFORE_COMMIT)
        commit_ms = producer.commit(timeout=cfg.batch_timeout) * 1000
        committed_at = time.time()
        for member, offsets in staged:
            member.result.commit_ms, member.result.committed_at = commit_ms, committed_at
            member.result.committed_offsets = {(tp.topic, tp.partition): tp.offset for tp in offsets}
        for member, _ in staged:
            member._fire(HookPoint.AFTER_COMMIT)


_OFFSET = operator.methodcaller("offset")


def _offsets_by_partition(msgs: list[Message], transitive: frozenset[str], only: tuple[str, int] | None = None,
                          through: dict[tuple[str, int], BitMap64] | None = None,
                          paths: dict[tuple[str, int], dict[int, BitMap64]] | None = None,
                          ) -> dict[tuple[str, int], BitMap64]:
    """The lineage origins of `msgs` as offsets per partition (each bitmap built at once from its offsets:
    a cached aggregation's batch counts every input as filtered). `only`: the one partition all of `msgs`
    come from, whose records are their own origins. `through`: filled with the origins of those of `msgs`
    read from a repartition topic; `paths`: the same by the index each carried (the path it took)."""
    if only is not None:
        return {only: BitMap64(list(map(_OFFSET, msgs)))} if msgs else {}
    offsets: dict[tuple[str, int], list[int]] = {}
    hops: dict[tuple[str, int, int], list[int]] = {}
    for msg in msgs:
        if msg.topic() in transitive:
            topic, partition, offset, index = lineage_source(msg, transitive)
            hops.setdefault((topic, partition, index), []).append(offset)
        else:
            topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        tp = (topic, partition)
        found = offsets.get(tp)
        if found is None:
            found = offsets[tp] = []
        found.append(offset)
    for (topic, partition, index), found in hops.items():
        if through is not None:
            through.setdefault((topic, partition), BitMap64()).update(found)
        if paths is not None:
            paths.setdefault((topic, partition), {})[index] = BitMap64(found)
    return {tp: BitMap64(found) for tp, found in offsets.items()}


def cut_off_late(members: Sequence[BatchAttempt], clients: TaskClients, config: EosConfig) -> None:
    """The late cut-off of each of `members` (batches of one partition: `BatchAttempt.extend_to_stable_end`),
    their partitions' last stable offsets read in one request (a unit of 32 tasks asked 32 times)."""
    todo = [(member, r) for member in members if (r := member.late_range()) is not None]
    if not todo:
        return
    try:
        stable = clients.stable_ends(config, sorted({(r.topic, r.partition) for _, r in todo}),
                                     timeout=min(5.0, config.batch_timeout))
    except KafkaEosError as exc:
        log.debug("the last stable offsets could not be read; the batches end where they were planned",
                  error=str(exc))
        return
    for member, r in todo:
        if (r.topic, r.partition) in stable:
            member.extend_to(stable[(r.topic, r.partition)])


def progress_key(offsets: Mapping[tuple[str, int], int | None], committers: Iterable[str | None]) -> object:
    """A task's committed progress, comparable from batch to batch: its input offsets and the producers that
    committed them. Equal to what a runtime's own last commit left (`TaskRuntime.applied`), it says that nobody
    committed the task since: every commit of a task's changelog commits its input offsets too, and carries
    its producer's token in their metadata (`eos.worker.progress`)."""
    return frozenset(offsets.items()), frozenset(committers)


def result_of(plan: TaskPlan, status: TaskStatus, spark_attempt: int, batch_attempt: int) -> TaskResult:
    """A result for `plan` stamped with where it ran."""
    return TaskResult(task=plan.task, batch=plan.batch, status=status, spark_attempt=spark_attempt,
                      batch_attempts=batch_attempt, executor=current_executor(), location=executor_location(),
                      pid=os.getpid(), host=socket.gethostname())
