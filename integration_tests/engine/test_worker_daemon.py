"""Local masters' Python workers run the installed, compiled pyspark (not Spark's zip, compiled from source at
every daemon start) and start with the framework's task code already loaded (eos.worker.daemon)."""

from __future__ import annotations


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
