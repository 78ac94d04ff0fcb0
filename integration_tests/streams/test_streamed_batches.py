"""Streamed batches on the broker and Spark: tasks read, process and produce their batches in slices of 30
outputs, and the job is SIGKILLed three times, at least once between two slices of a batch (its earlier
slices already in the open transaction), then run until caught up. Every good order is enriched exactly
once, every bad one is a dead letter once, every key's counts are 1..n in order, once each, and
`audit_application` says PASS."""

from __future__ import annotations

import json
import os
from collections import Counter

from eos.audit import audit_application
from integration_tests.helpers import produce
from integration_tests.streams.test_fused_topology import load_job, run_killed_then_caught_up
from integration_tests.streams.test_time_and_rekey import committed_records

JOB = """
import os
from eos import Application
from eos.testing import MarkWhile

app = Application(os.environ["APP"], max_records_per_batch=400, batch_slice_records=30, trigger_interval=0.0,
                  log_format="json", log_level="WARNING", state_dir=os.environ["STATE"])

@app.process(input=os.environ["ORDERS"], output=os.environ["ENRICHED"], key_serde="string", value_serde="json")
def enrich(record):
    order = record.value
    if order["qty"] == 0:
        return None
    return record.key, {**order, "total": order["qty"] * order["price"]}  # no price: a dead letter

app.stream(os.environ["ENRICHED"]).group_by_key().count(name="counts").to_stream().to(os.environ["COUNTS"])
if os.environ.get("MARKS"):  # kills land between two slices of a batch
    app.fault_hooks.on("after_slice", MarkWhile(os.environ["MARKS"], seconds=0.1))
"""

PARTITIONS, ORDERS, KEYS = 2, 3000, 40


def test_streamed_batches_commit_every_result_once_across_sigkills_between_slices(
        kafka, topic_factory, unique_name, tmp_path, monkeypatch):
    names = ("orders", "enriched", "counts")
    topics = dict(zip(names, (topic_factory(n, partitions=PARTITIONS) for n in names), strict=True))
    bootstrap = kafka.bootstrap_servers
    orders = [(f"k{i % KEYS}", {"id": i, "qty": i % 5, **({"price": 2} if i % 97 else {})}) for i in range(ORDERS)]
    produce(bootstrap, topics["orders"], [(k.encode(), json.dumps(v).encode()) for k, v in orders])
    good = [(k, v) for k, v in orders if v["qty"] and "price" in v]
    bad = [v["id"] for _, v in orders if v["qty"] and "price" not in v]

    marks = tmp_path / "marks"
    marks.mkdir()
    app_id = unique_name("app")
    env = {**os.environ, "EOS_BOOTSTRAP_SERVERS": bootstrap, "APP": app_id, "STATE": str(tmp_path / "state"),
           "MARKS": str(marks), **{n.upper(): t for n, t in topics.items()}}
    run_killed_then_caught_up(tmp_path, JOB, env, seed=7)

    enriched = [json.loads(v) for _, v, _ in committed_records(bootstrap, topics["enriched"])]
    ids = Counter(e["id"] for e in enriched)
    assert not [i for i, n in ids.items() if n > 1], "an order was enriched twice"
    assert set(ids) == {v["id"] for _, v in good}
    assert all(e["total"] == e["qty"] * 2 for e in enriched)
    letters = Counter(json.loads(v)["id"] for _, v, _ in committed_records(bootstrap, f"{app_id}-dlq"))
    assert letters == Counter(bad)

    counts: dict[str, list[int]] = {}
    for key, value, _ in committed_records(bootstrap, topics["counts"]):
        counts.setdefault(key.decode(), []).append(int.from_bytes(value, "big"))
    want = Counter(k for k, _ in good)
    assert counts == {k: list(range(1, n + 1)) for k, n in want.items()}

    app = load_job(tmp_path, env, monkeypatch)
    failed = [(r.mode, r.inputs, r.outputs) for r in audit_application(app) if r.verdict != "PASS"]
    assert not failed, failed
