"""A broker whose transactions are those of a Kafka before 4.0 (`transaction.version=1`, the storage formatted
so: `LocalCluster(features=...)`, the peers benchmark's `--broker-feature`). Kafka 4's clients then add a
transaction's partitions and its offsets' group with requests of their own, as librdkafka always does; the
framework's transactions hold there as on a 4.x default broker."""

from __future__ import annotations

import re

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from integration_tests.conftest import make_topic_factory
from integration_tests.foundation.test_transactions_on_broker import _producer, commit_one_abort_one
from integration_tests.helpers import read_values
from localkafka.provision import KafkaEndpoint, provide_kafka
from transactions import TransactionalProducer


@pytest.fixture(scope="module")
def old_kafka():
    with provide_kafka(features={"transaction.version": 1}) as endpoint:
        yield endpoint


def test_the_broker_finalizes_the_level_it_was_formatted_with(old_kafka: KafkaEndpoint):
    assert old_kafka.cluster is not None and old_kafka.cluster.features == {"transaction.version": 1}
    finalized = re.findall(r"finalizedFeatures=\{([^}]*)\}", old_kafka.cluster.log_path(1).read_text())
    assert finalized and "transaction.version=1" in finalized[-1].split(", ")


def test_read_committed_sees_only_committed(old_kafka, unique_name):
    topic = make_topic_factory(old_kafka, unique_name)("txn")
    commit_one_abort_one(old_kafka.bootstrap_servers, topic, unique_name("txn"))
    assert read_values(old_kafka.bootstrap_servers, topic) == [b"committed-%d" % i for i in range(5)]


def test_a_new_producer_fences_the_old_one(old_kafka, unique_name):
    topic, txn_id = make_topic_factory(old_kafka, unique_name)("fence"), unique_name("txn")
    old = _producer(old_kafka.bootstrap_servers, txn_id)
    old.begin_transaction()
    old.produce(topic, value=b"zombie")
    old.flush(30)
    _producer(old_kafka.bootstrap_servers, txn_id)
    with pytest.raises(KafkaException) as info:
        old.commit_transaction(30)
    code = info.value.args[0].code()
    del info, old  # (its traceback holds this frame: the producer would outlive the broker, reconnecting)
    assert code in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
    assert read_values(old_kafka.bootstrap_servers, topic) == []


def test_the_frameworks_producer_commits_records_and_offsets_together(old_kafka, unique_name):
    topics = make_topic_factory(old_kafka, unique_name)
    source, sink, group = topics("src", partitions=2), topics("sink"), unique_name("group")
    reader = Consumer({"bootstrap.servers": old_kafka.bootstrap_servers, "group.id": group,
                       "isolation.level": "read_committed", "enable.auto.commit": False})
    producer = TransactionalProducer(old_kafka.bootstrap_servers, unique_name("txn"))
    producer.init()
    try:
        for value, offsets in ((b"first", (3, 1)), (b"second", (5, 2))):
            producer.begin()
            producer.produce(sink, value, b"k")
            producer.send_offsets([TopicPartition(source, 0, offsets[0]), TopicPartition(source, 1, offsets[1])],
                                  reader.consumer_group_metadata())
            producer.commit(timeout=30)
        producer.begin()
        producer.produce(sink, b"aborted", b"k")
        producer.send_offsets([TopicPartition(source, 0, 99)], reader.consumer_group_metadata())
        producer.abort(timeout=30)
    finally:
        producer.close()
    committed = reader.committed([TopicPartition(source, 0), TopicPartition(source, 1)], 30)
    reader.close()
    assert [(tp.partition, tp.offset) for tp in committed] == [(0, 5), (1, 2)]
    assert read_values(old_kafka.bootstrap_servers, sink) == [b"first", b"second"]
