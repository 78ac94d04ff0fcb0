"""The exactly-once engine on a real broker and real Spark (stateless jobs)."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from eos import Application, ConfigError
from eos.testing import CrashWorker, Match
from integration_tests.helpers import assert_exactly_once, produce
from integration_tests.streams.test_time_and_rekey import committed_records
from transactions import KafkaAdmin

N = 200_000


def numbers(n: int, keys: int = 1000):
    for i in range(n):
        yield f"k{i % keys}".encode(), json.dumps({"id": i, "n": i}).encode()


def transform_app(app_id: str, bootstrap: str, src: str, dst: str, **settings) -> Application:
    app = Application(app_id, bootstrap, log_format="json", log_level="WARNING", **settings)

    @app.process(input=src, output=dst, key_serde="string", value_serde="json")
    def transform(record):
        return record.key, {"id": record.value["id"], "square": record.value["n"] ** 2}

    return app


def run_200k(kafka, spark, topic_factory, unique_name):
    src, dst = topic_factory("in", partitions=4), topic_factory("out", partitions=4)
    produce(kafka.bootstrap_servers, src, numbers(N))
    app = transform_app(unique_name("app"), kafka.bootstrap_servers, src, dst, max_records_per_batch=30_000)
    summary = app.run(spark, until_caught_up=True)
    assert summary.records_in == N and summary.records_out == N
    assert summary.transactions >= 4 * (N // 4 // 30_000)
    result = assert_exactly_once(kafka.bootstrap_servers, inputs=[src], outputs=[dst], group=app.config.group_id,
                                 expected_inputs=N)
    assert result.output_records == N
    # Committed offsets are the inputs' ends: nothing left behind, nothing skipped.
    admin = KafkaAdmin(kafka.bootstrap_servers)
    tps = admin.topic_partitions(src)
    assert admin.group_offsets(app.config.group_id, tps) == admin.end_offsets(tps)


def test_200k_records_over_4_partitions_exactly_once(kafka, spark, topic_factory, unique_name):
    run_200k(kafka, spark, topic_factory, unique_name)


@pytest.mark.spark_cluster
def test_200k_records_exactly_once_on_two_executor_jvms(kafka, spark_cluster, topic_factory, unique_name):
    assert spark_cluster.master.startswith("local-cluster[2")
    run_200k(kafka, spark_cluster, topic_factory, unique_name)


def test_spark_retries_a_task_that_died_between_produce_and_commit(kafka, spark, topic_factory, unique_name):
    src, dst = topic_factory("in", partitions=2), topic_factory("out", partitions=2)
    produce(kafka.bootstrap_servers, src, numbers(20_000))
    app = transform_app(unique_name("app"), kafka.bootstrap_servers, src, dst)
    # The first Spark attempt of task 1 exits its Python worker after producing, transaction open.
    app.fault_hooks.on("after_produce", CrashWorker(Match(partition=1, spark_attempt=0)))
    summary = app.run(spark, until_caught_up=True, keep_task_results=True)
    retried = [r for r in summary.task_results if r.task.partition == 1 and r.spark_attempt > 0]
    assert retried, "Spark did not retry the crashed task"
    assert_exactly_once(kafka.bootstrap_servers, inputs=[src], outputs=[dst], group=app.config.group_id,
                        expected_inputs=20_000)


def write_with_aborts(bootstrap: str, topic: str, txn_id: str) -> int:
    """Per partition: committed and aborted transactions interleaved, runs of aborted-only transactions,
    and partitions ending on an abort marker or a commit marker. Returns the number of committed records."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    producer.init_transactions(60)
    pattern = [("commit", 13), ("abort", 30), ("abort", 20), ("commit", 3), ("abort", 100), ("commit", 1),
               ("abort", 1), ("commit", 25), ("abort", 7)]
    committed, i = 0, 0
    for partition, plan in enumerate([pattern, pattern[:-1]]):  # p0 ends with an abort, p1 with a commit
        for outcome, count in plan:
            producer.begin_transaction()
            for _ in range(count):
                producer.produce(topic, key=b"k", value=json.dumps({"id": i, "n": i, "ok": outcome}).encode(),
                                 partition=partition)
                i += 1
            producer.flush(30)
            if outcome == "commit":
                producer.commit_transaction(30)
                committed += count
            else:
                producer.abort_transaction(30)
    return committed


def test_aborted_and_marker_only_ranges_neither_stall_nor_reread(kafka, spark, topic_factory, unique_name):
    src, dst = topic_factory("in", partitions=2), topic_factory("out", partitions=2)
    committed = write_with_aborts(kafka.bootstrap_servers, src, unique_name("writer"))
    # Tiny batches: many planned ranges hold only aborted records and transaction markers.
    app = transform_app(unique_name("app"), kafka.bootstrap_servers, src, dst, max_records_per_batch=7)
    summary = app.run(spark, until_caught_up=True, max_seconds=240)
    assert summary.records_in == committed, "some committed records were read twice or not at all"
    result = assert_exactly_once(kafka.bootstrap_servers, inputs=[src], outputs=[dst], group=app.config.group_id,
                                 expected_inputs=committed)
    assert result.output_records == committed
    admin = KafkaAdmin(kafka.bootstrap_servers)
    tps = admin.topic_partitions(src)
    ends = admin.end_offsets(tps)
    assert admin.group_offsets(app.config.group_id, tps) == ends  # caught up, past the trailing markers
    assert summary.batches <= sum(ends.values()) // 7 + 4  # and did not spin


