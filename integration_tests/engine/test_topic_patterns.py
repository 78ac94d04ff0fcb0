"""A job reading a topic pattern (`app.stream(re.compile(...))`) on the broker and Spark. Before any topic matches, it
refuses to start (exit 2), saying so. It starts with two topics (3 and 2 partitions); a third, of 5, is created
while it runs and read from its first record without a restart, its partitions 3 and 4 by tasks of their own (the
step reading the pattern is stateless; the count behind it reads a repartition topic); the first topic then gets a
fourth partition, read from the next batch by task 3; the job is SIGKILLed inside a transaction, and restarted to
run until caught up, looking for new topics on its own only hourly: its first batch deletes the second topic (read
whole by then) and creates a fourth, which the run reads all the same, by the look it takes before it ends. Every
record once in its output, the per-key counts, and the lineage audit PASS, the deleted topic's outputs accounted for
from the ledger."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

from eos.audit import audit_application
from eos.ledger import LedgerEntry, ledger_topic
from integration_tests.engine.test_kill_restart import kill_group, wait_for
from integration_tests.helpers import produce
from integration_tests.streams.test_fused_topology import load_job
from integration_tests.streams.test_time_and_rekey import committed_records
from transactions import KafkaAdmin, TopicSpec

JOB = """
import os
import re
from eos import Application
from eos.testing import MarkWhile

app = Application(os.environ["APP"], max_records_per_batch=150, trigger_interval=0.2,
                  metadata_refresh_interval=float(os.environ.get("REFRESH", "0.5")), log_format="json",
                  log_level="INFO", state_dir=os.environ["STATE"], batch_timeout=float(os.environ.get("WAIT", "30")))
events = app.stream(re.compile(re.escape(os.environ["BASE"]) + r"\\.[a-z]+"), name="events")
events.map_values(lambda e: {**e, "seen": True}, name="mark").to(os.environ["SEEN"])
counts = events.group_by(lambda k, v: k, name="by_key").count(name="per_key")
counts.to_stream().to(os.environ["COUNTS"], value_serde="long")
if os.environ.get("MARKS"):
    app.fault_hooks.on("before_commit", MarkWhile(os.environ["MARKS"], seconds=0.3))
