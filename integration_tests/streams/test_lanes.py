"""Lanes (`lanes`, `eos.driver.lanes`) on a real broker and real Spark: two batch loops in the driver, each running
its share of the units as Spark jobs of its own, at the same time. A two-step job (a stateless step, and a count
after a repartition, so that each lane's first step writes both lanes' second), 8 partitions in units of 2.
Workers die inside transactions in both steps and both lanes; the run until caught up ends only when every
lane has read what the others wrote. Each group's committed counts are 1, 2, ..., its reference total, once
each; every input is mapped once; the auditor says PASS. The job SIGKILLed and restarted with lanes is
`test_shared_transactions.py::test_a_job_of_units_sigkilled_and_restarted_commits_every_result_once`."""

from __future__ import annotations

import itertools
import json
import random

from eos import Application
from eos.audit import audit_application
from eos.testing import CrashWorker, Match
from eos.worker.plans import TaskStatus
from integration_tests.helpers import produce
from integration_tests.streams.test_time_and_rekey import committed_records

PARTITIONS, UNIT, GROUPS = 8, 2, 40


def orders(n: int, seed: int) -> list[tuple[bytes, bytes]]:
    rng = random.Random(seed)
    return [(f"k{rng.randrange(500)}".encode(), json.dumps({"id": i, "qty": 1 + i % 5}).encode()) for i in range(n)]


def group_of(value: dict) -> str:
    return f"g{value['id'] * 7 % GROUPS}"


def test_two_lanes_of_a_repartitioned_job_with_workers_dying_commit_every_result_once(kafka, spark, topic_factory,
                                                                                      unique_name):
    bootstrap = kafka.bootstrap_servers
    src, counts, mapped = (topic_factory(n, partitions=PARTITIONS) for n in ("in", "counts", "mapped"))
    inputs = orders(10_000, seed=5)
    produce(bootstrap, src, inputs)
    app = Application(unique_name("app"), bootstrap_servers=bootstrap, lanes=2, tasks_per_transaction=UNIT,
                      max_records_per_batch=400, batch_slice_records=100, cache_max_bytes=0, trigger_interval=0.0)
    stream = app.stream(src)
    stream.map_values(lambda v: {"id": v["id"], "double": v["qty"] * 2}, name="doubled").to(mapped)
    stream.group_by(lambda k, v: group_of(v), name="regroup").count(name="counts").to_stream().to(counts)
    # partition 3's unit is in lane 1, partition 4's in lane 0 (`lane_shares`), in both steps
    app.fault_hooks.on("before_commit", CrashWorker(Match(partition=3, spark_attempt=0, every_nth_batch=3)))
    app.fault_hooks.on("after_slice", CrashWorker(Match(partition=4, spark_attempt=0, every_nth_batch=4)))
    spans: list[tuple[float, float]] = []
    summary = app.run(spark, until_caught_up=True, keep_task_results=True,
                      on_batch=lambda report, _: spans.append((report.started, report.started + report.duration_s)))

    results = summary.task_results
    assert {r.status for r in results} <= {TaskStatus.COMMITTED, TaskStatus.NOOP, TaskStatus.DEFERRED}
    assert {r.task.partition for r in results if r.spark_attempt > 0} >= {3, 4}, "a crash did not happen"
    spans.sort()
    assert any(b[0] < a[1] for a, b in itertools.pairwise(spans)), "no two batches ran at once"

    want: dict[bytes, int] = {}
    for _, value in inputs:
        key = group_of(json.loads(value)).encode()
        want[key] = want.get(key, 0) + 1
    got: dict[bytes, list[int]] = {}
    for key, value, _ in committed_records(bootstrap, counts):
        got.setdefault(key, []).append(int.from_bytes(value, "big"))
    assert got.keys() == want.keys()
    wrong = {k: (v[-3:], want[k]) for k, v in got.items() if v != list(range(1, want[k] + 1))}
    assert not wrong, list(wrong.items())[:3]
    ids = sorted(json.loads(value)["id"] for _, value, _ in committed_records(bootstrap, mapped))
    assert ids == list(range(len(inputs)))
    reports = audit_application(app)
    assert reports and all(r.verdict == "PASS" for r in reports), [(r.mode, r.verdict) for r in reports]
