"""Run one chaos scenario: a Kafka cluster (with proxies for network faults), the job in a supervised
subprocess, steady load, the fault schedule, a drain, and the auditor's verdict.

The verdict is the auditor's: every input record exactly once in the output or the dead-letter topic
(lineage), per-key totals exact with no repeated or skipped step (stateful jobs), no transaction left
open. A run that does not drain (the job never catches up after the faults) also fails.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.faults import KINDS, inject
from chaos.load import Encoder, LoadGenerator, Make, is_poison, user_load
from chaos.processes import job_processes
from chaos.proxy import ProxyGroup, Route
from chaos.scenario import Scenario, schedule
from chaos.timeline import Timeline
from eos import Application
from eos.cli.loader import load_application
from localkafka import LocalCluster
from localkafka.provision import exit_on_sigterm
from transactions import KafkaAdmin, TopicSpec

__all__ = ["run_scenario", "scratch_environment", "ChaosResult", "Context"]


def scratch_environment(directory: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's environment) for a job whose processes are killed outright, with their
    temporary files in `directory` (removed with the scenario's scratch) rather than in /tmp, where a killed
    process's stay: Python's (the zygote's socket, task claims) follow TMPDIR; the JVMs' (each of Spark's leaves
    lz4's native library, 145 KB, Spark's submit and faulthandler directories, and its block managers unless
    SPARK_LOCAL_DIRS says otherwise) follow `java.io.tmpdir`, which every JVM the job starts, executors
    included, reads from JAVA_TOOL_OPTIONS (and says so on its stderr), where Spark's sockets fit."""
    from eos.driver.spark import with_java_tmpdir

    env = dict(os.environ if env is None else env)
    directory.mkdir(parents=True, exist_ok=True)
    options = with_java_tmpdir(env.get("JAVA_TOOL_OPTIONS", ""), str(directory))
    if options:
        env["JAVA_TOOL_OPTIONS"] = options
    env["TMPDIR"] = str(directory)
    return env


class JobSupervisor:
    """Keeps the job running: restarts the driver whenever it exits (as a cluster manager would). `scratch`: a
    directory for the temporary files of the job's processes (`scratch_environment`)."""

    def __init__(self, config: Path, log: Path, timeline: Timeline, scratch: Path | None = None) -> None:
        self.config, self.log, self.timeline = config, log, timeline
        self.env = scratch_environment(scratch) if scratch is not None else None
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._watch, name="chaos-supervisor", daemon=True)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> None:
        self._spawn()
        self._thread.start()

    def _spawn(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "chaos.jobs", str(self.config)], stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True, env=self.env)
        self.timeline.record("job", "start", f"driver pid {self.proc.pid}")

    def _reap_group(self, pgid: int) -> None:
        deadline = time.monotonic() + 20
        while job_processes(pgid) and time.monotonic() < deadline:
            time.sleep(0.2)
        for proc in job_processes(pgid):  # leftovers (e.g. a stopped worker) of the dead driver
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _watch(self) -> None:
        while not self._stopping.is_set():
            proc = self.proc
            if proc is not None and proc.poll() is not None and not self._stopping.is_set():
                with self._lock:
                    self.timeline.record("job", "exit", f"driver pid {proc.pid}", code=proc.returncode)
                    self._reap_group(proc.pid)
                    if not self._stopping.is_set():
                        self.restarts += 1
                        self._spawn()
            time.sleep(0.2)

    def catch_up(self, timeout: float) -> bool:
        """After `stop`: run the job once more until every step has caught up with its input (as `eos run
        --until-caught-up`), the drain of a job whose steps read topics other steps write. True if it did."""
        with open(self.log, "ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "chaos.jobs", str(self.config), "--until-caught-up"],
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=self.env)
        self.timeline.record("job", "start", f"driver pid {proc.pid}, until caught up")
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait(10)
        self._reap_group(proc.pid)
        self.timeline.record("job", "exit", f"driver pid {proc.pid}", code=code)
        return code == 0

    def wait_exit(self, timeout: float) -> None:
        proc = self.proc
        if proc is not None:
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass

    def stop(self, timeout: float = 90.0) -> None:
        """Graceful stop (the batch in flight commits), then whatever is left is killed."""
        self._stopping.set()
        with self._lock:
            proc = self.proc
            if proc is None:
                return
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                os.kill(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)
            self.timeline.record("job", "stop", f"driver pid {proc.pid}", code=proc.returncode)
            self._reap_group(proc.pid)


