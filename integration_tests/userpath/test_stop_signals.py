"""Stopping `eos run` with a SIGTERM to its whole process group, as systemd's default `KillMode=control-group`
does: Spark's JVM and Python workers get the signal with the driver, so a batch in flight cannot finish. The
driver says so in one warning line, prints no traceback and exits 0, as for a stop it could finish; the next
run processes what that batch held, and every input reaches the committed output exactly once (each id once,
each key's counts 1..n in order, its last count exact)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

from eos.audit.scan import scan_topic
from integration_tests.userpath.test_readme import example_env
from transactions import KafkaAdmin, TopicSpec
from transactions.clients import plain_producer

APP = "stop-signals"
N, KEYS = 40_000, 50

JOB = """
import os

from eos import Application

app = Application("stop-signals", trigger_interval=0.5, max_records_per_batch=1_000, state_dir=os.environ["STATE"])

@app.process(input="stop-in", output="stop-out", key_serde="string", value_serde="json")
def tag(record):
    return record.key, {**record.value, "tagged": True}

app.stream("stop-in").group_by_key().count(name="per-key").to_stream().to("stop-counts")
"""


def _committed(admin: KafkaAdmin, partitions: list[tuple[str, int]]) -> int:
    return sum(o or 0 for o in admin.group_offsets(APP, partitions, stable=False).values())


def test_a_sigterm_to_the_process_group_stops_cleanly_and_loses_nothing(kafka, tmp_path):
    bootstrap = kafka.bootstrap_servers
    admin = KafkaAdmin(bootstrap)
    admin.create_topics([TopicSpec("stop-in", 4), TopicSpec("stop-out", 4), TopicSpec("stop-counts", 4)])
    producer = plain_producer(bootstrap)
    for i in range(N):
        producer.produce("stop-in", key=f"k{i % KEYS}".encode(), value=json.dumps({"id": i}).encode())
        if i % 5_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    (tmp_path / "job.py").write_text(JOB)
    env = {**example_env(kafka, tmp_path), "STATE": str(tmp_path / "state")}
    partitions = admin.topic_partitions("stop-in")

    # Batches of 1,000 records per partition at most one per 0.5 s: each run stops with thousands of records
    # per partition left, however fast the machine (with 4,000 a quick second run finished the input).
    for _ in range(2):  # stopped twice, each time soon after a commit: mid-batch, or between two
        before = _committed(admin, partitions)
        job = subprocess.Popen([sys.executable, "-m", "eos.cli", "run", "job.py", "--no-live"], cwd=tmp_path,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 180
            while _committed(admin, partitions) <= before:
                assert job.poll() is None and time.monotonic() < deadline, "the job committed nothing"
                time.sleep(0.1)
            time.sleep(0.3)
            os.killpg(job.pid, signal.SIGTERM)  # the driver, Spark's JVM and its Python workers
            output = job.communicate(timeout=120)[0].decode(errors="replace")
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait()
        assert job.returncode == 0, output[-3000:]
        assert "Traceback" not in output, output[-3000:]
        assert not [line for line in output.splitlines() if line.startswith("Error")], output[-3000:]  # the CLI's
        assert "stop requested" in output and "run finished" in output, output[-3000:]
        assert _committed(admin, partitions) < N, "the run finished the input before it was stopped"

    done = subprocess.run([sys.executable, "-m", "eos.cli", "run", "job.py", "--no-live", "--until-caught-up"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert _committed(admin, partitions) == N

    ids = Counter(json.loads(m.value())["id"] for batch in scan_topic(bootstrap, "stop-out", admin=admin)
                  for m in batch)
    assert len(ids) == N and set(ids.values()) == {1}, "an input missing or repeated in stop-out"
    counts: dict[str, list[int]] = {}
    for batch in scan_topic(bootstrap, "stop-counts", admin=admin):
        for m in batch:
            counts.setdefault(m.key().decode(), []).append(int.from_bytes(m.value(), "big", signed=True))
    assert counts == {f"k{k}": list(range(1, N // KEYS + 1)) for k in range(KEYS)}
    admin.close()
