"""Tables in the fluent DSL on the broker and Spark, SIGKILLed mid-batch (inside transactions too) and
restarted. One job:

* orders joined with a filtered table (gold customers, written to the partition a partitioner chooses) and
  with an aggregated table (each customer's payments summed in exact quarters: Decimals, kept with the
  decimal serde; no repartition needed), a table-table outer join (customers with addresses), the right
  side of a foreign-key join and the tier re-grouping, all in the task that reads the customers;
* the foreign-key join's left side (accounts with their customer's tier);
* customers re-grouped by tier and counted (after a repartition topic);
* a stream of moves made a table (`to_table`) after a key change, and its rows re-grouped by city and counted:
  a repartition topic like another repartition topic, three more sub-topologies;
* a cogroup of each customer's orders (counted), payments (summed), page visits and moves (both keyed anew
  by customer, so each through a repartition topic of its own; the visits' written by a seventh
  sub-topology): one aggregate per customer, in the task that reads customers. Each move thus takes two
  paths through two repartition topics, and a row moving between cities makes two records on one of them:
  the lineage audit tells every output of every path apart;
* each customer's payments numbered by a processor with a store that keeps keys (`process_values`), and
  the numbers summed per customer in the same task: no repartition topic.

Every order is joined once with the table as it stood at the order's time; the tables' final joins, the
tier counts and the cogroup's aggregates equal a reference computed from the inputs, the cogroup updating
each customer once per record; `audit_application` says PASS (lineage of every step, the table-table and
foreign-key join audits), and FAIL on a committed copy of a result."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from decimal import Decimal
from itertools import accumulate

from confluent_kafka import Producer

from eos.audit import audit_application
from integration_tests.streams.test_fused_topology import commit_copy, load_job, run_killed_then_caught_up
from integration_tests.streams.test_time_and_rekey import committed_records

JOB = """
import os
from decimal import Decimal
from eos import Application, Processor, store
from eos.testing import MarkWhile


class PaymentNumbers(Processor):  # numbers each customer's payments, in its store (restored after a kill)
    def init(self, context):
        super().init(context)
        self.numbers = context.store("payment-numbers")

    def process(self, record):
        n = (self.numbers.get(record.key) or 0) + 1
        self.numbers.put(record.key, n)
        self.context.forward(record.key, {**record.value, "n": n})


app = Application(os.environ["APP"], timestamp="field:at", max_records_per_batch=int(os.environ["BATCH"]),
                  trigger_interval=0.0, log_format="json", log_level="WARNING", state_dir=os.environ["STATE"],
                  repartition_purge_interval=0)

customers = app.table(os.environ["CUSTOMERS"])
orders = app.stream(os.environ["ORDERS"])
gold = customers.filter(lambda key, customer: customer["tier"] == "gold", name="gold")
orders.join(gold, lambda order, customer: {"id": order["id"]}, name="vip").to(
    os.environ["VIP"], partitioner=lambda key, order, partitions: order["id"] % partitions)
payments = app.stream(os.environ["PAYMENTS"])
# In quarters, exact: Decimals, kept and changelogged with the decimal serde.
spent = payments.group_by_key().sum(lambda payment: Decimal(payment["amount"]) / 4, name="spent",
                                    aggregate_serde="decimal")
orders.left_join(spent, lambda order, total: {"id": order["id"], "spent": None if total is None else str(total)},
                 name="with_spent").to(os.environ["SPENT"])
customers.outer_join(app.table(os.environ["ADDRESSES"]),
                     lambda c, a: {"tier": c and c["tier"], "city": a and a["city"]},
                     name="profiles").to_stream().to(os.environ["PROFILES"])
app.table(os.environ["ACCOUNTS"]).left_join(
    customers, lambda account, c: {"account": account["id"], "tier": c and c["tier"]},
    foreign_key=lambda account: account["customer"], name="owner").to_stream().to(os.environ["OWNERS"])
