"""A function between its source and its sink (`Application.process`) on the broker and Spark, in the direct
loop (`eos.worker.processing._run_direct`): it returns a (key, value), nothing, two records, an `Output`
with headers of its own, or raises; the input has bad records of every kind.
The job is SIGKILLed three times (at least once inside a transaction) and restarted until caught up, then a
second wave of input runs, every record of it in the direct loop. The committed output holds exactly the
reference's records, once each; every bad record is a dead letter once; and `audit_application` says PASS,
then FAIL once a broken writer commits an output a second time."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter

from eos.audit import audit_application
from integration_tests.helpers import produce
from integration_tests.streams.test_folded_batches import wave  # keyless, tombstones, not JSON, not numbers
from integration_tests.streams.test_fused_topology import commit_copy, load_job, run_killed_then_caught_up
from integration_tests.streams.test_time_and_rekey import committed_records

JOB = """
import os
from eos import Application, Output
from eos.testing import MarkWhile

app = Application(os.environ["APP"], max_records_per_batch=400, trigger_interval=0.0, log_format="json",
                  log_level=os.environ.get("LEVEL", "WARNING"), state_dir=os.environ["STATE"])


@app.process(input=os.environ["ORDERS"], output=os.environ["OUT"], key_serde="string", value_serde="json")
def shape(record):
    order = record.value
    qty = order["qty"] + 0  # a tombstone or a quantity that is not a number raises: a dead letter
    if qty == 1:
        return None
    if qty == 2:
        return [(record.key, {"id": order["id"], "copy": 0}), (record.key, {"id": order["id"], "copy": 1})]
    if qty == 3:
        return Output(record.key, {"id": order["id"], "copy": 0}, headers=[("qty", b"3")])
    return record.key, {"id": order["id"], "copy": 0, "double": qty * 2}


if os.environ.get("MARKS"):
    app.fault_hooks.on("before_commit", MarkWhile(os.environ["MARKS"], seconds=0.3))
"""

PARTITIONS = 2


def reference(orders: list[tuple[bytes | None, bytes | None]]) -> tuple[Counter, int]:
    """The outputs the function makes of `orders` ((key, value, the qty header), counted) and how many of the
    orders are dead letters."""
    outputs: Counter = Counter()
    bad = 0
    for key, value in orders:
        try:
            order = json.loads(value) if value is not None else None
            qty = order["qty"] + 0  # type: ignore[index]
        except (ValueError, TypeError):
            bad += 1
            continue
        k = key.decode() if key is not None else None
        if qty == 2:
            outputs.update([(k, json.dumps({"id": order["id"], "copy": c}), None) for c in (0, 1)])
        elif qty == 3:
            outputs[(k, json.dumps({"id": order["id"], "copy": 0}), b"3")] += 1
        elif qty != 1:
            outputs[(k, json.dumps({"id": order["id"], "copy": 0, "double": qty * 2}), None)] += 1
    return outputs, bad


def test_a_functions_outputs_are_exactly_once_across_sigkills_and_a_restart(kafka, topic_factory, unique_name,
                                                                              tmp_path, monkeypatch):
    topics = {name: topic_factory(name, partitions=PARTITIONS) for name in ("orders", "out")}
    bootstrap = kafka.bootstrap_servers
    rng = random.Random(29)
    first = wave(rng, 0, 6000)
    produce(bootstrap, topics["orders"], first)

    marks = tmp_path / "marks"
    marks.mkdir()
    env = {**os.environ, "EOS_BOOTSTRAP_SERVERS": bootstrap, "APP": unique_name("app"),
           "STATE": str(tmp_path / "state"), "MARKS": str(marks), "ORDERS": topics["orders"], "OUT": topics["out"]}
    run_killed_then_caught_up(tmp_path, JOB, env, seed=31)

    second = wave(rng, 6000, 3000)
    produce(bootstrap, topics["orders"], second)
    env = {k: v for k, v in env.items() if k != "MARKS"} | {"LEVEL": "INFO"}
    done = subprocess.run([sys.executable, "-m", "eos.cli", "run", "job.py", "--until-caught-up"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    finished = [json.loads(line) for line in (done.stdout + done.stderr).splitlines()
                if line.startswith("{") and '"run finished"' in line]
    assert finished, done.stderr[-3000:]
    run = finished[-1]  # every record of the second wave in the direct loop
    assert run["records_in"] == run["records_direct"] == len(second), run

    want, bad = reference(first + second)
    got = Counter((k.decode() if k is not None else None, json.dumps(json.loads(v)), h.get("qty"))
                  for k, v, _, h in committed_records(bootstrap, topics["out"], headers=True))
    assert got == want  # each output once, none missing, none extra

    app = load_job(tmp_path, env, monkeypatch)
    letters = Counter((int(r[3]["eos.dlq.partition"]), int(r[3]["eos.dlq.offset"]))
                      for r in committed_records(bootstrap, app.config.dlq_topic, headers=True))
    assert max(letters.values()) == 1 and len(letters) == bad  # each bad record a dead letter once
    reports = audit_application(app)
    failed = [(r.mode, r.inputs, r.outputs, r.skipped) for r in reports if r.verdict != "PASS"]
    assert not failed, failed

    key, value, _ = committed_records(bootstrap, topics["out"])[-1]
    commit_copy(bootstrap, topics["out"], key, value)  # a broken writer commits an output again
    failed = [(r.mode, r.outputs) for r in audit_application(app) if r.verdict != "PASS"]
    assert failed and all(topics["out"] in outputs for _, outputs in failed), failed
