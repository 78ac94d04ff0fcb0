"""Schema Registry serdes on the broker and Spark, SIGKILLed mid-batch (inside transactions too) and restarted.

One job, two pipelines, each a stateless map, a windowed aggregation (emit final, its store's changelog in the
format too) and a stream-table join, all fused in one task per partition:

* Avro, Avro keys too (the windowed results' keys in Kafka Streams' binary layout around the Avro key);
* Protobuf (the generated-style classes of `integration_tests/jobs/shop_pb2.py`, imported by name).

The registry is the one every process of the job shares (`schema_registry` fixture: see
`localkafka.registry` for which one runs). Outputs are read back with confluent-kafka's own deserializers and
equal a reference computation; bad inputs (no magic byte, an unknown schema id, a payload that does not fit
the schema) and an output that does not fit its schema are dead letters with the registry's reason, each once,
and nothing of them reaches any output."""

from __future__ import annotations

import json
import os
import shutil
import struct
import time
from collections import Counter
from pathlib import Path

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from eos.audit import audit_application
from integration_tests.helpers import produce
from integration_tests.jobs import shop_pb2
from integration_tests.streams.test_fused_topology import load_job, run_killed_then_caught_up
from integration_tests.streams.test_time_and_rekey import committed_records
from transactions import KafkaAdmin

ORDER = json.dumps({"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "int"}, {"name": "customer", "type": "string"}, {"name": "qty", "type": "int"},
    {"name": "price", "type": "double"}]})

JOB = '''
import json, os
from eos import Application
from eos.testing import MarkWhile
from eos.windows import TumblingWindows
import shop_pb2

ORDER = os.environ["ORDER_SCHEMA"]
AMOUNT = json.dumps({"type": "record", "name": "Amount", "namespace": "shop", "fields": [
    {"name": "id", "type": "int"}, {"name": "amount", "type": "double"}]})
TOTAL = json.dumps({"type": "record", "name": "Total", "namespace": "shop", "fields": [
    {"name": "orders", "type": "int"}, {"name": "amount", "type": "double"}]})
CUSTOMER = json.dumps({"type": "record", "name": "Customer", "namespace": "shop", "fields": [
    {"name": "tier", "type": "string"}]})
TIERED = json.dumps({"type": "record", "name": "Tiered", "namespace": "shop", "fields": [
    {"name": "id", "type": "int"}, {"name": "tier", "type": "string"}, {"name": "amount", "type": "double"}]})

app = Application(os.environ["APP"], schema_registry_url=os.environ["REGISTRY"], timestamp="record",
                  max_records_per_batch=int(os.environ["BATCH"]), trigger_interval=0.0, log_format="json",
                  log_level="WARNING", state_dir=os.environ["STATE"])
KEY = app.avro('"string"')

# Avro: values and keys. An order of id % 101 == 50 maps to an amount its schema cannot hold (a dead letter).
orders = app.stream(os.environ["ORDERS"], key_serde=KEY, value_serde=app.avro(ORDER))
(orders.map_values(lambda o: {"id": o["id"], "amount": None if o["id"] % 101 == 50 else o["qty"] * o["price"]},
                   name="amounts")
    .to(os.environ["AMOUNTS"], value_serde=app.avro(AMOUNT)))
(orders.group_by_key().window(TumblingWindows(60_000, grace=5_000), emit="final", windowed_key="binary")
    .aggregate(lambda: {"orders": 0, "amount": 0.0},
               lambda customer, o, t: {"orders": t["orders"] + 1, "amount": t["amount"] + o["qty"] * o["price"]},
               name="spent", aggregate_serde=app.avro(TOTAL))
    .to_stream().to(os.environ["SPENT"], value_serde=app.avro(TOTAL)))
customers = app.table(os.environ["CUSTOMERS"], key_serde=KEY, value_serde=app.avro(CUSTOMER))
(orders.join(customers, lambda o, c: {"id": o["id"], "tier": c["tier"], "amount": o["qty"] * o["price"]},
             name="tiered", value_serde=app.avro(TIERED))
    .to(os.environ["TIERED"]))

# Protobuf values (string keys).
pb = app.stream(os.environ["PB_ORDERS"], value_serde=app.protobuf(shop_pb2.Order), name="pb-orders")
(pb.map_values(lambda o: shop_pb2.Total(customer=o.customer, orders=1, amount=o.qty * o.price), name="pb-amounts")
    .to(os.environ["PB_AMOUNTS"], value_serde=app.protobuf(shop_pb2.Total)))
(pb.group_by_key().window(TumblingWindows(60_000, grace=5_000), emit="final")
    .aggregate(shop_pb2.Total,
               lambda customer, o, t: shop_pb2.Total(customer=customer, orders=t.orders + 1,
                                                     amount=t.amount + o.qty * o.price),
               name="pb-spent", aggregate_serde=app.protobuf(shop_pb2.Total))
    .to_stream().to(os.environ["PB_SPENT"], value_serde=app.protobuf(shop_pb2.Total)))
pb_customers = app.table(os.environ["PB_CUSTOMERS"], value_serde=app.protobuf(shop_pb2.Customer))
(pb.join(pb_customers, lambda o, c: shop_pb2.Tiered(id=o.id, tier=c.tier, amount=o.qty * o.price),
         name="pb-tiered", value_serde=app.protobuf(shop_pb2.Tiered))
    .to(os.environ["PB_TIERED"]))

if os.environ.get("MARKS"):
    app.fault_hooks.on("before_commit", MarkWhile(os.environ["MARKS"], seconds=0.3))
'''