customers.group_by(lambda key, c: (c["tier"], c)).count(name="tiers").to_stream().to(os.environ["TIERS"])
moves = app.stream(os.environ["MOVES"])
places = moves.select_key(lambda who, move: who.upper(), name="mover").to_table(name="places")
places.group_by(lambda who, move: (move["city"], move)).count(name="residents").to_stream().to(os.environ["RESIDENTS"])
(orders.group_by_key().cogroup(lambda c, order, a: {**a, "orders": a["orders"] + 1})
 .cogroup(payments.group_by_key(), lambda c, p, a: {**a, "paid": a["paid"] + p["amount"]})
 .cogroup(app.stream(os.environ["VISITS"]).select_key(lambda page, visit: visit["customer"], name="visitor")
          .group_by_key(), lambda c, visit, a: {**a, "pages": sorted({*a["pages"], visit["page"]})})
 .cogroup(moves.select_key(lambda who, move: f"c{int(who[1:]) % 12}", name="by_customer").group_by_key(),
          lambda c, move, a: {**a, "moves": a["moves"] + 1})
 .aggregate(lambda: {"orders": 0, "paid": 0, "pages": [], "moves": 0},
            name="activity")).to_stream().to(os.environ["ACTIVITY"])
(payments.process_values(PaymentNumbers, name="numbered",
                         stores=[store("payment-numbers", key_serde="string", value_serde="long")])
 .group_by_key().aggregate(lambda: 0, lambda c, payment, total: total + payment["n"], name="numbers",
                           aggregate_serde="long").to_stream().to(os.environ["NUMBERS"]))
if os.environ.get("MARKS"):
    app.fault_hooks.on("before_commit", MarkWhile(os.environ["MARKS"], seconds=0.3))
