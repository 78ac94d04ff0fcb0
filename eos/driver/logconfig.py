"""Spark's own log4j configuration, named to a driver JVM the framework launches, so that log4j is set up once.

A driver JVM that finds no log4j configuration of the user's sets log4j up four times before its Py4J gateway
answers, each time building log4j's configuration, appenders and plugins afresh on the JVM's main thread:
spark-submit's first log line starts log4j, whose search of the classpath finds no file, so it takes its
built-in default; Spark sees that default and loads its own file (`org/apache/spark/log4j2-defaults.properties`,
or `log4j2-json-layout.properties` where structured logging is on); spark-submit then resets log4j (a search
again) once it has read whether structured logging is on; and the next log line loads Spark's file again.
Named at launch (`-Dlog4j2.configurationFile=classpath:...`), the same file is read once and kept. The java
command of a job's driver, run alone until its gateway answered (two runs of 4-5 alternations, medians): 0.97 /
1.03 s to the gateway against 1.07 / 1.17 s without, on 1.34 / 1.39 CPU-s against 1.48 / 1.54. A job's first
commit, where the JVM shares the cores with the driver's imports, moved within its runs' spread
(docs/measurements.md). What Spark logs, and at which levels, is the same: it is Spark's file, and Spark's
shell level (WARN until `setLogLevel`) is applied either way; only Spark's line saying it used that file is
no longer printed.

Only where Spark would have used its file: not when the user's driver options, environment or classpath may
name or hold a log4j configuration of their own (`launch_log_options`). Off with
`spark.eos.logConfigAtLaunch=false`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eos.driver.classdata import spark_home, user_java_options

__all__ = ["LOG_CONFIG_KEY", "launch_log_options", "spark_log_file"]

#: Spark setting: whether a driver JVM the framework launches is given Spark's log4j file at its launch
#: (`--spark-conf spark.eos.logConfigAtLaunch=false`: log4j searches and Spark loads its file, as without it)
LOG_CONFIG_KEY = "spark.eos.logConfigAtLaunch"

_PLAIN = "org/apache/spark/log4j2-defaults.properties"
_JSON = "org/apache/spark/log4j2-json-layout.properties"
_STRUCTURED = "spark.log.structuredLogging.enabled"
#: the JVM options of the environment that spark-submit's scripts or the JVM itself pass on to the driver's JVM
_ENV_OPTIONS = ("SPARK_SUBMIT_OPTS", "SPARK_DRIVER_OPTS", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS")
#: directories spark-submit's scripts put on the driver's classpath, where a log4j file would be found
_CLASSPATH_DIRS = ("SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR")


def spark_log_file(conf: Any) -> str:
    """The file of Spark's that its driver would load for `conf`: JSON lines where structured logging is on."""
    return _JSON if str(conf.get(_STRUCTURED, "false")).strip().lower() == "true" else _PLAIN


def launch_log_options(conf: Any, env: Mapping[str, str] | None = None) -> str | None:
    """The driver JVM option naming Spark's log4j file, for a driver JVM about to be launched with SparkConf
    `conf` in environment `env` (default: this process's); None where the framework leaves log4j to find its
    configuration: turned off, or where a configuration of the user's may be found (`_user_may_configure`)."""
    env = os.environ if env is None else env
    if str(conf.get(LOG_CONFIG_KEY, "true")).strip().lower() == "false" or _user_may_configure(conf, env):
        return None
    name = spark_log_file(conf)
    return f"-Dlog4j2.configurationFile=classpath:{name}" if _in_sparks_jars(str(spark_home()), name) else None


def _user_may_configure(conf: Any, env: Mapping[str, str]) -> bool:
    """Whether the driver's log4j configuration may come from the user: a log4j option among the driver's JVM
    options (settings, PYSPARK_SUBMIT_ARGS, the environment's), log4j's own environment variables, structured
    logging chosen in PYSPARK_SUBMIT_ARGS (which this process does not read), a classpath of the user's, or a
    log4j2 file in a configuration directory spark-submit puts on the classpath."""
    options = " ".join([user_java_options(conf), *(env.get(name, "") for name in _ENV_OPTIONS)]).lower()
    if "log4j" in options or any(name.upper().startswith("LOG4J_") for name in env):
        return True
    if _STRUCTURED in env.get("PYSPARK_SUBMIT_ARGS", ""):
        return True
    if conf.get("spark.driver.extraClassPath") or env.get("SPARK_DIST_CLASSPATH") or env.get("SPARK_CLASSPATH"):
        return True
    directories = [env.get(name) for name in _CLASSPATH_DIRS]
    if not env.get("SPARK_CONF_DIR"):
        directories.append(str(spark_home() / "conf"))
    return any(_holds_log4j2_file(directory) for directory in directories if directory)


def _holds_log4j2_file(directory: str) -> bool:
    try:
        return any(entry.name.lower().startswith("log4j2") for entry in os.scandir(directory))
    except OSError:
        return False


@functools.cache
def _in_sparks_jars(home: str, name: str) -> bool:
    """Whether Spark's jars hold `name` (Spark's common-utils jars, where Spark 4 keeps its log4j files):
    a release that moved or renamed them keeps log4j's search, rather than a JVM that names a missing file."""
    import zipfile

    try:
        jars = sorted(Path(home, "jars").glob("spark-common-utils*.jar"))
        for jar in jars:
            with zipfile.ZipFile(jar) as archive:
                try:
                    archive.getinfo(name)
                    return True
                except KeyError:
                    continue
    except (OSError, zipfile.BadZipFile):
        return False
    return False
