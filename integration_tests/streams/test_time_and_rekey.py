"""Event time, punctuation and re-keying on a real broker: wall-clock punctuation of idle tasks in
transactions of their own, exactly once across a crash; timestamps from a field; an aggregation by
another key through a repartition topic that is purged once consumed."""

from __future__ import annotations

import json
import time
from collections import Counter

from confluent_kafka import Consumer, TopicPartition

from eos import Application, Processor, store
from eos.audit import audit_application
from eos.driver.runner import Runner
from eos.testing import CrashWorker, Match
from integration_tests.helpers import produce
from integration_tests.userpath.test_audit_truth import inject
from transactions import KafkaAdmin


def committed_records(bootstrap: str, topic: str, *, headers: bool = False, partition: bool = False) -> list[tuple]:
    """(key, value, timestamp) of every committed record, partition by partition; with `headers`, the
    record's headers (a dict) come next, with `partition` its partition last."""
    admin = KafkaAdmin(bootstrap)
    ends = admin.end_offsets(admin.topic_partitions(topic))
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    consumer.assign([TopicPartition(t, p, 0) for (t, p) in ends])
    out, pending = [], {p for (_, p), end in ends.items() if end > 0}
    while pending:
        msg = consumer.poll(5)
        assert msg is not None, f"partitions {pending} of {topic} did not reach their end"
        if msg.error():
            pending.discard(msg.partition())
            continue
        record = (msg.key(), msg.value(), msg.timestamp()[1], *([dict(msg.headers() or ())] if headers else []),
                  *([msg.partition()] if partition else []))
        out.append(record)
    consumer.close()
    return out


class Heartbeat(Processor):
    """Counts its own wall-clock punctuations in a store and forwards each count."""

    def init(self, context):
        super().init(context)
        self.beats = context.store("beats")
        context.schedule(400, self.beat, type="wall_clock")

    def beat(self, timestamp):
        n = self.beats.get("n", 0) + 1
        self.beats.put("n", n)
        self.context.forward(self.context.task_id, n)

    def process(self, record):
        self.context.forward(record.key, -1)


def test_wall_clock_punctuation_of_an_idle_task_commits_exactly_once_across_a_crash(kafka, spark, topic_factory,
                                                                                   unique_name):
    src, out = topic_factory("in", partitions=2), topic_factory("out", partitions=2)
    produce(kafka.bootstrap_servers, src, [(b"only-p0", b"x")], partition_of=lambda n, key: 0)  # task 1 idles
    app = Application(unique_name("app"), kafka.bootstrap_servers, log_level="ERROR", trigger_interval=0.2)
    app.stream(src, value_serde="bytes").process(
        Heartbeat, name="beat", stores=[store("beats", key_serde="string", value_serde="long")]).to(
        out, value_serde="long")
    # The first attempt of an idle batch of task 1 dies after producing its beat, its transaction open.
    app.fault_hooks.on("after_produce", CrashWorker(Match(partition=1, spark_attempt=0, batch=3)))
    app.run(spark, max_seconds=15)
    app.fault_hooks.clear()
    app.run(spark, max_seconds=5)  # a restart goes on counting where the committed state is
    beats: dict[bytes, list[int]] = {}
    for key, value, _ in committed_records(kafka.bootstrap_servers, out):
        if key and key.startswith(b"beat-"):
            beats.setdefault(key, []).append(int.from_bytes(value or b"", "big", signed=True))
    assert set(beats) == {b"beat-0", b"beat-1"}
    for key, numbers in beats.items():  # each punctuation's effect once: no repeated and no skipped count
        assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 3, (key, numbers)


def test_event_time_from_a_field_becomes_the_outputs_timestamp(kafka, spark, topic_factory, unique_name):
    src, out = topic_factory("in", partitions=1), topic_factory("out", partitions=1)
    at = (int(time.time()) - 3600) * 1000  # near now: a broker deletes records older than its retention
    values = [{"id": 1, "at": at}, {"id": 2, "at": at + 5000}, {"id": 3}, {"id": 4, "at": -1}]
    produce(kafka.bootstrap_servers, src, [(b"k", json.dumps(v).encode()) for v in values])
    app = Application(unique_name("app"), kafka.bootstrap_servers, log_level="ERROR", timestamp="field:at")
    app.process(input=src, output=out, value_serde="json", name="copy")(lambda r: (r.key, r.value["id"]))
    summary = app.run(spark, until_caught_up=True)
    assert summary.dead_letters == 2  # no timestamp, a negative one
    assert [(v, ts) for _, v, ts in committed_records(kafka.bootstrap_servers, out)] == [
        (b"1", at), (b"2", at + 5000)]


def test_an_aggregation_by_another_key_goes_through_a_purged_repartition_topic(kafka, spark, topic_factory,
                                                                                unique_name):
    src, out = topic_factory("orders", partitions=3), topic_factory("totals", partitions=3)
    orders = [{"order": i, "customer": f"c{i % 7}", "amount": i % 11} for i in range(3000)]
    produce(kafka.bootstrap_servers, src, [(f"o{o['order']}".encode(), json.dumps(o).encode()) for o in orders])
    app = Application(unique_name("app"), kafka.bootstrap_servers, log_level="ERROR", max_records_per_batch=400)
    app.sum(src, out, name="spend", value=lambda order: order["amount"],
            group_by=lambda record: record.value["customer"])
    runner = Runner(app, spark)
    runner.run(until_caught_up=True)
    finals: dict[bytes, int] = {}
    for key, value, _ in committed_records(kafka.bootstrap_servers, out):
        finals[key or b""] = json.loads(value or b"0")
    expected = Counter()
    for o in orders:
        expected[o["customer"].encode()] += o["amount"]
    assert finals == dict(expected)

    topic = f"{app.config.application_id}-spend-repartition"
    admin = KafkaAdmin(kafka.bootstrap_servers)
    tps = admin.topic_partitions(topic)
    assert len(tps) == 3
    assert runner.purger is not None
    runner.purger.maybe_purge(force=True)
    assert admin.earliest_offsets(tps) == admin.group_offsets(app.config.group_id, tps)  # consumed = deleted
    # The repartition hop and the aggregation are audited as one: every order once in the totals.
    [report] = audit_application(app)
    assert report.verdict == "PASS" and report.inputs == [src] and report.outputs == [out], report.lineage
    assert report.lineage is not None and report.lineage.unique_origins == report.lineage.expected == 3000
    # a second total for one order (numbered as the one output made of it behind the hop: eos.origin)
    inject(kafka.bootstrap_servers, out, b"1", (src, 0, 5, 1 << 32))
    [report] = audit_application(app)
    assert report.verdict == "FAIL" and report.lineage is not None and report.lineage.duplicates == 1
