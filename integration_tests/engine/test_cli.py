"""`eos run` refuses bad configuration before any batch runs, and runs a job until caught up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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

def _parent(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])

@app.process(input=os.environ["EOS_TEST_INPUT"], output=os.environ["EOS_TEST_OUTPUT"], value_serde="json")
def lineage(record):
    daemon = os.getppid()
    with open(f"/proc/{daemon}/cmdline", "rb") as f:
        command = f.read().replace(b"\\0", b" ").decode()
    return record.key, {"hash": hash("eos"), "daemon": command, "zygote": _parent(daemon),
                        "driver": _parent(_parent(daemon))}
"""


def test_eos_runs_workers_forked_from_the_drivers_own_fork_with_pysparks_string_hashes(kafka, topic_factory,
                                                                                          unique_name, tmp_path):
    # `eos run` starts again with PYTHONHASHSEED=0 and forks the daemon's zygote from itself before loading the job
    # (eos.driver.spark.fork_zygote_early): the workers' daemon carries the driver's command line, and they hash
    # strings as PySpark's workers always do
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
