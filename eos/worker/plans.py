"""The contract between the driver and the Spark tasks: what the planner hands to a task, what a task hands
back, and the job definition every task gets (as a broadcast). Everything here crosses the process
boundary by pickling."""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from eos.errors import TaskFailure
from eos.topology import TaskId, offset_groups
from transactions import OffsetRange

if TYPE_CHECKING:
    from eos.config import EosConfig
    from eos.hooks import FaultHooks
    from eos.topology import SubTopology

__all__ = ["Job", "TaskPlan", "TaskGroup", "GroupMember", "StampPlan",
           "TaskResult", "TaskStatus", "StandbyPlan", "StandbyResult", "StandbyStatus",
           "OffsetReset", "SkipReason", "unit_id", "runtime_key"]

TopicPartition = tuple[str, int]


class Job:
    """Everything a task needs, shipped to workers once per run (as a broadcast)."""

    def __init__(self, config: EosConfig, subtopologies: dict[str, SubTopology], fault_hooks: FaultHooks,
                 dlq_partitions: int = 0, ledger_topic: str | None = None,
                 transitive_topics: frozenset[str] = frozenset(),
                 clocked_topics: frozenset[str] = frozenset()) -> None:
        self.run_id = uuid.uuid4().hex  # task runtimes cached by workers belong to one run
        self.config = config
        self.subtopologies = subtopologies
        self.fault_hooks = fault_hooks
        #: partitions of the dead-letter topic: a task writes its dead letters to its own partition if it exists
        self.dlq_partitions = dlq_partitions
        #: where each committed batch records what it consumed (written when config.lineage is on)
        self.ledger_topic = ledger_topic or f"{config.application_id}-ledger"
        #: the application's repartition topics: lineage reaches through them (eos.origin.lineage_origin)
        self.transitive_topics = transitive_topics
        #: topics between two sub-topologies whose records carry their writers' clocks (eos.streamtime)
        self.clocked_topics = clocked_topics
        #: (sub-topology, input topic) -> the consumer group its progress is committed under
        self.groups = offset_groups(subtopologies, config.group_id)


class TaskStatus(enum.StrEnum):
    COMMITTED = "committed"  # this attempt committed the batch
    NOOP = "noop"  # an earlier attempt had already committed it
    FENCED = "fenced"  # a newer attempt owns the task; this one stopped
    DEFERRED = "deferred"  # a Spark retry landed where the task has no state: the planner places it again
    FAILED = "failed"  # a deterministic failure (see `failure`): the job stops


class SkipReason(enum.StrEnum):
    RETENTION = "retention"  # records deleted by retention before they were processed
    RECREATED = "recreated"  # the committed offset belongs to an earlier topic of the same name
    LATEST = "latest"  # nothing was committed: reading started where auto_offset_reset says (the end, a time)


@dataclass(frozen=True)
class OffsetReset:
    """The planner moved a partition's start away from its committed offset `committed` to `start`.
    `not_read_from`: where the records start that the job will never read, `[not_read_from, start)` (a start at
    the end under auto_offset_reset="latest": its first application, or a topic created again), None for none."""

    committed: int
    start: int
    reason: SkipReason
    not_read_from: int | None = None


@dataclass(frozen=True)
class StampPlan:
    """For a task that writes topics whose records carry their writers' clocks (eos.streamtime)."""

    #: topic -> (its partition count, the source index of the writing sub-topology's task 0, the topic's
    #: source count: the tasks of all its writers): every partition gets the task's clock after a batch
    topics: dict[str, tuple[int, int, int]]
    #: the batch takes the task's input up to its end as planned
    caught_up: bool
    #: the batch announces the task idle (it has had no input for `source_idle_timeout`): readers stop
    #: waiting for its clock
    announce_idle: bool = False
    #: the task said it was idle and has input again: this batch (without input) tells the readers first
    wake: bool = False


@dataclass(frozen=True)
class TaskPlan:
    task: TaskId
    batch: int
    #: One range per input partition: `start` is the driver's hint (the task re-reads the committed
    #: offset), `end` the last stable offset at planning time, capped by max_records_per_batch.
    ranges: tuple[OffsetRange, ...]
    #: Spark executor the planner prefers for this task (best effort), e.g. "executor_127.0.0.1_1".
    preferred_location: str | None = None
    #: Input topic -> its topic id (recorded with the committed offsets and in the lineage ledger).
    topic_ids: dict[str, str | None] = field(default_factory=dict)
    #: Input partitions whose start the planner moved away from the committed offset.
    resets: dict[TopicPartition, OffsetReset] = field(default_factory=dict)
    #: No input: the batch runs the task's due wall-clock punctuations (and creates its runtime).
    idle: bool = False
    #: Global table topic -> partition -> (first offset, end): the table as this batch (every attempt) sees it.
    global_pins: dict[str, dict[int, tuple[int, int]]] = field(default_factory=dict)
    #: Input partitions with more input than this batch takes (capped by max_records_per_batch). When one of
    #: several co-partitioned inputs runs out, the batch stops there: the others' later records wait for it,
    #: so that records are processed in timestamp order across batches too (Kafka Streams' synchronization).
    behind: frozenset[TopicPartition] = frozenset()
    #: The task writes repartition topics: how its clock goes with its records.
    stamps: StampPlan | None = None
    #: The token of the producer whose transaction last committed the task's offsets, as the planner read them
    #: (None: unknown). A worker whose cached producer has committed under another token was fenced since, so
    #: it does not claim the task as its own (`eos.worker.claims`).
    last_producer: str | None = None
    #: The `tasks_per_transaction` its last commits were made under, as the planner read them (without waiting
    #: for pending offsets). A task of another grouping now first fences the transactional id those name, so
    #: that a transaction it left open no longer holds its offsets.
    last_groupings: frozenset[int] = frozenset()
    #: How many tasks of its sub-topology share its transaction (`tasks_per_transaction` as the planner settled
    #: it for the run): its unit is partitions [k*n, (k+1)*n), and the unit's transactional id names n.
    grouping: int = 1
    #: Planned in the run's first batch: a unit (`tasks_per_transaction`) then commits after its first task
    #: with input and leaves the others to the next batch, so that its first outputs come as a task's would.
    first_batch: bool = False
    #: Wall-clock time (`time.time()`) before which the batch's top-up waits (0: none): the task's last top-up
    #: plus the trigger interval, so that its commits keep the trigger's cadence wherever in the batch its Spark
    #: task started (`BatchAttempt._keep_cadence`; the planner sets it from `TaskResult.topped_up_at`).
    top_up_at: float = 0.0


