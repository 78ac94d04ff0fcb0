"""A driver JVM the framework launches is given Spark's own log4j file at launch (`eos.driver.logconfig`), and
ends up configured as Spark configures it without: the same file, the same loggers at the same levels, Spark's
shell level (WARN) on the console. A log4j file of the user's (here in the Spark configuration directory) is
left to log4j to find, and wins."""

from __future__ import annotations

import json
import os
import subprocess
import sys

DRIVER = """
import json, sys
from eos.driver.spark import build_spark_context
sc = build_spark_context("local[1]", conf=dict(kv.split("=", 1) for kv in sys.argv[1:]))
jvm = sc._jvm
config = jvm.org.apache.logging.log4j.LogManager.getContext(False).getConfiguration()
loggers = {name: str(logger.getLevel()) for name, logger in dict(config.getLoggers()).items()}
print(json.dumps({
    "arguments": list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()),
    "location": str(config.getConfigurationSource().getLocation()),
    "loggers": loggers,
    "root": str(jvm.org.apache.logging.log4j.LogManager.getRootLogger().getLevel()),
}))
sc.stop()
"""

_OPTION = "-Dlog4j2.configurationFile="


def _driver(env: dict[str, str], *conf: str) -> tuple[dict, str]:
    done = subprocess.run([sys.executable, "-c", DRIVER, *conf], env=env, timeout=240, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_spark_s_log_file_named_at_launch_configures_the_driver_as_spark_does(monkeypatch):
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    env = dict(os.environ)
    named, named_err = _driver(env)
    searched, searched_err = _driver(env, "spark.eos.logConfigAtLaunch=false")

    assert f"{_OPTION}classpath:org/apache/spark/log4j2-defaults.properties" in named["arguments"]
    assert not any(argument.startswith(_OPTION) for argument in searched["arguments"])
    # without the option Spark found log4j on its default and loaded its file itself; with it, log4j read it once
    assert "Using Spark's default log4j profile" in searched_err
    assert "Using Spark's default log4j profile" not in named_err
    for run in (named, searched):
        assert run["location"].endswith("org/apache/spark/log4j2-defaults.properties"), run["location"]
    assert named["loggers"] == searched["loggers"] and len(named["loggers"]) > 5
    assert named["root"] == searched["root"]
    assert 'Setting default log level to "WARN"' in named_err and 'Setting default log level to "WARN"' in searched_err


def test_a_log4j_file_of_the_user_s_is_found_by_log4j_and_wins(tmp_path):
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "log4j2.properties").write_text(
        "rootLogger.level = error\nrootLogger.appenderRef.stderr.ref = console\n"
        "appender.console.type = Console\nappender.console.name = console\nappender.console.target = SYSTEM_ERR\n"
        "appender.console.layout.type = PatternLayout\nappender.console.layout.pattern = USER %p %c: %m%n\n")
    ran, _ = _driver({**os.environ, "SPARK_CONF_DIR": str(conf_dir)})
    assert not any(argument.startswith(_OPTION) for argument in ran["arguments"])
    assert ran["location"] == str(conf_dir / "log4j2.properties")
