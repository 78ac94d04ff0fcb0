"""Joins on a real broker: every join kind over out-of-order input with tombstones and late records, a table
joined by two sub-topologies (each commits its own progress); the job SIGKILLed inside its transactions and
restarted, then checked by the join audit's replay of the committed inputs and by the lineage audit;
interactive queries after the crash and at the end; the auditor failing a tampered join output."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Producer

from eos.audit import audit_application, audit_joins
from integration_tests.engine.test_kill_restart import kill_job_repeatedly

ROOT = Path(__file__).resolve().parents[2]
BASE = (int(time.time()) // 3600 - 3) * 3_600_000  # event times in the last hours (the topics keep 7 days)
TOPICS = ("users", "accounts", "products", "orders", "payments", "clicks", "views",
          "enriched", "paid", "profiles", "priced", "click_views")

JOB = """
import os
from eos import Application
from eos.tables import JoinWindows


def pair(left, right):
    return {"l": left, "r": right}


def build(app, t):
    users = app.table(t["users"], name="users")
    app.join(t["orders"], users, t["enriched"], name="enrich", joiner=pair, how="left")
    app.join(t["payments"], users, t["paid"], name="pay", joiner=pair)  # the same table, read a second time
    app.join(users, app.table(t["accounts"], name="accounts"), t["profiles"], name="profile", joiner=pair,
             how="outer")
    app.join(t["orders"], app.global_table(t["products"], name="products"), t["priced"], name="price",
             joiner=pair, how="left", key=lambda r: r.value["product"])
    app.join(t["clicks"], t["views"], t["click_views"], name="attribution", joiner=pair, how="left",
             windows=JoinWindows(5_000, grace=2_000))
    return app

"""

#: The end of a test job file: the application from the environment `load_job` and the kill helper set
#: (APP, BATCH, STATE, TOPIC_NAMES, T_<NAME>), built by the file's `build(app, topics)`; with MARKS, a hook
#: marks each task's time inside its transaction from the third batch on (after two committed batches).
JOB_MAIN = """
if __name__ == "__main__" or os.environ.get("APP"):
    from eos.testing import MarkWhile, Match

    app = build(Application(os.environ["APP"], max_records_per_batch=int(os.environ["BATCH"]),
                            trigger_interval=0.0, log_format="json", log_level="WARNING",
                            state_dir=os.environ["STATE"]),
                {t: os.environ["T_" + t.upper()] for t in os.environ["TOPIC_NAMES"].split(",")})
    if os.environ.get("MARKS"):
        app.fault_hooks.on("before_commit", MarkWhile(os.environ["MARKS"], seconds=0.3, match=Match(batch=2)))
"""
JOB += JOB_MAIN


def produce_timed(bootstrap: str, topic: str, records: list[tuple[str | None, object, int]]) -> None:
    """(key, value or None for a tombstone, timestamp) records, in order."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    for key, value, ts in records:
        producer.produce(topic, key=None if key is None else key.encode(),
                         value=None if value is None else json.dumps(value).encode(), timestamp=ts)
        producer.poll(0)
    assert producer.flush(60) == 0


def load_inputs(bootstrap: str, t: dict[str, str], n: int, seed: int) -> None:
    """Tables updated (and keys deleted) while orders, payments, clicks and views stream in, some records out
    of order, some views late beyond the join's grace."""
    rng = random.Random(seed)
    users, accounts, products, orders, payments, clicks, views = ([] for _ in range(7))
    for i in range(n):
        ts = BASE + i * 200
        user = f"u{rng.randrange(30)}"
        if i % 7 == 0:
            users.append((user, None if rng.random() < 0.15 else {"name": f"n{i}"}, ts))
        if i % 11 == 0:
            accounts.append((user, None if rng.random() < 0.2 else {"balance": i}, ts))
        if i % 50 == 0:
            products.append((f"p{rng.randrange(8)}", {"price": rng.randrange(1, 99)}, ts))
        lag = rng.choice([0, 0, 0, 1_500, 4_000])
        orders.append((user, {"id": i, "product": f"p{rng.randrange(10)}"}, ts - lag))
        if i % 3 == 0:
            payments.append((user, {"order": i}, ts))
        clicks.append((user, {"click": i}, ts - lag))
        if i % 2 == 0:
            views.append((user, {"view": i}, ts - rng.choice([0, 0, 3_000, 30_000])))  # 30 s: late
    for name, records in (("users", users), ("accounts", accounts), ("products", products), ("orders", orders),
                          ("payments", payments), ("clicks", clicks), ("views", views)):
        produce_timed(bootstrap, t[name], records)


def make_topics(topic_factory) -> dict[str, str]:
    return {name: topic_factory(name, partitions=1 if name == "products" else 2) for name in TOPICS}


def load_job(tmp_path: Path, env: dict[str, str]):
    from eos.cli.loader import load_application

    saved = dict(os.environ)
    os.environ.update(env)
    try:
        return load_application(str(tmp_path / "job.py"))
    finally:
        os.environ.clear()
        os.environ.update(saved)


def check_joins(app, bootstrap: str) -> list:
    reports = audit_joins(app, bootstrap_servers=bootstrap)
    for report in reports:
        assert report.verdict == "PASS", (report.join.samples, report.transactions, report.offsets.violations)
        assert report.join.output_records > 0 and report.join.expected > 0, report.to_dict()
        # (with the ledger, every stream record of a global join is checked against its batch's pins)
        if report.join.kind == "stream-global":
            assert report.join.bounded == report.join.expected, report.to_dict()
        elif report.join.kind != "stream-stream":
            assert report.join.bounded > 0, report.to_dict()
    assert {r.join.kind for r in reports} == {"stream-table", "table-table", "stream-global", "stream-stream"}
    lineage = audit_application(app, bootstrap_servers=bootstrap)
    assert all(r.verdict == "PASS" for r in lineage), [r.to_dict() for r in lineage if r.verdict != "PASS"]
    return reports


