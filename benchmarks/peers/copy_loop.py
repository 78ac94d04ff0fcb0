"""The bare transactional copy loop of the peers benchmark: confluent-kafka, one process, consume ->
parse and enrich -> produce -> send the offsets -> commit, one transaction per second. JSON by orjson,
the framework's own JSON library, so that the loop is the ceiling of Python and librdkafka.
Arguments: bootstrap input output group."""

import sys
import time

import orjson
from confluent_kafka import Consumer, KafkaError, Producer

bootstrap, source, sink, group = sys.argv[1:5]
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "isolation.level": "read_committed"})
producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{group}-copy", "linger.ms": 5,
                     "partitioner": "murmur2_random"})
producer.init_transactions()
consumer.subscribe([source])
producer.begin_transaction()
started = time.monotonic()
while True:
    for msg in consumer.consume(10_000, 0.2):
        if msg.error() is not None:
            if msg.error().code() != KafkaError._PARTITION_EOF:
                raise SystemExit(f"consume error: {msg.error()}")
            continue
        order = orjson.loads(msg.value())
        order["total"] = order["qty"] * order["price"]
        while True:
            try:
                producer.produce(sink, key=msg.key(), value=orjson.dumps(order))
                break
            except BufferError:
                producer.poll(0.01)
    if time.monotonic() - started >= 1.0:
        positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
        if positions:
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata())
        producer.commit_transaction()
        producer.begin_transaction()
        started = time.monotonic()
