"""A job that starts at its inputs' end (auto_offset_reset="latest") on the broker and Spark: its first run finds
3,000 records already there (in two partitions of three) and reads none of them; the next 2,000 are read, the
run SIGKILLed inside a transaction and restarted. Every later record once in its output, the windowed counts
those of the later records alone, and the job's own audit (lineage, window) PASS with the earlier 3,000 "before
where the job started", where the lineage audit called them lost and the window audit recomputed from them.

A job whose sources start each per its own policy (`app.stream(..., auto_offset_reset=timedelta(hours=1))`
under an application's "none") on the same: refused at start-up until offsets are set, then started an hour
back, SIGKILLed inside a transaction, and audited."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter

from eos.audit import audit_application
from integration_tests.engine.test_kill_restart import kill_job_repeatedly
from integration_tests.helpers import produce
from integration_tests.streams.test_fused_topology import load_job
from integration_tests.streams.test_time_and_rekey import committed_records

JOB = """
import os
from eos import Application
from eos.testing import MarkWhile
from eos.windows import TumblingWindows

app = Application(os.environ["APP"], auto_offset_reset="latest", timestamp="field:at", max_records_per_batch=200,
                  trigger_interval=0.0, log_format="json", log_level="WARNING", state_dir=os.environ["STATE"])
views = app.stream(os.environ["VIEWS"])
views.map_values(lambda view: {**view, "seen": True}, name="mark").to(os.environ["SEEN"])
(views.group_by_key().window(TumblingWindows(60_000)).count(name="per_minute")
    .to_stream(lambda window, n: f"{window.key}@{window.start}").to(os.environ["MINUTES"], value_serde="long"))
if os.environ.get("MARKS"):
    app.fault_hooks.on("before_commit", MarkWhile(os.environ["MARKS"], seconds=0.3))
"""

BEFORE, AFTER = 3000, 2000
BASE = (int(time.time()) // 3600 - 2) * 3_600_000


def views(first: int, n: int) -> list[tuple[bytes, bytes]]:
    return [(f"u{i % 7}".encode(), json.dumps({"i": i, "at": BASE + i * 1_000}).encode())
            for i in range(first, first + n)]


def test_a_job_started_at_the_end_reads_and_audits_only_what_came_after(kafka, topic_factory, unique_name, tmp_path,
                                                                        monkeypatch):
    topics = {n: topic_factory(n, partitions=3) for n in ("views", "seen", "minutes")}
    bootstrap = kafka.bootstrap_servers
    # (the earlier records in two partitions of three: the third starts at its end with nothing before it)
    produce(bootstrap, topics["views"], views(0, BEFORE), partition_of=lambda n, key: n % 2)
    marks = tmp_path / "marks"
    marks.mkdir()
    (tmp_path / "job.py").write_text(JOB)
    env = {**os.environ, "EOS_BOOTSTRAP_SERVERS": bootstrap, "APP": unique_name("app"),
           "STATE": str(tmp_path / "state"), **{n.upper(): t for n, t in topics.items()}}
    first = subprocess.run([sys.executable, "-m", "eos.cli", "run", "job.py", "--until-caught-up"], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0 and not committed_records(bootstrap, topics["seen"]), first.stderr[-3000:]

    produce(bootstrap, topics["views"], views(BEFORE, AFTER))
    assert kill_job_repeatedly(tmp_path, {**env, "MARKS": str(marks)}, 1, marks, seed=61) == 1
    done = subprocess.run([sys.executable, "-m", "eos.cli", "run", "job.py", "--until-caught-up"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]

    seen = Counter(json.loads(v)["i"] for _, v, _ in committed_records(bootstrap, topics["seen"]))
    assert seen == Counter(range(BEFORE, BEFORE + AFTER))  # every later record once, none of the earlier
    counts: dict[str, int] = {}
    for k, v, _ in committed_records(bootstrap, topics["minutes"]):
        counts[k.decode()] = int.from_bytes(v, "big")  # (each window's last count)
    expected = Counter(f"u{i % 7}@{(BASE + i * 1_000) // 60_000 * 60_000}" for i in range(BEFORE, BEFORE + AFTER))
    assert counts == dict(expected)

    app = load_job(tmp_path, env, monkeypatch)
    reports = audit_application(app)
    assert [(r.mode, r.verdict, r.skipped) for r in reports] == [("lineage", "PASS", None), ("window", "PASS", None)], [
        (r.mode, r.lineage or r.window) for r in reports]
    (lineage, window) = reports
    assert lineage.lineage.not_read == BEFORE and lineage.lineage.expected == AFTER, lineage.lineage
    assert window.window.input_records == AFTER and window.window.output_records == len(committed_records(
        bootstrap, topics["minutes"])), window.window


JOB_BY_SOURCE = """
import os
from datetime import timedelta
from eos import Application
from eos.testing import MarkWhile
from eos.windows import TumblingWindows

app = Application(os.environ["APP"], auto_offset_reset="none", max_records_per_batch=300, trigger_interval=0.0,
                  log_format="json", log_level="WARNING", state_dir=os.environ["STATE"])
clicks = app.stream(os.environ["CLICKS"], auto_offset_reset=timedelta(hours=1))
clicks.map_values(lambda click: {**click, "recent": True}, name="recent").to(os.environ["RECENT"])
(clicks.group_by_key().window(TumblingWindows(600_000)).count(name="per_ten_minutes")
    .to_stream(lambda window, n: f"{window.key}@{window.start}").to(os.environ["COUNTS"], value_serde="long"))