def assert_store_is_committed_table(app, bootstrap: str, store: str, topic: str, group: str) -> None:
    """An interactive query of a table's store shows exactly the table as of the committed offsets."""
    from eos.audit.scan import scan_topic
    from transactions import KafkaAdmin

    admin = KafkaAdmin(bootstrap)
    # the offsets of committed transactions (stable=True would wait for a killed job's open transaction to
    # time out; that transaction's changelog writes are beyond the last stable offset the view reads to)
    committed = admin.group_offsets(group, admin.topic_partitions(topic), stable=False)
    expected: dict = {}
    for batch in scan_topic(bootstrap, topic, until={tp: o or 0 for tp, o in committed.items()}):
        for msg in batch:
            if msg.value() is None:
                expected.pop(msg.key().decode(), None)
            else:
                expected[msg.key().decode()] = json.loads(msg.value())
    view = app.store_view(store, bootstrap_servers=bootstrap)
    assert dict(view.all()) == expected
    assert sum(view.position.values()) > 0


def job_env(kafka, t: dict[str, str], app_id: str, tmp_path: Path, batch: int) -> dict[str, str]:
    return {"EOS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers, "APP": app_id, "STATE": str(tmp_path / "state"),
            "BATCH": str(batch), "TOPIC_NAMES": ",".join(t), **{"T_" + k.upper(): v for k, v in t.items()}}


def test_every_join_kind_killed_mid_batch_then_restarted_matches_the_replay(kafka, spark, topic_factory, unique_name,
                                                                          tmp_path, request):
    """The job SIGKILLed inside a transaction (four kills over 8,000 records, half of them inside, with
    --soak); queries after the crash show only committed state; a run to the end; then every join kind
    matches the replay of its committed inputs, the shared table's readers each committed to the end, queries
    equal the committed tables, and a tampered output fails the audit."""
    soak = request.config.getoption("--soak")
    n, kills = (8_000, 4) if soak else (2_000, 1)
    t = make_topics(topic_factory)
    load_inputs(kafka.bootstrap_servers, t, n, seed=2)
    (tmp_path / "job.py").write_text(JOB)
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {**os.environ, **job_env(kafka, t, unique_name("app"), tmp_path, 250), "MARKS": str(marks)}
    in_txn = kill_job_repeatedly(tmp_path, env, kills, marks, seed=4, pause=(4.0, 8.0))
    assert in_txn >= (kills + 1) // 2
    env.pop("MARKS")
    app = load_job(tmp_path, {k: v for k, v in env.items() if k.startswith(("T_", "APP", "STATE", "BATCH", "TOPIC",
                                                                               "EOS_"))})
    # after the crash: queries show what the committed batches wrote, nothing of the killed transactions
    assert_store_is_committed_table(app, kafka.bootstrap_servers, "enrich-users", t["users"], app.config.group_id)
    during = []

    def query_while_running(report, _results):  # after a batch committed, while the run goes on
        if report.batch == 1:
            assert_store_is_committed_table(app, kafka.bootstrap_servers, "enrich-users", t["users"],
                                            app.config.group_id)
            during.append(report.batch)

    summary = app.run(spark, until_caught_up=True, on_batch=query_while_running)  # the restart, in this process
    assert summary.dead_letters == 0 and during == [1]
    reports = check_joins(app, kafka.bootstrap_servers)
    assert sum(r.join.late_records for r in reports) > 0  # views beyond the grace were dropped, and named so

    # the table read by two sub-topologies: each committed its own progress in it, to the end
    from transactions import KafkaAdmin

    admin = KafkaAdmin(kafka.bootstrap_servers)
    tps = admin.topic_partitions(t["users"])
    ends = admin.end_offsets(tps)
    assert admin.group_offsets(app.config.group_id, tps, stable=True) == ends
    assert admin.group_offsets(f"{app.config.group_id}.pay", tps, stable=True) == ends

    # interactive queries: the table as committed, from the store's changelog; as a DataFrame; on the CLI
    assert_store_is_committed_table(app, kafka.bootstrap_servers, "enrich-users", t["users"], app.config.group_id)
    from pyspark.sql import SparkSession

    frame = app.read_store("profile-accounts", SparkSession(spark), bootstrap_servers=kafka.bootstrap_servers)
    view = app.store_view("profile-accounts", bootstrap_servers=kafka.bootstrap_servers)
    assert {r.key: json.loads(r.value) for r in frame.collect()} == dict(view.all())
    key = next(iter(dict(view.all())))
    cli = subprocess.run([sys.executable, "-m", "eos.cli", "store", "get", "job.py", "profile-accounts", key],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0 and json.loads(cli.stdout)["value"] == view.get(key), cli.stderr

    # a result no replay explains (a price from a product version that never existed) fails the audit
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    producer.produce(t["priced"], key=b"u1", value=json.dumps({"l": {"id": 0, "product": "p1"},
                                                               "r": {"price": 1000}}).encode(),
                     headers=[("eos.origin", f"{t['orders']}:0:0:0".encode())])
    producer.flush(10)
    failed = {r.join.kind: r for r in audit_joins(app, subtopologies=["price"])}
    assert failed["stream-global"].verdict == "FAIL"
    assert failed["stream-global"].join.unexpected + failed["stream-global"].join.wrong_values >= 1
