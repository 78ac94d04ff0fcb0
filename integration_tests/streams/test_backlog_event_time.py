"""Event time across the topics between a job's steps over a backlog (eos.streamtime), on the broker and
Spark: a filter step chained through a topic into a re-keyed per-minute count with a 5 s grace, over three
hours of history on 4 partitions, SIGKILLed mid-batch (once inside a transaction) and restarted, equals the
reference that applies grace per source partition: nothing is dropped but the one record that was late at its
own source, two hops upstream. Without the sources' clocks, each upstream batch's block of 48 minutes made
nearly every other block late. The filter step runs record at a time, and vectorized (`process_batch`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter

import pytest

from eos.audit import audit_application
from eos.audit.windows import audit_windows
from eos.cli.loader import load_application
from integration_tests.engine.test_kill_restart import kill_job_repeatedly
from integration_tests.helpers import produce
from integration_tests.streams.test_time_and_rekey import committed_records

JOB = """
import os
from eos import Application
from eos.testing import MarkWhile
from eos.windows import TumblingWindows

app = Application(os.environ["APP"], timestamp="field:at", max_records_per_batch=int(os.environ["BATCH"]),
                  trigger_interval=0.0, log_format="json", log_level="WARNING", state_dir=os.environ["STATE"],
                  repartition_purge_interval=0)

if os.environ.get("VECTORIZED"):  # the same filter on each batch as one table: its outputs carry its clock too
    @app.process_batch(input=os.environ["IN"], output=os.environ["MID"], key_serde="string", value_serde="json",
                       format="pandas", name="humans")
    def humans(table):
        return table[[not value.get("bot") for value in table["value"]]]
else:
    @app.process(input=os.environ["IN"], output=os.environ["MID"], key_serde="string", value_serde="json",
                 name="humans")
    def humans(record):
        return None if record.value.get("bot") else (record.key, record.value)

app.count(os.environ["MID"], os.environ["OUT"], name="pages", value_serde="json", group_by=lambda r: r.value["page"],
          windows=TumblingWindows(60_000, grace=5_000), emit="final")
if os.environ.get("MARKS"):
    app.fault_hooks.on("before_commit", MarkWhile(os.environ["MARKS"], seconds=0.3))
"""

PARTITIONS, PER_PARTITION, STEP_MS = 4, 1500, 7_200  # 3 hours of clicks on each partition, in order
BASE = (int(time.time()) // 3600 - 6) * 3_600_000  # outputs carry event time: within the topics' limits


def clicks() -> dict[int, list[dict]]:
    out = {}
    for p in range(PARTITIONS):
        out[p] = [{"id": f"{p}-{i}", "page": f"page-{(i * 7 + p) % 5}", "at": BASE + i * STEP_MS + p,
                   "bot": i % 10 == 9} for i in range(PER_PARTITION)]
        out[p].append({"id": f"{p}-end", "page": "end", "at": BASE + (PER_PARTITION + 100) * STEP_MS})
    late = out[1][800]["at"] - 600_000  # ten minutes behind its own partition's stream time: truly late
    out[1].insert(801, {"id": "late", "page": "page-0", "at": late})
    return out


@pytest.mark.parametrize("step", ["record-at-a-time", "vectorized"])
def test_a_rekeyed_windowed_count_over_a_backlog_drops_only_what_was_late_at_its_source(
        kafka, topic_factory, unique_name, tmp_path, monkeypatch, step):
    src, mid, out = (topic_factory(n, partitions=PARTITIONS) for n in ("clicks", "humans", "per-page"))
    data = clicks()
    for p, records in data.items():
        produce(kafka.bootstrap_servers, src, [(r["id"].encode(), json.dumps(r).encode()) for r in records],
                partition_of=lambda n, key, p=p: p)
    (tmp_path / "job.py").write_text(JOB)
    marks = tmp_path / "marks"
    marks.mkdir()
    app_id = unique_name("app")
    env = {**os.environ, "EOS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers, "APP": app_id, "IN": src, "MID": mid,
           "OUT": out,
           "STATE": str(tmp_path / "state"), "MARKS": str(marks), "BATCH": "400",
           **({"VECTORIZED": "1"} if step == "vectorized" else {})}
    in_txn = kill_job_repeatedly(tmp_path, env, 2, marks, seed=11, pause=(6.0, 12.0))
    assert in_txn >= 1
    env.pop("MARKS")
    final = subprocess.run([sys.executable, "-m", "eos.cli", "run", "job.py", "--until-caught-up",
                            "--summary-json", str(tmp_path / "summary.json")], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=600)
    assert final.returncode == 0, final.stderr[-3000:]

    # The reference: grace per source partition. Each partition is in order but for the one late click, and
    # every window of the backlog has closed (each partition's last click is 100 steps later).
    expected = Counter((r["page"], r["at"] // 60_000 * 60_000) for rs in data.values() for r in rs
                       if r["id"] != "late" and r["page"] != "end" and not r.get("bot"))
    got = Counter()
    for key, value, _ in committed_records(kafka.bootstrap_servers, out):
        windowed = json.loads(key)
        window = (windowed["key"], windowed["start"])
        assert window not in got, f"a second final result for {window}"
        got[window] = int.from_bytes(value, "big")
    assert got == expected
    assert sum(got.values()) == PARTITIONS * PER_PARTITION * 9 // 10
    summary = json.loads((tmp_path / "summary.json").read_text())  # the last run's share: the one late click
    assert summary["dropped_by_step"].get("pages", {}).get("late", 0) <= 1, summary["dropped_by_step"]

    # The window audit replays the repartition topic with its clocks: PASS, one late record, late at its source.
    for key in ("APP", "IN", "MID", "OUT", "STATE", "BATCH", "EOS_BOOTSTRAP_SERVERS"):
        monkeypatch.setenv(key, env[key])  # (another test of this process may have set them before)
    if step == "vectorized":
        monkeypatch.setenv("VECTORIZED", "1")
    else:
        monkeypatch.delenv("VECTORIZED", raising=False)
    sys.path.insert(0, str(tmp_path))
    try:
        app = load_application(str(tmp_path / "job.py"))
    finally:
        sys.path.remove(str(tmp_path))
    sub = app.subtopologies["pages"]
    result = audit_windows(kafka.bootstrap_servers, sub, group=app_id, dead_letters=app.config.dlq_topic,
                           clocked=frozenset(sub.inputs))
    assert result.violations == 0, result
    assert (result.late_records, result.late_at_source) == (1, 1), result
    assert result.input_records == PARTITIONS * (PER_PARTITION * 9 // 10 + 1) + 1
    reports = audit_application(app)  # lineage of both steps, and the window audit: the proof is one command
    assert [r.verdict for r in reports] == ["PASS"] * len(reports) and [r.mode for r in reports][-1] == "window"
