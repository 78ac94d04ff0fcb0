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
