"""A versioned table on the broker and Spark, SIGKILLed mid-batch (once inside a transaction, once at a random
time) and restarted, in two phases:

1. the prices table is read: updates mostly in time order, a quarter of them out of order (older than the
   product's latest price), deletions, and updates older than the history retention. The same task keeps
   it three times: for the orders' join (a versioned store), for a table-table join with the stock table,
   and for a count of products per price band (out-of-order updates change neither);
2. then orders come, each at a time anywhere in the prices' history: each is joined with the price its
   product had at the order's time, restored from the changelog after every kill.

Every order is joined once with the price of a reference versioned table at its time (None before the
product's first price, after a deletion, or before the history bound); the table-table join's and the
count's last results are those of the latest price by timestamp; `audit_application` says PASS, with the
versioned join replayed by the join audit."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections import Counter

import pytest
from confluent_kafka import Producer

from eos.audit import audit_application
from integration_tests.streams.test_dsl_tables import last_per_key
from integration_tests.streams.test_fused_topology import load_job, run_killed_then_caught_up
from integration_tests.streams.test_time_and_rekey import committed_records
from recovery import NOT_PUT
from tests.recovery.test_versioned import _Model
from transactions import KafkaAdmin

JOB = """
import os
from datetime import timedelta
from eos import Application
from eos.testing import MarkWhile

app = Application(os.environ["APP"], timestamp="field:at", max_records_per_batch=int(os.environ["BATCH"]),
                  trigger_interval=0.0, log_format="json", log_level="WARNING", state_dir=os.environ["STATE"])
prices = app.table(os.environ["PRICES"], name="prices", versioned=timedelta(minutes=30))
app.stream(os.environ["ORDERS"]).left_join(
    prices, lambda order, price: {"id": order["id"], "price": price and price["price"]}, name="priced").to(
    os.environ["PRICED"])
prices.join(app.table(os.environ["STOCK"]), lambda price, stock: {"price": price["price"], "stock": stock["n"]},
            name="offers").to_stream().to(os.environ["OFFERS"])