@dataclass
class Context:
    scenario: Scenario
    cluster: LocalCluster
    proxies: ProxyGroup | None
    job: JobSupervisor
    load: LoadGenerator
    timeline: Timeline
    marks_dir: str


@dataclass
class ChaosResult:
    scenario: dict[str, Any]
    verdict: str = "FAIL"
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the run did not try, for a verdict that still holds
    schedule: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    faults_injected: int = 0
    recovery: list[dict[str, Any]] = field(default_factory=list)
    throughput: list[tuple[float, int]] = field(default_factory=list)
    input_rate: list[tuple[float, int]] = field(default_factory=list)
    load: dict[str, int] = field(default_factory=dict)
    job: dict[str, Any] = field(default_factory=dict)
    audits: list[dict[str, Any]] = field(default_factory=list)
    violations: int = 0
    drained: bool = False
    duration_s: float = 0.0
    workdir: str = ""

    @classmethod
    def from_report(cls, report: Path) -> ChaosResult:
        """A finished run's result, read back from its report.json."""
        data = json.loads(report.read_text())
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def run_scenario(scenario: Scenario, workdir: str | Path | None = None, *, keep_logs: bool = True) -> ChaosResult:
    """Run one scenario and return its result (also written to `workdir`/report.json). A SIGTERM stops the
    job and the scenario's brokers before the process ends."""
    with exit_on_sigterm():
        return _run_scenario(scenario, workdir, keep_logs)


def own_job(scenario: Scenario) -> tuple[Application, Make]:
    """A scenario's job and load of the user's, loaded: a ValueError (or ConfigError) says what is wrong with
    either before anything starts, a first record the job's serdes refuse too (`first_record_encodes`; a job with
    Schema Registry serdes is pointed at confluent-kafka's in-memory registry for that, and at the run's own
    registry when the run starts)."""
    app, make = load_application(scenario.job), user_load(scenario.load)
    if app.uses_schema_registry:
        app.configure(schema_registry_url=f"mock://eos-chaos-{uuid.uuid4().hex[:8]}")
    first_record_encodes(app, make, scenario)
    return app, make


def first_record_encodes(app: Application, make: Make, scenario: Scenario) -> None:
    """The load's first record, made as the run makes it, serialized by the job's serdes (a ValueError if not)."""
    try:
        topic, key, value = make(0, random.Random(scenario.seed))
    except Exception as exc:
        raise ValueError(f"load = {scenario.load!r}: record(0, rng) failed: {type(exc).__name__}: {exc}") from None
    Encoder(app.input_serdes, f"load = {scenario.load!r}")(0, topic, key, value)


