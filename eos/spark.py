"""Spark for exactly-once jobs: speculation off, Python workers on this interpreter, loopback only.

The engine needs only a SparkContext (it runs RDD jobs); creating a SparkSession on top costs seconds more,
so the CLI and tests create a context. Users may pass either to `Application.run`.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

__all__ = ["build_spark_context", "build_spark_session", "spark_context_of", "DEFAULT_MASTER"]

# local[N,F]: N worker threads and F attempts per task (plain local[N] never retries a failed task).
DEFAULT_MASTER = "local[2,4]"

_BASE_CONF = {
    "spark.speculation": "false",  # EOS needs one live attempt per task at a time
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.python.worker.reuse": "true",  # lets a worker keep its tasks' producers (DESIGN section 4)
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.log.level": "WARN",
    # Wait longer for a task's preferred executor (where its state is) before running it elsewhere: a move
    # costs a restore. Spark ignores preferences for executors it has lost, so failover is not delayed.
    "spark.locality.wait": "10s",
    # A crash in native code (RocksDB, a client call) on a Python worker thread reports its Python stack.
    "spark.python.worker.faulthandler.enabled": "true",
}


def _prepare_environment() -> None:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def build_spark_context(master: str = DEFAULT_MASTER, app_name: str = "eos",
                        conf: dict[str, str] | None = None) -> "SparkContext":
    """Create (or return the running) SparkContext with EOS-safe settings. `local-cluster[N,cores,MB]`
    masters start N executor JVMs on this machine."""
    _prepare_environment()
    from pyspark import SparkConf, SparkContext

    spark_conf = SparkConf().setMaster(master).setAppName(app_name)
    for key, value in {**_BASE_CONF, **(conf or {})}.items():
        spark_conf.set(key, value)
    sc = SparkContext.getOrCreate(spark_conf)
    sc.setLogLevel("WARN")
    return sc


def build_spark_session(master: str = DEFAULT_MASTER, app_name: str = "eos",
                        conf: dict[str, str] | None = None) -> "SparkSession":
    """A SparkSession over `build_spark_context` (for users who also run SQL next to their jobs)."""
    from pyspark.sql import SparkSession

    return SparkSession(build_spark_context(master, app_name, conf))


def spark_context_of(spark: Any) -> "SparkContext":
    """Accept a SparkContext or a SparkSession."""
    return spark.sparkContext if hasattr(spark, "sparkContext") else spark
