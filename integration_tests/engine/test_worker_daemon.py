"""Local masters' Python workers run the installed, compiled pyspark (not Spark's zip, compiled from source at
every daemon start) and start with the framework's task code already loaded (eos.worker.daemon)."""

from __future__ import annotations

import pytest


def _worker_state(_):
    import sys

    import pyspark

    return pyspark.__file__, "eos.worker.entry" in sys.modules, "pyspark.worker" in sys.modules


def test_local_workers_import_the_installed_pyspark_and_start_with_the_task_code_loaded(spark):
    assert spark.getConf().get("spark.python.daemon.module") == "eos.worker.daemon"
    for path, entry_loaded, worker_loaded in spark.parallelize(range(4), 4).map(_worker_state).collect():
        assert ".zip" not in path and "site-packages" in path, path
        assert entry_loaded and worker_loaded


def test_a_later_context_on_another_master_does_not_inherit_the_local_daemon(spark_contexts):
    # a context's settings outlive it as the JVM's system properties, which the next context's SparkConf reads:
    # a cluster's executors (which may lack the framework) must get PySpark's own daemon back
    from eos.driver.spark import build_spark_context

    assert spark_contexts.get("local[1]").getConf().get("spark.python.daemon.module") == "eos.worker.daemon"
    spark_contexts.stop()
    sc = build_spark_context("local[1]", conf={"spark.pyspark.python": "/opt/other/python3"})
    try:
        assert sc.getConf().get("spark.python.daemon.module") == "pyspark.daemon"
    finally:
        sc.stop()


FRESH_DRIVER = """
import json, os, sys
from eos.driver.spark import build_spark_context

def lineage(_):
    import os
    daemon = os.getppid()
    with open(f"/proc/{daemon}/cmdline", "rb") as f:
        return os.getpid(), f.read().replace(b"\\0", b" ").decode(), os.environ.get("PYTHON_UNIX_DOMAIN_ENABLED")

sc = build_spark_context("local[2]", "zygote", dict(kv.split("=", 1) for kv in sys.argv[1:]), for_job=True)
first = sc.parallelize(range(4), 2).map(lineage).collect()
print(json.dumps({"workers": first, "again": sc.parallelize(range(4), 2).map(lambda x: x * 2).collect()}))
sc.stop()
"""


def _fresh_driver(*conf: str) -> dict:
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", FRESH_DRIVER, *conf], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_fresh_drivers_daemon_is_forked_from_the_zygote_started_with_its_jvm_and_can_be_turned_off():
    # eos.worker.zygote: the daemon Spark launches hands over to a process that imported its modules while the
    # JVM was starting; its workers run the job's tasks as any daemon's do
    warm = _fresh_driver()
    assert all("-m eos.worker.zygote" in daemon for _pid, daemon, _uds in warm["workers"]), warm
    assert warm["again"] == [0, 2, 4, 6]
    cold = _fresh_driver("spark.eos.daemonZygote=false")
    assert all("-m eos.worker.daemon" in daemon for _pid, daemon, _uds in cold["workers"]), cold


@pytest.mark.parametrize("zygote", ["true", "false"])
def test_workers_talk_to_the_jvm_over_unix_sockets_which_the_daemon_removes_at_the_stop(zygote):
    # spark.python.unix.domain.socket.enabled (eos.driver.spark): a daemon forked from the zygote gets it through
    # the environment it is handed, and removes its listening socket when the context stops
    import tempfile
    from pathlib import Path

    sockets = Path(tempfile.mkdtemp(prefix="eos-uds-", dir="/tmp"))  # (a socket's path must stay short)
    run = _fresh_driver(f"spark.eos.daemonZygote={zygote}", f"spark.python.unix.domain.socket.dir={sockets}")
    assert {str(uds).lower() for _pid, _daemon, uds in run["workers"]} == {"true"}, run
    assert run["again"] == [0, 2, 4, 6]
    assert list(sockets.iterdir()) == []
    sockets.rmdir()


def test_loopback_tcp_stays_available_for_the_workers():
    run = _fresh_driver("spark.python.unix.domain.socket.enabled=false")
    assert {str(uds).lower() for _pid, _daemon, uds in run["workers"]} <= {"false", "none"}, run
    assert run["again"] == [0, 2, 4, 6]
