"""Two attempts of the same task overlap: the first is SIGSTOPped after producing and adding its offsets,
a second attempt runs the batch and commits, then the first resumes. Its commit must fail as fenced
(it was fenced by the second attempt's init_transactions) and nothing may be duplicated (I4)."""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import signal
import time
from pathlib import Path

from eos import Application, TaskId
from eos.driver.checks import create_internal_topics
from eos.testing import StopSelf
from eos.worker.plans import Job, TaskPlan
from integration_tests.helpers import assert_exactly_once, produce
from transactions import KafkaAdmin, OffsetRange


def copy(record):  # module level: the attempts run in spawned processes, which pickle by reference
    return record.key, {"id": record.value["id"]}


def build(app_id: str, bootstrap: str, src: str, dst: str, zombie: bool) -> Job:
    app = Application(app_id, bootstrap, log_format="json", log_level="WARNING")
    app.process(input=src, output=dst, key_serde="string", value_serde="json", name="copy")(copy)
    if zombie:
        app.fault_hooks.on("before_commit", StopSelf())
    create_internal_topics(KafkaAdmin(bootstrap), app.config, app.subtopologies, {src: 1, dst: 1})
    return Job(app.config, app.subtopologies, app.fault_hooks)


def attempt(job: Job, plan: TaskPlan, results: multiprocessing.Queue[object]) -> None:
    from eos.worker.entry import run_task

    result = run_task(plan, job)
    results.put((result.status, result.records_out))


def process_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def start_stopped_in_its_commit(ctx, job: Job, plan: TaskPlan, results) -> multiprocessing.Process:
    """Start an attempt that stops itself in before_commit (records produced, offsets added to its open
    transaction) and wait until it is stopped."""
    proc = ctx.Process(target=attempt, args=(job, plan, results))
    proc.start()
    deadline = time.monotonic() + 120
    while process_state(proc.pid) != "T":
        assert time.monotonic() < deadline and proc.is_alive(), "the attempt never reached its commit"
        time.sleep(0.1)
    return proc


def test_zombie_attempt_cannot_commit_after_a_newer_attempt_started(kafka, topic_factory, unique_name):
    src, dst = topic_factory("in"), topic_factory("out")
    produce(kafka.bootstrap_servers, src, ((b"k", json.dumps({"id": i}).encode()) for i in range(1000)))
    app_id = unique_name("app")
    plan = TaskPlan(TaskId("copy", 0), 0, (OffsetRange(src, 0, 0, 1000),))
    ctx = multiprocessing.get_context("spawn")
    results: multiprocessing.Queue[object] = ctx.Queue()

    zombie = start_stopped_in_its_commit(ctx, build(app_id, kafka.bootstrap_servers, src, dst, True), plan, results)

    newer = ctx.Process(target=attempt, args=(build(app_id, kafka.bootstrap_servers, src, dst, False), plan, results))
    newer.start()
    assert results.get(timeout=120) == ("committed", 1000)
    newer.join(30)

    os.kill(zombie.pid, signal.SIGCONT)
    assert results.get(timeout=120) == ("fenced", 0)  # its commit failed: fenced, and it stopped
    zombie.join(30)

    result = assert_exactly_once(kafka.bootstrap_servers, inputs=[src], outputs=[dst], group=app_id,
                                 expected_inputs=1000)
    assert result.output_records == 1000


def test_a_stale_cached_producer_does_not_wait_out_a_dead_attempts_transaction(kafka, topic_factory, unique_name,
                                                                              request):
    """Worker A ran the task and keeps its producer. A later attempt elsewhere (B) initialised a producer,
    opened a transaction with the task's offsets in it and died. When A runs the task again, its stable read
    finds those offsets pending: A must see that its producer is stale and initialise a fresh one, which
    aborts B's transaction at once, instead of waiting for the broker's transaction timeout (60 s here)."""
    from eos.worker.clients import WorkerClients
    from eos.worker.entry import run_task
    from eos.worker.runtime import RUNTIMES

    src, dst = topic_factory("in"), topic_factory("out")
    produce(kafka.bootstrap_servers, src, ((b"k", json.dumps({"id": i}).encode()) for i in range(1000)))
    app_id = unique_name("app")
    job = build(app_id, kafka.bootstrap_servers, src, dst, False)
    assert job.config.transaction_timeout_ms >= 60_000
    worker_a = WorkerClients()
    # (run_task keeps the task's runtime, and through it worker A's clients, in this process's cache, as a
    # worker does between batches: cleared at the end, and the clients' reference cycles collected, or they
    # would outlive the test's broker and log its absence until the session ends)
    request.addfinalizer(lambda: (RUNTIMES.clear(), gc.collect()))
    # capped at 500 of the 1,000 records (`behind`), as the planner plans it: it reads no further
    first = TaskPlan(TaskId("copy", 0), 0, (OffsetRange(src, 0, 0, 500),), behind=frozenset({(src, 0)}))
    assert run_task(first, job, clients=worker_a).status == "committed"

    second = TaskPlan(TaskId("copy", 0), 1, (OffsetRange(src, 0, 500, 1000),))
    ctx = multiprocessing.get_context("spawn")
    results: multiprocessing.Queue[object] = ctx.Queue()
    dead = start_stopped_in_its_commit(ctx, build(app_id, kafka.bootstrap_servers, src, dst, True), second, results)
    os.kill(dead.pid, signal.SIGKILL)
    dead.join(30)

    started = time.monotonic()
    result = run_task(second, job, clients=worker_a)
    took = time.monotonic() - started
    assert (result.status, result.records_out) == ("committed", 500)
    assert took < 30, f"worker A waited {took:.0f}s: it waited for B's transaction to time out"
    assert_exactly_once(kafka.bootstrap_servers, inputs=[src], outputs=[dst], group=app_id, expected_inputs=1000)
