"""A task's processing runtime inside one worker: its processor (or batch function) and its stores.

Kept by the worker between batches while the task stays there (`RuntimeCache`); dropped whenever a batch
fails, so a runtime never carries effects of a transaction that did not commit. It is built from the job
and reads its changelogs and global tables through what it is given (`recovery.ChangelogSource`, a
`transactions.RangeReader`): Kafka in a Spark task, memory in `eos.testing.TopologyTestDriver`.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable, Mapping

from eos.cache import RecordCache
from eos.errors import TaskFailedError
from eos.processor import Processor
from eos.streamtime import EventClock, is_marker
from eos.tables import GlobalTable
from eos.time import RECORD_TIME
from eos.topology import SubTopology, TaskId
from eos.worker.context import TaskContext
from eos.worker.dead_letters import DeadLetterPolicy
from eos.worker.global_tables import GlobalCopy, GlobalTableView
from eos.worker.plans import Job, StampPlan
from eos.worker.processing import (
    NOT_A_BAD_RECORD,
    BatchOutcome,
    Drain,
    RecordScoped,
    input_readings,
    punctuate_idle,
    run_processor,
)
from eos.worker.stores import TaskStores
from eos.worker.topic_rules import TopicRule
from eos.worker.vectorized import run_batch_function
from recovery import ChangelogSource
from transactions import Message, ProducerRecord, RangeReader

__all__ = ["TaskRuntime", "RuntimeCache", "RUNTIMES"]


class TaskRuntime:
    def __init__(self, job: Job, sub: SubTopology, partition: int,
                 topic_rules: Callable[[str], TopicRule] | None = None, *, in_memory: bool = False) -> None:
        """`in_memory`: every store in memory and no state directory (a test driver's worker)."""
        cfg = job.config
        self.sub = sub
        self.job_config = cfg
        self.task = TaskId(sub.name, partition)
        self.topic_rules = topic_rules
        self.dlq = DeadLetterPolicy(cfg.dlq_topic, partition if partition < job.dlq_partitions else None,
                                    str(self.task), cfg.on_bad_record == "fail", topic_rules, job.transitive_topics)
        self.lineage = cfg.lineage
        self.stores = TaskStores(cfg, sub, partition, in_memory=in_memory, keep=True) if sub.stores else None
        self.globals = {g.name: GlobalTableView(g) for g in sub.global_tables}
        self.cache = RecordCache(cfg.cache_max_bytes) if cfg.cache_max_bytes and sub.stores else None
        self.context = TaskContext(application_id=cfg.application_id, subtopology=sub.name, partition=partition,
                                   output_topic=sub.output, key_serde=sub.output_key_serde,
                                   value_serde=sub.output_value_serde, lineage=cfg.lineage,
                                   stores={**(self.stores.views if self.stores else {}), **self.globals},
                                   topic_rules=topic_rules, transitive_topics=job.transitive_topics,
                                   raw_topics=sub.raw_outputs, serdes=sub.output_serdes,
                                   stamped_topics=frozenset(sub.output_topics) & job.clocked_topics,
                                   record_cache=self.cache)
        #: inputs whose records carry their sources' clocks (eos.streamtime)
        self.clocked = frozenset(sub.inputs) & job.clocked_topics
        self.processor = _create_processor(sub, self.context) if sub.processor_factory is not None else None
        #: how each input topic is read: serdes bound to it (a Schema Registry serde's subject), timestamps
        self.readings = input_readings(sub)
        self.reused = False  # whether a batch already ran on this runtime
        #: the task's committed progress as this runtime's last commit left it, once its changes were applied to
        #: the stores (`eos.worker.attempt.progress_key`); None while a batch runs, or after one that failed
        self.applied: object = None

    def ensure_restored(self, changelogs: ChangelogSource, progress: object = None,
                        committed: Mapping[tuple[str, int], int] | None = None) -> tuple[float, int]:
        """Open the task's stores and bring them up to their changelog's end. Returns (ms, records replayed).
        `progress`: what the task's committed offsets say now (offsets and the producers that committed them);
        when it is what this runtime's own last applied commit left (`applied`), stores kept open since are
        current as they are. Until this batch's commit is applied, nothing is taken as applied. `committed`:
        where the batch starts reading each input partition (stores restored from a table's topic end there)."""
        exact = self.job_config.processing_guarantee == "exactly_once"  # (at least once commits offsets apart)
        current, self.applied = exact and progress is not None and progress == self.applied, None
        return self.stores.open(changelogs, current=current, committed=committed) if self.stores else (0.0, 0)

    def refresh_globals(self, copy_of: Callable[[GlobalTable], GlobalCopy], read: RangeReader,
                        pins: dict[str, dict[int, tuple[int, int]]], timeout: float) -> int:
        """Bring the global tables this task reads (`copy_of(table)`: the worker's copy) to the batch's pinned
        offsets. Returns records read."""
        records = 0
        for view in self.globals.values():
            copy = copy_of(view.table)
            records += copy.advance(read, pins.get(view.table.topic, {}), timeout)
            view.copy = copy
        return records

    @property
    def streams(self) -> bool:
        """Whether a batch can be streamed through this runtime (`eos.worker.processing`): a processor (not a
        batch function, which takes its batch whole) reading one input topic, so one partition per task."""
        return self.processor is not None and len(self.sub.inputs) == 1 and self.job_config.batch_slice_records > 0

    def process(self, messages: list[Message] | Mapping[tuple[str, int], Iterable[Message]], stream_time: int,
                punctuation: dict[int, int], behind: frozenset[tuple[str, int]] = frozenset(), clocks: str = "",
                stamps: StampPlan | None = None, drain: Drain | None = None,
                into: BatchOutcome | None = None) -> BatchOutcome:
        """Process a batch starting at `stream_time` and the sources' `clocks` (from the committed offsets'
        metadata), with the punctuation schedule the driver last heard of. An empty batch runs only the
        punctuations due. With `stamps`, the batch ends with this task's clock sent to every partition of
        the clocked topics it writes (eos.streamtime). `messages`: the batch, or (streamed, when `streams`)
        its one partition's records as they are read, with `drain` producing outputs as they gather (gathered
        `into` the outcome given, which the caller may drain too)."""
        outcome = self._process(messages, stream_time, punctuation, behind, clocks, stamps, drain, into)
        if stamps is not None and self.context._stamped:
            self.context.stream_time = max(self.context.stream_time, outcome.stream_time)
            outcome.outputs.extend(self.context.markers({t: n for t, (n, _, _) in stamps.topics.items()},
                                                        idle=said_idle(stamps, outcome)))
        return outcome

    def _process(self, messages: list[Message] | Mapping[tuple[str, int], Iterable[Message]], stream_time: int,
                 punctuation: dict[int, int], behind: frozenset[tuple[str, int]], clocks: str,
                 stamps: StampPlan | None, drain: Drain | None, into: BatchOutcome | None) -> BatchOutcome:
        sub = self.sub
        self.context.stamp_sources = {t: (first + self.task.partition, total)
                                      for t, (_, first, total) in (stamps.topics if stamps else {}).items()}
        if self.processor is not None:
            ctx = self.context
            ctx.stream_time = max(ctx.stream_time, stream_time) if self.reused else stream_time
            ctx.adopt_punctuation_state(punctuation)
            ctx.begin_batch()
            self.reused = True
            scoped: list[RecordScoped] = [*self.stores.scoped()] if self.stores else []
            if self.cache is not None:
                scoped.append(self.cache)
            clock = None
            if self.clocked:  # the committed clocks are the truth, whatever this runtime saw before
                clock = EventClock(self.clocked, direct=len(self.clocked) < len(sub.inputs), stream_time=stream_time)
                clock.adopt(clocks)
            if not messages:
                outcome = punctuate_idle(self.processor, ctx, scoped, self.dlq)
                if clock is not None:
                    outcome.clocks, outcome.sources_idle = clocks, clock.all_idle()
                return outcome
            return run_processor(self.processor, ctx, messages, key_serde=sub.key_serde,
                                 value_serde=sub.value_serde, dlq=self.dlq, scoped=scoped,
                                 timestamp=sub.timestamp or RECORD_TIME,
                                 per_topic=self.readings,
                                 behind=behind if len(sub.inputs) > 1 else frozenset(), event_clock=clock,
                                 drain=drain, drain_at=self.job_config.batch_slice_records, into=into)
        assert sub.batch_fn is not None and isinstance(messages, list)
        if self.clocked:  # a vectorized step reading clocked topics keeps no clock: markers are not records
            messages = [m for m in messages if m.topic() not in self.clocked or not is_marker(m.headers())]
        ctx = self.context  # (its clock, Kafka Streams' stream time, stamps the rows and ends the batch's markers)
        outcome = run_batch_function(sub.batch_fn, sub.batch_format, messages, key_serde=sub.key_serde,
                                     value_serde=sub.value_serde, out_key_serde=sub.output_key_serde,
                                     out_value_serde=sub.output_value_serde, output_topic=sub.output,
                                     lineage=self.lineage, dlq=self.dlq, topic_rules=self.topic_rules,
                                     timestamp=sub.timestamp or RECORD_TIME, stream_time=stream_time,
                                     stamp=ctx.stamp_at if ctx._stamped else None)
        ctx.stream_time = outcome.stream_time
        return outcome

    def punctuation_state(self) -> dict[int, int]:
        return self.context.punctuation_state()

    def next_wall_clock(self) -> int | None:
        """When this task's next wall-clock punctuation is due (epoch ms), if it has any."""
        return self.context.next_wall_clock()

    def changelog_records(self) -> list[ProducerRecord]:
        return self.stores.changelog_records() if self.stores else []

    def after_commit(self, last_offsets: dict[tuple[str, int], int],
                     committed: Mapping[tuple[str, int], int] | None = None) -> None:
        """Called only after the batch's transaction committed: state changes reach the local stores
        (`committed`: the input offsets the batch committed)."""
        if self.stores:
            self.stores.apply(last_offsets, committed)

    def store_offsets(self) -> dict[str, int]:
        return self.stores.offsets() if self.stores else {}

    def release(self) -> None:
        """End of a batch (committed or not): persistent stores stay open for the next batch here (until another
        process asks for them or they idle), the batch's uncommitted changes dropped."""
        if self.stores:
            self.stores.release()

    def close(self) -> None:
        """The runtime is dropped: stores closed, the task's directory unlocked."""
        if self.stores:
            self.stores.close()
        if self.processor is not None:
            self.processor.close()


class RuntimeCache:
    """The task runtimes a worker keeps between batches, by transactional id, for one run (job definition)."""

    def __init__(self) -> None:
        self._runtimes: dict[str, tuple[str, TaskRuntime]] = {}

    def get(self, key: str, run_id: str) -> TaskRuntime | None:
        entry = self._runtimes.get(key)
        return entry[1] if entry is not None and entry[0] == run_id else None

    def put(self, key: str, run_id: str, runtime: TaskRuntime) -> None:
        """Cache a task runtime; runtimes of earlier runs (another job definition) are closed."""
        for other in [k for k, (rid, _) in self._runtimes.items() if rid != run_id or k == key]:
            self.drop(other)
        self._runtimes[key] = (run_id, runtime)

    def drop(self, key: str) -> None:
        entry = self._runtimes.pop(key, None)
        if entry is not None:
            entry[1].close()

    def clear(self) -> None:
        for key in list(self._runtimes):
            self.drop(key)


#: This worker process's runtimes (Spark reuses a Python worker from task to task).
RUNTIMES = RuntimeCache()


def said_idle(stamps: StampPlan | None, outcome: BatchOutcome) -> bool:
    """Whether a batch tells the readers of the topics it stamps that its task is idle: the planner says so
    (a task reading its input directly, with no input for `source_idle_timeout`), or the task reads clocked
    topics, caught up with them, and every source of its is idle (idleness passes on down the steps). A
    task merely caught up is not idle: new input may still come, older than other sources' clocks."""
    if stamps is None:
        return False
    return stamps.announce_idle or (stamps.caught_up and outcome.stopped_at is None and bool(outcome.sources_idle))


def _create_processor(sub: SubTopology, context: TaskContext) -> Processor:
    """Build and initialise the sub-topology's processor. A failure here is the job's code failing outside
    record processing: no record is to blame and running the task again cannot help."""
    assert sub.processor_factory is not None
    try:
        processor = sub.processor_factory()
        processor.init(context)
    except NOT_A_BAD_RECORD:
        raise
    except Exception as exc:
        raise TaskFailedError(
            f"the processor of sub-topology {sub.name!r} failed while being created or in init(): "
            f"{type(exc).__name__}: {exc}", task=context.task_id, cause_type=type(exc).__name__,
            detail=traceback.format_exc()) from exc
    return processor
