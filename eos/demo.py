"""Demo: a local 1-node KRaft cluster and a transactional produce/consume round trip."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from localkafka.provision import provide_kafka


def main() -> None:
    with provide_kafka(brokers=1) as kafka:
        print(f"Kafka ({kafka.source}) at {kafka.bootstrap_servers}")
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})  # keep alive until futures resolve
        admin.create_topics([NewTopic("demo", 1, 1)])["demo"].result(30)
        producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": "demo"})
        producer.init_transactions(60)
        for outcome in ("commit", "abort"):
            producer.begin_transaction()
            for i in range(10):
                producer.produce("demo", value=f"{outcome}-{i}".encode())
            producer.flush()
            producer.commit_transaction() if outcome == "commit" else producer.abort_transaction()
        consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": "demo",
                             "isolation.level": "read_committed", "enable.partition.eof": True})
        consumer.assign([TopicPartition("demo", 0, 0)])
        seen = []
        while True:
            msg = consumer.poll(10)
            if msg is None or (msg.error() and msg.error().code() == -191):
                break
            seen.append(msg.value())
        consumer.close()
        print(f"read_committed saw {len(seen)} records (10 committed, 10 aborted)")