def _run_scenario(scenario: Scenario, workdir: str | Path | None, keep_logs: bool) -> ChaosResult:
    from chaos.report import finish_result

    own, make = own_job(scenario) if scenario.own_job else (None, None)
    started = time.time()
    workdir = Path(workdir or tempfile.mkdtemp(prefix=f"chaos-{scenario.name}-"))
    workdir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="chaos-cluster-"))
    result = ChaosResult(scenario=scenario.to_dict(), workdir=str(workdir))
    planned = schedule(scenario)
    result.schedule = [vars(f) for f in planned]
    timeline = Timeline()
    cluster = LocalCluster(scratch / "cluster", scenario.brokers, proxied=scenario.needs_proxies)
    proxies = job = load = None
    registry = contextlib.ExitStack()
    try:
        url = None
        if own is not None and own.uses_schema_registry:  # a registry of the run's (as the suite's: provide_registry)
            from localkafka.registry import provide_registry

            url = registry.enter_context(provide_registry()).url
            own.configure(schema_registry_url=url)
        if scenario.needs_proxies:
            proxies = ProxyGroup(Route(n, listen, target) for n, listen, target in cluster.proxy_routes())
        cluster.up()
        direct = cluster.direct_bootstrap_servers
        run = uuid.uuid4().hex[:6]
        if own is not None:  # the user's job: its own application id and topics, on this fresh cluster
            app_id, src, out = own.config.application_id, "", ""
            KafkaAdmin(direct).create_topics(own.topic_specs(scenario.partitions))
        else:
            app_id, src, out = f"chaos-{scenario.job}-{run}", f"chaos-in-{run}", f"chaos-out-{run}"
            KafkaAdmin(direct).create_topics([TopicSpec(src, scenario.partitions),
                                              TopicSpec(out, scenario.partitions)])
        marks = workdir / "marks"
        shutil.rmtree(marks, ignore_errors=True)
        marks.mkdir()
        uses_marks = any(KINDS[f.kind].in_transaction or f.params.get("in_transaction") for f in scenario.faults)
        config = {"app_id": app_id, "bootstrap": cluster.bootstrap_servers, "input": src, "output": out,
                  "job": scenario.job, "master": scenario.master, "state_dir": str(scratch / "state" / "{executor}"),
                  "max_records_per_batch": scenario.max_records_per_batch, "standbys": scenario.standbys,
                  "transaction_timeout_ms": scenario.transaction_timeout_ms,
                  "batch_log": str(workdir / "batches.jsonl"),
                  "marks_dir": str(marks) if uses_marks else None, "spark_conf": _spark_conf(scenario),
                  "schema_registry_url": url}
        (workdir / "job.json").write_text(json.dumps(config, indent=2))
        (workdir / "batches.jsonl").write_text("")
        job = JobSupervisor(workdir / "job.json", workdir / "job.log", timeline, scratch / "tmp")
        load = LoadGenerator(direct, src, records=scenario.records, rate=scenario.rate, keys=scenario.keys,
                             seed=scenario.seed, make=make, log=workdir / "load.log",
                             encode=Encoder(own.input_serdes if own is not None else None, f"load = {scenario.load!r}"))
        ctx = Context(scenario, cluster, proxies, job, load, timeline, str(marks))
        job.start()
        load.warm_up(min(500, scenario.records))
        if not _wait_first_commit(workdir / "batches.jsonl", 180):
            result.reasons.append("the job never committed a batch" + _last_error(workdir / "job.log"))
            return result
        load.start()  # the timed load and the fault schedule start together
        reference = time.time()
        timeline.record("load", "start", f"{scenario.records} records at {scenario.rate}/s")
        timeline.record("faults", "start")
        for fault in planned:
            time.sleep(max(0.0, reference + fault.at - time.time()))
            detail = inject(ctx, fault)
            result.faults_injected += not detail.startswith("skipped")
        timeline.record("faults", "end")
        load.finished.wait(scenario.load_seconds + 300)
        timeline.record("load", "end", produced=load.produced, sent_all=load.ended)
        if load.error is not None:
            result.reasons.append(f"the load stopped after {load.produced} records: {load.error}")
        if own is not None:  # (its steps behind repartition topics too: run until every one has caught up)
            job.stop()
            result.drained = job.catch_up(scenario.drain_timeout)
        else:
            result.drained = _drain(KafkaAdmin(direct), app_id, src, scenario.drain_timeout)
            job.stop()
        timeline.record("drain", "end", drained=result.drained)
        if not result.drained:
            result.reasons.append(f"the job did not catch up within {scenario.drain_timeout:.0f}s after the faults")
        result.audits = _audit(direct, scenario, app_id, src, out, config)
        result.load = {"produced": load.produced, "poison": load.poisoned, "failed_deliveries": load.failed}
        if own is not None and load.poisoned:
            result.notes += _poison_taken(result.audits, load.poisoned_topics, load.poisoned)
        result.input_rate = [(second - int(timeline.started), count)
                             for second, count in sorted(load.per_second.items())]
        result.job = {"restarts": job.restarts, "app_id": app_id, "input": src, "output": out}
        return result
    except Exception as exc:  # (the report says why the scenario stopped, not only what it did not get to)
        result.reasons.append(f"the scenario stopped: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
                              if str(exc) else f"the scenario stopped: {type(exc).__name__}")
        raise
    finally:
        if job is not None:
            job.stop(timeout=30)
        if load is not None and load.finished.is_set():
            load.close()
        if proxies is not None:
            proxies.close()
        if keep_logs and (cluster.root / "logs").exists():
            shutil.copytree(cluster.root / "logs", workdir / "broker-logs", dirs_exist_ok=True)
        gc.collect()  # admin clients of this run (reference cycles) go before their brokers do
        cluster.down(timeout=15)
        registry.close()
        shutil.rmtree(scratch, ignore_errors=True)
        result.timeline = timeline.events
        result.duration_s = round(time.time() - started, 1)
        finish_result(result, workdir, timeline)