@dataclass(frozen=True)
class TaskGroup:
    """The tasks of one batch planned on one executor, shared out among `members` Spark tasks there: each member
    claims the tasks whose producers its worker process holds first (`eos.worker.claims`). Spark hands a task
    any idle Python worker, so one Spark task per Kafka task moved tasks between workers at random."""

    plans: tuple[TaskPlan, ...]
    batch: int
    #: names the group's claims: its executor (location, or "local") and its Spark job. A batch whose job
    #: failed is planned again under the same number; its new members must not take the old job's claims.
    key: str
    members: int
    preferred_location: str | None = None


@dataclass(frozen=True)
class GroupMember:
    """What one Spark task of a `TaskGroup` runs: its share of the group, claimed as it goes."""

    group: TaskGroup
    member: int

    @property
    def preferred_location(self) -> str | None:
        return self.group.preferred_location


@dataclass
class TaskResult:
    task: TaskId
    batch: int
    status: TaskStatus
    spark_attempt: int = 0
    batch_attempts: int = 1
    records_in: int = 0
    records_out: int = 0
    dead_letters: int = 0
    changelog_records: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    #: of records_in, those folded into a keyed aggregation in one loop (eos.worker.folding)
    records_folded: int = 0
    #: of records_in, those a function took in the direct loop (eos.worker.processing)
    records_direct: int = 0
    offsets_ms: float = 0.0  # stable read of the committed offsets
    read_ms: float = 0.0
    process_ms: float = 0.0
    produce_ms: float = 0.0  # begin, produce, send offsets
    commit_ms: float = 0.0
    restore_ms: float = 0.0
    restored_records: int = 0
    total_ms: float = 0.0
    committed_at: float = 0.0  # wall clock (time.time()) when the transaction committed
    #: Input offsets this task committed, per input partition.
    committed_offsets: dict[TopicPartition, int] = field(default_factory=dict)
    #: Offsets the batch read past its planned end (its partition's last stable offset when it began reading)
    extended: int = 0
    #: Of `extended`, the offsets read on to just before the commit (`BatchAttempt._top_up`)
    topped_up: int = 0
    #: Wall-clock time of the top-up's look-up (0: the batch did not top up), and how long the top-up waited
    #: for the plan's `top_up_at` first
    topped_up_at: float = 0.0
    cadence_wait_ms: float = 0.0
    executor: str | None = None
    location: str | None = None  # Spark preferred-location string of the executor it ran on
    pid: int = 0
    host: str = ""
    #: Changelog offset each store of the task reflects after this batch (its copy on this executor).
    store_offsets: dict[str, int] = field(default_factory=dict)
    #: Partitions whose reading started away from the committed offset (retention, a recreated topic).
    resets: dict[TopicPartition, OffsetReset] = field(default_factory=dict)
    #: The punctuation schedule after this batch, and when its next wall-clock punctuation is due (epoch ms).
    punctuation: dict[int, int] = field(default_factory=dict)
    next_wall_clock: int | None = None
    punctuations: int = 0
    #: records dropped on purpose, by reason (e.g. "late": all their windows were closed)
    dropped: dict[str, int] = field(default_factory=dict)
    #: The error of the batch's first dead letter (what a user needs to see when many records fail).
    first_dead_letter_error: str | None = None
    failure: TaskFailure | None = None


class StandbyStatus(enum.StrEnum):
    REFRESHED = "refreshed"
    BUSY = "busy"  # another process holds the copy right now
    ELSEWHERE = "elsewhere"  # Spark ran the refresh on another executor than planned


@dataclass(frozen=True)
class StandbyPlan:
    """Refresh the copy of a task's stores on one executor (a standby or a warm-up copy)."""

    task: TaskId
    batch: int
    preferred_location: str | None
    lag: int  # records the copy was behind when planned
    budget: float  # seconds of replay at most (EosConfig.standby_refresh_budget, shorter without active work)


@dataclass
class StandbyResult:
    task: TaskId
    batch: int
    status: StandbyStatus
    executor: str | None = None
    location: str | None = None
    replayed: int = 0
    ms: float = 0.0
    store_offsets: dict[str, int] = field(default_factory=dict)


def unit_id(plan: TaskPlan, config: EosConfig) -> str:
    """The transactional id that commits `plan`'s task: its unit's (`TaskPlan.grouping`; the task's own at 1)."""
    return plan.task.transactional_id(config.application_id, plan.grouping)


def runtime_key(task: TaskId, config: EosConfig) -> str:
    """Under what a worker keeps a task's runtime (`RuntimeCache`): the task's own id, whatever its unit."""
    return task.transactional_id(config.application_id)
