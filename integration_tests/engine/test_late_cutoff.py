"""The late cut-off on a real broker and real Spark: while input keeps arriving, a streamed batch reads its
partition up to the last stable offset as it is when the task begins reading, past the end the driver
planned, reads on to it once more when it has read that far (the top-up; no sooner than its task's last
top-up plus the trigger interval), and commits the end it read to.
With workers SIGKILLed before their commits, and (streamed) before a top-up, with the ledger's opening and
the group's offsets already in the transaction, every record is output exactly once, the committed ranges of
the ledger tile each partition, and the auditor's lineage check says PASS."""

from __future__ import annotations

import json
import threading
import time

import pytest
from confluent_kafka import Producer

from eos import Application
from eos.audit import audit_application
from eos.driver.planner import CADENCE_SLACK
from eos.testing import CrashWorker, Match
from eos.worker.attempt import CADENCE_WAIT_SHARE
from eos.worker.plans import TaskResult, TaskStatus
from integration_tests.engine.test_exactly_once import transform_app
from integration_tests.helpers import assert_exactly_once

RATE_S = 0.01  # a record to each partition every 10 ms: a batch's Spark job takes longer to reach its tasks
FEED_S = 8.0  # a run's time while input arrives
FEED_MAX_S = 40.0  # the input's time at most (a loaded machine may need more than one run)
#: The streamed step's trigger interval: long enough that its batches are paced by the interval, not by their own
#: time, even under the suite's load, so that a task's start moves from batch to batch with the Spark job's
#: dispatch, and some top-ups come sooner than the last plus the interval (at 0.3 s a loaded machine's batches
#: took longer than the interval, and no top-up ever had to wait for its cadence)
STREAMED_INTERVAL_S = 1.0


def feed(bootstrap: str, topic: str, seconds: float, produced: list[int],
         stop: threading.Event | None = None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": True})
    i, until = 0, time.monotonic() + seconds
    while time.monotonic() < until and not (stop is not None and stop.is_set()):
        for partition in (0, 1):
            producer.produce(topic, key=f"k{i}", value=json.dumps({"id": i, "n": i}), partition=partition)
            i += 1
        producer.poll(0)
        time.sleep(RATE_S)
    assert producer.flush(30) == 0
    produced.append(i)


def vectorized_app(app_id: str, bootstrap: str, src: str, dst: str, **settings) -> Application:
    """`transform_app` as a vectorized step (its batch read whole, then processed as one table)."""
    app = Application(app_id, bootstrap, log_format="json", log_level="WARNING", **settings)

    @app.process_batch(input=src, output=dst, key_serde="string", value_serde="json", format="pandas")
    def transform(frame):
        return frame.assign(value=frame.value.map(lambda v: {"id": v["id"], "square": v["n"] ** 2}))

    return app


@pytest.mark.parametrize("make_app", [transform_app, vectorized_app], ids=["streamed", "vectorized"])
def test_batches_read_past_their_plan_and_stay_exactly_once_when_workers_die_before_commit(
        make_app, kafka, spark, topic_factory, unique_name):
    streamed = make_app is transform_app
    src, dst = topic_factory("in", partitions=2), topic_factory("out", partitions=2)
    app = make_app(unique_name("app"), kafka.bootstrap_servers, src, dst,
                   trigger_interval=STREAMED_INTERVAL_S if streamed else 0.3)
    for batch in (3, 6):  # each kill lands on a batch that read past its plan (input arrives all the time)
        app.fault_hooks.on("before_commit", CrashWorker(Match(partition=batch % 2, spark_attempt=0, batch=batch)))
    app.fault_hooks.on("before_top_up", CrashWorker(Match(partition=0, spark_attempt=0, batch=4)))

    def killed_before_top_up(results: list[TaskResult]) -> bool:  # (batch 4's retry of partition 0 topped up)
        return any(r.batch == 4 and r.task.partition == 0 and r.spark_attempt > 0 and r.topped_up_at
                   for r in results)
    produced: list[int] = []
    stop = threading.Event()
    feeder = threading.Thread(target=feed, args=(kafka.bootstrap_servers, src, FEED_MAX_S, produced, stop))
    feeder.start()
    time.sleep(0.5)  # the first plan finds input
    results: list[TaskResult] = []
    runs: list[list[TaskResult]] = []
    try:
        # batches all the time the input arrives (caught up for a moment, a run until_caught_up would end
        # early, and its rest would be read as a backlog, with nothing arriving to read past the plan); under
        # the suite's load a run may see few batches in FEED_S, so runs follow each other (each with its kills
        # at batches 3 and 6) until three committed tasks have read past their plans and a kill was retried
        deadline = time.monotonic() + FEED_MAX_S - FEED_S
        while True:
            runs.append(app.run(spark, max_seconds=FEED_S, keep_task_results=True).task_results)
            results += runs[-1]
            committed = [r for r in results if r.status is TaskStatus.COMMITTED]
            if ((sum(r.extended > 0 for r in committed) >= 3 and any(r.spark_attempt > 0 for r in results)
                 and (not streamed or (any(r.topped_up > 0 for r in committed)
                                       and any(r.cadence_wait_ms > 0 for r in committed)
                                       and killed_before_top_up(results))))
                    or time.monotonic() > deadline or not feeder.is_alive()):
                break
    finally:
        stop.set()
        feeder.join()
    # the feeder's last records: read them too
    results += app.run(spark, until_caught_up=True, keep_task_results=True).task_results
    total = produced[0]

    committed = [r for r in results if r.status is TaskStatus.COMMITTED]
    assert sum(r.extended for r in committed) > 0 and sum(r.extended > 0 for r in committed) >= 3
    if streamed:  # it read on once more before committing (the top-up); a vectorized step reads its batch whole
        assert any(r.topped_up > 0 for r in committed)
        # and a top-up that came sooner than its task's last plus the interval waited for it (the cadence)
        assert any(r.cadence_wait_ms > 0 for r in committed)
        assert_top_ups_keep_their_cadence(runs, STREAMED_INTERVAL_S)
        assert killed_before_top_up(results)  # a batch killed with the ledger and group joined was done again
    assert [r for r in results if r.spark_attempt > 0]  # the kills happened and Spark retried
    result = assert_exactly_once(kafka.bootstrap_servers, inputs=[src], outputs=[dst], group=app.config.group_id,
                                 expected_inputs=total)
    assert result.output_records == total
    reports = audit_application(app)
    assert reports and all(r.verdict == "PASS" for r in reports), [(r.mode, r.verdict) for r in reports]


def assert_top_ups_keep_their_cadence(runs: list[list[TaskResult]], interval: float) -> None:
    """Within a run, a task's top-up comes no sooner than its top-up of the batch before plus the interval (less
    the planner's slack), unless its wait was cut at its share of the interval: whatever the machine's load, as
    a top-up that came later than that had nothing to wait for."""
    pairs = 0
    for run in runs:
        topped_up = {(r.task, r.batch): r for r in run if r.status is TaskStatus.COMMITTED and r.topped_up_at}
        for (task, batch), r in topped_up.items():
            last = topped_up.get((task, batch - 1))
            if last is None:
                continue
            pairs += 1
            gap = r.topped_up_at - last.topped_up_at
            cut = r.cadence_wait_ms >= CADENCE_WAIT_SHARE * interval * 1000 - 1
            assert gap >= interval * (1 - CADENCE_SLACK) - 0.005 or cut, (task, batch, gap, r.cadence_wait_ms)
    assert pairs, "no task topped up in two batches in a row"
