"""SparkSession for exactly-once jobs: speculation off, Python workers on this interpreter, loopback only."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["build_spark_session", "DEFAULT_MASTER"]

# local[N,F]: N worker threads and F attempts per task (plain local[N] never retries a failed task).
DEFAULT_MASTER = "local[2,4]"

_BASE_CONF = {
    "spark.speculation": "false",  # EOS needs one live attempt per task at a time
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.python.worker.reuse": "true",  # lets a worker keep its tasks' producers (DESIGN section 4)
    "spark.sql.shuffle.partitions": "4",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.log.level": "WARN",
}


def build_spark_session(master: str = DEFAULT_MASTER, app_name: str = "eos",
                        conf: dict[str, str] | None = None) -> "SparkSession":
    """Create (or return the running) SparkSession with EOS-safe settings.

    Python workers use this interpreter (`PYSPARK_PYTHON`), and Spark binds to loopback unless
    `SPARK_LOCAL_IP` says otherwise. `local-cluster[N,cores,MB]` masters start N executor JVMs.
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**_BASE_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
