"""Tasks that share a transaction (`tasks_per_transaction`) on a real broker and real Spark: a count and a
stateless step, 8 partitions in units of 4. Workers die inside a unit's transaction (before the commit of
its third task; after a streamed slice of its first; while the unit produces its tasks' changelog records,
which it does last, all together), where the unit reads its tasks' input in runs of two tasks a read
(`unit_read_records`: the third task's run is read after the first two tasks have produced into the
transaction), and the whole job, reading each unit's input in one read, is SIGKILLed three times and
restarted. Each key's committed counts are 1, 2, ..., its reference total, once each; every input is mapped
once; the auditor says PASS, and FAIL once a broken writer commits a result again; and each batch of a unit
commits in one transaction. The SIGKILLed job sets no tasks_per_transaction: "auto" makes the units of 4 on
the default master's two task slots, at its first start, and every restart keeps them."""

from __future__ import annotations

import json
import os
import random

from eos import Application
from eos.audit import audit_application
from eos.testing import CrashWorker, Match
from eos.worker.plans import TaskStatus
from eos.worker.progress import CommitMetadata
from integration_tests.helpers import produce
from integration_tests.streams.test_fused_topology import commit_copy, load_job, run_killed_then_caught_up
from integration_tests.streams.test_time_and_rekey import committed_records
from transactions import KafkaAdmin

PARTITIONS, UNIT, KEYS = 8, 4, 50


def orders(n: int, seed: int) -> list[tuple[bytes, bytes]]:
    rng = random.Random(seed)
    return [(f"k{rng.randrange(KEYS)}".encode(), json.dumps({"id": i, "qty": 1 + i % 5}).encode()) for i in range(n)]


def build(app: Application, src: str, counts: str, mapped: str) -> Application:
    stream = app.stream(src)
    stream.group_by_key().count(name="counts").to_stream().to(counts)
    stream.map_values(lambda v: {"id": v["id"], "double": v["qty"] * 2}).to(mapped)
    return app


def check(bootstrap: str, inputs: list[tuple[bytes, bytes]], counts: str, mapped: str) -> None:
    """Each key's counts are 1..n in order, once each; every input mapped once."""
    want: dict[bytes, int] = {}
    for key, _ in inputs:
        want[key] = want.get(key, 0) + 1
    got: dict[bytes, list[int]] = {}
    for key, value, _ in committed_records(bootstrap, counts):
        got.setdefault(key, []).append(int.from_bytes(value, "big"))
    assert got.keys() == want.keys()
    wrong = {k: (v[-3:], want[k]) for k, v in got.items() if v != list(range(1, want[k] + 1))}
    assert not wrong, list(wrong.items())[:3]
    ids = sorted(json.loads(value)["id"] for _, value, _ in committed_records(bootstrap, mapped))
    assert ids == list(range(len(inputs)))


