"""`eos run` refuses bad configuration before any batch runs, and runs a job until caught up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from integration_tests.helpers import assert_exactly_once, produce

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "integration_tests" / "jobs" / "pipeline.py"


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "eos.cli", "run", str(JOB), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_speculation_on_refuses_to_start_then_the_job_runs_with_it_off(kafka, topic_factory, unique_name, tmp_path):
    src, dst = topic_factory("in", partitions=2), topic_factory("out", partitions=2)
    produce(kafka.bootstrap_servers, src, ((b"k", json.dumps({"id": i, "n": i}).encode()) for i in range(5000)))
    env = {**os.environ, "EOS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers, "EOS_TEST_APP_ID": unique_name("app"),
           "EOS_TEST_INPUT": src, "EOS_TEST_OUTPUT": dst}

    refused = run_cli(env, "--until-caught-up", "--spark-conf", "spark.speculation=true")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "spark.speculation" in refused.stderr and "Set spark.speculation=false" in refused.stderr

    summary_path = tmp_path / "summary.json"
    ran = run_cli(env, "--until-caught-up", "--summary-json", str(summary_path))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    summary = json.loads(summary_path.read_text())
    assert summary["records_in"] == 5000 and summary["transactions"] >= 2
    assert_exactly_once(kafka.bootstrap_servers, inputs=[src], outputs=[dst], group=env["EOS_TEST_APP_ID"],
                        expected_inputs=5000)


LINEAGE_JOB = """
import os

from eos import Application

app = Application(os.environ["EOS_TEST_APP_ID"])

def _stat(pid):
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    return stat[stat.index("(") + 1:stat.rindex(")")], stat.rsplit(")", 1)[1].split()

def _parent(pid):
    return int(_stat(pid)[1][1])

def _started(pid):  # clock ticks after boot
    return int(_stat(pid)[1][19])

def _jvm(driver):
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            if _stat(int(entry))[0] == "java" and _parent(int(entry)) == driver:
                return int(entry)
        except OSError:
            pass

@app.process(input=os.environ["EOS_TEST_INPUT"], output=os.environ["EOS_TEST_OUTPUT"], value_serde="json")
def lineage(record):
    daemon = os.getppid()
    with open(f"/proc/{daemon}/cmdline", "rb") as f:
        command = f.read().replace(b"\\0", b" ").decode()
    zygote = _parent(daemon)
    driver = _parent(zygote)
    return record.key, {"hash": hash("eos"), "daemon": command, "zygote": zygote, "driver": driver,
                        "jvm_first": _started(_jvm(driver)) < _started(zygote)}
"""


def test_eos_runs_workers_forked_from_the_drivers_own_fork_with_pysparks_string_hashes(kafka, topic_factory,
                                                                                          unique_name, tmp_path):
    # `eos run` starts again with PYTHONHASHSEED=0 and forks the daemon's zygote from itself before loading the job
    # (eos.driver.spark.fork_zygote_early): the workers' daemon carries the driver's command line, and they hash
    # strings as PySpark's workers always do. Spark's JVM was launched before that fork (launch_jvm_early).
    from eos.audit.scan import scan_topic

    src, dst = topic_factory("in", partitions=2), topic_factory("out", partitions=2)
    produce(kafka.bootstrap_servers, src, ((f"k{i}".encode(), b"{}") for i in range(20)))
    (tmp_path / "lineage_job.py").write_text(LINEAGE_JOB)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
    env |= {"EOS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers, "EOS_TEST_APP_ID": unique_name("app"),
            "EOS_TEST_INPUT": src, "EOS_TEST_OUTPUT": dst}
    driver = subprocess.Popen([sys.executable, "-m", "eos.cli", "run", "lineage_job.py", "--until-caught-up",
                               "--no-live"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    output = driver.communicate(timeout=300)[0]
    assert driver.returncode == 0, output[-3000:]
    seeded = subprocess.run([sys.executable, "-c", "print(hash('eos'))"], env={**env, "PYTHONHASHSEED": "0"},
                            capture_output=True, text=True, check=True)
    values = [json.loads(r.value()) for batch in scan_topic(kafka.bootstrap_servers, dst) for r in batch]
    assert len(values) == 20
    assert {v["hash"] for v in values} == {int(seeded.stdout)}
    assert {v["driver"] for v in values} == {driver.pid}  # daemon <- zygote <- the driver itself
    assert all("-m eos.cli run lineage_job.py" in v["daemon"] for v in values), values[0]
    assert all(v["jvm_first"] for v in values)


def _session(sid: int) -> set[int]:
    """The live (not zombie) processes of session `sid`."""
    found = set()
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            found.add(int(entry))
    return found


def test_every_process_of_a_killed_driver_ends_with_it(kafka, topic_factory, unique_name, tmp_path):
    # Spark's JVM exits when its stdin, a pipe from the driver, closes. It is launched before the daemon's zygote
    # is forked from the driver (launch_jvm_early), so the zygote, and the daemon and workers forked from it, must
    # not hold the driver's end of that pipe: else a SIGKILLed driver's JVM, daemon and workers outlive it.
    from transactions import KafkaAdmin

    src, dst = topic_factory("in", partitions=2), topic_factory("out", partitions=2)
    produce(kafka.bootstrap_servers, src, ((f"k{i}".encode(), b"{}") for i in range(20)))
    (tmp_path / "lineage_job.py").write_text(LINEAGE_JOB)
    app_id = unique_name("app")
    env = {**os.environ, "EOS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers, "EOS_TEST_APP_ID": app_id,
           "EOS_TEST_INPUT": src, "EOS_TEST_OUTPUT": dst}
    driver = subprocess.Popen([sys.executable, "-m", "eos.cli", "run", "lineage_job.py", "--no-live"], cwd=tmp_path,
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    admin = KafkaAdmin(kafka.bootstrap_servers)
    try:
        deadline = time.monotonic() + 240
        tps = admin.topic_partitions(src)
        while sum(o or 0 for o in admin.group_offsets(app_id, tps, stable=False).values()) < 20:
            assert driver.poll() is None and time.monotonic() < deadline, "the job did not commit its input"
            time.sleep(0.2)
    finally:
        admin.close()
    processes = _session(driver.pid) - {driver.pid}
    assert len(processes) >= 4  # the JVM, the zygote, the daemon (launched and forked), the workers
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    deadline = time.monotonic() + 60
    while (left := _session(driver.pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, {pid: Path(f"/proc/{pid}/cmdline").read_bytes()[:80] for pid in left}


@pytest.mark.parametrize("args, said", [(["no_such_job.py"], "no_such_job.py"),
                                        (["job.py", "--no-such-option"], "--no-such-option")])
def test_a_run_that_fails_at_once_ends_the_jvm_launched_for_it_and_leaves_nothing(tmp_path, args, said):
    # the JVM is launched before the job is loaded (no_such_job.py: the zygote was forked too), even before the
    # command line is parsed (--no-such-option: no zygote yet, only its directory)
    (scratch := tmp_path / "tmp").mkdir()
    driver = subprocess.Popen([sys.executable, "-m", "eos.cli", "run", *args, "--no-live"], cwd=tmp_path,
                              env={**os.environ, "TMPDIR": str(scratch)}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    output = driver.communicate(timeout=120)[0]
    assert driver.returncode == 2, output
    assert said in output
    left = _session(driver.pid)  # the JVM launched for it was ended, not left to notice
    assert not left, {pid: Path(f"/proc/{pid}/cmdline").read_bytes()[:120] for pid in left}
    assert not list(scratch.iterdir())  # its gateway's file, the zygote's socket and their directories are gone