def test_bad_records_go_to_the_dead_letter_topic_in_the_same_transaction(kafka, spark, topic_factory, unique_name):
    src, dst = topic_factory("in", partitions=3), topic_factory("out", partitions=3)
    records = []
    for i in range(3000):
        if i % 50 == 7:
            records.append((b"k", b"{broken json"))  # cannot be deserialized
        elif i % 50 == 8:
            records.append((b"k", json.dumps({"id": i}).encode()))  # processing raises KeyError
        else:
            records.append((b"k", json.dumps({"id": i, "n": i}).encode()))
    produce(kafka.bootstrap_servers, src, records)
    app = transform_app(unique_name("app"), kafka.bootstrap_servers, src, dst)
    summary = app.run(spark, until_caught_up=True)
    assert summary.dead_letters == 120 and summary.records_out == 2880
    result = assert_exactly_once(kafka.bootstrap_servers, inputs=[src], outputs=[dst], group=app.config.group_id,
                                 dead_letter_topic=app.config.dlq_topic, expected_inputs=3000)
    assert result.dead_lettered == 120 and result.unique_origins == 2880

    consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": unique_name("g"),
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    consumer.assign([TopicPartition(app.config.dlq_topic, p, 0) for p in range(3)])
    stages, eof = {}, 0
    while eof < 3:
        msg = consumer.poll(30)  # the first poll also connects and finds the partitions' leaders
        assert msg is not None, "dead-letter topic not fully read"
        if msg.error():
            eof += 1
            continue
        headers = dict(msg.headers())
        stages[headers["eos.dlq.stage"].decode()] = stages.get(headers["eos.dlq.stage"].decode(), 0) + 1
        assert headers["eos.dlq.topic"].decode() == src and int(headers["eos.dlq.partition"]) == msg.partition()
        stage, kind = headers["eos.dlq.stage"], headers["eos.dlq.error.type"]
        assert (stage, kind) in ((b"deserialize", b"SerdeError"), (b"process", b"KeyError")), headers
        assert msg.value() == (b"{broken json" if stage == b"deserialize" else None) or stage == b"process"
        assert headers["eos.origin"] == f"{src}:{msg.partition()}:{int(headers['eos.dlq.offset'])}:0".encode()
    consumer.close()
    assert stages == {"deserialize": 60, "process": 60}


def test_bad_record_policy_fail_stops_the_job_with_a_clear_error(kafka, spark, topic_factory, unique_name):
    src, dst = topic_factory("in"), topic_factory("out")
    produce(kafka.bootstrap_servers, src, [(b"k", b"not json")])
    app = transform_app(unique_name("app"), kafka.bootstrap_servers, src, dst, on_bad_record="fail")
    with pytest.raises(Exception, match="on_bad_record='fail'"):
        app.run(spark, until_caught_up=True)
    admin = KafkaAdmin(kafka.bootstrap_servers)
    assert admin.group_offsets(app.config.group_id, [(src, 0)]) == {(src, 0): None}  # nothing committed


def test_unequal_partition_counts_are_read_by_a_stateless_step_and_refused_by_one_keeping_state(
        kafka, spark, topic_factory, unique_name):
    a, b, out = topic_factory("a", partitions=2), topic_factory("b", partitions=3), topic_factory("out")
    produce(kafka.bootstrap_servers, a, [(f"a{i}".encode(), json.dumps({"i": i}).encode()) for i in range(40)])
    produce(kafka.bootstrap_servers, b, [(f"b{i}".encode(), json.dumps({"i": 100 + i}).encode()) for i in range(60)])
    app = Application(unique_name("app"), kafka.bootstrap_servers)
    app.process(input=[a, b], output=out, name="merge")(lambda r: (r.key, r.value))
    summary = app.run(spark, until_caught_up=True)  # (three tasks: the third reads b's partition 2 only)
    assert summary.records_in == 100
    assert_exactly_once(kafka.bootstrap_servers, inputs=[a, b], outputs=[out], group=app.config.group_id,
                        expected_inputs=100)
    outputs = Counter(json.loads(v)["i"] for _, v, _ in committed_records(kafka.bootstrap_servers, out))
    assert outputs == Counter([*range(40), *range(100, 160)])
    counted = Application(unique_name("app"), kafka.bootstrap_servers)
    counted.stream([a, b]).group_by_key().count(name="n").to_stream().to(out, value_serde="long")
    with pytest.raises(ConfigError, match=r"different partition counts .*=2.*=3\)\. It keeps state by key"):
        counted.run(spark, until_caught_up=True)


def test_missing_topics_refuse_to_start(kafka, spark, topic_factory, unique_name):
    out = topic_factory("out")
    app = Application(unique_name("app"), kafka.bootstrap_servers)
    app.process(input="no-such-topic-" + unique_name("x"), output=out, name="copy")(lambda r: (r.key, r.value))
    with pytest.raises(ConfigError, match="do not exist"):
        app.run(spark, until_caught_up=True)
