"""The job runs in a subprocess (driver, Spark JVM and Python workers in one process group) that is
SIGKILLed at least 10 times, half of them while a task is between producing and committing, and is
restarted each time. The job chains a stateless sub-topology (input -> output) and a stateful one that reads
its output (running count and sum per key, RocksDB store, 1,000 keys). Afterwards each committed output
must hold every one of its inputs exactly once, and every key's committed totals must equal the totals
recomputed from the committed input, with no step repeated or skipped."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

from integration_tests.helpers import assert_exactly_once, assert_totals_exact, produce

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "integration_tests" / "jobs" / "pipeline.py"
N, KILLS = 60_000, 2  # --soak: SOAK_N, SOAK_KILLS
SOAK_N, SOAK_KILLS = 200_000, 10


class PipelineTopics(NamedTuple):
    input: str
    output: str
    totals: str
    app_id: str


def start_job(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "eos.cli", "run", str(JOB), "--until-caught-up"],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _group_alive(proc.pid):
        time.sleep(0.2)
    assert not _group_alive(proc.pid), "processes of the killed job survived"


def _group_alive(pgid: int) -> bool:
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                stat = (p / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[2]) == pgid and stat[0] not in ("Z", "X"):
                return True
    return False


def wait_for(predicate, timeout: float, proc: subprocess.Popen[bytes]) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.05)
    return False


def kill_job_repeatedly(cwd, env: dict[str, str], kills: int, marks, seed: int,
                        pause: tuple[float, float] = (4.0, 10.0)) -> int:
    """Start `eos run job.py --until-caught-up` in `cwd` and SIGKILL it `kills` times: even kills as soon as a
    task is inside its transaction (a `MarkWhile` hook of the job writes into `marks`), odd ones after a
    random pause. Returns how many kills landed inside a transaction; the job's output goes to job.log."""
    import random
    import sys

    rng, in_txn = random.Random(seed), 0
    for kill in range(kills):
        with open(cwd / "job.log", "ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "eos.cli", "run", "job.py", "--until-caught-up"],
                                    cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        if kill % 2 == 0:
            in_txn += wait_for(lambda: any(marks.iterdir()), 120, proc)
        else:
            wait_for(lambda: False, rng.uniform(*pause), proc)
        assert proc.poll() is None, f"the job finished before kill {kill + 1}; see {cwd / 'job.log'}"
        kill_group(proc)
        for marker in marks.iterdir():
            marker.unlink()
    return in_txn


def pipeline_run(kafka, topic_factory, unique_name, tmp_path, n: int) -> tuple[dict[str, str], PipelineTopics]:
    """`n` inputs on 1,000 keys for the pipeline job, and the environment of its runs: batches of 1,500, a mark in
    `tmp_path / "marks"` while a task is inside its transaction."""
    topics = PipelineTopics(topic_factory("in", partitions=4), topic_factory("out", partitions=4),
                            topic_factory("totals", partitions=4), unique_name("app"))
    produce(kafka.bootstrap_servers, topics.input,
            ((f"k{i % 1000}".encode(), json.dumps({"id": i, "n": i}).encode()) for i in range(n)))
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {**os.environ, "EOS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers, "EOS_TEST_APP_ID": topics.app_id,
           "EOS_TEST_INPUT": topics.input, "EOS_TEST_OUTPUT": topics.output, "EOS_TEST_TOTALS": topics.totals,
           "EOS_TEST_STATE_DIR": str(tmp_path / "state"), "EOS_TEST_MARK_DIR": str(marks), "EOS_TEST_BATCH": "1500"}
    return env, topics


def assert_pipeline_exact(bootstrap: str, topics: PipelineTopics, n: int) -> None:
    """Each committed output holds every one of its inputs once, and every key's committed totals equal those
    recomputed from the committed input."""
    app_id = topics.app_id
    assert_exactly_once(bootstrap, inputs=[topics.input], outputs=[topics.output], group=app_id, expected_inputs=n)
    assert_exactly_once(bootstrap, inputs=[topics.output], outputs=[topics.totals], group=app_id, expected_inputs=n)
    result = assert_totals_exact(bootstrap, inputs=[topics.output], totals=[topics.totals], group=app_id)
    assert result["count"].keys_expected == 1000 and result["count"].output_records == n


def test_job_survives_repeated_sigkill_and_restart(kafka, topic_factory, unique_name, tmp_path, request):
    n, kill_count = (SOAK_N, SOAK_KILLS) if request.config.getoption("--soak") else (N, KILLS)
    env, topics = pipeline_run(kafka, topic_factory, unique_name, tmp_path, n)
    marks = tmp_path / "marks"
    rng = random.Random(20261121)
    log = tmp_path / "job.log"
    kills = in_txn_kills = 0
    while kills < kill_count:
        proc = start_job(env, log)
        if kills % 2 == 0:  # kill while a task holds an open transaction with produced records and offsets
            hit = wait_for(lambda: any(marks.iterdir()), 120, proc)
            in_txn_kills += hit
        else:  # kill at a random moment of the run
            wait_for(lambda: False, rng.uniform(6.0, 22.0), proc)
        assert proc.poll() is None, f"the job finished before kill {kills + 1}; see {log}"
        kill_group(proc)
        kills += 1
        for marker in marks.iterdir():
            marker.unlink()
    assert in_txn_kills >= (kill_count + 1) // 2
    env.pop("EOS_TEST_MARK_DIR")
    env["EOS_TEST_BATCH"] = "25000"  # the catch-up run: small batches only matter while killing
    final = start_job(env, log)
    assert final.wait(600) == 0, f"the final run failed; see {log}"
    assert_pipeline_exact(kafka.bootstrap_servers, topics, n)
