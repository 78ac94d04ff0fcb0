"""A record late on one partition of a repartition topic and on time on another, on the broker and Spark.

A view is made into two records keyed anew (a flat map before a stream-stream join with clicks); they reach
two tasks through the repartition topic. One task's stream time is an hour on: it drops its record as late.
The other joins its record with a click. The ledger names the late record by its own place on the repartition
topic, and the join audit leaves out that one only and expects the other's result (it used to name both by
the view they came from, and call the result unexpected)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from confluent_kafka import Producer

from eos.audit import audit_application
from eos.streamtime import MARKER_HEADER, decode_stamp
from integration_tests.engine.test_kill_restart import kill_group, wait_for
from integration_tests.streams.test_fused_topology import load_job
from integration_tests.streams.test_time_and_rekey import committed_records
from transactions.memory import partition_for

JOB = """
import os
from eos import Application
from eos.tables import JoinWindows

app = Application(os.environ["APP"], trigger_interval=0.1, source_idle_timeout=1.0, repartition_purge_interval=0,
                  log_format="json", log_level="WARNING", state_dir=os.environ["STATE"])
views = app.stream(os.environ["VIEWS"]).flat_map(lambda k, v: [(f"a{v['u']}", v), (f"g{v['u']}", v)])
views.join(app.stream(os.environ["CLICKS"]), lambda v, c: {"u": v["u"], "click": c}, windows=JoinWindows(1_000),
           name="seen").to(os.environ["SEEN"])
"""

BASE = (int(time.time()) // 3600 - 3) * 3_600_000


def test_a_view_late_on_one_task_only_is_left_out_there_only(kafka, topic_factory, unique_name, tmp_path,
                                                             monkeypatch):
    bootstrap = kafka.bootstrap_servers
    topics = {n: topic_factory(n, partitions=2) for n in ("views", "clicks", "seen")}
    task_of = {key: partition_for(key.encode(), 2) for key in ("a1", "g1", "a2", "g2", "v1", "v2")}
    assert task_of["a1"] == task_of["a2"] == task_of["g2"] == task_of["v1"] != task_of["g1"] == task_of["v2"]
    env = {**os.environ, "EOS_BOOTSTRAP_SERVERS": bootstrap, "APP": unique_name("app"),
           "STATE": str(tmp_path / "state"), **{n.upper(): t for n, t in topics.items()}}
    (tmp_path / "job.py").write_text(JOB)
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})

    def send(topic: str, key: str, value, at: int) -> None:
        producer.produce(topics[topic], key=key.encode(), value=json.dumps(value).encode(), timestamp=at)
        assert producer.flush(30) == 0

    def said_idle(source: int) -> bool:
        try:
            records = committed_records(bootstrap, f"{env['APP']}-seen-left-repartition", headers=True)
        except Exception:  # (the topic is not there yet)
            return False
        return any((stamp := decode_stamp(h.get(MARKER_HEADER))) is not None and stamp.idle
                   and stamp.source == source for *_, h in records)

    def seen() -> list[dict]:
        return [json.loads(v) for _, v, _ in committed_records(bootstrap, topics["seen"])]

    with open(tmp_path / "job.log", "ab") as log:
        job = subprocess.Popen([sys.executable, "-m", "eos.cli", "run", "job.py"], cwd=tmp_path, env=env,
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        send("clicks", "g1", "click", BASE)
        send("clicks", "a1", "later", BASE + 3_600_000)
        send("views", "v2", {"u": 2}, BASE + 3_600_000)  # (the task of a1 an hour on)
        # the views task of v1, which had none, says it is idle (a marker of its own): it holds no clock back
        assert wait_for(lambda: said_idle(task_of["v1"]), 120, job), f"no source idle; see {tmp_path / 'job.log'}"
        send("views", "v1", {"u": 1}, BASE + 10)
        assert wait_for(lambda: seen() != [], 120, job), f"nothing joined; see {tmp_path / 'job.log'}"
    finally:
        kill_group(job)
    assert seen() == [{"u": 1, "click": "click"}]

    app = load_job(tmp_path, env, monkeypatch)
    reports = audit_application(app)
    failed = [(r.mode, r.join and (r.join.missing, r.join.unexpected, r.join.samples)) for r in reports
              if r.verdict != "PASS"]
    assert not failed, failed
    (join,) = (r.join for r in reports if r.mode == "join")
    assert (join.kind, join.late_records, join.expected, join.output_records) == ("stream-stream", 1, 1, 1), join