prices.group_by(lambda product, price: (str(price["price"] // 25), price)).count(name="bands").to_stream().to(
    os.environ["BANDS"])
if os.environ.get("MARKS"):
    app.fault_hooks.on("before_commit", MarkWhile(os.environ["MARKS"], seconds=0.3))
"""

PARTITIONS, PRODUCTS, UPDATES, ORDERS = 2, 24, 50, 1_200
RETENTION = 30 * 60_000
BASE = (int(time.time()) // 3600 - 30) * 3_600_000


def partition(key: str) -> int:
    return int(key[1:]) % PARTITIONS


def prices() -> list[tuple[str, dict | None, int]]:
    """(product, price or None, timestamp) in production order: each product's time moves on a minute an
    update, a quarter of the updates go up to twenty minutes back (out of order), one in twenty is a deletion
    at the product's newest time, one in forty two hours back (before the history bound)."""
    rnd, out = random.Random(7), []
    newest = dict.fromkeys((f"p{i}" for i in range(PRODUCTS)), BASE)
    held = dict.fromkeys(newest, False)
    for step in range(UPDATES):
        for i in range(PRODUCTS):
            key = f"p{i}"
            roll = rnd.random()
            if roll < 0.05 and held[key]:
                newest[key] += 60_000
                out.append((key, None, newest[key]))
                held[key] = False
                continue
            if roll < 0.075 and step > 10:
                at = newest[key] - 2 * 3_600_000
            elif roll < 0.325 and step:
                at = newest[key] - rnd.randint(1, 20) * 60_000 + rnd.randint(0, 59_999)
            else:
                newest[key] += 60_000 + rnd.randint(0, 30_000)
                at = newest[key]
                held[key] = True
            out.append((key, {"price": rnd.randint(1, 199), "at": at}, at))
    return out


def job_env(tmp_path, bootstrap: str, app_id: str, topics: dict[str, str]) -> dict[str, str]:
    """The job's environment: its topics (by role, upper-cased), application id, state directory, batches
    of 40 records, and the directory its transactions are marked in (for the kills)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    return {**os.environ, "EOS_BOOTSTRAP_SERVERS": bootstrap, "APP": app_id, "STATE": str(tmp_path / "state"),
            "MARKS": str(marks), "BATCH": "40", **{n.upper(): t for n, t in topics.items()}}


def eos_cli(cwd, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eos.cli", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_a_versioned_table_joins_each_order_with_the_price_at_its_time_across_sigkills(
        kafka, topic_factory, unique_name, tmp_path, monkeypatch):
    names = ("prices", "stock", "orders", "priced", "offers", "bands")
    topics = dict(zip(names, (topic_factory(n, partitions=PARTITIONS) for n in names), strict=True))
    bootstrap = kafka.bootstrap_servers
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})

    def produce(topic: str, rows) -> None:
        for key, value, at in rows:
            producer.produce(topics[topic], key=key.encode(), partition=partition(key), timestamp=at,
                             value=None if value is None else json.dumps(value).encode())
            producer.poll(0)
        assert producer.flush(60) == 0

    updates = prices()
    stock = [(f"p{i}", {"n": i * 3, "at": BASE}, BASE) for i in range(0, PRODUCTS, 2)]
    produce("prices", updates)
    produce("stock", stock)
    env = job_env(tmp_path, bootstrap, unique_name("app"), topics)
    run_killed_then_caught_up(tmp_path, JOB, env, seed=5, kills=2, pause=(2.0, 4.0))  # phase 1: the table

    # The reference: a versioned table per task (partition), fed in offset order.
    models = [_Model(RETENTION) for _ in range(PARTITIONS)]
    kept = [models[partition(k)].put(k, v, at) != NOT_PUT for k, v, at in updates]
    assert 0 < kept.count(False) < 60  # some updates came too late to keep
    latest = {k: models[partition(k)].get(k) for k in {k for k, _, _ in updates}}
    holding = {k: v for k, v in latest.items() if v is not None}
    assert 0 < len(holding) < PRODUCTS
    counts = Counter(str(v["price"] // 25) for v in holding.values())
    bands = {key.decode(): int.from_bytes(value, "big") for key, value, _ in committed_records(bootstrap,
                                                                                              topics["bands"])}
    assert Counter(bands) == counts
    n_of = {k: v["n"] for k, v, _ in stock}
    assert last_per_key(bootstrap, topics["offers"]) == {k: {"price": v["price"], "stock": n_of[k]}
                                                         for k, v in holding.items() if k in n_of}

    rnd = random.Random(11)
    first, end = BASE, max(at for _, _, at in updates)
    orders = [(f"p{rnd.randrange(PRODUCTS)}", {"id": i, "at": at}, at)
              for i, at in enumerate(rnd.randint(first - 60_000, end + 60_000) for _ in range(ORDERS))]
    produce("orders", orders)
    run_killed_then_caught_up(tmp_path, JOB, env, seed=6, kills=2, pause=(2.0, 4.0))  # phase 2: the orders

    expected = Counter((o["id"], (lambda p: p and p["price"])(models[partition(k)].get(k, at)))
                       for k, o, at in orders)
    got = Counter((v["id"], v["price"]) for v in (json.loads(v) for _, v, _ in committed_records(
        bootstrap, topics["priced"])))
    assert got == expected
    nones = sum(price is None for (_, price), n in expected.items())
    assert 50 < nones < ORDERS // 2, nones  # (before a first price, after a deletion, before the bound)

    app = load_job(tmp_path, env, monkeypatch)
    reports = audit_application(app)
    failed = [(r.mode, r.inputs, r.outputs) for r in reports if r.verdict != "PASS"]
    assert not failed, failed
    checked = sorted((r.join.kind, r.join.how) for r in reports if r.mode == "join" and not r.skipped)
    assert checked == [("stream-table", "left"), ("table-table", "inner")], checked
    # the store as queries read it from its changelog: every product's latest price, and its prices by time
    view = app.store_view("priced-prices").view
    assert dict(view.all()) == holding
    assert [view.get(k, as_of=at) for k, _, at in orders[:200]] == [models[partition(k)].get(k, at)
                                                                   for k, _, at in orders[:200]]
    # ... and from the command line
    key, at = next((k, at) for k, _, at in orders if models[partition(k)].get(k, at) not in (None, holding.get(k)))
    shown = eos_cli(tmp_path, env, "store", "get", "job.py", "priced-prices", key, "--as-of", str(at))
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["value"] == models[partition(key)].get(key, at) != holding.get(key)
    shown = eos_cli(tmp_path, env, "store", "get", "job.py", "bands-store", "1", "--as-of", str(at))
    assert shown.returncode == 2 and "--as-of reads a versioned store" in shown.stderr, shown.stderr


GRACE_JOB = """
import os
from datetime import timedelta
from eos import Application
from eos.testing import MarkWhile

# OPTIMIZATION="all": the prices table's stores are restored from its topic, in a state directory of each
# process's own, so every restart restores them from the topic up to the committed offsets
optimization = os.environ.get("OPTIMIZATION", "none")
state = os.environ["STATE"] + (f"/{os.getpid()}" if optimization != "none" else "")
app = Application(os.environ["APP"], timestamp="field:at", max_records_per_batch=int(os.environ["BATCH"]),
                  trigger_interval=0.0, log_format="json", log_level="WARNING", state_dir=state,
                  topology_optimization=optimization)
prices = app.table(os.environ["PRICES"], name="prices", versioned=timedelta(hours=2))
orders = app.stream(os.environ["ORDERS"])
price_of = lambda order, price: {"id": order["id"], "price": price and price["price"]}
orders.left_join(prices, price_of, name="waited", grace=timedelta(minutes=30)).to(os.environ["WAITED"])
orders.left_join(prices, price_of, name="at_once").to(os.environ["AT_ONCE"])
# the same prices as a versioned global table, each order joined with its product's price at the order's time
rates = app.global_table(os.environ["PRICES"], name="global-prices", versioned=timedelta(hours=2))
orders.left_join(rates, price_of, key=lambda product, order: product, name="global").to(os.environ["GLOBAL"])
if os.environ.get("MARKS"):
    app.fault_hooks.on("before_commit", MarkWhile(os.environ["MARKS"], seconds=0.3))
"""


def timeline() -> tuple[list[tuple[str, dict | None, int]], list[tuple[str, dict, int]]]:
    """Prices and orders over an hour: each minute every product gets a price, three in ten of them come up to
    twenty minutes late (behind the minute's newest prices of every product), one in twenty-five is a
    deletion; orders come up to five minutes out of order, one in fifty forty-five minutes late."""
    rnd = random.Random(23)
    updates, orders = [], []
    for step in range(60):
        for key in (f"p{i}" for i in range(PRODUCTS)):
            roll = rnd.random()
            at = BASE + step * 60_000 + rnd.randint(0, 20_000)
            if roll < 0.3 and step > 2:
                at -= rnd.randint(60_000, 20 * 60_000)
            updates.append((key, None if roll > 0.96 else {"price": rnd.randint(1, 199), "at": at}, at))
        for _ in range(20):
            at = BASE + step * 60_000 + rnd.randint(0, 59_999) - rnd.randint(0, 5 * 60_000)
            if rnd.random() < 0.02:
                at -= 45 * 60_000
            orders.append((f"p{rnd.randrange(PRODUCTS)}", {"id": len(orders), "at": at}, at))
    return updates, orders


def let_go(orders: list[tuple[str, dict, int]], grace: int) -> tuple[list[tuple[str, dict, int]], int, int]:
    """A reference of a task's grace period: the orders of one partition (offset order) it let go of, in order;
    how many it dropped as late, and how many it still holds."""
    observed, held, out, late = None, [], [], 0
    for seq, (key, order, at) in enumerate(orders):
        observed = at if observed is None else max(observed, at)
        if at < observed - grace:
            late += 1
            continue
        held.append((at, seq, key, order))
        for due in sorted(h for h in held if h[0] <= observed - grace):
            held.remove(due)
            out.append((due[2], due[3], due[0]))
    return out, late, len(held)


@pytest.mark.parametrize("optimization", ["none", "all"])
def test_a_grace_period_holds_each_order_for_the_late_prices_of_its_time_across_sigkills(
        kafka, topic_factory, unique_name, tmp_path, monkeypatch, optimization):
    """Prices up to twenty minutes late, orders held back thirty minutes: each order let go is joined with
    the price its product had at its time among all the updates (a reference versioned table fed everything),
    exactly once, through SIGKILLs; the same orders joined at once (no grace period) miss late prices. With
    `topology_optimization="all"` the prices table has no changelog of its own: every restarted process
    restores it from its (compacted) topic, up to the offsets the tasks committed."""
    names = ("prices", "orders", "waited", "at_once", "global")
    compact = {"cleanup.policy": "compact"} if optimization != "none" else None
    topics = dict(zip(names, (topic_factory(n, partitions=PARTITIONS, config=compact if n == "prices" else None)
                              for n in names), strict=True))
    bootstrap = kafka.bootstrap_servers
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    updates, orders = timeline()
    for topic, rows in (("prices", updates), ("orders", orders)):
        for key, value, at in rows:
            producer.produce(topics[topic], key=key.encode(), partition=partition(key), timestamp=at,
                             value=None if value is None else json.dumps(value).encode())
            producer.poll(0)
    assert producer.flush(60) == 0
    env = {**job_env(tmp_path, bootstrap, unique_name("app"), topics), "OPTIMIZATION": optimization}
    run_killed_then_caught_up(tmp_path, GRACE_JOB, env, seed=9, kills=2, pause=(2.0, 4.0))

    models = [_Model(2 * 3_600_000) for _ in range(PARTITIONS)]
    for key, value, at in updates:
        assert models[partition(key)].put(key, value, at) != NOT_PUT
    expected, late, holding = Counter(), 0, 0
    for p in range(PARTITIONS):
        released, dropped, held = let_go([o for o in orders if partition(o[0]) == p], 30 * 60_000)
        late, holding = late + dropped, holding + held
        expected.update((o["id"], (lambda v: v and v["price"])(models[p].get(k, at))) for k, o, at in released)
    assert late > 5 and holding > 20, (late, holding)

    def joined(topic: str) -> Counter:
        return Counter((v["id"], v["price"]) for v in (json.loads(v) for _, v, _ in committed_records(
            bootstrap, topics[topic])))
    assert joined("waited") == expected
    at_once = dict(joined("at_once"))  # (each order once: none held, none late)
    assert sorted(i for i, _ in at_once) == list(range(len(orders))) and set(at_once.values()) == {1}
    at_once = dict(at_once.keys())  # order id -> the price it was joined with
    missed = sum(at_once[i] != price for i, price in expected)
    assert missed > 20, missed  # without the grace period, orders read before a late price miss it
    # the versioned global table holds every price from the first batch on: each order, at once, gets the
    # price at its time among all the updates
    assert joined("global") == Counter((o["id"], (lambda v: v and v["price"])(models[partition(k)].get(k, at)))
                                       for k, o, at in orders)

    app = load_job(tmp_path, env, monkeypatch)
    reports = audit_application(app)
    failed = [(r.mode, r.violations, r.lineage and r.lineage.samples) for r in reports if r.verdict != "PASS"]
    assert not failed, failed
    # the three joins replayed by the join audit, the grace period's with its late orders
    checked = sorted((r.join.kind, r.join.how, r.join.late_records) for r in reports
                     if r.mode == "join" and not r.skipped)
    assert checked == [("stream-global", "left", 0), ("stream-table", "left", 0), ("stream-table", "left", late)], \
        checked
    # every order of the global join checked against the global table as its batch's pins had read it
    (pinned,) = (r.join for r in reports if r.mode == "join" and r.join.kind == "stream-global")
    assert pinned.bounded == pinned.expected == len(orders), (pinned.bounded, pinned.expected)
    # the global table by time from the command line
    key, at = next((k, at) for k, _, at in orders if models[partition(k)].get(k, at) not in (None, models[
        partition(k)].get(k)))
    shown = eos_cli(tmp_path, env, "store", "get", "job.py", "global-prices", key, "--as-of", str(at))
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["value"] == models[partition(key)].get(key, at)
    # what is still held, as queries read the buffer from its changelog, and as the command line shows it
    held = app.store_view("waited-buffer").view.all()
    assert len(held) == holding and {h.message[1] for h in held} == set(range(PARTITIONS))
    shown = eos_cli(tmp_path, env, "store", "dump", "job.py", "waited-buffer")
    assert shown.returncode == 0, shown.stderr
    rows = [json.loads(line) for line in shown.stdout.splitlines()]
    assert sorted(r["origin"] for r in rows if "origin" in r) == sorted(f"{topics['orders']}:{h.message[1]}:"
                                                                      f"{h.message[2]}" for h in held)
    if optimization == "none":
        return
    # the table's stores wrote nothing of their own; every restart restored them from the prices topic
    stores = {s.name: s.source_topic for sub in app.subtopologies.values() for s in sub.stores}
    assert stores == {"waited-prices": topics["prices"], "at_once-prices": topics["prices"], "waited-buffer": None}
    own = {f"{app.config.application_id}-{s}-changelog": None if topic else PARTITIONS for s, topic in stores.items()}
    assert KafkaAdmin(bootstrap).partition_counts(own) == own
    restarts = [d for d in (tmp_path / "state").iterdir() if (d / app.config.application_id).is_dir()]
    assert len(restarts) >= 2, restarts  # (processes that ran batches, each restoring into a state of its own)
    # queries read the table from its topic up to the committed offsets: every product's latest price
    assert dict(app.store_view("waited-prices").view.all()) == {
        k: v for k in {k for k, _, _ in updates} if (v := models[partition(k)].get(k)) is not None}
