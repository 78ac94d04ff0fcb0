"""The driver loop: plan a batch, run one Spark job whose Spark tasks share out the planned tasks
(`eos.driver.groups`), collect one result per task, repeat at the trigger interval. Graceful stop finishes
the current batch first.

The job definition (config, sub-topologies, hooks) goes to the workers once per run as a broadcast.
Whether a failed batch stops the job is decided by the error's type (`eos.errors.stops_the_job`): bad
configuration, `on_bad_record="fail"` and deterministic task failures stop it; anything else (a lost
executor, a broker outage) is planned again, up to `max_failed_batches` times in a row.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import structlog
from py4j.protocol import Py4JError
from pyspark import cloudpickle  # the pickler Spark itself uses for Python functions

from eos.driver.checks import (
    check_broker,
    check_spark_conf,
    check_topics,
    create_internal_topics_soon,
    create_repartition_topics,
    match_topic_patterns,
)
from eos.driver.groups import one_result_per_task, share_out
from eos.driver.lease import acquire_driver_lease, check_driver_lease
from eos.driver.placement import Placer
from eos.driver.planner import Planner
from eos.driver.purge import PURGE_INTERVAL_S, RepartitionPurger
from eos.driver.reports import BatchReport, LatenessWatch, RunSummary, to_json
from eos.driver.shipping import ship_framework
from eos.driver.spark import (
    ContextStart,
    is_local_master,
    jvm_may_be_gone,
    spark_conf,
    task_rdd,
    task_slots,
    total_task_slots,
)
from eos.errors import ConfigError, JobFailedError, stops_the_job
from eos.ledger import ledger_topic
from eos.logs import configure_logging
from eos.schema_registry import check_registries
from eos.topology import topic_groups
from eos.worker.entry import SparkTaskFunction
from eos.worker.plans import Job, StandbyPlan, StandbyResult, StandbyStatus, TaskPlan, TaskResult, TaskStatus, unit_id
from transactions import GroupLease, KafkaAdmin

if TYPE_CHECKING:
    from pyspark import SparkContext

    from eos.app import Application
    from eos.driver.metrics import DriverMetrics

__all__ = ["Runner", "root_cause"]

log = structlog.get_logger(__name__)

OnBatch = Callable[[BatchReport, list[TaskResult]], None]

#: How long a run until caught up waits, at most, for the topics the application writes and reads itself to be
#: stable (`Runner._settled`), and how often it looks again
SETTLE_S = 10.0
SETTLE_POLL_S = 0.05


class Runner:
    def __init__(self, app: Application, sc: SparkContext | ContextStart) -> None:
        self.app = app
        self._start = sc if isinstance(sc, ContextStart) else None
        self._sc = None if isinstance(sc, ContextStart) else sc
        self.config = app.config
        self._stop = threading.Event()
        self.placer: Placer | None = None
        self.admin: KafkaAdmin | None = None
        self.lease: GroupLease | None = None
        self.purger: RepartitionPurger | None = None
        self.metrics: DriverMetrics | None = None
        self.lateness = LatenessWatch(self.config)
        configure_logging(self.config.log_format, self.config.log_level)

    @property
    def sc(self) -> SparkContext:
        """The context (waiting for it, when it is still being built: `prepare` asks for it last)."""
        if self._sc is None:
            assert self._start is not None
            self._sc = self._start.context()
        return self._sc

    def request_stop(self) -> None:
        """Graceful stop: the batch in flight finishes (commits), then the loop ends."""
        self._stop.set()

    def prepare(self, *, again: bool = False, batch: int = 0) -> tuple[Planner, Job]:
        """Start-up checks, internal topics, offsets of new partitions; the job definition for the tasks. What
        needs Kafka comes first, what needs Spark last: a context still starting (`ContextStart`) is waited
        for only then, and the internal topics (`create_internal_topics_soon`, made on a thread of their own meanwhile)
        after it. `again`: while the job runs, after its topic patterns matched other topics (the repartition
        topics, the lease and the metrics server stay as they are)."""
        cfg = self.config
        cfg.require_bootstrap()
        admin = self.admin = KafkaAdmin(cfg.bootstrap_servers)
        if not again:
            match_topic_patterns(self.app, admin, at_start=True)
            create_repartition_topics(admin, cfg, self.app.internal_topics)
        clocked = self.app.clocked_topics
        counts = check_topics(admin, self.app.subtopologies, clocked)
        check_registries(self.app.subtopologies, cfg.application_id)
        check_broker(admin, cfg)
        internal = create_internal_topics_soon(cfg, self.app.subtopologies, counts)  # (while the rest goes on)
        if cfg.driver_lease and self.lease is None:
            self.lease = acquire_driver_lease(admin, cfg)
        planner = Planner(admin, cfg, self.app.subtopologies, counts, clocked)
        planner.refresh_topic_ids()
        planner.initialize_offsets()
        purged = sorted(self.app.repartition_topics) if cfg.repartition_purge_interval else []
        self.purger = RepartitionPurger(admin, cfg, purged, cfg.repartition_purge_interval or PURGE_INTERVAL_S,
                                        topic_groups(self.app.subtopologies, cfg.group_id))
        planner.plan_ahead(batch)  # (while a context still starts: the first batch's look-ups are done by then)
        check_spark_conf(spark_conf(self.sc))
        planner.set_task_slots(total_task_slots(self.sc))  # (what tasks_per_transaction="auto" goes by)
        ship_framework(self.sc, local=is_local_master(str(self.sc.master)))
        # the internal topics exist before the run's first batch: waited for here, their creation overlapped by the rest
        job = Job(cfg, dict(self.app.subtopologies), self.app.fault_hooks, internal.result(),
                  ledger_topic(cfg.application_id),
                  self.app.repartition_topics, clocked)
        if self.placer is None and cfg.placement:
            self.placer = Placer(self.sc, admin, cfg, self.app.subtopologies, counts)
        elif self.placer is not None:  # (prepared again: where tasks ran stays known; a wider topic adds tasks)
            self.placer.set_tasks(self.app.subtopologies, counts)
        if cfg.metrics_port is not None and self.metrics is None:
            from eos.driver.metrics import DriverMetrics  # (prometheus_client: ~25 ms, only for a job that serves)

            metrics = DriverMetrics(cfg.application_id)
            try:
                metrics.serve(cfg.metrics_port, cfg.metrics_host)
            except OSError as exc:
                raise ConfigError(f"cannot serve metrics on {cfg.metrics_host}:{cfg.metrics_port} ({exc}): choose "
                                  "another metrics_port (--metrics-port), or none") from None
            self.metrics = metrics
            log.info("metrics served", url=f"http://{cfg.metrics_host}:{cfg.metrics_port}/metrics")
        return planner, job

    def run(self, *, until_caught_up: bool = False, max_batches: int | None = None, max_seconds: float | None = None,
            handle_signals: bool = False, keep_task_results: bool = False,
            on_batch: OnBatch | None = None) -> RunSummary:
        with structlog.contextvars.bound_contextvars(app=self.config.application_id):
            return self._run(until_caught_up, max_batches, max_seconds, handle_signals, keep_task_results, on_batch)

    def _run(self, until_caught_up: bool, max_batches: int | None, max_seconds: float | None, handle_signals: bool,
             keep_task_results: bool, on_batch: OnBatch | None) -> RunSummary:
        cfg = self.config
        try:
            planner, job = self.prepare()
        except BaseException:
            self._release()
            raise
        broadcast = self.sc.broadcast(cloudpickle.dumps(job))
        tasks_fn = SparkTaskFunction(broadcast)
        summary = RunSummary(cfg.application_id, dead_letter_topic=cfg.dlq_topic)
        started = time.monotonic()
        look = started + cfg.metadata_refresh_interval  # when the inputs are looked at next (`_inputs_changed`)
        replan: str | None = None  # what changed since the job definition was made, if anything
        batch = failures = 0
        settling: float | None = None  # until when a run until caught up waits for its own topics (`_settled`)
        log.info("run started", subtopologies=sorted(self.app.subtopologies), until_caught_up=until_caught_up,
                 master=self.sc.master)
        with self._signals(handle_signals):
            try:
                while not self._stop.is_set():
                    if max_seconds is not None and time.monotonic() - started > max_seconds:
                        break
                    t0, wall = time.monotonic(), time.time()
                    if self.lease is not None:
                        check_driver_lease(self.lease, cfg)
                    try:
                        if time.monotonic() >= look:
                            look = time.monotonic() + cfg.metadata_refresh_interval
                            replan = self._inputs_changed(planner) or replan
                        if replan:  # (until it succeeds: a failed attempt is made again with the next batch)
                            planner, job = self.prepare(again=True, batch=batch)
                            stale, broadcast = broadcast, self.sc.broadcast(cloudpickle.dumps(job))
                            tasks_fn = SparkTaskFunction(broadcast)
                            stale.unpersist()
                            log.info(f"planned again for {replan}", batch=batch,
                                     seconds=round(time.monotonic() - t0, 3))
                            replan = None
                        plans = planner.plan(batch)
                        if self.metrics is not None:
                            self.metrics.observe_lag(planner.lag)
                        standbys: list[StandbyPlan] = []
                        if self.placer is not None:
                            plans, standbys = self.placer.place(plans, batch)
                        if until_caught_up and all(p.idle and not (p.stamps and p.stamps.wake) for p in plans):
                            # every input is processed (punctuation of idle tasks does not count), unless a
                            # step's output that a later step reads is not yet stable
                            settling = settling or time.monotonic() + SETTLE_S
                            if not self._settled(planner, settling):
                                self._stop.wait(SETTLE_POLL_S)
                                continue
                            # (a topic a pattern matches, or a partition, added since the last look: read too)
                            replan = self._inputs_changed(planner)
                            if replan is None:
                                break
                            settling = None
                            continue
                        settling = None
                        if not plans and not standbys:
                            self._stop.wait(cfg.trigger_interval)
                            continue
                        everything = self._execute(tasks_fn, [*plans, *standbys], batch)
                    except Exception as exc:
                        if not stops_the_job(exc) and (changed := self._changed_under(planner)):
                            # (a topic a pattern matched deleted, say: the batch is planned again without it)
                            log.info(f"the batch is planned again for {changed}", batch=batch, error=root_cause(exc))
                            replan = changed
                            continue
                        failures += 1
                        if stops_the_job(exc):
                            raise
                        if self._stop.is_set():
                            # A stop was asked for and the batch did not finish (a SIGTERM to the driver's
                            # whole process group ends Spark's processes too): its transactions abort, and
                            # the next start reads its input again.
                            log.warning("stopped with a batch in flight; it did not commit and runs again at the "
                                        "next start", batch=batch, error=root_cause(exc))
                            break
                        if failures > cfg.max_failed_batches:
                            raise JobFailedError(f"{failures} batches in a row failed; the last error: "
                                                 f"{root_cause(exc)}") from exc
                        backoff = min(30.0, 2.0 ** failures)
                        log.error("batch failed; planning it again", batch=batch, failures=failures,
                                  retry_in_s=backoff, error=root_cause(exc))
                        self._stop.wait(backoff)
                        continue
                    failures = 0
                    if self._start is not None:
                        self._start.settle()  # (after the first batch: what the context needs only later)
                    results = [r for r in everything if isinstance(r, TaskResult)]
                    planner.observe(results)
                    planner.time_batch(plans, time.monotonic() - t0)
                    if self.purger is not None:
                        self.purger.maybe_purge()
                    report = self._report(batch, wall, time.monotonic() - t0, results, standbys, everything)
                    report.input_lag = sum(planner.lag.values())
                    summary.add(report, results, keep_task_results)
                    if self.metrics is not None:
                        self.metrics.observe_batch(report, results)
                    summary.dead_letter_warnings += self._warn_dead_letters(results)
                    self.lateness.check(summary, results)
                    log.info("batch done", **to_json(report))
                    if on_batch is not None:
                        on_batch(report, results)
                    batch += 1
                    if max_batches is not None and batch >= max_batches:
                        break
                    deferred = any(isinstance(r, TaskResult) and r.status is TaskStatus.DEFERRED for r in results)
                    if deferred and self.app.graph.patterns:  # (a matched topic deleted since the plan, perhaps)
                        look = time.monotonic()
                    if not any(p.behind for p in plans) and not deferred:
                        # A batch that max_records_per_batch capped is followed at once, as Kafka Streams
                        # processes a backlog without pause between its commits: waiting out the interval
                        # left the cores idle for what a shorter batch saved (docs/measurements.md). So is one
                        # whose tasks were left for the next batch (a unit's in a run's first batch).
                        self._stop.wait(max(0.0, cfg.trigger_interval - (time.monotonic() - t0)))
            finally:
                try:
                    with jvm_may_be_gone():
                        broadcast.unpersist()
                except (Py4JError, OSError):  # Spark's JVM is gone (see stop_context): nothing to unpersist
                    pass
                self._release()
        summary.elapsed_s = time.monotonic() - started
        if self.placer is not None:
            summary.moves = list(self.placer.moves)
        log.info("run finished", batches=summary.batches, transactions=summary.transactions,
                 records_in=summary.records_in, records_folded=summary.records_folded,
                 records_direct=summary.records_direct,
                 records_out=summary.records_out, dead_letters=summary.dead_letters,
                 elapsed_s=round(summary.elapsed_s, 2))
        return summary

    def _inputs_changed(self, planner: Planner) -> str | None:
        """What changed in the job's inputs since its definition was made, if anything: its topic patterns match
        other topics, or an input has more partitions. Then the next batch is planned anew
        (`prepare(again=True)`: a new topic's, or a new partition's, records start where their source's
        auto_offset_reset says, a new job definition goes to the workers, whose task runtimes are built again
        from their stores). The tasks stay, and keep their transactional ids: a stateless step whose input
        has more partitions than its tasks gets tasks for them, with ids of their own. A step that keeps state
        by key stops the job instead, saying so: its input's keys now hash to other partitions than its stores
        were built from (`check_topics`, `ensure_changelogs`), as Kafka Streams stops at a changelog of too few
        partitions."""
        assert self.admin is not None
        reasons = []
        if self.app.graph.patterns:
            before = self.app.graph.pattern_topics()
            if match_topic_patterns(self.app, self.admin):
                reasons.append("the topics the patterns match")
                for name, topics in self.app.graph.pattern_topics().items():
                    if topics != before[name]:
                        log.info("a topic pattern matches other topics: read from the next batch", source=name,
                                 added=sorted(set(topics) - set(before[name])),
                                 removed=sorted(set(before[name]) - set(topics)))
        known = planner.partition_counts
        counts = self.admin.partition_counts(sorted({t for sub in planner.subtopologies.values() for t in sub.inputs}))
        grown = {t: (known[t], n) for t, n in counts.items() if n is not None and n > known.get(t, n)}
        if grown:
            reasons.append("the partitions added to its inputs")
            for topic, (was, now) in sorted(grown.items()):
                log.info("an input topic has more partitions: they are read from the next batch", topic=topic,
                         partitions=now, before=was)
        return " and ".join(reasons) or None

    def _changed_under(self, planner: Planner) -> str | None:
        """After a batch failed: what changed in the job's inputs (`_inputs_changed`: a topic a pattern matched
        deleted while it ran fails the plan's look-ups), so that the next batch is planned for them at once;
        None when nothing did, or when that cannot be told now (the failure is then handled as any)."""
        try:
            return self._inputs_changed(planner)
        except Exception as exc:  # (the broker cannot say: the failure stands)
            log.debug("could not look at the inputs after a failed batch", error=root_cause(exc))
            return None

    @staticmethod
    def _settled(planner: Planner, until: float) -> bool:
        """Whether the topics the application writes and reads itself held nothing past what the last plan saw
        as stable. A run until caught up waits for them up to SETTLE_S: the markers of the last batch's commit
        come a moment after EndTxn's answer, and a plan between the two saw a later step's input as read. A
        transaction of its own still open then (a writer killed, not yet fenced) ends the wait."""
        unsettled = planner.unsettled()
        if unsettled and time.monotonic() >= until:
            log.warning("stopping as caught up with transactions of the application's own topics still open; "
                        "their records are read at the next start", partitions=[f"{t}-{p}" for t, p in unsettled],
                        waited_s=SETTLE_S)
            return True
        return not unsettled

    def _release(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None
        if self.lease is not None:
            self.lease.release()
            self.lease = None

    def _execute(self, tasks_fn: SparkTaskFunction, plans: list[TaskPlan | StandbyPlan],
                 batch: int) -> list[TaskResult | StandbyResult]:
        """One Spark job: the tasks planned on each executor shared out among as many Spark tasks as it runs at
        once (`eos.driver.groups`), each standby one Spark task. A task that reports a deterministic failure
        raises it here (its kind of error), after the placer has seen the results."""
        # A SIGTERM to the driver's whole process group ends Spark's JVM while the batch's job is in flight: Py4J
        # would log a traceback for the call it left unanswered. The error is raised all the same, and `_run` says
        # what became of the batch (`jvm_may_be_gone`).
        with jvm_may_be_gone():
            items = share_out(plans, task_slots(self.sc), lambda plan: unit_id(plan, self.config))
            self.sc.setJobGroup(f"{self.config.application_id}-batch-{batch}",
                                f"eos {self.config.application_id} batch {batch} ({len(plans)} tasks in "
                                f"{len(items)} Spark tasks)", True)
            rdd = task_rdd(self.sc, items, [p.preferred_location for p in items])
            collected = rdd.mapPartitions(tasks_fn).collect()
        results = one_result_per_task(plans, collected)
        if self.placer is not None:
            self.placer.observe(results)
        for r in results:
            if isinstance(r, TaskResult) and r.failure is not None:
                raise r.failure.to_exception()
        return results

    def _warn_dead_letters(self, results: list[TaskResult]) -> int:
        """Log a warning for every task whose batch dead-lettered more than dead_letter_warn_ratio of its
        input (a job that rejects most of its input is rarely what its author wants). Returns how many."""
        ratio, warned = self.config.dead_letter_warn_ratio, 0
        for r in results:
            if r.dropped:
                log.warning("records dropped", task=str(r.task), batch=r.batch, **r.dropped)
            if r.records_in and r.dead_letters > ratio * r.records_in:
                warned += 1
                log.warning("most of the batch went to the dead-letter topic", task=str(r.task), batch=r.batch,
                            dead_letters=r.dead_letters, records_in=r.records_in, topic=self.config.dlq_topic,
                            first_error=r.first_dead_letter_error)
        return warned

    def _report(self, batch: int, wall: float, duration: float, results: list[TaskResult],
                standbys: list[StandbyPlan], everything: list[TaskResult | StandbyResult]) -> BatchReport:
        report = BatchReport.of(batch, wall, duration, results)
        report.standbys_refreshed = sum(isinstance(r, StandbyResult) and r.status is StandbyStatus.REFRESHED
                                        for r in everything)
        report.max_standby_lag = max((p.lag for p in standbys), default=0)
        if self.placer is not None:
            report.placement = self.placer.snapshot()
        return report

    @contextmanager
    def _signals(self, enabled: bool) -> Iterator[None]:
        if not enabled or threading.current_thread() is not threading.main_thread():
            yield
            return
        hits = 0
        # A SIGTERM to the driver's whole process group ends Spark's JVM too, while the batch in flight finishes:
        # from the signal on, Py4J's traceback for a connection the dying JVM reset (a call of the batch's, a
        # proxy released) is held back, and the run says in one line that the JVM exited
        held, errors = contextlib.ExitStack(), []

        def handler(signum: int, frame: Any) -> None:
            nonlocal hits
            hits += 1
            if hits > 1:
                raise KeyboardInterrupt
            log.warning("stop requested: finishing the current batch", signal=signal.Signals(signum).name)
            errors.append(held.enter_context(jvm_may_be_gone()).errors)
            self.request_stop()

        previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
            held.close()
            if errors and errors[0]:
                log.info("Spark's JVM exited after the stop signal", error=errors[0][0])


def root_cause(exc: BaseException) -> str:
    """One line naming the root cause of a failed batch. An exception raised in a Spark task reaches the
    driver as a Py4J error whose text ends with the Python traceback: its last exception line is the
    root cause ("An error occurred while calling collectAndServe" says nothing). Display only: decisions are
    made on exception types."""
    text = str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    python = [line for line in lines if _looks_like_exception_line(line)]
    if python:
        return python[-1][:500]
    return (lines[0] if lines else type(exc).__name__)[:500]


def _looks_like_exception_line(line: str) -> bool:
    head, sep, _ = line.partition(":")
    return bool(sep) and head.replace(".", "").isidentifier() and (head.endswith("Error") or head.endswith("Exception"))
