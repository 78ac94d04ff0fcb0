"""The micro-batch planner (driver): for each task, `start` = committed offset, `end` = last stable offset,
capped by `max_records_per_batch` (in a run's first batch by `first_batch_max_records`, which is smaller;
behind a backlog by what takes about `trigger_interval`: `Planner.time_batch`); tasks with nothing to do are
skipped.

The committed offsets read here are a hint, read without RequireStable: after a crash, a stable read
would wait for the broker to time out the crashed attempt's transaction. A hint can only be behind the
truth (pending offsets only move forward), so "hint >= end" safely means "nothing to do", and each task
re-reads its offsets with a stable read after fencing older attempts.

A committed offset that no longer points into the partition (the topic was created again, or records were
deleted by retention before they were processed) is moved, logged and carried in the plan as an
`OffsetReset`, so that the task applies the same move and records it in the lineage ledger.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Mapping

import structlog

from eos.clock import wall_ms, wall_time
from eos.config import EosConfig
from eos.errors import ConfigError
from eos.ledger import ledger_topic
from eos.offset_reset import reset_duration_ms
from eos.topology import SubTopology, TaskId, offset_groups, task_count, task_inputs
from eos.worker.plans import OffsetReset, SkipReason, StampPlan, TaskPlan, TaskResult, TaskStatus
from eos.worker.progress import CommitMetadata
from transactions import Committed, KafkaAdmin, OffsetRange

__all__ = ["Planner", "unit_size", "AUTO_UNIT_MIN_TASKS", "DEFAULT_TASK_SLOTS"]

log = structlog.get_logger(__name__)

#: How often the planner reads the input topics' ids again (to notice a topic deleted and created again).
TOPIC_ID_REFRESH_S = 10.0

TP = tuple[str, int]
#: With auto_offset_reset='latest', a group of an application that has run before answering "nothing committed"
#: is read again this many times, this far apart, before its partitions are pinned to their ends
PIN_CONFIRM_READS = 4
PIN_CONFIRM_PAUSE_S = 0.5


#: Records of the first batch behind a backlog, before any has been timed: shared by the widest sub-topology's
#: tasks (at least 4 shares: 50,000 records per partition up to 4 partitions). On 64 partitions 50,000 each
#: made one batch of 3.2M records, ~13 s without a commit where Kafka Streams commits every second. The
#: smallest backlog batch is shared the same way: first_batch_max_records per partition up to 4 partitions.
BACKLOG_START_RECORDS = 200_000
#: `tasks_per_transaction="auto"` puts a sub-topology's tasks in one unit per task slot only where a unit then
#: holds at least this many: on two task slots, 64 partitions ran at 19,122 rec/s with a transaction per task
#: and 56,483 in units of 32 (the broker writing 64 commit markers per transaction), while 4 partitions in
#: units of 2 gained nothing measurable and held 40-65 MiB more (docs/measurements.md, 2026-11-29).
AUTO_UNIT_MIN_TASKS = 4
#: The task slots "auto" groups by until the runner says how many the application has: the default local
#: master's two (`local[2,4]`), and the test driver's.
DEFAULT_TASK_SLOTS = 2
#: A task's next top-up is due this share of the trigger interval before a whole interval after its last
#: (`Planner._top_up_at`): after a late one, the later top-ups come back earlier by this much a batch.
CADENCE_SLACK = 0.02


class Planner:
    def __init__(self, admin: KafkaAdmin, config: EosConfig, subtopologies: Mapping[str, SubTopology],
                 partition_counts: Mapping[str, int], clocked: frozenset[str] = frozenset(), *,
                 timed: bool = True, task_slots: int = DEFAULT_TASK_SLOTS) -> None:
        """`timed`: batches behind a backlog are sized from how long the last ones took (`time_batch`); a test
        driver, which runs no clock, plans with the configured bounds only. `task_slots`: how many tasks the
        application runs at once, as far as known (`set_task_slots`)."""
        self.admin = admin
        self.config = config
        self.task_slots = max(1, task_slots)
        #: each sub-topology's unit size (`unit_size`), settled at the run's first plan and kept for the run
        self.groupings: dict[str, int] | None = None
        #: the unit sizes each sub-topology's tasks were last committed under, as the first plan read them
        self._recorded: dict[str, Counter[int]] = {}
        self._groupings_used = False  # whether a batch was planned under them (then they stay)
        #: records per input partition and batch while the input is behind (`time_batch`)
        self._sized = timed and config.size_backlog_batches and config.trigger_interval > 0
        #: each task's last top-up (`TaskResult.topped_up_at`), which its next one keeps the cadence of
        self._top_ups: dict[TaskId, float] = {}
        self._timed = timed
        self._last_plan_first = True  # whether the last plan was the run's first
        self.subtopologies = dict(subtopologies)
        self.partition_counts = dict(partition_counts)
        widest = max(4, *(self.task_count(sub) for sub in self.subtopologies.values()))
        #: the fewest records per partition of a backlog batch (`time_batch`)
        self.backlog_floor = max(1, min(config.first_batch_max_records, config.max_records_per_batch) * 4 // widest)
        self.backlog_records = min(config.max_records_per_batch,
                                   max(self.backlog_floor, BACKLOG_START_RECORDS // widest))
        self.topic_ids: dict[str, str | None] = {}
        self.wall_clock_due: dict[TaskId, int] = {}
        #: tasks that write clocked topics and had no input when last planned: since when (eos.clock)
        self.quiet_since: dict[TaskId, float] = {}
        self._first_plan = True
        #: a batch planned ahead (`plan_ahead`) and its plans, which `plan` returns once
        self._ahead: tuple[int, list[TaskPlan]] | None = None
        self._ids_read = -TOPIC_ID_REFRESH_S
        self._warned: dict[TP, OffsetReset] = {}
        #: records each input partition was behind when the last batch was planned
        self.lag: dict[TP, int] = {}
        #: the last stable offset of each input partition when the last batch was planned
        self.stable_ends: dict[TP, int] = {}
        written = {topic for sub in self.subtopologies.values() for topic in sub.output_topics}
        #: the input partitions the application writes itself (a step's output that a later step reads)
        self.own_inputs = [tp for tp in self.input_partitions() if tp[0] in written]
        #: the offset each consumer group's last committed batch of an input partition committed, with the
        #: topic's id then (a topic read by several sub-topologies has a group, and a progress, per reader)
        self._committed: dict[tuple[str, TP], tuple[int, str | None]] = {}
        self.groups = offset_groups(self.subtopologies, config.group_id)
        #: the auto_offset_reset of each (group, topic) whose source has one of its own (`policy`)
        self.offset_resets = {(group, topic): self.subtopologies[name].offset_resets[topic]
                              for (name, topic), group in self.groups.items()
                              if topic in self.subtopologies[name].offset_resets}
        #: the topics each sub-topology writes whose records carry their writers' clocks (eos.streamtime)
        self.clocked = clocked
        self.stamped = {name: sorted(set(sub.output_topics) & clocked)
                        for name, sub in self.subtopologies.items() if set(sub.output_topics) & clocked}

    def task_count(self, sub: SubTopology) -> int:
        return task_count(sub, self.partition_counts)

    def input_partitions(self) -> list[TP]:
        tps: set[TP] = set()
        for sub in self.subtopologies.values():
            for topic in sub.inputs:
                tps.update((topic, p) for p in range(self.partition_counts[topic]))
        return sorted(tps)

    def initialize_offsets(self) -> dict[TP, int]:
        """Start the partitions that have no committed offset where their sources' auto_offset_reset says
        (`eos.offset_reset`), when that is not their first record: "latest" pins them to their current end, a
        duration to their first record at or after the start minus it, so that the first batch does not chase
        a moving start, and "none" refuses to start (a ConfigError). Returns what was pinned.

        A pin overwrites what a group has committed, and librdkafka 2.16 answers a read during a coordinator
        move as "nothing committed" for every partition, with no error (README, "Known limits"). So when the
        application has run before (its ledger holds records) and a group answers so, the group is read again,
        up to `PIN_CONFIRM_READS` times `PIN_CONFIRM_PAUSE_S` apart, before anything is pinned or refused."""
        ran_before: bool | None = None
        missing: dict[str, list[TP]] = {}
        for group, tps in self._by_group().items():
            tps = [tp for tp in tps if self.policy(group, tp[0]) != "earliest"]
            if not tps:
                continue
            committed = self.admin.group_offsets(group, tps, stable=False)
            if all(o is None for o in committed.values()):
                ran_before = self._ran_before() if ran_before is None else ran_before
                if ran_before:
                    committed = self._read_again(group, tps)
            missing[group] = [tp for tp in tps if committed.get(tp) is None]
        refused = sorted({tp for group, tps in missing.items() for tp in tps if self.policy(group, tp[0]) == "none"})
        if refused:
            raise ConfigError(_nothing_committed(refused))
        pinned: dict[TP, int] = {}
        for group, tps in missing.items():
            if tps:
                starts = self._reset_starts(group, tps)
                firsts = self.admin.earliest_offsets(tps)
                # (each says where the records start that the job starts after, for its first batch to record in
                # the ledger: they are not its input, and the audits leave them out)
                self.admin.set_group_offsets(group, starts, metadata={
                    tp: CommitMetadata(not_read_from=firsts.get(tp, 0)).encode() for tp, start in starts.items()
                    if start > firsts.get(tp, 0)})
                pinned.update(starts)
        return pinned

    def policy(self, group: str, topic: str) -> str:
        """The auto_offset_reset of the source that commits its progress in `topic` under `group`."""
        return self.offset_resets.get((group, topic), self.config.auto_offset_reset)

    def _reset_starts(self, group: str, tps: list[TP]) -> dict[TP, int]:
        """Where `tps` (policies "latest" or a duration) start: the last stable offset, or the first record at
        or after now minus the duration, if before it (a later start would read as a truncated topic's)."""
        starts = self.admin.end_offsets(tps, committed=True)
        by_duration: dict[int, list[TP]] = {}
        for tp in tps:
            back = reset_duration_ms(self.policy(group, tp[0]))
            if back is not None:
                by_duration.setdefault(back, []).append(tp)
        now = wall_ms()
        for back, some in by_duration.items():
            for tp, offset in self.admin.offsets_for_time(some, now - back).items():
                starts[tp] = min(starts[tp], offset)
        return starts

    def _read_again(self, group: str, tps: list[TP]) -> dict[TP, int | None]:
        """`group`'s offsets read again until one shows (see `initialize_offsets`), or what the last read said."""
        for _ in range(PIN_CONFIRM_READS):
            time.sleep(PIN_CONFIRM_PAUSE_S)
            committed = self.admin.group_offsets(group, tps, stable=False)
            if any(o is not None for o in committed.values()):
                return committed
        log.warning("the application has run before, but its group has no offsets committed for these inputs "
                    "(expired, deleted, or the inputs changed): they start where their auto_offset_reset says",
                    group=group, partitions=len(tps))
        return committed

    def _ran_before(self) -> bool:
        """Whether the application's ledger holds records: some batch of an earlier run wrote to it."""
        topic = ledger_topic(self.config.application_id)
        count = self.admin.partition_counts([topic]).get(topic)
        if not count:
            return False
        ends = self.admin.end_offsets([(topic, p) for p in range(count)], committed=False)
        return any(end > 0 for end in ends.values())

    def _by_group(self) -> dict[str, list[TP]]:
        """Input partitions by the group their progress is committed under."""
        out: dict[str, set[TP]] = {}
        for (_, topic), group in self.groups.items():
            out.setdefault(group, set()).update((topic, p) for p in range(self.partition_counts[topic]))
        return {g: sorted(tps) for g, tps in out.items()}

    def plan_ahead(self, batch: int) -> bool:
        """Plan `batch` now, for `plan(batch)` to return once. A run plans its first batch while Spark's context is
        still starting (its look-ups then overlap the JVM's start instead of following it). A look-up that fails
        leaves nothing planned: `plan` looks again, and the run's handling of a failed batch applies to it."""
        try:
            self._ahead = (batch, self._plan(batch))
        except Exception as exc:  # (planned again, and raised then, by `plan`)
            log.debug("could not plan ahead; the batch is planned when it runs", batch=batch,
                      error=f"{type(exc).__name__}: {exc}")
            return False
        return True

    def set_task_slots(self, slots: int) -> None:
        """How many tasks the application runs at once, once Spark's context can say (what "auto" unit sizes
        go by). Until a batch is planned for good: a plan made ahead under other unit sizes is made again when
        it runs, since a unit's size names its transactional id. After that the sizes stay for the run."""
        self.task_slots = max(1, slots)
        if self.groupings is None or self._groupings_used:
            return
        sizes = self._unit_sizes()
        if sizes != self.groupings:
            self.groupings = sizes
            if self._ahead is not None:
                self._ahead = None
                self._first_plan = self._last_plan_first

    def plan(self, batch: int) -> list[TaskPlan]:
        plans: list[TaskPlan] | None = None
        if self._ahead is not None:
            (planned, ahead), self._ahead = self._ahead, None
            if planned == batch:
                plans = ahead
        if plans is None:
            plans = self._plan(batch)
        self._use_groupings()
        return plans

    def _plan(self, batch: int) -> list[TaskPlan]:
        if time.monotonic() - self._ids_read >= TOPIC_ID_REFRESH_S:
            self.refresh_topic_ids()
        tps = self.input_partitions()
        commits = {group: self.admin.group_commits(group, group_tps, stable=False, timeout=10)
                   for group, group_tps in self._by_group().items()}
        ends = self.admin.end_offsets(tps, committed=True, timeout=10)
        self.stable_ends = ends
        earliest = self.admin.earliest_offsets(tps, timeout=10)
        if self.groupings is None:
            self._recorded = {sub.name: Counter(g for partition in range(self.task_count(sub))
                                                for g in _last_groupings(self._committed_by(sub, partition, commits)))
                              for sub in self.subtopologies.values()}
            self.groupings = self._unit_sizes()
        batch_cap = self.backlog_records if self._sized else self.config.max_records_per_batch
        self._last_plan_first = self._first_plan
        pins = self._global_pins()
        plans = []
        for sub in self.subtopologies.values():
            cap = batch_cap
            if self._first_plan:  # the first batch starts the workers and clients: its outputs come sooner if small
                cap = min(cap, self.config.first_batch_max_records)
            for partition in range(self.task_count(sub)):
                ranges, resets, behind = [], {}, set()
                for topic in task_inputs(sub, partition, self.partition_counts):
                    tp = (topic, partition)
                    group = self.groups[(sub.name, topic)]
                    start, reset = self._start(group, tp, commits[group].get(tp), earliest[tp], ends[tp])
                    if reset is None:
                        start = self._not_before_last_commit(group, tp, start, ends[tp])
                    self.lag[tp] = max(0, ends[tp] - start)
                    if reset is not None:
                        resets[tp] = reset
                    ranges.append(OffsetRange(topic, partition, start, max(start, min(ends[tp], start + cap))))
                    if ends[tp] > start + cap:
                        behind.add(tp)
                task = sub.task(partition)
                busy = any(not r.empty for r in ranges)
                committed = self._committed_by(sub, partition, commits)
                if busy:
                    self.quiet_since.pop(task, None)
                announce = not busy and self._idle_due(sub, task, committed)
                wake = busy and self._announces_idleness(sub) and self._said_idle(committed)
                busy = busy and not wake  # first the readers hear that it is awake, then its records
                stamps = self._stamps(sub, not behind, announce, wake)
                if busy or self._punctuation_due(sub, task) or announce or wake:
                    plans.append(TaskPlan(task, batch, tuple(ranges) if busy else tuple(r.at_start() for r in ranges),
                                          topic_ids={t: self.topic_ids.get(t) for t in sub.inputs},
                                          resets=resets, idle=not busy, behind=frozenset(behind),
                                          global_pins={g.topic: pins[g.topic] for g in sub.global_tables},
                                          stamps=stamps, last_producer=_last_producer(committed),
                                          last_groupings=_last_groupings(committed),
                                          grouping=self.groupings[sub.name], first_batch=self._first_plan,
                                          top_up_at=self._top_up_at(task)))
        self._first_plan = False
        return plans

    def _committed_by(self, sub: SubTopology, partition: int,
                      commits: Mapping[str, Mapping[TP, Committed]]) -> list[Committed | None]:
        """What the groups of `sub`'s inputs last committed for its task of `partition`, one per input."""
        return [commits[self.groups[(sub.name, topic)]].get((topic, partition)) for topic in sub.inputs]

    def _unit_sizes(self) -> dict[str, int]:
        return {name: unit_size(self.config.tasks_per_transaction, self.task_count(sub), self.task_slots,
                                self._recorded.get(name, Counter()))
                for name, sub in self.subtopologies.items()}

    def _use_groupings(self) -> None:
        """The unit sizes are settled for the run once a batch is planned under them (said once, where units
        hold more than one task)."""
        if self._groupings_used or self.groupings is None:
            return
        self._groupings_used = True
        for name, size in sorted(self.groupings.items()):
            if size > 1:
                tasks = self.task_count(self.subtopologies[name])
                log.info("tasks share transactions", subtopology=name, tasks=tasks, tasks_per_transaction=size,
                         units=math.ceil(tasks / size), task_slots=self.task_slots,
                         setting=self.config.tasks_per_transaction)

    def unsettled(self) -> list[TP]:
        """The input partitions the application writes itself that hold records past the last stable offset the
        last plan saw: a transaction of its own that committed after the plan, or whose commit markers the
        broker had not written yet (it answers EndTxn first, then writes them), or one still open."""
        if not self.own_inputs:
            return []
        ends = self.admin.end_offsets(self.own_inputs, committed=False, timeout=10)
        return [tp for tp in self.own_inputs if self.stable_ends.get(tp, 0) < ends[tp]]

    def _stamps(self, sub: SubTopology, caught_up: bool, announce: bool, wake: bool) -> StampPlan | None:
        topics = self.stamped.get(sub.name)
        if not topics:
            return None
        return StampPlan({t: (self.partition_counts[t], *self._sources(sub, t)) for t in topics}, caught_up,
                         announce, wake)

    def _announces_idleness(self, sub: SubTopology) -> bool:
        """Whether the planner tells the readers of `sub`'s clocked topics when its tasks are idle and awake:
        a writer of such topics that reads its input directly (one that reads clocked topics itself passes its
        sources' idleness on in its markers). A task that said it is idle and has input again first runs a
        batch without input that says it is awake (`StampPlan.wake`), its records come in the next: tasks
        that get input in the same round all wake before any of their records reach a reader, so a reader
        never calls one's records late because of another's."""
        return sub.name in self.stamped and not set(sub.inputs) & self.clocked

    def _idle_due(self, sub: SubTopology, task: TaskId, committed: list[Committed | None]) -> bool:
        """Whether a task that announces idleness and has no input has had none for `source_idle_timeout` and
        has not said it is idle since: then it runs a batch of its own to say so, else its readers would wait
        for its clock forever (an input partition that never gets a record)."""
        if not self._announces_idleness(sub):
            return False
        if self._said_idle(committed):
            self.quiet_since.pop(task, None)
            return False
        since = self.quiet_since.setdefault(task, wall_time())
        return wall_time() - since >= self.config.source_idle_timeout

    def _sources(self, sub: SubTopology, topic: str) -> tuple[int, int]:
        """(the source index of `sub`'s task 0 in `topic`, the topic's source count): the tasks of every
        sub-topology writing it, in name order."""
        first = total = 0
        for name in sorted(n for n, topics in self.stamped.items() if topic in topics):
            if name == sub.name:
                first = total
            total += self.task_count(self.subtopologies[name])
        return first, total

    @staticmethod
    def _said_idle(committed: list[Committed | None]) -> bool:
        """Whether a writer of clocked topics last told their readers that it is idle. (A writer that reads
        clocked topics itself hears of its sources' idleness in its input: markers make it busy.)"""
        return any(CommitMetadata.decode(c.metadata).idle for c in committed if c is not None)

    def _global_pins(self) -> dict[str, dict[int, tuple[int, int]]]:
        """Where every global table is read to in this batch: its partitions' last stable offsets now."""
        topics = sorted({g.topic for sub in self.subtopologies.values() for g in sub.global_tables})
        if not topics:
            return {}
        tps = [(t, p) for t in topics for p in range(self.partition_counts[t])]
        ends = self.admin.end_offsets(tps, committed=True, timeout=10)
        earliest = self.admin.earliest_offsets(tps, timeout=10)
        pins: dict[str, dict[int, tuple[int, int]]] = {t: {} for t in topics}
        for t, p in tps:
            pins[t][p] = (earliest[(t, p)], ends[(t, p)])
        return pins

    def _punctuation_due(self, sub: SubTopology, task: TaskId) -> bool:
        """A task without input runs a batch of its own when its wall-clock punctuation is due (Kafka
        Streams runs those whatever the input does). Processors can schedule punctuation in `init()`, so
        at start-up each processor task without input runs once, to create its processor and report."""
        due = self.wall_clock_due.get(task)
        if due is None:
            return self._first_plan and sub.may_punctuate
        return due <= wall_ms()

    def _top_up_at(self, task: TaskId) -> float:
        """When the task's next top-up is due (`TaskPlan.top_up_at`): a trigger interval after its last, less
        `CADENCE_SLACK`, so that a top-up that once came late does not hold the later ones back for good; 0
        (none) for a task that did not top up last time, and for a test driver's plans (it runs no clock)."""
        last = self._top_ups.get(task)
        if last is None or not self._timed or self.config.trigger_interval <= 0:
            return 0.0
        return last + self.config.trigger_interval * (1 - CADENCE_SLACK)

    def observe(self, results: list[TaskResult]) -> None:
        """Learn from the tasks' results when each one's next wall-clock punctuation is due, when each topped up
        and what each committed."""
        for r in results:
            if r.status is TaskStatus.COMMITTED and r.topped_up_at:
                self._top_ups[r.task] = r.topped_up_at
            else:
                self._top_ups.pop(r.task, None)
            if r.status is TaskStatus.COMMITTED:
                for tp, offset in r.committed_offsets.items():
                    group = self.groups.get((r.task.subtopology, tp[0]))
                    if group is not None:
                        self._committed[(group, tp)] = (offset, self.topic_ids.get(tp[0]))
            if r.status in (TaskStatus.COMMITTED, TaskStatus.NOOP):
                if r.next_wall_clock is None:
                    self.wall_clock_due.pop(r.task, None)
                else:
                    self.wall_clock_due[r.task] = r.next_wall_clock

    def time_batch(self, plans: list[TaskPlan], seconds: float) -> None:
        """Size the next batches behind a backlog from this one, which took `seconds`: so that a batch takes
        about `trigger_interval`, as Kafka Streams commits every `commit.interval.ms` while it works through a
        backlog. Only a batch that the cap held back counts (a smaller one says nothing of the cap), and a
        run's first (it starts the workers). At most doubled or halved per batch, within `backlog_floor`
        (`first_batch_max_records`, shared over the widest sub-topology's partitions past 4) and
        `max_records_per_batch`."""
        if not self._sized or not any(p.behind for p in plans) or seconds <= 0:
            return
        if self._last_plan_first:
            return
        cfg = self.config
        factor = min(2.0, max(0.5, cfg.trigger_interval / seconds))
        self.backlog_records = int(min(cfg.max_records_per_batch, max(self.backlog_floor,
                                                                      self.backlog_records * factor)))

    def _not_before_last_commit(self, group: str, tp: TP, start: int, end: int) -> int:
        """`start`, or the offset the partition's last batch committed if that is later. The group coordinator
        takes a transaction's offsets in when the commit marker reaches it, a moment after the producer's
        commit returned, and the planner reads the group's offsets without waiting for pending ones (a
        crashed attempt's would hold it up): planned from the offsets before the last batch, a batch that
        follows at once found everything it was planned done, a no-op. The task reads the committed offset
        again (stable) in any case; this only keeps the plan from lagging one batch behind."""
        last = self._committed.get((group, tp))
        if last is None or last[1] != self.topic_ids.get(tp[0]) or not start < last[0] <= end:
            return start
        return last[0]

    def _start(self, group: str, tp: TP, committed: Committed | None, earliest: int,
               end: int) -> tuple[int, OffsetReset | None]:
        """Where a partition's next batch starts: its committed offset, unless that offset belongs to an
        earlier incarnation of the topic (deleted and created again), lies beyond the partition's end (the
        same, or a truncation), or below its first offset (records deleted by retention before they were
        processed). Then reading starts per auto_offset_reset, and the reset is logged and recorded."""
        offset = committed.offset if committed is not None else None
        if offset is None:
            return earliest, None
        not_read = CommitMetadata.decode(committed.metadata if committed is not None else None).not_read_from
        if not_read is not None and earliest <= offset <= end:  # (set at the end: until a batch commits)
            return offset, OffsetReset(offset, offset, SkipReason.LATEST, not_read_from=max(not_read, earliest))
        recorded_id = CommitMetadata.decode(committed.metadata if committed is not None else None).topic_id
        current_id = self.topic_ids.get(tp[0])
        if (recorded_id is not None and current_id is not None and recorded_id != current_id) or offset > end:
            policy = self.policy(group, tp[0])
            if policy == "none":
                raise ConfigError(f"input {tp[0]}[{tp[1]}] was deleted and created again (or truncated): its "
                                  f"committed offset {offset} belongs to the earlier topic, and its auto_offset_reset "
                                  f"is 'none'. {_WHERE_TO_START}")
            start = (earliest if policy == "earliest" else
                     max(earliest, min(end, self._reset_starts(group, [tp])[tp])))
            reset = OffsetReset(offset, start, SkipReason.RECREATED,
                                not_read_from=earliest if start > earliest else None)
            self._warn(tp, reset, "the topic was deleted and created again (or truncated): its committed offset "
                                  f"{offset} belongs to the earlier topic; reading starts at {start} "
                                  f"(auto_offset_reset={policy})")
            return start, reset
        if offset < earliest:
            reset = OffsetReset(offset, earliest, SkipReason.RETENTION)
            self._warn(tp, reset, f"{earliest - offset:,} record(s) (offsets {offset}..{earliest - 1}) were deleted by "
                                  "retention before they were processed")
            return earliest, reset
        return offset, None

    def _warn(self, tp: TP, reset: OffsetReset, what: str) -> None:
        if self._warned.get(tp) != reset:
            self._warned[tp] = reset
            log.warning(f"input {tp[0]}[{tp[1]}]: {what}", topic=tp[0], partition=tp[1], reason=reset.reason.value,
                        committed=reset.committed, start=reset.start)

    def refresh_topic_ids(self) -> None:
        """Read the input topics' ids (at start-up, and whenever a topic may have been created again)."""
        topics = sorted({t for sub in self.subtopologies.values() for t in sub.inputs})
        self.topic_ids = self.admin.topic_ids(topics, timeout=10)
        self._ids_read = time.monotonic()


_WHERE_TO_START = ("Commit where it starts (`eos reset <job> --to earliest`, `--to latest` or `--to <time>`; "
                   "`--input TOPIC=WHERE` for one topic), or give it another auto_offset_reset (the application's, "
                   "or its source's: app.stream(..., auto_offset_reset=\"earliest\")).")


def _nothing_committed(refused: list[TP]) -> str:
    shown = ", ".join(f"{t}[{p}]" for t, p in refused[:6]) + (f" and {len(refused) - 6} more" if len(refused) > 6
                                                                else "")
    return (f"{len(refused)} input partition(s) have no committed offset, and their auto_offset_reset is 'none', "
            f"which refuses to guess where to start: {shown}. {_WHERE_TO_START}")


def unit_size(setting: int | str, tasks: int, slots: int, recorded: Mapping[int, int]) -> int:
    """How many of a sub-topology's `tasks` share a transaction under `tasks_per_transaction` = `setting`. A
    number is taken as it is. "auto": the size the tasks were last committed under (`recorded`: how many tasks
    each size committed; where they differ, the most common, then the largest), so that an application's unit
    size never changes by itself; for tasks that never committed, one unit per task slot where that puts at
    least AUTO_UNIT_MIN_TASKS tasks in a unit, else 1 (a transaction per task)."""
    if setting != "auto":
        return int(setting)
    if recorded:
        return max(recorded, key=lambda size: (recorded[size], size))
    per_slot = math.ceil(tasks / max(1, slots))
    return per_slot if per_slot >= AUTO_UNIT_MIN_TASKS else 1


def _last_groupings(committed: list[Committed | None]) -> frozenset[int]:
    """The `tasks_per_transaction` of the commits that last committed a task's input offsets (none when nothing
    committed them, or another client did)."""
    decoded = [CommitMetadata.decode(c.metadata) for c in committed if c is not None and c.offset is not None]
    return frozenset(m.grouping for m in decoded if m.producer)


def _last_producer(committed: list[Committed | None]) -> str | None:
    """The token of the producer that last committed a task's input offsets (one transaction commits them all),
    or None when nothing says (nothing committed, or offsets committed by another client)."""
    tokens = {CommitMetadata.decode(c.metadata).producer for c in committed if c is not None and c.offset is not None}
    return tokens.pop() if len(tokens) == 1 else None
