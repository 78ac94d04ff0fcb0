"""The driver loop: plan a batch, run one Spark job with one Spark partition per planned task, collect the
task results, repeat at the trigger interval. Graceful stop finishes the current batch first.

The job definition (config, sub-topologies, hooks) goes to the workers once per run as a broadcast.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark import cloudpickle  # the pickler Spark itself uses for Python functions

from eos.batch import StandbyPlan, StandbyResult, TaskPlan, TaskResult
from eos.checks import check_broker, check_spark_conf, check_topics, create_internal_topics
from eos.logs import configure_logging, get_logger
from eos.placer import Placer
from eos.planner import Planner
from eos.standby import run_standby
from eos.task import Job, run_task
from transactions import KafkaAdmin

if TYPE_CHECKING:
    from pyspark import SparkContext

    from eos.app import Application

__all__ = ["Runner", "RunSummary", "BatchReport"]


@dataclass
class BatchReport:
    batch: int
    started: float  # unix time
    duration_s: float
    tasks: int
    committed: int
    noop: int
    fenced: int
    records_in: int
    records_out: int
    dead_letters: int
    max_commit_ms: float
    restored_records: int = 0
    standbys_refreshed: int = 0
    max_standby_lag: int = 0  # records the most lagging copy was behind before its refresh
    #: task -> {"active": executor, "copies": {executor: lag in records}} after this batch (placement on)
    placement: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunSummary:
    application_id: str
    batches: int = 0
    transactions: int = 0
    noop_tasks: int = 0
    fenced_tasks: int = 0
    records_in: int = 0
    records_out: int = 0
    dead_letters: int = 0
    changelog_records: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    restored_records: int = 0
    elapsed_s: float = 0.0
    batch_reports: list[BatchReport] = field(default_factory=list)
    task_results: list[TaskResult] = field(default_factory=list)
    #: Every time a task ran on another executor than before: why, and what its restore cost.
    moves: list[dict[str, Any]] = field(default_factory=list)

    def add(self, report: BatchReport, results: list[TaskResult], keep_results: bool) -> None:
        self.batches += 1
        self.batch_reports.append(report)
        for r in results:
            self.transactions += r.status == "committed"
            self.noop_tasks += r.status == "noop"
            self.fenced_tasks += r.status == "fenced"
            self.records_in += r.records_in
            self.records_out += r.records_out
            self.dead_letters += r.dead_letters
            self.changelog_records += r.changelog_records
            self.bytes_in += r.bytes_in
            self.bytes_out += r.bytes_out
            self.restored_records += r.restored_records
        if keep_results:
            self.task_results.extend(results)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("task_results")
        return data


_JOBS: dict[str, Job] = {}


class _SparkTasks:
    """The function each Spark partition runs (module-level, so workers import it instead of unpickling code)."""

    def __init__(self, job_broadcast: Any) -> None:
        self.job_broadcast = job_broadcast
        self.token = uuid.uuid4().hex  # identifies this run's job in the worker's cache

    def __call__(self, plans: Iterator[TaskPlan | StandbyPlan]) -> Iterator[TaskResult | StandbyResult]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        attempt = ctx.attemptNumber() if ctx is not None else 0
        job = _JOBS.get(self.token)
        if job is None:
            job = _JOBS[self.token] = cloudpickle.loads(self.job_broadcast.value)
        for plan in plans:
            yield run_standby(plan, job) if isinstance(plan, StandbyPlan) else run_task(plan, job, attempt)


class Runner:
    def __init__(self, app: "Application", sc: "SparkContext") -> None:
        self.app = app
        self.sc = sc
        self.config = app.config
        self._stop = threading.Event()
        self.placer: Placer | None = None
        configure_logging(self.config.log_format, self.config.log_level)  # before binding: bind() freezes config
        self.log = get_logger("eos.runner", app=self.config.application_id)

    def request_stop(self) -> None:
        """Graceful stop: the batch in flight finishes (commits), then the loop ends."""
        self._stop.set()

    def prepare(self) -> tuple[Planner, Job]:
        cfg = self.config
        cfg.require_bootstrap()
        check_spark_conf(dict(self.sc.getConf().getAll()))
        admin = KafkaAdmin(cfg.bootstrap_servers)
        counts = check_topics(admin, self.app.subtopologies)
        check_broker(admin, cfg)
        task_count = max(counts[sub.inputs[0]] for sub in self.app.subtopologies.values())
        internal = create_internal_topics(admin, cfg, task_count)
        extras = {"dlq_partitions": internal[cfg.dlq_topic], **self.app.prepare_internal(admin, counts)}
        job = Job(cfg, dict(self.app.subtopologies), self.app.fault_hooks, extras)
        planner = Planner(admin, cfg, self.app.subtopologies, counts)
        planner.initialize_offsets()
        self.placer = Placer(self.sc, admin, cfg, self.app.subtopologies, counts, self.log) if cfg.placement else None
        return planner, job

    def run(self, *, until_caught_up: bool = False, max_batches: int | None = None, max_seconds: float | None = None,
            handle_signals: bool = False, keep_task_results: bool = False,
            on_batch: Callable[[BatchReport, list[TaskResult]], None] | None = None) -> RunSummary:
        cfg = self.config
        planner, job = self.prepare()
        sc = self.sc
        broadcast = sc.broadcast(cloudpickle.dumps(job))
        tasks_fn = _SparkTasks(broadcast)
        summary = RunSummary(cfg.application_id)
        started = time.monotonic()
        batch = 0
        self.log.info("run started", subtopologies=sorted(self.app.subtopologies), until_caught_up=until_caught_up,
                      master=sc.master)
        with self._signals(handle_signals):
            try:
                failures = 0
                while not self._stop.is_set():
                    if max_seconds is not None and time.monotonic() - started > max_seconds:
                        break
                    t0, wall = time.monotonic(), time.time()
                    try:
                        plans = planner.plan(batch)
                        standbys: list[StandbyPlan] = []
                        if self.placer is not None:
                            plans, standbys = self.placer.place(plans, batch)
                        if not plans and (until_caught_up or not standbys):
                            if until_caught_up:
                                break
                            self._stop.wait(cfg.trigger_interval)
                            continue
                        everything = self._execute(sc, tasks_fn, [*plans, *standbys], batch)
                        results = [r for r in everything if isinstance(r, TaskResult)]
                        refreshed = [r for r in everything if isinstance(r, StandbyResult) and r.status == "refreshed"]
                        if self.placer is not None:
                            self.placer.observe(everything)
                    except Exception as exc:
                        failures += 1
                        if _stops_the_job(exc) or failures > cfg.max_failed_batches:
                            raise
                        backoff = min(30.0, 2.0 ** failures)
                        self.log.error("batch failed; planning it again", batch=batch, failures=failures,
                                       retry_in_s=backoff, error=str(exc).splitlines()[0][:500])
                        self._stop.wait(backoff)
                        continue
                    failures = 0
                    report = _report(batch, wall, time.monotonic() - t0, results)
                    report.standbys_refreshed = len(refreshed)
                    report.max_standby_lag = max((p.lag for p in standbys), default=0)
                    if self.placer is not None:
                        report.placement = self.placer.snapshot()
                    summary.add(report, results, keep_task_results)
                    self.log.info("batch done", **asdict(report))
                    if on_batch is not None:
                        on_batch(report, results)
                    batch += 1
                    if max_batches is not None and batch >= max_batches:
                        break
                    self._stop.wait(max(0.0, cfg.trigger_interval - (time.monotonic() - t0)))
            finally:
                broadcast.unpersist()
        summary.elapsed_s = time.monotonic() - started
        if self.placer is not None:
            summary.moves = list(self.placer.moves)
        self.log.info("run finished", batches=summary.batches, transactions=summary.transactions,
                      records_in=summary.records_in, records_out=summary.records_out,
                      dead_letters=summary.dead_letters, elapsed_s=round(summary.elapsed_s, 2))
        return summary

    def _execute(self, sc: Any, tasks_fn: _SparkTasks, plans: list[TaskPlan], batch: int) -> list[TaskResult]:
        sc.setJobGroup(f"{self.config.application_id}-batch-{batch}",
                       f"eos {self.config.application_id} batch {batch} ({len(plans)} tasks)", True)
        return self.app.task_rdd(sc, plans).mapPartitions(tasks_fn).collect()

    @contextmanager
    def _signals(self, enabled: bool) -> Iterator[None]:
        if not enabled or threading.current_thread() is not threading.main_thread():
            yield
            return
        hits = {"n": 0}

        def handler(signum: int, frame: Any) -> None:
            hits["n"] += 1
            if hits["n"] > 1:
                raise KeyboardInterrupt
            self.log.warning("stop requested: finishing the current batch", signal=signal.Signals(signum).name)
            self.request_stop()

        previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for s, h in previous.items():
                signal.signal(s, h)


def _stops_the_job(exc: BaseException) -> bool:
    """Errors that re-planning cannot fix: the bad-record policy said stop, or the configuration is wrong."""
    from eos.config import ConfigError

    text = str(exc)
    return isinstance(exc, ConfigError) or "BadRecordError" in text or "on_bad_record='fail'" in text


def _report(batch: int, wall: float, duration: float, results: list[TaskResult]) -> BatchReport:
    return BatchReport(
        batch=batch, started=wall, duration_s=round(duration, 4), tasks=len(results),
        committed=sum(r.status == "committed" for r in results), noop=sum(r.status == "noop" for r in results),
        fenced=sum(r.status == "fenced" for r in results), records_in=sum(r.records_in for r in results),
        records_out=sum(r.records_out for r in results), dead_letters=sum(r.dead_letters for r in results),
        max_commit_ms=round(max((r.commit_ms for r in results), default=0.0), 2),
        restored_records=sum(r.restored_records for r in results))
