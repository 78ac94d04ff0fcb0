"""`eos run --metrics-port` serves Prometheus metrics while the job runs: records, transactions, commit
latency and consumer lag per partition, as an operator's scrape sees them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request

from integration_tests.helpers import produce
from localkafka.config import free_port

JOB = """
import os
from eos import Application

app = Application(os.environ["APP"], trigger_interval=0.5, max_records_per_batch=500, log_format="json",
                  log_level="WARNING")

@app.process(input=os.environ["IN"], output=os.environ["OUT"], value_serde="json", name="copy")
def copy(record):
    return record.key, record.value
"""


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def test_metrics_are_served_while_the_job_runs(kafka, topic_factory, unique_name, tmp_path):
    src, out = topic_factory("in", partitions=2), topic_factory("out", partitions=2)
    produce(kafka.bootstrap_servers, src, ((f"k{i}".encode(), json.dumps({"i": i}).encode()) for i in range(8_000)))
    (tmp_path / "job.py").write_text(JOB)
    app_id, port = unique_name("app"), free_port()
    env = {**os.environ, "EOS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers, "APP": app_id, "IN": src, "OUT": out}
    proc = subprocess.Popen([sys.executable, "-m", "eos.cli", "run", "job.py", "--metrics-port", str(port)],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        seen: list[dict[str, float]] = []
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            try:
                seen.append(scrape(port))
            except OSError:
                time.sleep(0.5)
                continue
            if seen[-1].get(f'eos_records_in_total{{application="{app_id}",subtopology="copy"}}', 0) >= 8_000:
                break
            time.sleep(0.5)
        final = seen[-1]
        assert final[f'eos_records_in_total{{application="{app_id}",subtopology="copy"}}'] == 8_000
        assert final[f'eos_records_out_total{{application="{app_id}",subtopology="copy"}}'] == 8_000
        assert final[f'eos_transactions_total{{application="{app_id}",subtopology="copy"}}'] >= 2 * (4_000 // 500)
        assert final[f'eos_commit_latency_seconds_count{{application="{app_id}"}}'] >= 16
        lags = [m for m in seen if any(k.startswith("eos_consumer_lag_records") and v > 0 for k, v in m.items())]
        assert lags, "the lag was never above zero while 8,000 records were worked through"
        assert final[f'eos_consumer_lag_records{{application="{app_id}",partition="0",topic="{src}"}}'] >= 0
    finally:
        proc.terminate()
        proc.wait(60)
