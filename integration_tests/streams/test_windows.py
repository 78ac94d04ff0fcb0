"""Windowed aggregations on a real broker: every window kind and both emit modes over out-of-order input
with late records, checked against the auditor's reference; a re-keyed windowed count; and windowed jobs
SIGKILLed repeatedly, mid-batch and inside their transactions, whose results still match the reference."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from eos import Application
from eos.audit import audit_application
from eos.audit.windows import audit_windows
from eos.windows import HoppingWindows, SessionWindows, SlidingWindows, TumblingWindows
from integration_tests.engine.test_kill_restart import kill_job_repeatedly
from integration_tests.helpers import produce
from integration_tests.streams.test_time_and_rekey import committed_records

ROOT = Path(__file__).resolve().parents[2]
WINDOWS = {"tumbling": TumblingWindows(60_000, grace=20_000), "hopping": HoppingWindows(60_000, 20_000, grace=20_000),
           "session": SessionWindows(15_000, grace=20_000), "sliding": SlidingWindows(30_000, grace=20_000)}
# Event times in the last hours: outputs carry them, and a topic refuses timestamps more than an hour ahead
# (message.timestamp.after.max.ms) and deletes records older than its retention (7 days). 40,000 events span 5 h.
BASE = (int(time.time()) // 3600 - 6) * 3_600_000


def events(n: int, seed: int, keys: int = 20) -> list[tuple[bytes, bytes]]:
    """Events mostly in time order, some out of order within the grace period, some late beyond it."""
    rng, t, out = random.Random(seed), BASE, []
    for i in range(n):
        t += rng.randrange(0, 900)
        lag = rng.choice([0] * 12 + [5_000, 15_000, 90_000])
        out.append((f"user-{rng.randrange(keys)}".encode(),
                    json.dumps({"id": i, "at": t - lag, "amount": rng.randrange(1, 50)}).encode()))
    return out


def test_every_window_kind_and_emit_mode_matches_the_reference(kafka, spark, topic_factory, unique_name):
    data = events(3000, seed=7)
    app = Application(unique_name("app"), kafka.bootstrap_servers, log_level="ERROR", timestamp="field:at",
                      max_records_per_batch=500)
    for kind, windows in WINDOWS.items():
        for emit in ("update", "final"):
            src, out = topic_factory(f"{kind}-in", partitions=2), topic_factory(f"{kind}-{emit}", partitions=2)
            produce(kafka.bootstrap_servers, src, data)
            app.sum(src, out, name=f"{kind}_{emit}", value=lambda v: v["amount"], windows=windows, emit=emit)
    summary = app.run(spark, until_caught_up=True)
    assert summary.dropped.get("late", 0) > 0 and summary.dead_letters == 0
    for name, sub in app.subtopologies.items():
        result = audit_windows(kafka.bootstrap_servers, sub, group=app.config.group_id)
        assert result.violations == 0, (name, result)
        assert result.input_records == 3000 and result.late_records > 0 and result.windows_expected > 50, name
    reports = audit_application(app)  # lineage: updates name their records; final results are derived
    assert all(r.verdict == "PASS" for r in reports), [(r.inputs, r.lineage) for r in reports]


def test_a_windowed_count_by_another_key_goes_through_a_repartition_topic(kafka, spark, topic_factory, unique_name):
    src, out = topic_factory("clicks", partitions=3), topic_factory("per-page", partitions=3)
    rng = random.Random(11)
    clicks = [{"user": f"u{rng.randrange(50)}", "page": f"p{rng.randrange(5)}", "at": BASE + i * 250}
              for i in range(3000)]
    produce(kafka.bootstrap_servers, src, [(c["user"].encode(), json.dumps(c).encode()) for c in clicks])
    app = Application(unique_name("app"), kafka.bootstrap_servers, log_level="ERROR", timestamp="field:at")
    # Re-keying interleaves the input partitions: a repartition partition holds one upstream batch's stretch
    # of event time, then another's. Records carry their source's clock (eos.streamtime), so a grace period
    # of a few seconds is enough for input partitions that are each in order.
    app.count(src, out, name="pages", value_serde="json", group_by=lambda r: r.value["page"],
              windows=TumblingWindows(60_000, grace=5_000), emit="final")
    summary = app.run(spark, until_caught_up=True)
    assert summary.dropped == {}
    # A record 2.5 hours on for each page on every input partition moves every source's clock, and so every
    # task's stream time, past the windows' grace; a record a day ahead is one the repartition topic refuses
    # (message.timestamp.after.max.ms): a dead letter.
    ahead = [(b"u", json.dumps({"user": "u", "page": f"p{p}", "at": BASE + 9_000_000}).encode())
             for p in range(5) for _ in range(3)]
    produce(kafka.bootstrap_servers, src, ahead, partition_of=lambda n, key: n % 3)
    far = json.dumps({"user": "u", "page": "p0", "at": BASE + 10**8}).encode()
    produce(kafka.bootstrap_servers, src, [(b"u", far)])
    summary = app.run(spark, until_caught_up=True)
    assert summary.dead_letters == 1
    (letter,) = committed_records(kafka.bootstrap_servers, app.config.dlq_topic, headers=True)
    assert b"message.timestamp.after.max.ms" in letter[3]["eos.dlq.error"]
    expected = Counter((c["page"], (c["at"] // 60_000) * 60_000) for c in clicks)
    got = Counter()
    for key, value, _ in committed_records(kafka.bootstrap_servers, out):
        windowed = json.loads(key or b"{}")
        got[(windowed["key"], windowed["start"])] += int.from_bytes(value or b"", "big")
    assert got == expected


JOB = """
import os
from eos import Application
from eos.testing import MarkWhile
from eos.windows import SessionWindows, SlidingWindows, TumblingWindows

