"""A real Spark standalone cluster (a master and two workers from `spark-class`, on loopback), whose
executors run a Python that has the framework's dependencies but not the framework: everything the tasks
run was shipped by the driver. A stateful job with a standby launched with spark-submit, then the same kind
of job run from the test process, whose worker is SIGKILLed mid-run (worker JVM, executor JVM and Python
workers, as a lost machine): the task fails over to the standby's executor; both runs audit exactly-once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaos.processes import executor_pid
from eos.driver.spark import live_executors
from integration_tests.cluster.standalone import StandaloneCluster, executor_python
from integration_tests.helpers import assert_exactly_once, assert_totals_exact, produce
from integration_tests.standby import test_standby
from integration_tests.standby.test_standby import BATCH, run_failover

pytestmark = pytest.mark.spark_cluster

JOB = """
import os
from eos import Application

app = Application(os.environ["APP"], trigger_interval=0.0, max_records_per_batch=500, log_format="json",
                  log_level="WARNING", state_dir=os.environ["STATE"], num_standby_replicas=1)

@app.process(input=os.environ["IN"], output=os.environ["OUT"], value_serde="json")
def double(record):
    return record.key, {"id": record.value["id"], "n": record.value["n"] * 2}

app.aggregate(os.environ["OUT"], os.environ["TOTALS"], name="totals", initializer=lambda: {"count": 0, "sum": 0},
              aggregator=lambda key, value, t: {"count": t["count"] + 1, "sum": t["sum"] + value["n"]})

if __name__ == "__main__":
    summary = app.run(until_caught_up=True)
    from pyspark import SparkContext
    print("RAN-ON", SparkContext._active_spark_context.master, summary.records_in, flush=True)
"""


def spark_submit() -> str:
    return str(Path(sys.executable).parent / "spark-submit")


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    cluster = StandaloneCluster(tmp_path_factory.mktemp("standalone"), workers=2).start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def python():
    return executor_python()


def cluster_conf(python: str) -> dict[str, str]:
    """What a user sets for a standalone cluster: the executors' Python, one core per executor, and (the
    tests' rule, not the framework's) the driver on loopback."""
    return {"spark.pyspark.python": python, "spark.executor.cores": "1", "spark.executor.memory": "1g",
            "spark.cores.max": "2", "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false"}


def test_spark_submit_on_the_standalone_cluster(kafka, standalone, python, topic_factory, unique_name, tmp_path):
    src, out, totals = (topic_factory(name, partitions=2) for name in ("in", "out", "totals"))
    produce(kafka.bootstrap_servers, src, ((f"k{i % 100}".encode(), json.dumps({"id": i, "n": i}).encode())
                                          for i in range(4000)))
    (tmp_path / "job.py").write_text(JOB)
    app_id = unique_name("app")
    env = {**os.environ, "EOS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers, "APP": app_id, "IN": src, "OUT": out,
           "TOTALS": totals, "STATE": str(tmp_path / "state" / "{executor}"),
           "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("PYSPARK_PYTHON", None)
    # spark.pyspark.python names the driver's Python too unless spark.pyspark.driver.python is given
    args = [spark_submit(), "--master", standalone.master_url,
            "--conf", f"spark.pyspark.driver.python={sys.executable}",
            # the suite's JVMs compile with C1 only (integration_tests/conftest.py); spark-submit reads no
            # PYSPARK_SUBMIT_ARGS
            "--driver-java-options", "-XX:TieredStopAtLevel=1",
            "--conf", "spark.executor.extraJavaOptions=-XX:TieredStopAtLevel=1"]
    for key, value in cluster_conf(python).items():
        args += ["--conf", f"{key}={value}"]
    done = subprocess.run([*args, "job.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert f"RAN-ON {standalone.master_url} 8000" in done.stdout, done.stdout[-2000:]  # 4,000 through 2 steps
    assert_exactly_once(kafka.bootstrap_servers, inputs=[src], outputs=[out], group=app_id, expected_inputs=4000)
    assert_totals_exact(kafka.bootstrap_servers, inputs=[out], totals=[totals], group=app_id)
    assert len(list((tmp_path / "state").iterdir())) >= 2  # each executor has its own state directory


def test_a_killed_worker_fails_over_to_the_standby(kafka, standalone, python, spark_contexts, topic_factory,
                                                   unique_name, tmp_path):
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(test_standby)  # the job's functions live in a test module
    sc = spark_contexts.get(standalone.master_url, cluster_conf(python))
    deadline = time.monotonic() + 120
    while len(live_executors(sc)) < 2:
        assert time.monotonic() < deadline, "the standalone cluster did not give the job two executors"
        time.sleep(0.5)
    killed = []

    def kill(victim):
        killed.append(victim)
        standalone.kill_worker_of(executor_pid(victim, sc.applicationId))

    try:
        _, reports, move, changelog_before = run_failover(kafka, sc, topic_factory, unique_name, tmp_path,
                                                          standbys=1, kill=kill)
    finally:
        spark_contexts.stop()
    assert killed and standalone.status()["aliveworkers"] == 1
    max_lag = max(rep.max_standby_lag for rep in reports)
    assert move.restored_records <= max(max_lag, BATCH), (move, max_lag)
    assert move.restored_records < changelog_before / 4, (move, changelog_before)