def test_workers_dying_inside_a_unit_s_transaction_leave_every_result_once(kafka, spark, topic_factory,
                                                                           unique_name):
    bootstrap = kafka.bootstrap_servers
    src, counts, mapped = (topic_factory(n, partitions=PARTITIONS) for n in ("in", "counts", "mapped"))
    inputs = orders(12_000, seed=3)
    produce(bootstrap, src, inputs)
    # a backlog batch plans 500 records a task: runs of two tasks (1,000 offsets) a read
    app = build(Application(unique_name("app"), bootstrap_servers=bootstrap, tasks_per_transaction=UNIT,
                            max_records_per_batch=500, batch_slice_records=100, cache_max_bytes=0,
                            trigger_interval=0.0, unit_read_records=1_100), src, counts, mapped)
    # batch 1: the worker running unit 0-3 dies before the commit, after tasks 0-2 produced into its
    # transaction; batch 2: the one running unit 4-7 dies after task 4's first slice; batch 3: the one running
    # unit 4-7 dies once task 5's changelog records are produced, task 4's before them and tasks 6-7's not
    app.fault_hooks.on("before_commit", CrashWorker(Match(partition=2, spark_attempt=0, batch=1)))
    app.fault_hooks.on("after_slice", CrashWorker(Match(partition=4, spark_attempt=0, batch=2)))
    app.fault_hooks.on("after_produce", CrashWorker(Match(partition=5, spark_attempt=0, batch=3)))
    summary = app.run(spark, until_caught_up=True, keep_task_results=True)

    results = summary.task_results
    assert {r.status for r in results if r.batch > 0} <= {TaskStatus.COMMITTED, TaskStatus.NOOP}
    # the run's first batch: each unit commits after its first task, the rest follow in the next batch at once
    assert [(r.task.partition, r.status) for r in sorted(results, key=lambda r: r.task) if r.batch == 0] == [
        (p, TaskStatus.COMMITTED if p % UNIT == 0 else TaskStatus.DEFERRED) for p in range(PARTITIONS)]
    assert [r.spark_attempt > 0 for r in results if (r.batch, r.task.partition) in {(1, 2), (2, 4), (3, 5)}] == [
        True, True, True]
    commits: dict[tuple[int, int], set[float]] = {}
    for r in results:
        if r.status is TaskStatus.COMMITTED:
            commits.setdefault((r.batch, r.task.partition // UNIT), set()).add(r.committed_at)
    assert commits and all(len(times) == 1 for times in commits.values()), "a unit committed twice in a batch"
    check(bootstrap, inputs, counts, mapped)
    reports = audit_application(app)
    assert reports and all(r.verdict == "PASS" for r in reports), [(r.mode, r.verdict) for r in reports]


JOB = """
import os
from eos import Application
from eos.testing import MarkWhile
from integration_tests.streams.test_shared_transactions import build

app = build(Application(os.environ["APP"], max_records_per_batch=300, trigger_interval=0.0, cache_max_bytes=0,
                        log_format="json", log_level="WARNING", state_dir=os.environ["STATE"]),
            os.environ["IN"], os.environ["COUNTS"], os.environ["MAPPED"])
if os.environ.get("MARKS"):
    app.fault_hooks.on("before_commit", MarkWhile(os.environ["MARKS"], seconds=0.3))
"""


def test_a_job_of_units_sigkilled_and_restarted_commits_every_result_once(kafka, topic_factory, unique_name,
                                                                          tmp_path, monkeypatch):
    bootstrap = kafka.bootstrap_servers
    topics = {n: topic_factory(n, partitions=PARTITIONS) for n in ("in", "counts", "mapped")}
    inputs = orders(16_000, seed=4)
    produce(bootstrap, topics["in"], inputs)
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {**os.environ, "EOS_BOOTSTRAP_SERVERS": bootstrap, "APP": unique_name("app"),
           "STATE": str(tmp_path / "state"), "MARKS": str(marks), "IN": topics["in"], "COUNTS": topics["counts"],
           "MAPPED": topics["mapped"], "PYTHONPATH": os.getcwd()}
    run_killed_then_caught_up(tmp_path, JOB, env, seed=43)

    check(bootstrap, inputs, topics["counts"], topics["mapped"])
    app = load_job(tmp_path, env, monkeypatch)
    assert app.config.tasks_per_transaction == "auto"
    committed = KafkaAdmin(bootstrap).group_commits(app.config.group_id, [(topics["in"], p) for p in range(PARTITIONS)])
    assert {CommitMetadata.decode(c.metadata).grouping for c in committed.values()} == {UNIT}
    reports = audit_application(app)
    assert reports and all(r.verdict == "PASS" for r in reports), [(r.mode, r.verdict) for r in reports]
    key, value, _ = committed_records(bootstrap, topics["mapped"])[0]
    commit_copy(bootstrap, topics["mapped"], key, value)  # a broken writer: one result twice
    failed = [(r.mode, r.outputs) for r in audit_application(app) if r.verdict != "PASS"]
    assert [mode for mode, _ in failed] == ["lineage"] and topics["mapped"] in failed[0][1], failed
