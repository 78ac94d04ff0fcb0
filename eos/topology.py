"""Sub-topologies and tasks.

A sub-topology reads co-partitioned input topics, runs its part of the processor graph (eos.graph: one or
many processors, record by record) and writes to its outputs.
A task is one partition index of a sub-topology (Kafka Streams' model): task count = the largest partition
count of its inputs, and task p reads partition p of each input that has one (`task_count`, `task_inputs`;
the inputs of a sub-topology that keeps state by key must be co-partitioned, `copartitioned`). Each task
has the stable transactional id `<application_id>-<subtopology>-<partition>`, or, when
`tasks_per_transaction` n > 1 tasks share a transaction, its unit's `<application_id>-<subtopology>-<first>x<n>`
(partitions [first, first + n), first a multiple of n).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from eos.processor import Processor
from eos.serde import Serde
from recovery import StoreSpec

__all__ = ["SubTopology", "TaskId", "BatchFormat", "clocked_topics", "copartitioned", "cyclic_topics", "task_count",
           "task_inputs", "uses_event_time"]

_NAME = re.compile(r"^[A-Za-z0-9_.]{1,100}$")

#: The table type a vectorized (`process_batch`) function gets and returns.
BatchFormat = Literal["pandas", "arrow"]


@dataclass(frozen=True, order=True)
class TaskId:
    """One task: a sub-topology and a partition index. `str(task)` is "<subtopology>-<partition>"."""

    subtopology: str
    partition: int

    def __str__(self) -> str:
        return f"{self.subtopology}-{self.partition}"

    def transactional_id(self, application_id: str, tasks_per_transaction: int = 1) -> str:
        """The id of the transactions that commit this task: its own, or its unit's when `tasks_per_transaction`
        tasks share one. A unit's id depends on n and its first partition only, never on the partition count."""
        if tasks_per_transaction <= 1:
            return f"{application_id}-{self.subtopology}-{self.partition}"
        first = self.partition - self.partition % tasks_per_transaction
        return f"{application_id}-{self.subtopology}-{first}x{tasks_per_transaction}"

    @classmethod
    def parse(cls, text: str) -> TaskId:
        """The inverse of `str()`: sub-topology names never contain '-', so the last '-' splits."""
        subtopology, _, partition = text.rpartition("-")
        if not subtopology or not partition.isdigit():
            raise ValueError(f"not a task id: {text!r} (expected <subtopology>-<partition>)")
        return cls(subtopology, int(partition))


@dataclass(frozen=True)
class SubTopology:
    name: str
    inputs: tuple[str, ...]
    output: str | None
    key_serde: Serde
    value_serde: Serde
    output_key_serde: Serde
    output_value_serde: Serde
    processor_factory: Callable[[], Processor] | None = None
    batch_fn: Callable[[Any], Any] | None = None
    batch_format: BatchFormat = "pandas"
    #: State stores used by the processor, one instance per task.
    stores: tuple[StoreSpec, ...] = ()
    #: Topics the processor may forward to besides `output`.
    extra_outputs: tuple[str, ...] = ()
    #: Where each record's event time comes from (eos.time); None: the record's own timestamp.
    timestamp: Callable[[Any], int] | None = None
    #: The processor may schedule wall-clock punctuation (Processor API): its tasks run once at start-up
    #: even without input, so the driver learns their schedules.
    may_punctuate: bool = False
    #: The windowed aggregations the window audit can replay (eos.windows.Windowing, each with the topic its
    #: results go to)
    windowings: tuple[Any, ...] = ()
    #: The windowed aggregations the window audit cannot replay, each (its name, why): the lineage audit
    #: proves their results (each once, derived from committed inputs); `audit_application` says so
    unreplayed_windows: tuple[tuple[str, str], ...] = ()
    #: Inputs read with other serdes or timestamps than the sub-topology's (a join's two sides):
    #: topic -> (key serde, value serde, timestamp extractor or None for the record's own timestamp).
    per_topic: Mapping[str, tuple[Serde, Serde, Callable[[Any], int] | None]] = field(default_factory=dict)
    #: Input topics with a policy of their own for where a partition nothing was committed for starts
    #: (`eos.offset_reset`; the others: the application's auto_offset_reset).
    offset_resets: Mapping[str, str] = field(default_factory=dict)
    #: Global tables the processor reads (eos.tables.GlobalTable): a full copy on every task, read up to
    #: offsets the planner pins for the batch.
    global_tables: tuple[Any, ...] = ()
    #: The joins the join audit can replay (eos.tables.JoinSpec, each with the topic its results go to)
    joins: tuple[Any, ...] = ()
    #: The joins it cannot replay, each (its name, its JoinSpec, why): the lineage audit proves their results
    #: (each once, derived from committed inputs); `audit_application` says so
    unreplayed_joins: tuple[tuple[str, Any, str], ...] = ()
    #: Output topics whose records the processor forwards already serialized (bytes or None), e.g. the
    #: subscriptions of a foreign-key join next to its results.
    raw_outputs: frozenset[str] = frozenset()
    #: the serdes of each output topic a sink writes (others: `output_key_serde`/`output_value_serde`)
    output_serdes: Mapping[str, tuple[Serde, Serde]] = field(default_factory=dict)
    #: the processor graph the sub-topology runs (eos.graph.GraphPart); None for one built by hand
    graph: Any = None

    def __post_init__(self) -> None:
        self.check_name(self.name)
        if not self.inputs:
            raise ValueError(f"sub-topology {self.name!r} has no input topic")
        if (self.processor_factory is None) == (self.batch_fn is None):
            raise ValueError(f"sub-topology {self.name!r} needs exactly one of a processor or a batch function")

    @staticmethod
    def check_name(name: str) -> None:
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"sub-topology name {name!r} must be 1-100 characters of [A-Za-z0-9_.] "
                             "(it is part of each task's transactional id; '-' separates the id's parts)")

    @property
    def output_topics(self) -> tuple[str, ...]:
        return tuple(t for t in (self.output, *self.extra_outputs) if t)

    def task(self, partition: int) -> TaskId:
        return TaskId(self.name, partition)


