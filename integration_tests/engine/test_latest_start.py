"""A job that starts at its inputs' end (auto_offset_reset="latest") on the broker and Spark: its first run finds
3,000 records already there (in two partitions of three) and reads none of them; the next 2,000 are read, the
run SIGKILLed inside a transaction and restarted. Every later record once in its output, the windowed counts
those of the later records alone, and the job's own audit (lineage, window) PASS with the earlier 3,000 "before
where the job started", where the lineage audit called them lost and the window audit recomputed from them."""

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
