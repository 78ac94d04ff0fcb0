"""Bad input loses nothing and blocks nothing: outputs too large for their topic, dead letters too large for
the dead-letter topic, counts over values that are not JSON and tombstones."""

from __future__ import annotations

import json

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from eos import Application
from eos.audit import audit
from integration_tests.helpers import assert_exactly_once, produce, read_values
from transactions import KafkaAdmin


def pad_app(app_id: str, bootstrap: str, src: str, dst: str, **settings) -> Application:
    app = Application(app_id, bootstrap, log_level="ERROR", **settings)

    @app.process(input=src, output=dst, key_serde="string", value_serde="json")
    def pad(record):
        return record.key, "x" * record.value["size"]

    return app


def sizes(*values: int):
    return [(f"k{i}".encode(), json.dumps({"size": n}).encode()) for i, n in enumerate(values)]


def dead_letter_headers(bootstrap: str, topic: str) -> list[dict[str, bytes]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "headers-reader", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    parts = KafkaAdmin(bootstrap).topic_partitions(topic)
    consumer.assign([TopicPartition(t, p, 0) for t, p in parts])
    found, idle = [], 0
    while idle < 10:
        msg = consumer.poll(0.5)
        if msg is None:
            idle += 1
            continue
        if not msg.error():
            found.append({**dict(msg.headers() or []), "__value": msg.value()})
    consumer.close()
    return found


def test_an_output_larger_than_its_topic_accepts_goes_to_the_dead_letter_topic(kafka, spark, topic_factory,
                                                                                unique_name):
    src = topic_factory("in", partitions=1)
    dst = topic_factory("out", partitions=1, config={"max.message.bytes": "4000"})
    produce(kafka.bootstrap_servers, src, sizes(100, 10_000, 200))
    app = pad_app(unique_name("app"), kafka.bootstrap_servers, src, dst)
    summary = app.run(spark, until_caught_up=True)
    assert (summary.records_out, summary.dead_letters) == (2, 1)
    [letter] = dead_letter_headers(kafka.bootstrap_servers, app.config.dlq_topic)
    error = letter["eos.dlq.error"].decode()
    assert f"the output of {src}[0]@1 to topic {dst} is 10," in error and "limit of 4,000 bytes" in error
    assert letter["eos.dlq.stage"] == b"serialize"
    assert_exactly_once(kafka.bootstrap_servers, inputs=[src], outputs=[dst], group=app.config.group_id,
                        dead_letter_topic=app.config.dlq_topic, expected_inputs=3)


def test_a_topic_limit_lowered_while_the_job_runs_does_not_block_the_partition(kafka, spark, topic_factory,
                                                                               unique_name):
    src, dst = topic_factory("in", partitions=1), topic_factory("out", partitions=1)
    produce(kafka.bootstrap_servers, src, sizes(100))
    app = pad_app(unique_name("app"), kafka.bootstrap_servers, src, dst)
    app.run(spark, until_caught_up=True)  # the workers now know the topic's limit (1 MB)
    resource = ConfigResource(ResourceType.TOPIC, dst, incremental_configs=[
        ConfigEntry("max.message.bytes", "3000", incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})  # kept until its answer arrives
    admin.incremental_alter_configs([resource])[resource].result(30)
    produce(kafka.bootstrap_servers, src, sizes(20_000, 50))
    summary = app.run(spark, until_caught_up=True, max_seconds=120)
    assert (summary.records_in, summary.records_out, summary.dead_letters) == (2, 1, 1)
    assert read_values(kafka.bootstrap_servers, dst) == [b'"' + b"x" * 100 + b'"', b'"' + b"x" * 50 + b'"']


def test_a_dead_letter_too_large_for_the_dead_letter_topic_keeps_its_origin_and_error(kafka, spark, topic_factory,
                                                                                       unique_name):
    src, dst = topic_factory("in", partitions=1), topic_factory("out", partitions=1)
    dlq = topic_factory("dlq", partitions=1, config={"max.message.bytes": "2000"})
    produce(kafka.bootstrap_servers, src, [(b"big", b"{" + b"x" * 5000), (b"small", b'{"size": 1}')])
    app = pad_app(unique_name("app"), kafka.bootstrap_servers, src, dst, dead_letter_topic=dlq)
    summary = app.run(spark, until_caught_up=True)
    assert (summary.records_out, summary.dead_letters) == (1, 1)
    [letter] = dead_letter_headers(kafka.bootstrap_servers, dlq)
    assert letter["__value"] is None and b"key and value omitted" in letter["eos.dlq.payload"]
    assert letter["eos.dlq.offset"] == b"0" and b"cannot deserialize" in letter["eos.dlq.error"]
    assert_exactly_once(kafka.bootstrap_servers, inputs=[src], outputs=[dst], group=app.config.group_id,
                        dead_letter_topic=dlq, expected_inputs=2)


def test_count_reads_no_values_and_skips_tombstones(kafka, spark, topic_factory, unique_name):
    src, dst = topic_factory("words", partitions=2), topic_factory("counts", partitions=2)
    produce(kafka.bootstrap_servers, src, [(b"hello", b"plain text"), (b"hello", None), (b"world", b"\x00\xff"),
                                           (b"hello", b'{"json": true}'), (b"world", b"")])
    app = Application(unique_name("app"), kafka.bootstrap_servers, log_level="ERROR")
    app.count(src, dst, name="counts", key_serde="string")
    summary = app.run(spark, until_caught_up=True)
    assert summary.dead_letters == 0 and summary.records_out == 4
    finals: dict[bytes, int] = {}
    for key, value in read_pairs(kafka.bootstrap_servers, dst):
        finals[key] = int.from_bytes(value, "big")
    assert finals == {b"hello": 2, b"world": 2}
    report = audit(kafka.bootstrap_servers, inputs=[src], outputs=[dst], dead_letter_topic=app.config.dlq_topic,
                   group=app.config.group_id)
    assert report.verdict == "PASS" and report.lineage is not None and report.lineage.filtered == 1  # the tombstone


def read_pairs(bootstrap: str, topic: str) -> list[tuple[bytes, bytes]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "pairs-reader", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(t, p, 0) for t, p in KafkaAdmin(bootstrap).topic_partitions(topic)])
    pairs, idle = [], 0
    while idle < 10:
        msg = consumer.poll(0.5)
        if msg is None:
            idle += 1
        elif not msg.error():
            pairs.append((msg.key(), msg.value()))
    consumer.close()
    return pairs