def task_count(sub: SubTopology, partition_counts: Mapping[str, int]) -> int:
    """How many tasks `sub` has: the largest partition count of its inputs (Kafka Streams' rule)."""
    return max(partition_counts[t] for t in sub.inputs)


def task_inputs(sub: SubTopology, partition: int, partition_counts: Mapping[str, int]) -> tuple[str, ...]:
    """The inputs the task of `partition` reads: those that have that partition (all of them where the inputs
    are co-partitioned; a merge of topics of other counts gives the extra tasks the larger topics only)."""
    return tuple(t for t in sub.inputs if partition < partition_counts[t])


def copartitioned(sub: SubTopology, clocked: frozenset[str] = frozenset()) -> bool:
    """Whether `sub`'s inputs must have equal partition counts: where a task keeps state (stores: aggregations,
    joins, tables), keeps stream time for windows or punctuation, or follows its sources' clocks in the job's
    own topics (`clocked`), partition p of every input must hold the same keys and times. A stateless step
    may merge topics of any counts: its task p reads partition p of those that have one."""
    return bool(sub.stores) or uses_event_time(sub) or bool(set(sub.inputs) & clocked)


def table_changelogs(subtopologies: Mapping[str, SubTopology]) -> frozenset[str]:
    """The input topics that are also changelogs: tables whose stores are restored from them
    (`StoreSpec.source_topic`, the `topology_optimization`); they must be compacted."""
    return frozenset(spec.source_topic for sub in subtopologies.values() for spec in sub.stores
                     if spec.source_topic is not None)


def offset_groups(subtopologies: Mapping[str, SubTopology], group_id: str) -> dict[tuple[str, str], str]:
    """The consumer group under which each sub-topology commits its progress in each input topic:
    (sub-topology, topic) -> group.

    The first sub-topology (in the order they were defined) reading a topic commits under the application's
    group; each further one that reads it too (e.g. a table joined twice) under its own group
    `<group_id>.<sub-topology>`, so that the readers never overwrite each other's offsets, and adding a
    reader never moves an existing one's progress."""
    groups: dict[tuple[str, str], str] = {}
    first: dict[str, str] = {}
    for sub in subtopologies.values():
        for topic in sub.inputs:
            owner = first.setdefault(topic, sub.name)
            groups[(sub.name, topic)] = group_id if owner == sub.name else f"{group_id}.{sub.name}"
    return groups


def topic_groups(subtopologies: Mapping[str, SubTopology], group_id: str) -> dict[str, list[str]]:
    """topic -> every group that commits progress in it (its readers')."""
    out: dict[str, list[str]] = {}
    for (_, topic), group in offset_groups(subtopologies, group_id).items():
        out.setdefault(topic, []).append(group)
    return out


def uses_event_time(sub: SubTopology) -> bool:
    """Whether a sub-topology's results depend on stream time: windowed aggregations, windowed (stream-stream)
    joins, and Processor API steps, which may schedule stream-time punctuation."""
    if sub.graph is not None:
        return any(p.windowing is not None or p.may_punctuate or (p.join is not None and p.join.windows is not None)
                   for p in sub.graph.processors)
    return bool(sub.windowings) or sub.may_punctuate or any(j.windows is not None for j in sub.joins)


def clocked_topics(subtopologies: Mapping[str, SubTopology]) -> frozenset[str]:
    """The topics between two sub-topologies of one application whose records carry their writers' clocks
    (eos.streamtime): those read by a step that uses event time, or by one that writes such a topic itself,
    and written only by steps that keep a clock: record-at-a-time steps, and vectorized steps that read no
    topic of the application's own (their clock is Kafka Streams' stream time, the largest timestamp read; one
    reading another step's topic would have to keep its sources' clocks, and keeps none). A topic on a cycle of
    sub-topologies (a foreign-key join's subscriptions and responses) carries no clock: each batch that reads
    a clock marker writes one, and around a cycle the markers would never stop."""
    writers: dict[str, list[SubTopology]] = {}
    for sub in subtopologies.values():
        for topic in sub.output_topics:
            writers.setdefault(topic, []).append(sub)
    edges = {t for t, ws in writers.items()
             if all(w.processor_factory is not None or not set(w.inputs) & writers.keys() for w in ws)
             and any(t in r.inputs for r in subtopologies.values())} - cyclic_topics(subtopologies)
    clocked: set[str] = set()
    changed = True
    while changed:
        changed = False
        for topic in edges - clocked:
            readers = [r for r in subtopologies.values() if topic in r.inputs]
            if any(uses_event_time(r) or set(r.output_topics) & clocked for r in readers):
                clocked.add(topic)
                changed = True
    return frozenset(clocked)


def cyclic_topics(subtopologies: Mapping[str, SubTopology]) -> set[str]:
    """The topics a sub-topology writes that lead, through the sub-topologies reading them, back to it."""
    feeds: dict[str, set[str]] = {}  # sub-topology -> the sub-topologies reading what it writes
    for sub in subtopologies.values():
        feeds[sub.name] = {r.name for r in subtopologies.values() if set(sub.output_topics) & set(r.inputs)}

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            name = todo.pop()
            if name == goal:
                return True
            if name not in seen:
                seen.add(name)
                todo.extend(feeds[name])
        return False

    return {t for sub in subtopologies.values() for t in sub.output_topics
            for r in subtopologies.values() if t in r.inputs and reaches(r.name, sub.name)}