app.stream(os.environ["PAYMENTS"]).map_values(lambda p: p["eur"] * 100, name="cents").to(os.environ["CENTS"])
if os.environ.get("MARKS"):
    app.fault_hooks.on("before_commit", MarkWhile(os.environ["MARKS"], seconds=0.3))
"""


def test_each_source_starts_per_its_own_policy_and_none_refuses_until_offsets_are_set(
        kafka, topic_factory, unique_name, tmp_path, monkeypatch):
    """The application's policy is "none", its clicks' own an hour back from the start. Its first run finds
    clicks from three hours ago and from the last half hour, and payments: it refuses to start, naming the
    payments' partitions, with nothing pinned. Offsets committed for the payments (as an operator would),
    the next run starts the clicks at the first record of the last hour, and is SIGKILLed inside a
    transaction, restarted and finished with more of both: every click of the last hour and every payment
    once in its output, the windowed counts those of the recent clicks alone, and the audits (the lineage of
    both steps, the window) PASS with the old clicks "before where the job started"."""
    from transactions import KafkaAdmin

    topics = {n: topic_factory(n, partitions=p) for n, p in (("clicks", 3), ("payments", 2), ("recent", 3),
                                                               ("counts", 3), ("cents", 2))}
    bootstrap = kafka.bootstrap_servers
    now = int(time.time() * 1000)
    old, recent, later = 1500, 1000, 1000
    clicks = [(f"u{i % 5}".encode(), json.dumps({"i": i}).encode()) for i in range(old + recent + later)]
    at = [now - 3 * 3_600_000 + i * 2_000 for i in range(old)] + [now - 1_800_000 + i * 1_000 for i in range(recent)]
    produce(bootstrap, topics["clicks"], clicks[:old + recent], timestamp_of=lambda n, key: at[n])
    payments = [(f"c{i % 9}".encode(), json.dumps({"i": i, "eur": i % 50}).encode()) for i in range(1000)]
    produce(bootstrap, topics["payments"], payments[:500])
    marks = tmp_path / "marks"
    marks.mkdir()
    (tmp_path / "job.py").write_text(JOB_BY_SOURCE)
    app_id = unique_name("app")
    env = {**os.environ, "EOS_BOOTSTRAP_SERVERS": bootstrap, "APP": app_id, "STATE": str(tmp_path / "state"),
           **{n.upper(): t for n, t in topics.items()}}
    refused = subprocess.run([sys.executable, "-m", "eos.cli", "run", "job.py", "--until-caught-up"], cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "2 input partition(s) have no committed offset, and their auto_offset_reset is 'none'" in refused.stderr
    assert f"{topics['payments']}[0], {topics['payments']}[1]" in refused.stderr and "eos reset" in refused.stderr
    admin = KafkaAdmin(bootstrap)
    clicks_tps = admin.topic_partitions(topics["clicks"])
    assert set(admin.group_offsets(app_id, clicks_tps).values()) == {None}  # (nothing pinned by the refusal)
    admin.set_group_offsets(app_id, dict.fromkeys(admin.topic_partitions(topics["payments"]), 0))

    produce(bootstrap, topics["clicks"], clicks[old + recent:], timestamp_of=lambda n, key: int(time.time() * 1000))
    produce(bootstrap, topics["payments"], payments[500:])
    assert kill_job_repeatedly(tmp_path, {**env, "MARKS": str(marks)}, 1, marks, seed=62) == 1
    done = subprocess.run([sys.executable, "-m", "eos.cli", "run", "job.py", "--until-caught-up"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]

    seen = Counter(json.loads(v)["i"] for _, v, _ in committed_records(bootstrap, topics["recent"]))
    assert seen == Counter(range(old, old + recent + later))  # every click of the last hour once, no older one
    cents = Counter(json.loads(v) for _, v, _ in committed_records(bootstrap, topics["cents"]))
    assert cents == Counter(json.loads(v)["eur"] * 100 for _, v in payments)
    counts: dict[str, int] = {}
    for k, v, _ in committed_records(bootstrap, topics["counts"]):
        counts[k.decode()] = int.from_bytes(v, "big")  # (each window's last count)
    stamps = {json.loads(v)["i"]: ts for _, v, ts in committed_records(bootstrap, topics["recent"])}
    expected = Counter(f"u{i % 5}@{stamps[i] // 600_000 * 600_000}" for i in range(old, old + recent + later))
    assert counts == dict(expected)

    app = load_job(tmp_path, env, monkeypatch)
    reports = audit_application(app)
    assert sorted((r.mode, r.verdict, r.skipped) for r in reports) == [
        ("lineage", "PASS", None), ("lineage", "PASS", None), ("window", "PASS", None)], [
        (r.mode, r.lineage or r.window) for r in reports]
    by_input = {tuple(r.inputs): r for r in reports if r.mode == "lineage"}
    assert by_input[(topics["clicks"],)].lineage.not_read == old
    assert by_input[(topics["clicks"],)].lineage.expected == recent + later
    assert by_input[(topics["payments"],)].lineage.expected == 1000
    (window,) = [r for r in reports if r.mode == "window"]
    assert window.window.input_records == recent + later, window.window
