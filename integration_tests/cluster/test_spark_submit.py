"""A job launched by spark-submit runs on the master spark-submit was given (not on a local default), and
`app.run()` inside it needs no master of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from integration_tests.helpers import assert_exactly_once, produce

JOB = """
import os
from eos import Application

app = Application(os.environ["APP"], trigger_interval=0.0, log_format="json", log_level="WARNING")

@app.process(input=os.environ["IN"], output=os.environ["OUT"], value_serde="json")
def double(record):
    return record.key, {"id": record.value["id"], "n2": record.value["n"] * 2}

if __name__ == "__main__":
    summary = app.run(until_caught_up=True)
    from pyspark import SparkContext
    print("RAN-ON", SparkContext._active_spark_context.master, summary.records_in, flush=True)
"""


def spark_submit() -> str:
    return str(Path(sys.executable).parent / "spark-submit")


def test_spark_submit_runs_the_job_on_the_master_it_was_given(kafka, topic_factory, unique_name, tmp_path):
    src, out = topic_factory("in", partitions=2), topic_factory("out", partitions=2)
    produce(kafka.bootstrap_servers, src, ((f"k{i}".encode(), json.dumps({"id": i, "n": i}).encode())
                                          for i in range(2000)))
    (tmp_path / "job.py").write_text(JOB)
    app_id = unique_name("app")
    env = {**os.environ, "EOS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers, "APP": app_id, "IN": src, "OUT": out,
           "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run([spark_submit(), "--master", "local-cluster[2,1,1024]", "--conf", "spark.ui.enabled=false",
                           "--conf", "spark.driver.host=127.0.0.1", "job.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "RAN-ON local-cluster[2,1,1024] 2000" in done.stdout, done.stdout[-2000:]
    assert_exactly_once(kafka.bootstrap_servers, inputs=[src], outputs=[out], group=app_id, expected_inputs=2000)
