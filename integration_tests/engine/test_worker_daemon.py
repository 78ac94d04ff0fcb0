"""Local masters' Python workers run the installed, compiled pyspark (not Spark's zip, compiled from source at
every daemon start) and start with the framework's task code already loaded (eos.worker.daemon)."""

from __future__ import annotations

from integration_tests.helpers import fresh_driver


def _worker_state(_):
    import sys

    import pyspark

    return pyspark.__file__, "eos.worker.entry" in sys.modules, "pyspark.worker" in sys.modules


def test_local_workers_import_the_installed_pyspark_and_start_with_the_task_code_loaded(spark):
    assert spark.getConf().get("spark.python.daemon.module") == "eos.worker.daemon"
    for path, entry_loaded, worker_loaded in spark.parallelize(range(4), 4).map(_worker_state).collect():
        assert ".zip" not in path and "site-packages" in path, path
        assert entry_loaded and worker_loaded


LATER_CONTEXTS = """
import json, sys
from eos.driver.spark import build_spark_context, spark_conf

def seen(sc):
    conf = spark_conf(sc)
    return {"name": conf.get("spark.app.name"), "python": conf.get("spark.pyspark.python"),
            "daemon": conf.get("spark.python.daemon.module")}

first = build_spark_context("local[1]", "first", {"spark.pyspark.python": "/opt/other/python3"})
out = {"first": seen(first)}
first.stop()
second = build_spark_context("local[2]", "second")
out["second"] = {**seen(second), "workers": second.parallelize([0], 1).map(lambda _: __import__("sys").executable)
                 .collect()}
second.stop()
third = build_spark_context("local[1]", "third", {"spark.pyspark.python": "/opt/other/python3"})
out["third"] = seen(third)
third.stop()
print(json.dumps(out))
"""


def test_a_later_context_inherits_nothing_of_the_context_that_launched_the_jvm():
    # spark-submit makes the settings the JVM was launched with its system properties, which a later context's
    # SparkConf reads: the executors' Python of a cluster's context ran a later local context's workers, which
    # lacked pandas (eos.driver.spark._jvm_defaults)
    import sys

    out = fresh_driver(LATER_CONTEXTS)
    # a context on executors that may lack the framework keeps PySpark's own daemon (unset: its default)
    assert out["first"] == {"name": "first", "python": "/opt/other/python3", "daemon": None}, out
    assert out["second"] == {"name": "second", "python": None, "daemon": "eos.worker.daemon",
                             "workers": [sys.executable]}, out
    assert out["third"] == {"name": "third", "python": "/opt/other/python3", "daemon": None}, out


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
    return fresh_driver(FRESH_DRIVER, *conf)


def test_a_fresh_drivers_daemon_is_forked_from_the_zygote_started_with_its_jvm_and_can_be_turned_off():
    # eos.worker.zygote: the daemon Spark launches hands over to a process that imported its modules while the
    # JVM was starting; its workers run the job's tasks as any daemon's do. Either way the workers talk to the
    # JVM over Unix sockets (spark.python.unix.domain.socket.enabled, eos.driver.spark): a daemon forked from
    # the zygote gets the setting through the environment it is handed, and removes its listening socket when
    # the context stops.
    warm = _fresh_driver_on_unix_sockets()
    assert all("-m eos.worker.zygote" in daemon for _pid, daemon, _uds in warm["workers"]), warm
    cold = _fresh_driver_on_unix_sockets("spark.eos.daemonZygote=false")
    assert all("-m eos.worker.daemon" in daemon for _pid, daemon, _uds in cold["workers"]), cold


def _fresh_driver_on_unix_sockets(*conf: str) -> dict:
    import tempfile
    from pathlib import Path

    sockets = Path(tempfile.mkdtemp(prefix="eos-uds-", dir="/tmp"))  # (a socket's path must stay short)
    run = _fresh_driver(*conf, f"spark.python.unix.domain.socket.dir={sockets}")
    assert {str(uds).lower() for _pid, _daemon, uds in run["workers"]} == {"true"}, run
    assert run["again"] == [0, 2, 4, 6]
    assert list(sockets.iterdir()) == []
    sockets.rmdir()
    return run


def test_loopback_tcp_stays_available_for_the_workers():
    run = _fresh_driver("spark.python.unix.domain.socket.enabled=false")
    assert {str(uds).lower() for _pid, _daemon, uds in run["workers"]} <= {"false", "none"}, run
    assert run["again"] == [0, 2, 4, 6]