app = Application(os.environ["APP"], timestamp="field:at", max_records_per_batch=int(os.environ["BATCH"]),
                  trigger_interval=0.0, log_format="json", log_level="WARNING", state_dir=os.environ["STATE"])
app.sum(os.environ["IN1"], os.environ["OUT1"], name="hourly", value=lambda v: v["amount"],
        windows=TumblingWindows(60_000, grace=20_000), emit="final")
app.count(os.environ["IN2"], os.environ["OUT2"], name="visits", value_serde="json",
          windows=SessionWindows(15_000, grace=20_000))
# Sliding windows without grace: a record in order opens the window ending at it, at stream time.
app.sum(os.environ["IN3"], os.environ["OUT3"], name="trailing", value=lambda v: v["amount"],
        windows=SlidingWindows(30_000), emit="final")
if os.environ.get("MARKS"):
    app.fault_hooks.on("before_commit", MarkWhile(os.environ["MARKS"], seconds=0.3))
"""


def test_windowed_jobs_killed_repeatedly_still_match_the_reference(kafka, topic_factory, unique_name, tmp_path,
                                                                   request):
    """One kill inside a transaction (six kills, half of them inside, and 40,000 events with --soak)."""
    soak = request.config.getoption("--soak")
    events_n, kills = (40_000, 6) if soak else (10_000, 1)
    data = events(events_n, seed=3)
    topics = {name: topic_factory(name, partitions=2) for name in ("in1", "out1", "in2", "out2", "in3", "out3")}
    for topic in ("in1", "in2", "in3"):
        produce(kafka.bootstrap_servers, topics[topic], data)
    (tmp_path / "job.py").write_text(JOB)
    marks = tmp_path / "marks"
    marks.mkdir()
    app_id = unique_name("app")
    env = {**os.environ, "EOS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers, "APP": app_id,
           "STATE": str(tmp_path / "state"), "MARKS": str(marks),
           "BATCH": "1500" if soak else "400", **{k.upper(): v for k, v in topics.items()}}
    in_txn = kill_job_repeatedly(tmp_path, env, kills, marks, seed=5)
    assert in_txn >= (kills + 1) // 2  # the even kills wait for a task inside its transaction
    env.pop("MARKS")
    final = subprocess.run([sys.executable, "-m", "eos.cli", "run", "job.py", "--until-caught-up"], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=600)
    assert final.returncode == 0, final.stderr[-3000:]
    sys.path.insert(0, str(tmp_path))
    try:
        from eos.cli.loader import load_application

        for key, value in env.items():
            os.environ.setdefault(key, value)
        app = load_application(str(tmp_path / "job.py"))
    finally:
        sys.path.remove(str(tmp_path))
    for name, sub in app.subtopologies.items():
        result = audit_windows(kafka.bootstrap_servers, sub, group=app_id)
        assert result.violations == 0, (name, result)
        assert result.input_records == events_n and result.windows_expected > 100, (name, result)
    # windows and buffered records made and dropped within a batch (a batch spans minutes of event time; the
    # windows' retention is a minute) leave no tombstone: each one deletes a record its changelog holds
    tombstones = 0
    for sub in app.subtopologies.values():
        for spec in sub.stores:
            held: set[bytes] = set()
            for key, value, _ in committed_records(kafka.bootstrap_servers, spec.changelog_topic(app_id)):
                assert value is not None or key in held, f"a tombstone of a key {spec.name}'s changelog never held"
                tombstones += value is None
                held.add(key)
    assert tombstones > 0
