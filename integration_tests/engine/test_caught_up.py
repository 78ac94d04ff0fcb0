"""A run until caught up on a real broker and real Spark, of a job whose later step reads an earlier step's
topic: it ends only once that topic is stable past what its last plan saw. The broker answers a commit
(EndTxn) before it writes the commit's markers, so a plan made in between saw the later step's input as read
and the run ended a batch early (eos.driver.runner, `Runner._settled`)."""

from __future__ import annotations

import json
import threading
import time

from confluent_kafka import Producer

from eos import Application
from integration_tests.helpers import produce, read_values

LATE_S = 3.0  # when the transaction on the later step's input commits, after the run began


def test_a_run_until_caught_up_reads_a_later_steps_input_that_becomes_stable_after_its_last_plan(
        kafka, spark, topic_factory, unique_name):
    src, mid, dst = (topic_factory(name, partitions=2) for name in ("in", "mid", "out"))
    app = Application(unique_name("app"), kafka.bootstrap_servers, log_format="json", log_level="WARNING",
                      trigger_interval=0.2)

    @app.process(input=src, output=mid, key_serde="string", value_serde="json")
    def first(record):
        return record.key, {**record.value, "first": True}

    @app.process(input=mid, output=dst, key_serde="string", value_serde="json")
    def second(record):
        return record.key, {**record.value, "second": True}

    produce(kafka.bootstrap_servers, src, ((f"k{i}".encode(), json.dumps({"id": i}).encode()) for i in range(20)))
    # A transaction on the later step's input that commits LATE_S into the run: until then the topic's last
    # stable offset stays before it (the first step's output too), as before a commit's markers are written.
    late = Producer({"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": unique_name("late")})
    late.init_transactions()
    late.begin_transaction()
    for i in range(100, 110):
        late.produce(mid, key=f"k{i}", value=json.dumps({"id": i, "first": True}), partition=i % 2)
    assert late.flush(30) == 0
    committer = threading.Timer(LATE_S, late.commit_transaction)
    started = time.monotonic()
    committer.start()
    try:
        summary = app.run(spark, until_caught_up=True)
    finally:
        committer.join()
    assert time.monotonic() - started >= LATE_S
    values = [json.loads(v) for v in read_values(kafka.bootstrap_servers, dst)]
    assert sorted(v["id"] for v in values) == [*range(20), *range(100, 110)]
    assert all(v["second"] and v["first"] for v in values)
    assert summary.records_out == 20 + 30