def _poison_taken(audits: list[dict[str, Any]], topics: set[str], poisoned: int) -> list[str]:
    """A note when a job of the user's took malformed records of the poison fault as records (its input serde
    accepts any bytes: strings, bytes), which leaves its dead-letter path untried. Not a failure: every record
    is still accounted for by the lineage audit."""
    lettered = sum((a.get("lineage") or {}).get("dead_lettered", 0) for a in audits
                   if a.get("mode") == "lineage" and topics & set(a.get("inputs") or ()))
    if lettered >= poisoned:
        return []
    return [f"the job took at least {poisoned - lettered} of the {poisoned} malformed records the poison fault wrote "
            f"to {', '.join(sorted(topics))} as records (its input serde accepts them): the fault did not try its "
            "dead-letter path"]


def _last_error(job_log: Path) -> str:
    """The job's last error line (e.g. a configuration Spark refused), to say why it never committed."""
    lines = job_log.read_text(errors="replace").splitlines() if job_log.is_file() else []
    errors = [line for line in lines if "Error" in line or "Exception" in line]
    return f": {errors[-1].strip()[:300]}" if errors else ""


def _spark_conf(scenario: Scenario) -> dict[str, str]:
    if not scenario.master.startswith("local-cluster"):
        return {}
    # Lose a stopped or dead executor within seconds (Spark's defaults wait two minutes).
    # Spark requires spark.network.timeoutInterval <= spark.storage.blockManagerHeartbeatTimeoutMs.
    return {"spark.network.timeout": "12s", "spark.network.timeoutInterval": "6s",
            "spark.executor.heartbeatInterval": "2s", "spark.storage.blockManagerHeartbeatTimeoutMs": "12000",
            "spark.task.maxFailures": "8"}


def _wait_first_commit(batch_log: Path, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in batch_log.read_text().splitlines():
            if json.loads(line).get("committed"):
                return True
        time.sleep(0.5)
    return False


def _drain(admin: KafkaAdmin, group: str, topic: str, timeout: float) -> bool:
    """Wait until the group's committed offsets reach the input's last stable offsets (twice in a row)."""
    deadline, streak = time.monotonic() + timeout, 0
    while time.monotonic() < deadline:
        try:
            lag = admin.group_lag(group, [topic])
        except Exception:  # a broker may still be settling after the faults
            time.sleep(1)
            continue
        streak = streak + 1 if lag == 0 else 0
        if streak >= 2:
            return True
        time.sleep(1)
    return False


def _audit(bootstrap: str, scenario: Scenario, app_id: str, src: str, out: str,
           config: dict[str, Any]) -> list[dict[str, Any]]:
    from eos.audit import AggregateSpec, audit, audit_application, audit_windowed

    if scenario.own_job:  # `eos audit app`: every step's lineage, every window and join, each once
        from chaos.jobs import build

        return [r.to_dict() for r in audit_application(build({**config, "marks_dir": None}),
                                                       bootstrap_servers=bootstrap)]
    if scenario.job == "windowed":  # every closed window's one result against the reference
        from chaos.jobs import build

        return [r.to_dict() for r in audit_windowed(build({**config, "marks_dir": None}), bootstrap_servers=bootstrap)]
    dlq = f"{app_id}-dlq"
    reports = [audit(bootstrap, inputs=[src], outputs=[out], dead_letter_topic=dlq, group=app_id,
                     extra_topics=[f"{app_id}-totals-store-changelog"] if scenario.job == "stateful" else ())]
    if scenario.job == "stateful":
        def n_of(raw: bytes | None) -> Any:
            return json.loads(raw or b"null")["n"]

        accept = lambda raw: not is_poison(raw)
        for kind, extract in (("count", lambda raw: json.loads(raw)["count"]),
                              ("sum", lambda raw: json.loads(raw)["sum"])):
            reports.append(audit(bootstrap, inputs=[src], outputs=[out], group=app_id,
                                 aggregate=AggregateSpec(kind, n_of, extract, accept)))  # type: ignore[arg-type]
    return [r.to_dict() for r in reports]