PARTITIONS, PER_PARTITION, STEP_MS = 2, 400, 2_500
BASE = (int(time.time()) // 3600 - 4) * 3_600_000
CUSTOMERS = [f"c{i}" for i in range(12)]
TIERS = {c: ("gold" if i % 3 == 0 else "basic") for i, c in enumerate(CUSTOMERS) if i % 5 != 4}  # some unknown


def orders() -> list[tuple[dict, int]]:
    """(order, timestamp) in time order, then a last order of every customer much later, so that every
    partition's windows close."""
    out = [({"id": i, "customer": CUSTOMERS[(i * 7) % 12], "qty": 1 + i % 4, "price": 0.5 + i % 9},
            BASE + i * STEP_MS) for i in range(PER_PARTITION * PARTITIONS)]
    end = BASE + (PER_PARTITION * PARTITIONS + 100) * STEP_MS
    return out + [({"id": 100_000 + n, "customer": c, "qty": 1, "price": 1.0}, end) for n, c in enumerate(CUSTOMERS)]


def partition_of(customer: str) -> int:
    return CUSTOMERS.index(customer) % PARTITIONS  # a customer's orders and table row share a partition


def test_avro_and_protobuf_jobs_are_exactly_once_across_sigkills_and_bad_records_are_dead_letters(
        kafka, schema_registry, topic_factory, unique_name, tmp_path, monkeypatch):
    names = ("orders", "amounts", "spent", "customers", "tiered", "pb_orders", "pb_amounts", "pb_spent",
             "pb_customers", "pb_tiered")
    topics = dict(zip(names, (topic_factory(n.replace("_", "-"), partitions=PARTITIONS) for n in names),
                      strict=True))
    bootstrap, registry = kafka.bootstrap_servers, SchemaRegistryClient({"url": schema_registry.url})
    data = orders()

    def avro(schema: str | None, topic: str, is_key: bool = False):
        ctx = SerializationContext(topic, MessageField.KEY if is_key else MessageField.VALUE)
        serialize = AvroSerializer(registry, schema)
        return lambda obj: serialize(obj, ctx)

    key_of = avro('"string"', topics["orders"], is_key=True)
    order_of = avro(ORDER, topics["orders"])
    records = [((key_of(o["customer"]), order_of(o)), partition_of(o["customer"]), at) for o, at in data]
    order_id = struct.unpack(">i", records[0][0][1][1:5])[0]
    bad = [b'{"id": 1}', b"\x00" + struct.pack(">i", 999_999) + b"\x02",  # no magic byte; an unknown schema id
           b"\x00" + struct.pack(">i", order_id) + b"\xff\xff\xff"]  # ORDER's id, bytes that are no Order
    for n, value in enumerate(bad):
        records.insert(100 + 150 * n, ((key_of("c0"), value), 0, data[100 + 150 * n][1]))
    customer_of = avro(json.dumps({"type": "record", "name": "Customer", "namespace": "shop", "fields": [
        {"name": "tier", "type": "string"}]}), topics["customers"])
    customers_key = avro('"string"', topics["customers"], is_key=True)
    produce(bootstrap, topics["customers"], [(customers_key(c), customer_of({"tier": t})) for c, t in TIERS.items()],
            partition_of=lambda n, key: partition_of(list(TIERS)[n]), timestamp_of=lambda n, key: BASE - 1)
    produce(bootstrap, topics["orders"], [kv for kv, _, _ in records], partition_of=lambda n, k: records[n][1],
            timestamp_of=lambda n, k: records[n][2])

    pb_ctx = SerializationContext(topics["pb_orders"], MessageField.VALUE)
    pb_order = ProtobufSerializer(shop_pb2.Order, registry, {"use.deprecated.format": False})
    pb_customer = ProtobufSerializer(shop_pb2.Customer, registry, {"use.deprecated.format": False})
    produce(bootstrap, topics["pb_customers"],
            [(c.encode(), pb_customer(shop_pb2.Customer(tier=t), SerializationContext(topics["pb_customers"],
                                                                                     MessageField.VALUE)))
             for c, t in TIERS.items()],
            partition_of=lambda n, key: partition_of(key.decode()), timestamp_of=lambda n, key: BASE - 1)
    pb_records = [((o["customer"].encode(), pb_order(shop_pb2.Order(**o), pb_ctx)), at) for o, at in data]
    pb_bad = [b"\x00" + struct.pack(">i", 999_999) + b"\x00\x08\x01",
              b"\x00" + pb_records[0][0][1][1:5] + b"\x00\xff\xff\xff"]
    for n, value in enumerate(pb_bad):
        pb_records.insert(200 + 200 * n, ((b"c0", value), data[200 + 200 * n][1]))
    produce(bootstrap, topics["pb_orders"], [kv for kv, _ in pb_records],
            partition_of=lambda n, key: partition_of(key.decode()), timestamp_of=lambda n, k: pb_records[n][1])

    shutil.copy(Path(shop_pb2.__file__), tmp_path / "shop_pb2.py")  # the job imports it by name, as users do
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {**os.environ, "EOS_BOOTSTRAP_SERVERS": bootstrap, "REGISTRY": schema_registry.url, "ORDER_SCHEMA": ORDER,
           "APP": unique_name("app"), "STATE": str(tmp_path / "state"), "MARKS": str(marks), "BATCH": "150",
           **{n.upper(): t for n, t in topics.items()}}
    run_killed_then_caught_up(tmp_path, JOB, env, seed=29)

    # The references: every good order once; the one whose amount its schema cannot hold, nowhere.
    dead = {o["id"] for o, _ in data if o["id"] % 101 == 50}
    good = [(o, at) for o, at in data if o["id"] not in dead]
    closed = [(o, at) for o, at in good if o["id"] < 100_000]  # the last orders' windows never close

    def windows(rows):
        out: dict = {}
        for o, at in rows:
            n, amount = out.get((o["customer"], at // 60_000 * 60_000), (0, 0.0))
            out[(o["customer"], at // 60_000 * 60_000)] = (n + 1, amount + o["qty"] * o["price"])
        return out

    def read(topic: str, value, key=lambda k: k.decode()):
        return [(key(k), value(v, SerializationContext(topic, MessageField.VALUE)), ts)
                for k, v, ts in committed_records(bootstrap, topic)]

    avro_value, avro_key = AvroDeserializer(registry), AvroDeserializer(registry)
    customer_key = lambda topic: (lambda k: avro_key(k, SerializationContext(topic, MessageField.KEY)))
    amounts = read(topics["amounts"], avro_value, customer_key(topics["amounts"]))
    assert Counter((c, v["id"], v["amount"]) for c, v, _ in amounts) == Counter(
        (o["customer"], o["id"], o["qty"] * o["price"]) for o, _ in good)
    spent = read(topics["spent"], avro_value, key=lambda k: (
        avro_key(k[:-16], SerializationContext(topics["spent"], MessageField.KEY)), int.from_bytes(k[-8:], "big")))
    assert Counter(k for k, _, _ in spent).most_common(1)[0][1] == 1  # one final result per window
    assert {k: (v["orders"], v["amount"]) for k, v, _ in spent} == windows(closed)
    tiered = read(topics["tiered"], avro_value, customer_key(topics["tiered"]))
    assert Counter((v["id"], v["tier"]) for _, v, _ in tiered) == Counter(
        (o["id"], TIERS[o["customer"]]) for o, _ in good if o["customer"] in TIERS)

    def proto(message):
        return ProtobufDeserializer(message, {"use.deprecated.format": False}, schema_registry_client=registry)

    pb_amounts = read(topics["pb_amounts"], proto(shop_pb2.Total))
    assert Counter((c, v.amount) for c, v, _ in pb_amounts) == Counter(
        (o["customer"], o["qty"] * o["price"]) for o, _ in data)
    pb_spent = read(topics["pb_spent"], proto(shop_pb2.Total), key=lambda k: tuple(json.loads(k)[f]
                                                                                  for f in ("key", "start")))
    assert Counter(k for k, _, _ in pb_spent).most_common(1)[0][1] == 1
    assert {k: (v.orders, v.amount) for k, v, _ in pb_spent} == windows(o for o in data if o[0]["id"] < 100_000)
    pb_tiered = read(topics["pb_tiered"], proto(shop_pb2.Tiered))
    assert Counter((v.id, v.tier) for _, v, _ in pb_tiered) == Counter(
        (o["id"], TIERS[o["customer"]]) for o, _ in data if o["customer"] in TIERS)

    # Dead letters: each bad input and the order whose output did not fit, once, with the registry's reason.
    app = load_job(tmp_path, env, monkeypatch)
    letters = committed_records(bootstrap, app.config.dlq_topic, headers=True)
    by_value = {v: h["eos.dlq.error"].decode() for _, v, _, h in letters}
    assert len(letters) == len(by_value) == len(bad) + len(pb_bad) + len(dead), by_value.values()
    assert "not in the Schema Registry wire format" in by_value[bad[0]]
    assert "the registry says" in by_value[bad[1]] and "404" in by_value[bad[1]], by_value[bad[1]]
    assert "cannot deserialize" in by_value[bad[2]], by_value[bad[2]]
    assert "the registry says" in by_value[pb_bad[0]] and "404" in by_value[pb_bad[0]], by_value[pb_bad[0]]
    assert "cannot deserialize" in by_value[pb_bad[1]], by_value[pb_bad[1]]
    unfit = [error for value, error in by_value.items() if value not in bad + pb_bad]
    assert len(unfit) == len(dead) and all("cannot serialize" in e and "amount" in e for e in unfit), unfit

    subjects = set(registry.get_subjects())
    assert {f"{topics['orders']}-key", f"{topics['amounts']}-value", f"{topics['spent']}-key",
            f"{env['APP']}-spent-store-changelog-value", f"{env['APP']}-pb-spent-store-changelog-value",
            f"{topics['pb_tiered']}-value"} <= subjects, subjects
    reports = audit_application(app)
    failed = [(r.mode, r.inputs, r.outputs, r.verdict) for r in reports if r.verdict != "PASS"]
    assert not failed and sorted(r.mode for r in reports) == ["join", "join", "lineage", "lineage", "window",
                                                              "window"], failed
    # The windows share their task with a table's source: the window audit cannot replay them, and says so.
    assert all(r.skipped and "lineage audit alone" in r.skipped for r in reports if r.mode == "window")


OUTAGE_JOB = '''
import json
from eos import Application

VIEW = json.dumps({"type": "record", "name": "View", "fields": [{"name": "i", "type": "long"}]})
app = Application("{app}", schema_registry_url="http://127.0.0.1:9", log_format="json", log_level="WARNING",
                  trigger_interval=0.2, state_dir="{state}")
app.stream("{source}", value_serde=app.avro(VIEW)).map_values(lambda v: {"i": v["i"]}, name="copy").to(
    "{sink}", value_serde="json")
'''


def test_a_registry_outage_under_a_running_job_delays_records_and_loses_none(kafka, topic_factory, unique_name,
                                                                              tmp_path):
    """A Spark job reads Avro; the registry then answers 503 to everything for 8 s (its schemas kept) while
    records of a schema id the job's workers have not seen arrive. Their look-ups fail, and the batch attempts
    that need them run again until the registry answers: every record once in the output, none a dead letter
    (before, each was dead-lettered at its first failed look-up)."""
    import signal
    import subprocess
    import sys
    import urllib.request

    from confluent_kafka.schema_registry import Schema

    from integration_tests.helpers import assert_exactly_once, read_values
    from localkafka.registry import local_registry

    source, sink, app_id = topic_factory("views"), topic_factory("copies"), unique_name("outage")
    v1 = json.dumps({"type": "record", "name": "View", "fields": [{"name": "i", "type": "long"}]})
    v2 = json.dumps({"type": "record", "name": "View", "fields": [{"name": "i", "type": "long"},
                                                                   {"name": "page", "type": "string", "default": ""}]})
    job_file = OUTAGE_JOB
    for name, value in (("app", app_id), ("state", str(tmp_path / "state")), ("source", source), ("sink", sink)):
        job_file = job_file.replace("{" + name + "}", value)
    (tmp_path / "job.py").write_text(job_file)
    with local_registry() as url:  # (a registry of its own: the suite's others keep answering)
        registry = SchemaRegistryClient({"url": url})
        ctx = SerializationContext(source, MessageField.VALUE)
        first, later = AvroSerializer(registry, v1), AvroSerializer(registry, v2)
        registry.register_schema(f"{source}-value", Schema(v2, "AVRO"))  # (known to the registry, not to the job)
        produce(kafka.bootstrap_servers, source, [(b"k%d" % (i % 7), first({"i": i}, ctx)) for i in range(200)])
        newer = [(b"k%d" % (i % 7), later({"i": i, "page": "p"}, ctx)) for i in range(200, 400)]
        job = subprocess.Popen([sys.executable, "-m", "eos.cli", "run", "job.py", "-b", kafka.bootstrap_servers,
                                "--schema-registry-url", url, "--no-live"], cwd=tmp_path, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 120
            while len(read_values(kafka.bootstrap_servers, sink)) < 200:
                assert job.poll() is None and time.monotonic() < deadline, "the job did not copy the first records"
                time.sleep(0.5)
            outage = urllib.request.Request(f"{url}/eos/outage", data=b'{"seconds": 8}', method="POST",
                                            headers={"Content-Type": "application/json"})
            urllib.request.urlopen(outage, timeout=5).close()
            produce(kafka.bootstrap_servers, source, newer)
            while len(read_values(kafka.bootstrap_servers, sink)) < 400:
                assert job.poll() is None and time.monotonic() < deadline + 60, "the job did not copy the rest"
                time.sleep(0.5)
        finally:
            job.send_signal(signal.SIGTERM)
            _, stderr = job.communicate(timeout=60)
    assert job.returncode == 0, stderr[-3000:]
    assert sorted(json.loads(v)["i"] for v in read_values(kafka.bootstrap_servers, sink)) == list(range(400))
    assert "batch attempt failed; running the batch again" in stderr and "HTTP 503" in stderr, stderr[-3000:]
    assert_exactly_once(kafka.bootstrap_servers, inputs=[source], outputs=[sink], group=app_id,
                        dead_letter_topic=f"{app_id}-dlq", expected_inputs=400)
    dead_letters = KafkaAdmin(kafka.bootstrap_servers).partition_counts([f"{app_id}-dlq"])[f"{app_id}-dlq"]
    assert dead_letters is None or read_values(kafka.bootstrap_servers, f"{app_id}-dlq") == []
