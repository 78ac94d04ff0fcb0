"""Foreign-key table joins and table aggregations with re-grouping on a real broker: tables updated, moved
between foreign keys and groups, and deleted, over topics that are not co-partitioned; the job SIGKILLed
inside a transaction and restarted; the join audit's replay, the lineage audit and the final aggregates
recomputed from the committed tables all agree."""

from __future__ import annotations

import json
import os
import random
from collections import defaultdict

from confluent_kafka import Producer

from eos.audit import audit_application, audit_joins
from eos.audit.scan import scan_topic
from integration_tests.engine.test_kill_restart import kill_job_repeatedly
from integration_tests.streams.test_joins import JOB_MAIN, load_job

JOB = """
import os
from eos import Application


def build(app, t):
    orders = app.table(t["orders"], name="orders")
    customers = app.table(t["customers"], name="customers")
    app.join(orders, customers, t["orders_with_customer"], name="customer", how="left",
             foreign_key=lambda order: order["customer"], joiner=lambda o, c: {"order": o, "customer": c})
    app.sum_table(orders, t["revenue"], name="revenue", group_by=lambda k, order: order["customer"],
                  value=lambda order: order["amount"])
    app.count_table(orders, t["order_counts"], name="counts", group_by=lambda k, order: order["customer"])
    return app

""" + JOB_MAIN

PARTITIONS = {"orders": 2, "customers": 3, "orders_with_customer": 2, "revenue": 2, "order_counts": 2}


def load_tables(bootstrap: str, t: dict[str, str], n: int, seed: int) -> None:
    """Orders created, moved to other customers, re-priced and deleted; customers renamed and deleted, all
    interleaved. Keyed as the Java client keys them (murmur2), as the foreign-key join requires."""
    rng = random.Random(seed)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True,
                         "partitioner": "murmur2_random"})
    for i in range(n):
        if i % 4 == 0:
            customer = f"c{rng.randrange(20)}"
            value = None if rng.random() < 0.1 else {"name": f"name{i}"}
            producer.produce(t["customers"], key=customer.encode(),
                             value=None if value is None else json.dumps(value).encode())
        order = f"o{rng.randrange(120)}"
        value = None if rng.random() < 0.08 else {"customer": f"c{rng.randrange(24)}", "amount": rng.randrange(1, 50)}
        producer.produce(t["orders"], key=order.encode(), value=None if value is None else json.dumps(value).encode())
        producer.poll(0)
    assert producer.flush(60) == 0


def final_table(bootstrap: str, topic: str) -> dict[str, object]:
    table: dict[str, object] = {}
    for batch in scan_topic(bootstrap, topic):
        for msg in batch:
            key = msg.key().decode()
            if msg.value() is None:
                table.pop(key, None)
            else:
                table[key] = json.loads(msg.value())
    return table


def last_values(bootstrap: str, topic: str, decode) -> dict[str, object]:
    last: dict[str, object] = {}
    for batch in scan_topic(bootstrap, topic):
        for msg in batch:
            last[msg.key().decode()] = None if msg.value() is None else decode(msg.value())
    return last


def test_foreign_key_join_and_table_aggregation_killed_and_restarted_are_exact(kafka, spark, topic_factory,
                                                                               unique_name, tmp_path, request):
    soak = request.config.getoption("--soak")
    n, kills = (6_000, 4) if soak else (1_500, 1)
    t = {name: topic_factory(name, partitions=p) for name, p in PARTITIONS.items()}
    load_tables(kafka.bootstrap_servers, t, n, seed=7)
    (tmp_path / "job.py").write_text(JOB)
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {"EOS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers, "APP": unique_name("app"),
           "STATE": str(tmp_path / "state"), "BATCH": "150", "TOPIC_NAMES": ",".join(t),
           **{"T_" + k.upper(): v for k, v in t.items()}}
    in_txn = kill_job_repeatedly(tmp_path, {**os.environ, **env, "MARKS": str(marks)}, kills, marks, seed=8,
                                 pause=(4.0, 8.0))
    assert in_txn >= (kills + 1) // 2
    app = load_job(tmp_path, env)
    summary = app.run(spark, until_caught_up=True)
    assert summary.dead_letters == 0

    reports = audit_joins(app, bootstrap_servers=kafka.bootstrap_servers)
    assert [r.join.kind for r in reports] == ["foreign-key"]
    assert reports[0].verdict == "PASS", (reports[0].join.samples, reports[0].transactions, reports[0].offsets)
    lineage = audit_application(app, bootstrap_servers=kafka.bootstrap_servers)
    assert all(r.verdict == "PASS" for r in lineage), [r.to_dict()["lineage"] for r in lineage if r.verdict != "PASS"]

    # the references, from the final tables
    orders, customers = final_table(kafka.bootstrap_servers, t["orders"]), final_table(kafka.bootstrap_servers,
                                                                                          t["customers"])
    joined = {k: v for k, v in last_values(kafka.bootstrap_servers, t["orders_with_customer"], json.loads).items()
              if v is not None}
    assert joined == {k: {"order": o, "customer": customers.get(o["customer"])} for k, o in orders.items()}
    assert any(v["customer"] is None for v in joined.values()) and any(v["customer"] for v in joined.values())
    revenue, counts = defaultdict(int), defaultdict(int)
    for order in orders.values():
        revenue[order["customer"]] += order["amount"]
        counts[order["customer"]] += 1
    got_revenue = last_values(kafka.bootstrap_servers, t["revenue"], json.loads)
    got_counts = last_values(kafka.bootstrap_servers, t["order_counts"], lambda b: int.from_bytes(b, "big"))
    assert {k: v for k, v in got_revenue.items() if v} == {k: v for k, v in revenue.items() if v}
    assert {k: v for k, v in got_counts.items() if v} == dict(counts)
