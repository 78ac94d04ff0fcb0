"""The driver's JVM launched early (`eos.driver.jvm`): the first launch goes through spark-submit and records the
java command its launcher gave; the next launch of the same runs that command, with the environment Spark's
scripts would have given it, and reaches a gateway as the first did. Real JVMs, no Kafka."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from eos.driver.jvm import LaunchedJvm

SETTINGS = {"spark.master": "local[1]", "spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1",
            "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}


def _environ(pid: int) -> dict[str, str]:
    entries = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(e.decode().split("=", 1) for e in entries if b"=" in e)


def _launch(settings: dict[str, str]) -> tuple[LaunchedJvm, list[bytes], dict[str, str]]:
    """Launch, wait for the gateway, note the JVM's command and environment, end it."""
    jvm = LaunchedJvm(settings, dict(os.environ))
    try:
        assert jvm.wait_ready(120), "the JVM did not reach its gateway"
        command = Path(f"/proc/{jvm.proc.pid}/cmdline").read_bytes().split(b"\0")[:-1]
        return jvm, command, _environ(jvm.proc.pid)
    finally:
        jvm.discard()


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A cache of its own, and Spark's own (empty) configuration directory rather than the suite's, whose
    spark-defaults.conf the scripts would read: no launch is recorded where the scripts read more than its key."""
    monkeypatch.setenv("EOS_CLASS_DATA_CACHE", str(tmp_path))
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    return tmp_path


def test_the_next_launch_runs_the_command_spark_submits_launcher_gave(cache):
    tmp_path = cache
    first, command, environ = _launch(SETTINGS)
    assert not first.recorded
    (record_file,) = tmp_path.glob("launch-*.json")
    record = json.loads(record_file.read_text())
    assert record["command"][0].endswith("/java") and "org.apache.spark.deploy.SparkSubmit" in record["command"]
    assert record["env"]["SPARK_ENV_LOADED"] == "1"  # (what load-spark-env.sh exports)

    second, again, environ_again = _launch(SETTINGS)
    assert second.recorded  # no shell scripts, no launcher JVM
    assert again == command  # the JVM spark-submit would have run, with the environment it would have had
    spark_vars = {k for k in environ if k.startswith(("SPARK_", "PYSPARK_", "JAVA_", "PYTHONHASHSEED"))}
    assert {k: environ_again.get(k) for k in spark_vars} == {k: environ[k] for k in spark_vars}

    other, _, _ = _launch({**SETTINGS, "spark.driver.memory": "600m"})  # another launch: spark-submit again
    assert not other.recorded and len(list(tmp_path.glob("launch-*.json"))) == 2


def test_a_recorded_command_whose_jvm_does_not_start_is_forgotten(cache):
    from pyspark.errors import PySparkRuntimeError

    tmp_path = cache
    _launch(SETTINGS)
    (record_file,) = tmp_path.glob("launch-*.json")
    record_file.write_text(json.dumps({"command": ["/bin/false"], "env": {}, "unset": []}))  # (a Java gone since)
    broken = LaunchedJvm(SETTINGS, dict(os.environ))
    assert broken.recorded
    with pytest.raises(PySparkRuntimeError):
        broken.context(None)  # type: ignore[arg-type]  (it fails before the configuration is used)
    assert not record_file.exists()
    relaunched, _, _ = _launch(SETTINGS)
    assert not relaunched.recorded and record_file.exists()


def test_no_launch_is_recorded_where_spark_submits_scripts_read_a_configuration(tmp_path, monkeypatch):
    (conf := tmp_path / "conf").mkdir()
    (conf / "spark-env.sh").write_text("export SPARK_DAEMON_MEMORY=1g\n")  # (anything could be set here)
    monkeypatch.setenv("EOS_CLASS_DATA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    for _ in range(2):
        jvm, _, environ = _launch(SETTINGS)
        assert not jvm.recorded and environ["SPARK_DAEMON_MEMORY"] == "1g"
    assert not list((tmp_path / "cache").glob("launch-*.json"))
