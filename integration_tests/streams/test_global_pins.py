"""A global table updated while its job runs, on the broker and Spark, SIGKILLed mid-batch (once inside a
transaction, once after running a while) and restarted while orders and rates keep coming.

Each batch joins its orders with the global table exactly where the driver pinned it for that batch, and the
lineage ledger records those pins. So every order's rate is checked twice: by the test, against the rates
topic alone (each order joined once; a rate its currency held; per currency, never a rate older than one an
earlier order of the partition got), and by the join audit, against the rate its batch's pins had read, which
decides each result exactly (`eos.audit.joins.GlobalReads`)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from collections import defaultdict

from confluent_kafka import Producer

from eos.audit import audit_application
from eos.audit.scan import scan_topic
from eos.ledger import LedgerEntry, ledger_topic
from integration_tests.engine.test_kill_restart import kill_group, wait_for
from integration_tests.streams.test_fused_topology import load_job
from integration_tests.streams.test_time_and_rekey import committed_records

JOB = """
import os
from eos import Application
from eos.testing import MarkWhile

app = Application(os.environ["APP"], max_records_per_batch=40, trigger_interval=0.2, log_format="json",
                  log_level="WARNING", state_dir=os.environ["STATE"])
rates = app.global_table(os.environ["RATES"], name="rates")
app.stream(os.environ["ORDERS"]).left_join(
    rates, lambda order, rate: {"id": order["id"], "rate": rate and rate["r"]}, key=lambda k, order: order["cur"],
    name="rated").to(os.environ["RATED"])
if os.environ.get("MARKS"):
    app.fault_hooks.on("before_commit", MarkWhile(os.environ["MARKS"], seconds=0.3))
"""

CURRENCIES, ROUNDS, ORDERS_PER_ROUND = 6, 100, 20


def feed(bootstrap: str, orders: str, rates: str, stop: threading.Event) -> None:
    """Rounds of orders and rate updates, a quarter of a second apart: each round a few rates change (the
    first round sets every currency's) and 20 orders come, on two partitions each."""
    rnd = random.Random(31)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    n = 0
    for step in range(ROUNDS):
        if stop.is_set():
            return
        for c in range(CURRENCIES) if step == 0 else rnd.sample(range(CURRENCIES), 2):
            producer.produce(rates, key=f"c{c}".encode(), value=json.dumps({"r": step * 1000 + c}).encode())
        for _ in range(ORDERS_PER_ROUND):
            producer.produce(orders, key=f"o{n}".encode(),
                             value=json.dumps({"id": n, "cur": f"c{rnd.randrange(CURRENCIES)}"}).encode())
            n += 1
        assert producer.flush(30) == 0
        time.sleep(0.25)


def test_a_global_table_updated_while_its_job_is_killed_joins_each_order_where_its_batch_pinned_it(
        kafka, topic_factory, unique_name, tmp_path, monkeypatch):
    bootstrap = kafka.bootstrap_servers
    topics = {"orders": topic_factory("orders", partitions=2), "rates": topic_factory("rates", partitions=2),
              "rated": topic_factory("rated", partitions=2)}
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {**__import__("os").environ, "EOS_BOOTSTRAP_SERVERS": bootstrap, "APP": unique_name("app"),
           "STATE": str(tmp_path / "state"), "MARKS": str(marks), **{n.upper(): t for n, t in topics.items()}}
    (tmp_path / "job.py").write_text(JOB)
    stop = threading.Event()
    feeder = threading.Thread(target=feed, args=(bootstrap, topics["orders"], topics["rates"], stop), daemon=True)
    feeder.start()
    try:
        in_txn = 0
        for kill, pause in enumerate((None, random.Random(5).uniform(9.0, 11.0))):
            with open(tmp_path / "job.log", "ab") as log:  # (runs on: the feed is still coming)
                proc = subprocess.Popen([sys.executable, "-m", "eos.cli", "run", "job.py"], cwd=tmp_path, env=env,
                                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            if pause is None:
                in_txn += wait_for(lambda: any(marks.iterdir()), 120, proc)
            else:
                wait_for(lambda: False, pause, proc)
            assert proc.poll() is None, f"the job ended before kill {kill + 1}; see {tmp_path / 'job.log'}"
            kill_group(proc)
            for marker in marks.iterdir():
                marker.unlink()
        assert in_txn == 1
    finally:
        feeder.join(120)
        stop.set()
    assert not feeder.is_alive()
    env.pop("MARKS")
    done = subprocess.run([sys.executable, "-m", "eos.cli", "run", "job.py", "--until-caught-up"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]

    # the rates topic alone: each order joined once, with a rate its currency held, never with one older than
    # an earlier order of its partition got for the same currency
    history: dict[str, list[int]] = defaultdict(list)
    for key, value, _ in committed_records(bootstrap, topics["rates"]):
        history[key.decode()].append(json.loads(value)["r"])
    orders = {json.loads(v)["id"]: (json.loads(v)["cur"], p)
              for _, v, _, p in committed_records(bootstrap, topics["orders"], partition=True)}
    assert len(orders) == ROUNDS * ORDERS_PER_ROUND
    results = [json.loads(v) for _, v, _ in committed_records(bootstrap, topics["rated"])]
    assert sorted(r["id"] for r in results) == sorted(orders)
    newest: dict[tuple[int, str], int] = {}
    for r in sorted(results, key=lambda r: r["id"]):  # (an order's id grows with its offset in its partition)
        cur, p = orders[r["id"]]
        assert r["rate"] in history[cur], r
        at = history[cur].index(r["rate"])
        assert at >= newest.get((p, cur), 0), (r, history[cur])
        newest[(p, cur)] = at

    # the batches read the table at several places while it changed, and the ledger says where
    pins = {tuple(sorted(entry.pins[topics["rates"]].items()))
            for batch in scan_topic(bootstrap, ledger_topic(env["APP"]))
            for entry in map(LedgerEntry.decode, (m.value() for m in batch)) if entry is not None}
    assert len(pins) >= 2, pins

    # the join audit: every order's result is the rate its batch's pins had read, exactly
    app = load_job(tmp_path, env, monkeypatch)
    reports = audit_application(app)
    assert all(r.verdict == "PASS" for r in reports), [
        (r.mode, r.violations, r.join and (r.join.wrong_values, r.join.missing, r.join.unexpected, r.join.samples))
        for r in reports if r.verdict != "PASS"]
    (join,) = (r.join for r in reports if r.mode == "join")
    assert join.kind == "stream-global" and join.bounded == join.expected == len(orders), join