"""

PARTITIONS, ORDERS, PAYMENTS, MOVES, VISITS = 2, 1600, 700, 600, 500
BASE = (int(time.time()) // 3600 - 4) * 3_600_000
END = BASE + 3_600_000  # the tables change after every order and payment


def tier(i: int) -> str:
    return "gold" if i % 3 == 0 else "basic"


def inputs() -> dict[str, list[tuple[str, dict | None]]]:
    """Per topic role, (key, value) in production order; values carry their event time in "at" (a tombstone
    keeps its record's own time, later than every "at")."""
    customers = [(f"c{i}", {"tier": tier(i), "at": BASE - 10}) for i in range(12)]
    customers += [(f"c{i}", {"tier": "basic" if tier(i) == "gold" else "gold", "at": END + i}) for i in (0, 1, 2, 5)]
    customers += [("c7", None), ("c9", None)]
    addresses = [(f"c{i}", {"city": f"city{i}", "at": BASE - 9}) for i in range(2, 12)] + [("c3", None)]
    accounts = [(f"a{i}", {"id": i, "customer": f"c{i % 14}", "at": BASE - 8}) for i in range(20)]
    accounts += [("a3", {"id": 3, "customer": "c4", "at": END + 20}), ("a5", None)]
    payments = [(f"c{i % 12}", {"amount": i % 7 + 1, "at": BASE + i * 1_000}) for i in range(PAYMENTS)]
    orders = [(f"c{i % 12}", {"id": i, "at": BASE + i * 500 + 250}) for i in range(ORDERS)]
    moves = [(f"p{i % 30}", None if i % 29 == 28 else {"city": f"city{i * 7 % 9}", "at": BASE + i * 1_000})
             for i in range(MOVES)]  # a tombstone now and then: the row leaves its city
    visits = [(f"/p{i % 40}", {"customer": f"c{i * 5 % 12}", "page": f"/p{i % 40}", "at": BASE + i * 1_500 + 7})
              for i in range(VISITS)]
    return {"customers": customers, "addresses": addresses, "accounts": accounts, "payments": payments,
            "orders": orders, "moves": moves, "visits": visits}


def final(rows: list[tuple[str, dict | None]]) -> dict[str, dict]:
    table: dict[str, dict] = {}
    for key, value in rows:
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    return table


def last_per_key(bootstrap: str, topic: str) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value, _ in committed_records(bootstrap, topic):
        out[key.decode()] = None if value is None else json.loads(value)
    return {k: v for k, v in out.items() if v is not None}


def test_table_dsl_joins_and_aggregations_are_exactly_once_across_sigkills(
        kafka, topic_factory, unique_name, tmp_path, monkeypatch):
    names = ("customers", "addresses", "accounts", "payments", "orders", "vip", "spent", "profiles", "owners",
             "tiers", "moves", "residents", "visits", "activity", "numbers")
    topics = dict(zip(names, (topic_factory(n, partitions=PARTITIONS) for n in names), strict=True))
    bootstrap = kafka.bootstrap_servers
    data = inputs()
    # Keyed as the Java client keys them (murmur2): the foreign-key join's right table must be.
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True,
                         "partitioner": "murmur2_random"})
    for role, rows in data.items():
        for key, value in rows:
            producer.produce(topics[role], key=key.encode(),
                             value=None if value is None else json.dumps(value).encode())
            producer.poll(0)
    assert producer.flush(60) == 0

    marks = tmp_path / "marks"
    marks.mkdir()
    env = {**os.environ, "EOS_BOOTSTRAP_SERVERS": bootstrap, "APP": unique_name("app"),
           "STATE": str(tmp_path / "state"), "MARKS": str(marks), "BATCH": "250",
           **{n.upper(): t for n, t in topics.items()}}
    run_killed_then_caught_up(tmp_path, JOB, env, seed=31)

    # Every order once, joined with the tables as they stood at its time (every table change comes later).
    initial = {k: v for k, v in data["customers"] if v is not None and v["at"] < BASE}
    orders = data["orders"]
    vip = Counter((json.loads(v)["id"], p) for _, v, _, p in committed_records(bootstrap, topics["vip"],
                                                                             partition=True))
    assert vip == Counter((o["id"], o["id"] % PARTITIONS) for k, o in orders if initial[k]["tier"] == "gold")
    paid: dict[str, list[tuple[int, int]]] = {}
    for key, p in data["payments"]:
        paid.setdefault(key, []).append(p["at"])
    sums = {k: list(zip(ats, accumulate(p["amount"] for kk, p in data["payments"] if kk == k), strict=True))
            for k, ats in paid.items()}

    def spent_at(key: str, at: int) -> int | None:
        before = [total for t, total in sums.get(key, []) if t <= at]
        return before[-1] if before else None

    got = Counter((v["id"], v["spent"] and Decimal(v["spent"])) for v in (json.loads(v) for _, v, _ in
                                                                         committed_records(bootstrap, topics["spent"])))
    quarters = lambda total: None if total is None else Decimal(total) / 4
    assert got == Counter((o["id"], quarters(spent_at(k, o["at"]))) for k, o in orders)
    assert any(total % 1 for _, total in got if total)  # (fractions of a unit among them)

    customers, addresses, accounts = (final(data[r]) for r in ("customers", "addresses", "accounts"))
    assert last_per_key(bootstrap, topics["profiles"]) == {
        k: {"tier": customers[k]["tier"] if k in customers else None,
            "city": addresses[k]["city"] if k in addresses else None}
        for k in set(customers) | set(addresses)}
    assert last_per_key(bootstrap, topics["owners"]) == {
        k: {"account": a["id"], "tier": customers[a["customer"]]["tier"] if a["customer"] in customers else None}
        for k, a in accounts.items()}
    counts = Counter(c["tier"] for c in customers.values())
    tiers = {}
    for key, value, _ in committed_records(bootstrap, topics["tiers"]):
        tiers[key.decode()] = int.from_bytes(value, "big")
    assert tiers == counts
    # The moves as a table: every row in the city of its last move, a deleted one in none (a city left empty
    # counts 0, which Counter's equality takes as absent).
    places = final([(who.upper(), move) for who, move in data["moves"]])
    residents = Counter(move["city"] for move in places.values())
    counted = {key.decode(): int.from_bytes(value, "big")
               for key, value, _ in committed_records(bootstrap, topics["residents"])}
    assert Counter(counted) == residents and len(places) < 30

    # The cogroup: each customer's orders counted, payments summed, pages visited and moves counted (a
    # tombstone is no move), in one aggregate.
    activity: dict[str, dict] = {}
    records_of: Counter[str] = Counter()
    for role, customer_of in (("orders", lambda key, v: key), ("payments", lambda key, v: key),
                              ("visits", lambda key, v: v["customer"]),
                              ("moves", lambda key, v: f"c{int(key[1:]) % 12}")):
        for key, value in data[role]:
            if value is None:
                continue
            row = activity.setdefault(customer_of(key, value), {"orders": 0, "paid": 0, "pages": [], "moves": 0})
            records_of[customer_of(key, value)] += 1
            if role == "orders":
                row["orders"] += 1
            elif role == "payments":
                row["paid"] += value["amount"]
            elif role == "visits":
                row["pages"] = sorted({*row["pages"], value["page"]})
            else:
                row["moves"] += 1
    assert last_per_key(bootstrap, topics["activity"]) == activity
    updates = [key.decode() for key, _, _ in committed_records(bootstrap, topics["activity"])]
    assert Counter(updates) == records_of  # one update per record: none lost, none twice

    # The payments numbered per customer (1, 2, ... k, each number once) and the numbers summed.
    paid = Counter(key for key, _ in data["payments"])
    numbers = [(key.decode(), int.from_bytes(value, "big"))
               for key, value, _ in committed_records(bootstrap, topics["numbers"])]
    assert Counter(key for key, _ in numbers) == paid  # one update per payment
    assert dict(numbers) == {key: k * (k + 1) // 2 for key, k in paid.items()}

    app = load_job(tmp_path, env, monkeypatch)
    assert len(app.subtopologies) == 7 and not [t for t in app.internal_topics if "numbers" in t]
    assert dict(app.store_view("payment-numbers").all()) == dict(paid)
    assert dict(app.store_view("activity-store").all()) == activity
    assert dict(app.store_view("tiers-store").all()) == dict(counts)
    assert Counter(dict(app.store_view("residents-store").all())) == residents
    reports = audit_application(app)
    failed = [(r.mode, r.inputs, r.outputs) for r in reports if r.verdict != "PASS"]
    assert not failed, failed
    # replayed: the orders joined with the filtered table (through its filter), the outer and foreign-key joins
    checked = sorted((r.join.kind, r.join.how) for r in reports if r.mode == "join" and not r.skipped)
    assert checked == [("foreign-key", "left"), ("stream-table", "inner"), ("table-table", "outer")], checked
    assert all(r.join.output_records for r in reports if r.mode == "join" and not r.skipped)
    # the join with the aggregated table: "not checked" by the join audit, as the topology says
    unreplayed = [(name, j.kind) for s in app.subtopologies.values() for name, j, _ in s.unreplayed_joins]
    assert unreplayed == [("with_spent", "stream-table")], unreplayed
    assert [r.join.kind for r in reports if r.mode == "join" and r.skipped] == ["stream-table"]

    # A profile committed twice (a broken writer): the lineage audit of its task says FAIL.
    commit_copy(bootstrap, topics["profiles"], *committed_records(bootstrap, topics["profiles"])[0][:2])
    failed = [(r.mode, r.outputs) for r in audit_application(app) if r.verdict != "PASS"]
    assert "lineage" in [mode for mode, _ in failed] and all(topics["profiles"] in o for _, o in failed), failed
    # A city's count committed twice, origin and all, behind the two repartition topics (whose audit leaves
    # out the input-order check, as behind any repartition topic): a duplicate.
    key, value, _, headers = committed_records(bootstrap, topics["residents"], headers=True)[0]
    commit_copy(bootstrap, topics["residents"], key, value, headers)
    (chained,) = [r for r in audit_application(app) if r.mode == "lineage" and topics["residents"] in r.outputs]
    assert chained.verdict == "FAIL" and chained.lineage.duplicates == 1, chained.lineage
