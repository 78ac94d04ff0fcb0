"""`TopologyTestDriver`: an application run in one process, on an in-memory Kafka, by the framework's own code.

The driver creates the application's topics in a `transactions.memory.MemoryCluster` with the start-up code
of a real run (repartition, dead-letter, ledger and changelog topics), then, whenever input arrives or the
wall clock moves, plans batches with the real `Planner` and runs each unit with `eos.worker.entry.run_unit`: the
same batch protocol, processors, serdes, stores, restores, windows, joins, punctuation, dead letters and
stream-time clocks as a Spark task, against memory instead of a broker. Results are read back typed.

    driver = TopologyTestDriver(app)
    driver.pipe("orders", "alice", {"qty": 2, "price": 3.5}, timestamp=1_000)
    assert [r.value["total"] for r in driver.read("orders-enriched")] == [7.0]

Crashes (`crash_at`) kill a batch at a step of the protocol; the task restarts from its committed state,
its stores restored from their changelogs. `check_exactly_once` runs inputs once straight and once with
crashes at random steps and compares what was committed (`eos.testing.crashes`). `audit` runs the job's own
exactly-once audits (`eos audit app`) over what the driver committed.

Differences from a cluster: every topic has `partitions` partitions (1 by default; a mapping gives some
topics others); record timestamps default to the driver's wall clock, which moves only when told
(`advance_wall_clock`); units of tasks sharing a transaction run one after another, as one worker runs
them, and `tasks_per_transaction="auto"` makes them for `task_slots` slots (2 by default); there is no
Spark, so no standby replicas, placement or vectorized steps' Arrow path differences (they run as in a
worker); the driver creates every topic empty, so each source's `auto_offset_reset` starts at its beginning
(`driver.planner.initialize_offsets()` applies the policies to what a test wrote before it).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal, cast

from eos.app import Application
from eos.audit.auditor import AuditReport
from eos.clock import clock_source
from eos.driver.checks import check_topics, create_internal_topics, create_repartition_topics
from eos.driver.planner import DEFAULT_TASK_SLOTS, Planner
from eos.driver.reset import ResetPlan
from eos.errors import ConfigError, SerdeError
from eos.hooks import FaultHooks, FaultPoint, HookPoint
from eos.ledger import LedgerEntry, ledger_topic
from eos.queries import StoreSnapshot, store_view
from eos.serde import Serde, refused_part
from eos.streamtime import is_marker
from eos.testing.clients import MemoryWorker
from eos.testing.crashes import ExactlyOnceReport, check_exactly_once
from eos.testing.topics import TestInputTopic, TestOutputTopic
from eos.topology import cyclic_topics, table_changelogs
from eos.windows import ms as to_ms
from eos.worker.entry import run_unit, units_of
from eos.worker.plans import Job, TaskPlan, TaskResult
from transactions import KafkaAdmin, TopicSpec
from transactions.memory import MemoryAdmin, MemoryCluster, MemoryMessage

__all__ = ["TopologyTestDriver", "TestRecord", "DeadLetter", "CrashPoint", "SimulatedCrash", "ExactlyOnceReport"]

#: What the driver's methods are called in Kafka Streams' TopologyTestDriver, where the name is not ours in snake case
_DRIVER_HINTS = {**dict.fromkeys(
    ("getKeyValueStore", "get_key_value_store", "getTimestampedKeyValueStore", "getWindowStore", "get_window_store",
     "getTimestampedWindowStore", "getSessionStore", "get_session_store", "getStateStore", "get_state_store",
     "getVersionedKeyValueStore"), "store(name) is any store's committed typed view (get, range, all; fetch for "
    "windows and sessions)"),
                 **dict.fromkeys(("advanceWallClockTime", "advance_wall_clock_time"),
                                 "advance_wall_clock(ms or timedelta)"),
                 **dict.fromkeys(("pipeInput", "pipe_input"),
                                 "pipe(topic, key, value) here, or create_input_topic(topic).pipe_input(key, value)"),
                 **dict.fromkeys(("readOutput", "read_output", "readValue", "read_value"),
                                 "read(topic) here, or create_output_topic(topic).read_value()"),
                 **dict.fromkeys(("getAllStateStores", "get_all_state_stores"),
                                 "store(name) for each; app.describe() names them")}

#: Rounds of batches one call may run (`max_rounds`), and while its batches read topics on a cycle of steps.
MAX_ROUNDS, MAX_CYCLE_ROUNDS = 100_000, 1_000

Step = Literal["after_slice", "before_top_up", "after_read", "after_produce", "before_commit", "after_commit"]


@dataclass(frozen=True)
class TestRecord:
    """A committed record, deserialized with the serdes of the step that wrote it (or reads it)."""

    __test__ = False  # not a pytest test class

    key: Any
    value: Any
    timestamp: int
    headers: dict[str, bytes] = field(default_factory=dict)
    topic: str = ""
    partition: int = 0
    offset: int = 0


@dataclass(frozen=True)
class DeadLetter:
    """A record a step sent to the dead-letter topic: its original bytes, and why."""

    key: bytes | None
    value: bytes | None
    error: str
    error_type: str
    stage: str
    subtopology: str
    topic: str
    partition: int
    offset: int


@dataclass(frozen=True)
class CrashPoint:
    """Where a batch is killed: a protocol step, optionally of one task (e.g. "count-0") or batch."""

    step: Step
    task: str | None = None
    batch: int | None = None

    def matches(self, point: FaultPoint) -> bool:
        return (point.name.value == self.step and (self.task is None or point.task == self.task)
                and (self.batch is None or point.batch == self.batch))


class SimulatedCrash(BaseException):
    """The process running a batch died (a BaseException, as a SIGKILL is not an error a task handles)."""


class TopologyTestDriver:
    """An application in one process on an in-memory Kafka (see the module's docstring)."""

    def __init__(self, app: Application, *, partitions: int | Mapping[str, int] = 1,
                 wall_clock_ms: int | None = None, topic_configs: Mapping[str, Mapping[str, str]] | None = None,
                 log_level: str = "WARNING", max_rounds: int | None = None, state_dir: str | Path | None = None,
                 task_slots: int = DEFAULT_TASK_SLOTS) -> None:
        """`partitions`: of every topic of the application (a mapping: per topic, 1 for the others);
        `wall_clock_ms`: the driver's wall clock at the start (now if None); `topic_configs`: topic settings
        of the application's own topics, as a broker has them (`cleanup.policy`, `max.message.bytes`,
        `message.timestamp.after.max.ms`, ...: what a topic refuses becomes a dead letter, as on a
        cluster); `log_level` of the framework's logs while the driver runs; `state_dir`: persistent stores in
        RocksDB under this directory, kept open between batches as a worker keeps them (by default every
        store is in memory); `task_slots`: the tasks a cluster would run at once, which
        `tasks_per_transaction="auto"` makes its units by (the default local master's two); `max_rounds`: the
        rounds of batches one call may run before it fails as one that never settles (by default 100,000, and
        1,000 while its batches read topics on a cycle of the job's steps: a record that goes round for ever)."""
        app.require_steps()
        self.app = app
        self.config = app.config.with_overrides(log_level=log_level,
                                                **({} if state_dir is None else {"state_dir": str(state_dir)}))
        self._state_dir = state_dir
        self._options: dict[str, Any] = {"partitions": partitions, "wall_clock_ms": wall_clock_ms,
                                         "topic_configs": topic_configs, "log_level": log_level,
                                         "max_rounds": max_rounds, "state_dir": state_dir, "task_slots": task_slots}
        self.now = int(time.time() * 1000) if wall_clock_ms is None else wall_clock_ms
        self._started = self.now
        self.cluster = MemoryCluster(clock=lambda: self.now / 1000)
        self.admin = cast(KafkaAdmin, MemoryAdmin(self.cluster))  # the admin calls the start-up code makes
        self.max_rounds = max_rounds
        self.batch = 0
        self.results: list[TaskResult] = []
        self.crashes: list[tuple[CrashPoint, FaultPoint]] = []
        #: the steps batches have reached so far (`after_slice` only in batches big enough to be sliced)
        self.steps_reached: set[str] = set()
        self._armed: list[CrashPoint] = []
        self._read_to: dict[tuple[str, int], int] = {}  # (topic, partition) -> the next offset `read` returns
        with self._clock():
            self._create_topics(partitions, topic_configs or {})
            self._prepare()
            for topic, config in self._configs.items():
                if topic not in self.cluster.configs:
                    raise KeyError(f"topic_configs names {topic!r}, which the application does not use")
                self.cluster.configs[topic].update(config)
            # (no `initialize_offsets`: every topic was created empty just now, so each auto_offset_reset starts
            # at its beginning, and "none" does not refuse a topic the test has yet to write)
        self.worker = MemoryWorker(self.cluster)
        self._run()  # processors that schedule punctuation run once at start-up, as on a cluster

    # ------------------------------------------------------------------ input
    def pipe(self, topic: str, key: Any = None, value: Any = None, *, timestamp: int | None = None,
             headers: Iterable[tuple[str, bytes]] | Mapping[str, bytes] | None = None, partition: int | None = None,
             serialized: bool = False) -> None:
        """Write one record to `topic` (serialized with the serdes of the step that reads it; `serialized`:
        key and value are bytes as they are, e.g. a malformed record) and process everything it leads to.
        `timestamp`: the driver's wall clock unless given."""
        self._append(topic, key, value, timestamp, headers, partition, serialized)
        self._run()

    def pipe_many(self, topic: str, records: Iterable[tuple[Any, ...]], *, serialized: bool = False) -> None:
        """Write (key, value[, timestamp[, partition[, headers]]]) records to `topic`, then process them (in as
        many batches as the planner makes of them)."""
        self.pipe_records(((topic, *record) for record in records), serialized=serialized)

    def pipe_records(self, records: Iterable[tuple[Any, ...]], *, process: bool = True,
                     serialized: bool = False) -> None:
        """Write (topic, key, value[, timestamp[, partition[, headers]]]) records, in order, then process them
        (in as many batches as the planner makes of them: one, unless they exceed max_records_per_batch).
        `process=False` only writes them: `run_batch` then runs tasks one at a time, in the order a test
        wants (to stage a race between two steps)."""
        for topic, key, value, *rest in records:
            self._append(topic, key, value, rest[0] if rest else None, rest[2] if len(rest) > 2 else None,
                         rest[1] if len(rest) > 1 else None, serialized)
        if process:
            self._run()

    def run_batch(self, task: str | None = None) -> bool:
        """Plan and run one batch of every task with something to do, or of `task` only (e.g. "fk.right-0"),
        without going on to what it leads to. Returns whether a batch ran."""
        with self._clock():
            plans = [p for p in self.planner.plan(self.batch) if task is None or str(p.task) == task]
            results = self._run_plans(plans)
            self.planner.observe(results)
            self.results.extend(results)
            self.batch += 1
        return bool(results)

    def advance_wall_clock(self, ms: int | timedelta) -> None:
        """Move the wall clock on by `ms` milliseconds or a timedelta (wall-clock punctuation that comes due runs,
        as on a cluster)."""
        step = to_ms(ms)
        if step < 0:
            raise ValueError(f"advance_wall_clock({ms!r}): the wall clock only moves on (give 0 or more)")
        self.now += step
        self._run()

    def create_input_topic(self, topic: str, key_serde: Serde | str | None = None,
                           value_serde: Serde | str | None = None, *, start_timestamp: int | None = None,
                           auto_advance: int | timedelta = 0) -> TestInputTopic:
        """Kafka Streams' `createInputTopic`: `pipe` as a topic object (`pipe_input(key, value)`, ...), with
        its own time when `start_timestamp` is given (`eos.testing.topics.TestInputTopic`)."""
        return TestInputTopic(self, topic, key_serde, value_serde, start_timestamp=start_timestamp,
                              auto_advance=auto_advance)

    # ------------------------------------------------------------------ output
    def read(self, topic: str) -> list[TestRecord]:
        """The committed records of `topic` not read before, partition by partition, typed."""
        self._known(topic)
        return self._read(topic, self._output_serdes(topic))

    def create_output_topic(self, topic: str, key_serde: Serde | str | None = None,
                            value_serde: Serde | str | None = None) -> TestOutputTopic:
        """Kafka Streams' `createOutputTopic`: `read` as a topic object (`read_key_value()`,
        `read_values_to_list()`, `is_empty()`, ...: `eos.testing.topics.TestOutputTopic`)."""
        return TestOutputTopic(self, topic, key_serde, value_serde)

    def records(self, topic: str) -> list[TestRecord]:
        """Every committed record of `topic`, typed (clock markers between steps left out)."""
        self._known(topic)
        key_serde, value_serde = self._output_serdes(topic)
        return [self._typed(msg, key_serde, value_serde) for msg in self.cluster.records(topic)
                if not is_marker(msg.headers())]

    def dead_letters(self) -> list[DeadLetter]:
        """Every record committed to the dead-letter topic, with its error."""
        out = []
        for msg in self.cluster.records(self.config.dlq_topic):
            h = {k: v.decode("utf-8", "replace") for k, v in msg.headers() or ()}
            out.append(DeadLetter(msg.key(), msg.value(), h.get("eos.dlq.error", ""), h.get("eos.dlq.error.type", ""),
                                  h.get("eos.dlq.stage", ""), h.get("eos.dlq.subtopology", ""),
                                  h.get("eos.dlq.topic", ""), int(h.get("eos.dlq.partition", -1)),
                                  int(h.get("eos.dlq.offset", -1))))
        return out

    def store(self, name: str) -> StoreSnapshot:
        """The store (or global table) `name` as committed: its typed read view (`get`, `range`, `all`,
        `fetch`, ...), read from its changelog as interactive queries do."""
        return store_view(self.app, name, admin=self.admin, scan=self._scan)

    def ledger(self) -> list[LedgerEntry]:
        """The lineage ledger: per committed batch, the input it consumed, and which records produced nothing
        (`filtered`) or were dropped as late (`late`)."""
        topic = ledger_topic(self.config.application_id)
        return [e for m in self.cluster.records(topic) if (e := LedgerEntry.decode(m.value())) is not None]

    def audit(self, *, max_samples: int = 10) -> list[AuditReport]:
        """`eos audit app` of what the driver committed: the lineage audit of every step (each input exactly
        once in the outputs or the dead-letter topic, each record's outputs in a run without a gap, no batch
        committed twice), the window audit of every windowed aggregation and the join audit of every join,
        reading the driver's cluster as they read a broker. Each report's `verdict` is PASS or FAIL;
        `eos.audit.report.render` prints one as the command does."""
        from eos.audit import audit_application

        return audit_application(self.app, bootstrap_servers=self.cluster.bootstrap_servers, max_samples=max_samples)

    @property
    def dropped(self) -> dict[str, dict[str, int]]:
        """Records dropped on purpose so far, per step and reason (e.g. {"counts": {"late": 2}})."""
        out: dict[str, dict[str, int]] = {}
        for r in self.results:
            for reason, n in r.dropped.items():
                by = out.setdefault(r.task.subtopology, {})
                by[reason] = by.get(reason, 0) + n
        return out

    # ------------------------------------------------------------------ reprocessing
    def reset(self, *, to: str = "earliest", inputs: Mapping[str, str] | None = None) -> ResetPlan:
        """What `eos reset` does, on the driver's cluster (`eos.driver.reset`): the application's groups
        cleared and each input's position committed (`to`: "earliest", "latest", a time as `eos reset --to`
        takes it, relative to the driver's clock; `inputs`: a topic's own), its internal topics and its stores
        (those under the driver's `state_dir` too) gone; then the job starts again, as a new run would. Returns
        the plan carried out. The outputs stay, so what the job writes next follows what it wrote before; the
        audits hold it to its outputs since the reset."""
        from dataclasses import replace

        from eos.driver.reset import apply_reset, plan_reset

        with self._clock():
            plan = plan_reset(self.app, self.admin, to=to, inputs=inputs, now_ms=self.now)
            own = [] if self._state_dir is None else [Path(self._state_dir) / self.config.application_id]
            plan = replace(plan, local_state=[p for p in own if p.is_dir()], state_dir=self.config.state_dir)
            self.worker.close()  # (its stores closed before their directories go)
            apply_reset(plan, self.admin)
            self.worker = MemoryWorker(self.cluster)
            create_repartition_topics(self.admin, self.config, self.app.internal_topics)
            self._prepare()
            self.planner.initialize_offsets()
        self._run()
        return plan

    # ------------------------------------------------------------------ crashes
    def crash_at(self, step: Step, *, task: str | None = None, batch: int | None = None) -> None:
        """Kill the next batch attempt that reaches `step` (of `task`, in `batch`, if given): its open
        transaction is left to be aborted, the worker with its runtimes and in-memory stores is gone, and
        the task runs again from its committed state, restoring its stores from their changelogs."""
        if step not in {p.value for p in HookPoint}:
            raise ValueError(f"unknown step {step!r}; steps are {[p.value for p in HookPoint]}")
        self._armed.append(CrashPoint(step, task, batch))

    def check_exactly_once(self, inputs: Sequence[tuple[Any, ...]], *, crashes: int = 8, seed: int = 0,
                           chunk: int = 7) -> ExactlyOnceReport:
        """Run `inputs` ((topic, key, value[, timestamp]), in order, `chunk` at a time) on two new drivers
        like this one, straight and with up to `crashes` batches killed at random steps (`seed`), and
        compare everything they committed: outputs, dead letters and stores. Raises AssertionError naming
        the first record that differs and the input it came from (a processor that reads the wall clock or
        a random number, say); returns the report otherwise. This driver's own state is not touched."""
        options = {**self._options, "wall_clock_ms": self._started}  # both runs on the same clock
        runs = itertools.count()

        def driver() -> TopologyTestDriver:  # (each run's stores in a directory of its own)
            state_dir = None if self._state_dir is None else Path(self._state_dir) / f"check-{next(runs)}"
            return TopologyTestDriver(self.app, **{**options, "state_dir": state_dir})

        return check_exactly_once(driver, inputs, crashes=crashes, seed=seed, chunk=chunk)

    def close(self) -> None:
        self.worker.close()

    def __enter__(self) -> TopologyTestDriver:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ the loop
    def _run(self) -> None:
        """Plan and run batches until nothing is left to do (what `app.run(until_caught_up=True)` does)."""
        bound, cycle_bound = self.max_rounds or MAX_ROUNDS, self.max_rounds or MAX_CYCLE_ROUNDS
        if self.app.graph.patterns:  # (a topic a pattern matches may have been created on the cluster meanwhile)
            self._match_patterns()
        if self._inputs_grown():  # (partitions added to an input: planned in, as a running job does)
            with self._clock():
                self._prepare()
        with self._clock():
            for rounds in range(bound + 1):
                plans = self.planner.plan(self.batch)
                if not plans:
                    return
                cycle = self._cycling(plans) if rounds >= cycle_bound else ""
                if cycle:
                    raise RuntimeError(f"the application did not settle: after {rounds:,} rounds of batches its "
                                       f"steps still read {cycle}, which they write themselves (a cycle of steps "
                                       "through a topic), so a record may go round for ever. Give the cycle a way "
                                       "out (a filter on a count of rounds kept in the value, say), or a cycle "
                                       "that takes longer max_rounds= of TopologyTestDriver")
                if rounds == bound:
                    raise RuntimeError(f"the application did not settle within {bound:,} rounds of batches; a job "
                                       "that needs more in one call takes max_rounds= of TopologyTestDriver")
                results = self._run_plans(plans)
                self.planner.observe(results)
                self.results.extend(results)
                self.batch += 1

    def _inputs_grown(self) -> bool:
        known = self.planner.partition_counts
        counts = self.admin.partition_counts([t for t in known if t in self.cluster.logs])
        return any(n is not None and n > known[t] for t, n in counts.items())

    def _cycling(self, plans: list[TaskPlan]) -> str:
        """The topics on a cycle of the job's steps that `plans` read records of, quoted, or ""."""
        topics = sorted({r.topic for plan in plans for r in plan.ranges if not r.empty and r.topic in self._cyclic})
        return ", ".join(repr(t) for t in topics)

    def _run_plans(self, plans: list[TaskPlan]) -> list[TaskResult]:
        """Each unit of `plans` (the tasks that share a transaction: `tasks_per_transaction`) in turn."""
        return [result for unit in units_of(plans, self.config) for result in self._run_unit(unit)]

    def _run_unit(self, unit: tuple[TaskPlan, ...]) -> list[TaskResult]:
        while True:
            try:
                results = run_unit(unit, self.job, 0, self.worker.clients, self.worker.runtimes,
                                   in_memory=self._state_dir is None)
            except SimulatedCrash:
                self.worker.close()
                self.worker = MemoryWorker(self.cluster)  # a new process: nothing of the old one survives
                continue
            for result in results:
                if result.failure is not None:
                    raise result.failure.to_exception()
            return results  # (a stale plan comes back DEFERRED: it is planned again next round)

    def _maybe_crash(self, point: FaultPoint) -> None:
        self.steps_reached.add(point.name.value)
        for armed in self._armed:
            if armed.matches(point):
                self._armed.remove(armed)
                self.crashes.append((armed, point))
                raise SimulatedCrash(f"crash at {point.name.value} of task {point.task}, batch {point.batch}")

    @contextmanager
    def _clock(self) -> Iterator[None]:
        with clock_source(lambda: self.now / 1000):
            yield

    # ------------------------------------------------------------------ topics and serdes
    def _prepare(self) -> None:
        """The job definition and the planner for the topics the application reads now, as a run prepares
        them (again when a topic a pattern matches is created: `_match_patterns`)."""
        app = self.app
        self._matched = self.app.graph.pattern_topics()
        self._patterns = app.graph.patterns
        #: topic -> the serdes a record piped to it is written with (`Application.input_serdes`), per plan
        self._input_serdes: dict[str, tuple[Serde, Serde]] = {}
        counts = check_topics(self.admin, app.subtopologies, app.clocked_topics)
        dlq_partitions = create_internal_topics(self.admin, self.config, app.subtopologies, counts)
        hooks = FaultHooks({p: list(h) for p, h in app.fault_hooks.hooks.items()})
        for point in HookPoint:
            hooks.on(point, self._maybe_crash)
        self.job = Job(self.config, dict(app.subtopologies), hooks, dlq_partitions,
                       ledger_topic(self.config.application_id), app.repartition_topics, app.clocked_topics)
        self.planner = Planner(self.admin, self.config, app.subtopologies, counts, app.clocked_topics,
                               timed=False, task_slots=self._options["task_slots"])
        self.planner.refresh_topic_ids()
        self._cyclic = frozenset(cyclic_topics(app.subtopologies))

    def _match_patterns(self, created: str | None = None) -> None:
        """Match the application's topic patterns against this driver's topics, creating `created` first (a
        topic a test writes that a pattern matches, with as many partitions as that pattern's other topics), and
        plan anew if they read other topics than this driver planned for (as a run looks every
        metadata_refresh_interval; the application may have been matched by another driver meanwhile)."""
        if created is not None:
            pattern = next(n for n, p in self.app.graph.patterns.items() if p.fullmatch(created))
            first = self._matched[pattern][0]
            self.admin.create_topics([TopicSpec(created, self.cluster.partitions(first))])
        self.app.match_patterns(self.admin.topic_names())
        if self.app.graph.pattern_topics() != self._matched:
            with self._clock():
                self._prepare()

    def _create_topics(self, partitions: int | Mapping[str, int], configs: Mapping[str, Mapping[str, str]]) -> None:
        app, cfg = self.app, self.config
        patterns = app.graph.patterns
        if patterns:  # the topics a pattern reads at the start are those `partitions` names
            named = [] if isinstance(partitions, int) else [t for t in partitions
                                                              if any(p.fullmatch(t) for p in patterns.values())]
            self.admin.create_topics([TopicSpec(t, cast(Mapping[str, int], partitions)[t]) for t in named])
            app.match_patterns(self.admin.topic_names())
            if app.unmatched_patterns():
                raise ConfigError(f"the topic pattern of source {', '.join(app.unmatched_patterns())} matches no topic "
                                  "of the driver: name the topics it reads at the start with their partition counts, "
                                  "TopologyTestDriver(app, partitions={\"events-a\": 1, ...}) (a topic it matches "
                                  "that a test writes later is created then)")
        internal = set(app.internal_topics)
        user: set[str] = set()
        for sub in app.subtopologies.values():
            user.update(sub.inputs)
            user.update(sub.output_topics)
            user.update(g.topic for g in sub.global_tables)
        default = partitions if isinstance(partitions, int) else 1
        counts = {} if isinstance(partitions, int) else dict(partitions)
        compacted = table_changelogs(app.subtopologies)  # (a table's topic that is its stores' changelog)
        self.admin.create_topics([TopicSpec(t, counts.get(t, default),
                                            config={"cleanup.policy": "compact"} if t in compacted else {})
                                  for t in sorted(user - internal)])
        create_repartition_topics(self.admin, cfg, app.internal_topics)
        self._configs = configs  # applied once every topic exists (the dead-letter topic too)

    def _append(self, topic: str, key: Any, value: Any, timestamp: int | None,
                headers: Iterable[tuple[str, bytes]] | Mapping[str, bytes] | None, partition: int | None,
                serialized: bool = False) -> None:
        patterns = self._patterns
        if patterns and (self.app.graph.pattern_topics() != self._matched or (
                any(p.fullmatch(topic) for p in patterns.values())
                and all(topic not in topics for topics in self._matched.values()))):
            self._match_patterns(created=None if topic in self.cluster.logs else topic)
        if topic not in self.cluster.logs:  # (per record: the check inline)
            self._known(topic)
        serdes = self._input_serdes.get(topic)
        if serdes is None:  # (a topic's first record of this plan: which also says when no step reads it)
            serdes = self._input_serdes[topic] = self.app.input_serdes(topic)
        key_serde, value_serde = serdes
        if serialized:
            key, value = _raw(topic, "key", key), _raw(topic, "value", value)
        else:
            try:
                key, value = (key_serde.serialize(key) if key is not None else None,
                              value_serde.serialize(value) if value is not None else None)
            except SerdeError as exc:
                raise _unpiped(topic, key_serde, key, value, exc) from exc
        self.cluster.append(topic, partition, key, value, _headers(headers),
                            self.now if timestamp is None else int(timestamp))

    def _output_serdes(self, topic: str) -> tuple[Serde, Serde]:
        from eos.serde import BytesSerde

        for sub in self.app.subtopologies.values():
            if topic in sub.raw_outputs:
                return BytesSerde(), BytesSerde()
            if topic in sub.output_serdes:
                ks, vs = sub.output_serdes[topic]
                return ks.bind(topic, True), vs.bind(topic, False)
            if topic in sub.output_topics:
                return sub.output_key_serde.bind(topic, True), sub.output_value_serde.bind(topic, False)
        try:
            return self.app.input_serdes(topic)
        except KeyError:
            return BytesSerde(), BytesSerde()

    @staticmethod
    def _typed(msg: MemoryMessage, key_serde: Serde, value_serde: Serde) -> TestRecord:
        key, value = msg.key(), msg.value()
        return TestRecord(None if key is None else key_serde.deserialize(key),
                          None if value is None else value_serde.deserialize(value), msg.timestamp()[1],
                          dict(msg.headers() or ()), msg.topic(), msg.partition(), msg.offset())

    def _read(self, topic: str, serdes: tuple[Serde, Serde], *, limit: int | None = None,
              peek: bool = False) -> list[TestRecord]:
        """The committed records of `topic` not read before (the first `limit`), partition by partition, typed with
        `serdes`; marked read unless `peek` (clock markers between steps left out)."""
        read_to = self._read_to
        out: list[TestRecord] = []
        for msg in self.cluster.records(topic):
            tp = (topic, msg.partition())
            if msg.offset() < read_to.get(tp, 0) or is_marker(msg.headers()):
                continue
            if limit is not None and len(out) == limit:
                break
            out.append(self._typed(msg, *serdes))
            if not peek:
                read_to[tp] = msg.offset() + 1
        return out

    def __getattr__(self, name: str) -> Any:  # (only for what the driver has not: Kafka Streams' names)
        if name.startswith("_"):
            raise AttributeError(name)
        from eos.dsl.base import no_such_step

        raise no_such_step(TopologyTestDriver, name, _DRIVER_HINTS)

    def _known(self, topic: str) -> None:
        """`topic` is one of the driver's cluster, or a KeyError names those that are."""
        if topic not in self.cluster.logs:
            raise KeyError(f"no topic {topic!r}: the application's topics are {sorted(self.cluster.logs)}")

    def _scan(self, topic: str, until: dict[tuple[str, int], int]) -> list[list[Any]]:
        return [[m for m in self.cluster.records(topic, p) if m.offset() < end]
                for (_, p), end in sorted(until.items())]


def _unpiped(topic: str, key_serde: Serde, key: Any, value: Any, exc: SerdeError) -> SerdeError:
    """The error of a record piped to `topic` that the reading step's serdes refused (`exc`): which part, what
    was given, and what to give."""
    part = refused_part(key_serde.serialize, key)
    given = key if part == "key" else value
    return SerdeError(f"the {part} piped to {topic!r}, {given!r:.60} ({type(given).__name__}), is not what the step "
                      f"reading it takes: {exc}; give a {part} its {part} serde takes, or bytes with serialized=True")


def _headers(headers: Iterable[tuple[str, bytes]] | Mapping[str, bytes] | None) -> list[tuple[str, bytes]]:
    """A record's headers as Kafka has them, from (name, value) pairs or a mapping (what `TestRecord.headers`
    is); anything else is refused, saying what a header is."""
    pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers or ())
    for pair in pairs:
        if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str)
                and (pair[1] is None or isinstance(pair[1], bytes))):
            raise TypeError(f"a header is a (name, value bytes) pair, got {pair!r:.60}: give headers as "
                            "[(\"name\", b\"value\"), ...] or {\"name\": b\"value\"}")
    return pairs


def _raw(topic: str, part: str, data: Any) -> bytes | None:
    """A key or value written as it is (`serialized=True`): bytes, or None."""
    if data is None or type(data) is bytes:
        return data
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"serialized=True writes a record's key and value as they are on the topic, as bytes or None; "
                    f"the {part} of a record for {topic!r} is a {type(data).__name__} ({data!r:.60}): encode it, or "
                    f"leave serialized=False to have the serde of the step that reads {topic!r} write it")