if late := os.environ.get("LATE"):  # a third topic, created by the first batch that commits, once
    import json
    from confluent_kafka import Producer  # (named by a function shipped to the workers: by reference)
    from transactions import KafkaAdmin, TopicSpec

    def late_topic(point, late=late, bootstrap=os.environ["EOS_BOOTSTRAP_SERVERS"], base=os.environ["BASE"]):
        try:
            os.close(os.open(late, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return
        admin = KafkaAdmin(bootstrap)
        admin.delete_topics([base + ".old"])  # (read whole by the runs before: gone while this one runs)
        admin.create_topics([TopicSpec(base + ".asia", 3, 1)])
        producer = Producer({"bootstrap.servers": bootstrap})
        for i in range(2000, 2100):
            producer.produce(base + ".asia", key=f"u{i % 11}".encode(), value=json.dumps({"i": i}).encode())
        producer.flush(30)

    app.fault_hooks.on("before_commit", late_topic)
"""

N = 1000  # records of each topic; the second's in three parts: before one of them is seen in the output, after
SEEN, KILLED = 400, 800  # (the batches that read those: one of them is killed), and after the kill
OLD = 50  # records of a topic read whole, then deleted while the last run runs


def events(region: str, first: int) -> list[tuple[bytes, bytes]]:
    return [(f"u{i % 11}".encode(), json.dumps({"i": i, "region": region}).encode()) for i in range(first, first + N)]


def test_a_topic_created_while_the_job_runs_is_read_exactly_once_across_a_kill(kafka, unique_name, tmp_path,
                                                                               monkeypatch):
    bootstrap = kafka.bootstrap_servers
    admin = KafkaAdmin(bootstrap)
    base = unique_name("ev")
    first, second = f"{base}.eu", f"{base}.us"
    seen, counts = unique_name("seen"), unique_name("counts")
    marks = tmp_path / "marks"
    marks.mkdir()
    (tmp_path / "job.py").write_text(JOB)
    env = {**os.environ, "EOS_BOOTSTRAP_SERVERS": bootstrap, "APP": unique_name("app"), "BASE": base,
           "STATE": str(tmp_path / "state"), "SEEN": seen, "COUNTS": counts}
    created = subprocess.run([sys.executable, "-m", "eos.cli", "topics", "create", "--from-app", "job.py",
                              "--partitions", "3"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert created.returncode == 0 and f"created {seen}" in created.stdout, created.stdout + created.stderr
    assert "its topics are named by their writers; create them by name" in created.stdout, created.stdout
    refused = subprocess.run([sys.executable, "-m", "eos.cli", "run", "job.py", "--until-caught-up"], cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "matches no topic on" in refused.stderr, refused.stderr[-3000:]
    admin.create_topics([TopicSpec(first, 3, 1), TopicSpec(f"{base}.old", 2, 1)], timeout=30)
    produce(bootstrap, first, events("eu", 0)[:N // 2])
    produce(bootstrap, f"{base}.old", events("old", 3000)[:OLD])

    def regions() -> Counter[str]:
        return Counter(json.loads(v)["region"] for _, v, _ in committed_records(bootstrap, seen))

    with open(tmp_path / "job.log", "ab") as out:  # a run that goes on until killed
        proc = subprocess.Popen([sys.executable, "-m", "eos.cli", "run", "job.py"], cwd=tmp_path,
                                env={**env, "MARKS": str(marks)}, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        assert wait_for(lambda: regions()["eu"] > 0 and regions()["old"] == OLD, 180, proc), (
            tmp_path / "job.log").read_text()[-3000:]
        admin.create_topics([TopicSpec(second, 5, 1)], timeout=30)  # (created while the job runs, wider)
        produce(bootstrap, second, events("us", N)[:SEEN])
        assert wait_for(lambda: regions()["us"] > 0, 120, proc), (tmp_path / "job.log").read_text()[-3000:]
        admin.add_partitions(first, 4)  # (while the job runs: the rest of the first topic over four partitions)
        produce(bootstrap, first, events("eu", 0)[N // 2:], partition_of=lambda n, key: n % 4)
        for marker in marks.iterdir():
            marker.unlink()
        produce(bootstrap, second, events("us", N)[SEEN:KILLED])  # (batches to come, whatever the job has read)
        assert wait_for(lambda: any(marks.iterdir()), 60, proc), "no batch inside its transaction"
        assert proc.poll() is None
    finally:
        kill_group(proc)
    log = (tmp_path / "job.log").read_text()
    assert "a topic pattern matches other topics" in log and second in log, log[-3000:]
    assert "planned again for the topics the patterns match" in log, log[-3000:]
    assert "an input topic has more partitions" in log, log[-3000:]
    produce(bootstrap, second, events("us", N)[KILLED:])

    # run until caught up, not looking for new topics on its own (REFRESH): a third topic, created while its
    # first batch commits, is read all the same, by the look it takes before it ends
    done = subprocess.run([sys.executable, "-m", "eos.cli", "run", "job.py", "--until-caught-up"], cwd=tmp_path,
                          env={**env, "REFRESH": "3600", "LATE": str(tmp_path / "late"), "WAIT": "5"},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    # a batch reading the deleted topic could not commit its offsets (librdkafka retries until the batch timeout,
    # WAIT): it went back to the planner, which planned the next one without the topic
    assert ("an input of the batch is gone" in done.stderr
            or "the batch is planned again for the topics the patterns match" in done.stderr), done.stderr[-3000:]
    assert (tmp_path / "late").exists() and "planned again for the topics the patterns match" in done.stderr
    everything = [*range(2 * N), *range(2000, 2100), *range(3000, 3000 + OLD)]
    outputs = Counter(json.loads(v)["i"] for _, v, _ in committed_records(bootstrap, seen))
    assert outputs == Counter(everything)  # every record of the three topics once
    last: dict[str, int] = {}
    for k, v, _ in committed_records(bootstrap, counts):
        last[k.decode()] = int.from_bytes(v, "big")
    assert last == dict(Counter(f"u{i % 11}" for i in everything))

    app = load_job(tmp_path, env, monkeypatch)
    reports = audit_application(app)
    assert [(r.mode, r.verdict, r.skipped) for r in reports] == [("lineage", "PASS", None)], [
        (r.mode, r.lineage) for r in reports]
    assert sorted(reports[0].inputs) == [f"{base}.asia", first, second], reports[0].inputs
    # (the deleted topic's outputs: each of a record a committed batch read, says the ledger)
    assert (reports[0].lineage.expected, reports[0].lineage.no_longer_read) == (len(everything) - OLD, OLD), (
        reports[0].lineage)
    entries = (LedgerEntry.decode(v) for _, v, _ in committed_records(bootstrap, ledger_topic(env["APP"])))
    read = {(e.task, i.topic, i.partition) for e in entries if e is not None for i in e.inputs}
    # the wider topic's own tasks committed, and the first topic's new partition was read by task 3
    assert {("mark-3", second, 3), ("mark-4", second, 4), ("mark-3", first, 3)} <= read, sorted(read)
