"""Standby replicas and sticky, lag-aware placement on three executor JVMs (local-cluster[3,1,1024]).

Each executor has its own state directory (`{executor}`), as separate hosts would. One continuous run:
a steady phase (tasks stay put, no restores after warm-up), then the executor of a task is SIGKILLed and
the task must move to the executor holding its standby and replay at most the standby's lag. Without
standbys the moved task replays its whole changelog. Both runs must audit exactly-once."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter

import pytest

from chaos.processes import executor_pid
from eos import Application, TaskId
from eos.driver.runner import Runner
from eos.driver.spark import live_executors
from integration_tests.helpers import assert_exactly_once, assert_totals_exact, produce
from integration_tests.streams.test_time_and_rekey import committed_records
from transactions import KafkaAdmin

KEYS = 4000
BATCH = 1000


def add(key, value, totals):
    return {"count": totals["count"] + 1, "sum": totals["sum"] + value["n"]}


def records(first, n):
    return ((f"k{i % KEYS}".encode(), json.dumps({"id": i, "n": i % 7}).encode()) for i in range(first, first + n))


def wait(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def fail_over(sc, kafka, admin, app_id, src, more, results, victim_task, victim, kill=None) -> None:
    """Lose the executor `victim` (`kill(executor_id)`; default: SIGKILL its JVM), write `more` records to `src`,
    and wait until they are read and `victim_task` has committed on another executor (`results`: the run's)."""
    seen_before_kill = len(results)
    if kill is None:
        os.kill(executor_pid(victim, sc.applicationId), signal.SIGKILL)
    else:
        kill(victim)
    wait(lambda: victim not in live_executors(sc), 60, "Spark to notice the lost executor")
    produce(kafka.bootstrap_servers, src, more)
    wait(lambda: admin.group_lag(app_id, [src]) == 0 and any(
        r.task == victim_task and r.executor != victim and r.status == "committed" for r in results[seen_before_kill:]),
        240, "the moved task to commit")


def run_failover(kafka, sc, topic_factory, unique_name, tmp_path, standbys, kill=None):
    """`kill(executor_id)` loses the executor (default: SIGKILL its JVM)."""
    src, out = topic_factory("in", partitions=4), topic_factory("totals", partitions=4)
    app_id = unique_name("app")
    app = Application(app_id, kafka.bootstrap_servers, state_dir=str(tmp_path / "state" / "{executor}"),
                      num_standby_replicas=standbys, max_records_per_batch=BATCH, trigger_interval=0.3,
                      acceptable_recovery_lag=200,  # each task's whole changelog is ~10k records here
                      log_format="json", log_level="WARNING")
    app.aggregate(src, out, name="totals", initializer=lambda: {"count": 0, "sum": 0}, aggregator=add)
    runner = Runner(app, sc)
    results, reports = [], []
    summary = {}
    thread = threading.Thread(target=lambda: summary.setdefault("s", runner.run(
        keep_task_results=True, on_batch=lambda rep, res: (reports.append(rep), results.extend(res)))), daemon=True)
    produce(kafka.bootstrap_servers, src, records(0, 40_000))
    thread.start()
    admin = KafkaAdmin(kafka.bootstrap_servers)
    wait(lambda: admin.group_lag(app_id, [src]) == 0 and len(reports) >= 3, 240, "the first load")
    time.sleep(3)  # a few more (standby-only) batches: copies catch up with the last commits
    steady = list(results)

    victim_task = TaskId("totals", 0)
    victim = [r for r in steady if r.task == victim_task and r.status == "committed"][-1].executor
    changelog_before = sum(r.changelog_records for r in steady if r.task == victim_task)
    fail_over(sc, kafka, admin, app_id, src, records(40_000, 8_000), results, victim_task, victim, kill)
    runner.request_stop()
    thread.join(120)
    s = summary["s"]
    assert_exactly_once(kafka.bootstrap_servers, inputs=[src], outputs=[out], group=app_id, expected_inputs=48_000)
    assert_totals_exact(kafka.bootstrap_servers, inputs=[src], totals=[out], group=app_id)
    moves = [m for m in s.moves if m.task == victim_task and m.source == victim]
    assert moves and moves[0].reason == "executor lost", {"victim": victim, "moves": s.moves}
    return steady, reports, moves[0], changelog_before


@pytest.mark.spark_cluster
def test_steady_placement_then_failover_to_the_standby(kafka, spark_cluster3, topic_factory, unique_name, tmp_path):
    steady, reports, move, changelog_before = run_failover(kafka, spark_cluster3, topic_factory, unique_name,
                                                           tmp_path, standbys=1)
    # Steady state: once placed, every task keeps its executor and restores nothing, batch after batch.
    committed = [r for r in steady if r.status == "committed"]
    last_batch = max(r.batch for r in committed)
    settled = max(r.batch for r in committed if r.restored_records > 0) if any(
        r.restored_records for r in committed) else 0
    assert settled <= 3, "tasks were still moving after warm-up"
    for task in {r.task for r in committed}:
        later = [r.executor for r in committed if r.task == task and r.batch > settled]
        assert len(set(later)) == 1, f"{task} changed executors in steady state: {later}"
    assert last_batch - settled >= 4  # and that was several batches
    assert any(rep.standbys_refreshed for rep in reports)
    # Batch reports show where each task and its standby run, and the standby's lag.
    placed = [rep.placement for rep in reports if rep.placement and all(
        len(where.standbys) == 1 and where.active not in where.standbys for where in rep.placement.values())]
    assert placed and set(placed[-1]) == {r.task for r in committed}
    # Failover: the task replayed at most its standby's lag, a small part of its changelog.
    max_lag = max(rep.max_standby_lag for rep in reports)
    assert move.restored_records <= max(max_lag, BATCH), (move, max_lag)
    assert move.restored_records < changelog_before / 4, (move, changelog_before)


@pytest.mark.spark_cluster
@pytest.mark.soak  # the default suite proves failover with a standby; benchmarks.standby measures both
def test_without_standbys_a_moved_task_replays_its_whole_changelog(kafka, spark_cluster3, topic_factory, unique_name,
                                                                   tmp_path):
    _, _, move, changelog_before = run_failover(kafka, spark_cluster3, topic_factory, unique_name, tmp_path,
                                                standbys=0)
    assert move.restored_records == changelog_before, (move, changelog_before)


TABLE_KEYS = 8000


def rows(version: int, keys=range(TABLE_KEYS)):
    return ((f"p{i}".encode(), json.dumps({"price": i * 10 + version}).encode()) for i in keys)


def orders(first: int, n: int):
    return ((f"p{(i * 7) % TABLE_KEYS}".encode(), json.dumps({"id": i}).encode()) for i in range(first, first + n))


@pytest.mark.spark_cluster
def test_a_table_restored_from_its_topic_fails_over_to_its_standby(kafka, spark_cluster3, topic_factory, unique_name,
                                                                   tmp_path):
    """`topology_optimization="all"`: the prices table has no changelog of its own; its standby copy replays the
    compacted prices topic up to the offsets the active task committed. The executor of a task is SIGKILLed
    after a price update: the task moves to the copy, replays at most the copy's lag, and every order is joined
    exactly once with the price it had when the order came (the update, for the orders after it)."""
    prices = topic_factory("prices", partitions=4, config={"cleanup.policy": "compact"})
    src, out = topic_factory("orders", partitions=4), topic_factory("priced", partitions=4)
    app_id = unique_name("app")
    app = Application(app_id, kafka.bootstrap_servers, state_dir=str(tmp_path / "state" / "{executor}"),
                      num_standby_replicas=1, max_records_per_batch=BATCH, trigger_interval=0.3,
                      acceptable_recovery_lag=200, topology_optimization="all", log_format="json",
                      log_level="WARNING")
    app.stream(src).join(app.table(prices), lambda o, p: {"id": o["id"], "price": p["price"]}, name="priced").to(out)
    assert [s.source_topic for sub in app.subtopologies.values() for s in sub.stores] == [prices]
    runner = Runner(app, spark_cluster3)
    results, reports, summary = [], [], {}
    thread = threading.Thread(target=lambda: summary.setdefault("s", runner.run(
        keep_task_results=True, on_batch=lambda rep, res: (reports.append(rep), results.extend(res)))), daemon=True)
    produce(kafka.bootstrap_servers, prices, rows(0))
    produce(kafka.bootstrap_servers, src, orders(0, 8_000))
    thread.start()
    admin = KafkaAdmin(kafka.bootstrap_servers)
    wait(lambda: admin.group_lag(app_id, [src, prices]) == 0 and len(reports) >= 3, 240, "the first load")
    updated = range(0, TABLE_KEYS, 5)
    produce(kafka.bootstrap_servers, prices, rows(1, updated))  # a price update, read before the next orders
    produce(kafka.bootstrap_servers, src, orders(8_000, 4_000))
    wait(lambda: admin.group_lag(app_id, [src, prices]) == 0, 120, "the update and the orders after it")
    time.sleep(3)  # a few more (standby-only) batches: copies catch up with the last commits
    steady = list(results)

    victim_task = TaskId("priced", 0)
    victim = [r for r in steady if r.task == victim_task and r.status == "committed"][-1].executor
    table_partition = admin.end_offsets([(prices, 0)])[(prices, 0)]
    fail_over(spark_cluster3, kafka, admin, app_id, src, orders(12_000, 4_000), results, victim_task, victim)
    runner.request_stop()
    thread.join(120)

    assert admin.partition_counts([f"{app_id}-priced-prices-changelog"]) == {f"{app_id}-priced-prices-changelog": None}
    assert not any(r.changelog_records for r in results)
    assert any(rep.standbys_refreshed for rep in reports)
    got = Counter((v["id"], v["price"]) for v in (json.loads(v) for _, v, _ in committed_records(
        kafka.bootstrap_servers, out)))
    expected = Counter()
    for i in range(16_000):
        key = (i * 7) % TABLE_KEYS
        expected[(i, key * 10 + (1 if i >= 8_000 and key % 5 == 0 else 0))] += 1
    assert got == expected, sorted((got - expected).items())[:5]
    # (a move for balance planned just before the kill may come first)
    moves = [m for m in summary["s"].moves if m.task == victim_task and m.source == victim
             and m.reason == "executor lost"]
    assert moves, {"victim": victim, "moves": summary["s"].moves}
    max_lag = max(rep.max_standby_lag for rep in reports)
    assert moves[0].restored_records <= max(max_lag, BATCH), (moves[0], max_lag)
    assert moves[0].restored_records < table_partition / 4, (moves[0], table_partition)
