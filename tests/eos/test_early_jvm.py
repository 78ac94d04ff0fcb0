"""The driver's JVM launched before its context (`eos run`): launched as PySpark launches it, used only by a context
it fits, ended otherwise. (That a real run uses it, and that nothing of a killed driver outlives it, is in
integration_tests/engine/test_cli.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from eos.driver import jvm as jvm_module
from eos.driver import spark
from eos.driver.classdata import spark_home
from eos.driver.jvm import LaunchedJvm, _alive


class FakeProcess:
    pid = -1  # (no such process: not a `java` to signal)

    def __init__(self, command: list[str], **kwargs: Any) -> None:
        self.command, self.kwargs = command, kwargs
        self.stdin = open("/dev/null", "wb")  # (closed by discard)
        self.stderr = open("/dev/null", "rb")
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self.returncode = 0
        return 0

    def kill(self) -> None:
        self.returncode = -9


@pytest.fixture
def launches(monkeypatch, tmp_path) -> list[FakeProcess]:
    launched: list[FakeProcess] = []

    def popen(command: list[str], **kwargs: Any) -> FakeProcess:
        launched.append(FakeProcess(command, **kwargs))
        return launched[-1]

    monkeypatch.setattr(jvm_module.subprocess, "Popen", popen)
    monkeypatch.setenv("EOS_CLASS_DATA_CACHE", str(tmp_path))  # (no launch recorded there)
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    monkeypatch.delenv("SPARK_TESTING", raising=False)
    return launched


SETTINGS = {"spark.master": "local[2]", "spark.speculation": "false",
            "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -Xms16m"}


def test_the_jvm_is_launched_as_pyspark_launches_it(launches):
    jvm = LaunchedJvm(SETTINGS, {"PATH": "/usr/bin"})
    (proc,) = launches
    assert proc.command == [str(Path(spark_home()) / "bin" / "spark-submit"),
                            "--conf", "spark.master=local[2]", "--conf", "spark.speculation=false",
                            "--conf", "spark.driver.extraJavaOptions=-XX:+UseSerialGC -Xms16m", "pyspark-shell"]
    env = proc.kwargs["env"]
    assert env["PATH"] == "/usr/bin" and env["SPARK_CONNECT_MODE"] == "0"
    assert Path(env["_PYSPARK_DRIVER_CONN_INFO_PATH"]).parent.is_dir()  # where the gateway writes its port
    assert proc.kwargs["stdin"] == subprocess.PIPE  # its end tells the JVM that the driver is gone
    assert proc.kwargs["stderr"] == subprocess.PIPE  # held until a context takes the JVM
    assert jvm.driver_only_fds() == (proc.stdin.fileno(), proc.stderr.fileno())
    jvm.discard()
    assert proc.stdin.closed and proc.stderr.closed and jvm.driver_only_fds() == ()
    assert not Path(env["_PYSPARK_DRIVER_CONN_INFO_PATH"]).parent.exists()


def test_a_context_uses_the_jvm_only_with_its_settings_and_launch_environment(launches, monkeypatch):
    jvm = LaunchedJvm(SETTINGS, dict(os.environ))
    assert jvm.fits({**SETTINGS, "spark.app.name": "orders"})  # (the context names the application)
    assert not jvm.fits({**SETTINGS, "spark.speculation": "true"})
    assert not jvm.fits({k: v for k, v in SETTINGS.items() if k != "spark.speculation"})
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--driver-memory 2g pyspark-shell")  # set after the launch
    assert not jvm.fits(SETTINGS)
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS")
    assert jvm.fits(SETTINGS)
    launches[0].returncode = 1  # it died
    assert not jvm.fits(SETTINGS)
    jvm.discard()


def test_a_jvm_that_does_not_fit_is_ended_and_the_context_launches_its_own(launches, monkeypatch):
    monkeypatch.setattr(spark, "_launches_jvm", lambda: True)  # (no JVM runs in this process yet)
    monkeypatch.setattr(spark, "_EARLY", [LaunchedJvm(SETTINGS, dict(os.environ))])
    assert spark._take_early_jvm({**SETTINGS, "spark.speculation": "true"}) is None
    assert spark._EARLY == [] and launches[0].stdin.closed
    fitting = LaunchedJvm(SETTINGS, dict(os.environ))
    monkeypatch.setattr(spark, "_EARLY", [fitting])
    assert spark._take_early_jvm({**SETTINGS, "spark.app.name": "orders"}) is fitting
    fitting.discard()


def test_the_launch_is_for_the_settings_a_jobs_context_asks_for(launches, monkeypatch):
    # launch_jvm_early and build_spark_context(for_job=True) compute the settings alike, else the JVM launched
    # early would never fit and every run would launch a second one
    monkeypatch.setattr(spark, "_EARLY", [])
    monkeypatch.setattr(spark, "_launches_jvm", lambda: True)
    monkeypatch.setattr("eos.worker.zygote.forkable", lambda: True)
    for name, value in (("PYSPARK_DRIVER_PYTHON", sys.executable), ("PYSPARK_PYTHON", sys.executable),
                        ("SPARK_LOCAL_IP", "127.0.0.1")):  # (what the launch sets, restored after the test)
        monkeypatch.setenv(name, value)
    conf = {"spark.executor.memory": "1g"}
    spark.launch_jvm_early("local[2,4]", conf)
    (jvm,) = spark._EARLY
    assert jvm.zygote_socket is not None  # a local master's daemon is forked from a zygote listening there
    assert launches[0].kwargs["env"]["EOS_DAEMON_ZYGOTE"] == jvm.zygote_socket
    assert jvm.fits(spark._context_settings("local[2,4]", "orders", conf, for_job=True, defaults={}))
    assert not jvm.fits(spark._context_settings("local[2,4]", "orders", conf, for_job=False, defaults={}))
    spark.discard_early()
    assert spark._EARLY == [] and launches[0].stdin.closed
    assert not Path(jvm.zygote_socket).parent.exists()  # (no zygote was forked into it)

    # executors on another Python: the launch's environment names it (as the context's would), and still fits
    other = {**conf, "spark.pyspark.python": "/opt/python3.11/bin/python3"}
    spark.launch_jvm_early("local[2,4]", other)
    (jvm,) = spark._EARLY
    assert launches[1].kwargs["env"]["PYSPARK_PYTHON"] == "/opt/python3.11/bin/python3"
    assert jvm.zygote_socket is None  # (its daemon is PySpark's own: no zygote)
    assert jvm.fits(spark._context_settings("local[2,4]", "orders", other, for_job=True, defaults={}))
    spark.discard_early()


def test_a_zygote_that_cannot_be_forked_is_started_where_the_early_jvm_looks(launches, monkeypatch):
    from eos.worker import zygote

    started: list[str | None] = []
    monkeypatch.setattr(spark, "_EARLY", [])
    monkeypatch.setattr(spark, "_ZYGOTES", [])
    monkeypatch.setattr(spark, "_launches_jvm", lambda: True)
    monkeypatch.setattr(zygote, "forkable", lambda: True)
    monkeypatch.setattr(zygote, "fork_zygote", lambda *args: None)  # (the system refused the fork)
    monkeypatch.setattr(zygote, "start_zygote", lambda path=None: started.append(path) or "started")
    for name, value in (("PYSPARK_DRIVER_PYTHON", sys.executable), ("PYSPARK_PYTHON", sys.executable),
                        ("SPARK_LOCAL_IP", "127.0.0.1")):
        monkeypatch.setenv(name, value)
    spark.launch_jvm_early("local[2,4]", {})
    (jvm,) = spark._EARLY
    spark.fork_zygote_early("local[2,4]", {})
    assert started == [jvm.zygote_socket] and spark._ZYGOTES == ["started"]
    spark.discard_early()


def test_no_early_launch_when_turned_off_or_a_jvm_runs_already(launches, monkeypatch):
    monkeypatch.setattr(spark, "_EARLY", [])
    monkeypatch.setattr(spark, "_launches_jvm", lambda: True)
    spark.launch_jvm_early("local[2]", {spark.EARLY_JVM_KEY: "false"})
    monkeypatch.setattr(spark, "_launches_jvm", lambda: False)
    spark.launch_jvm_early("local[2]", {})
    assert launches == [] and spark._EARLY == []


def test_eos_run_reads_the_launchs_options_before_its_command_line_is_parsed():
    from eos.cli import launch_options

    assert launch_options(["job.py", "--master", "local[4]", "--spark-conf", "a=1", "--spark-conf=b=2",
                           "--log-format=json", "--trigger-interval", "0.5"]) == {
        "--master": ["local[4]"], "--spark-conf": ["a=1", "b=2"], "--log-format": ["json"]}
    assert launch_options(["job.py", "--until-caught-up"]) == {}
    assert launch_options(["job.py", "--", "--master", "x"]) == {}
    assert launch_options(["job.py", "--master"]) is None  # (the command's parser says what is wrong)
    assert launch_options(["--help"]) is None


# `eos run`'s launch in a fresh interpreter, its JVM stood in for by a launch that fails: what it logged, and
# whether structlog was imported when the JVM was launched.
LAUNCH = """
import json, subprocess, sys

seen = {}

def popen(command, **kwargs):
    seen["structlog at the launch"] = "structlog" in sys.modules
    raise OSError("no JVM in this test")

subprocess.Popen = popen
import eos.cli

eos.cli._launch_jvm(["job.py", "--master", "local[1]", "--log-format", "json"])
print(json.dumps(seen))
"""


def test_eos_run_launches_the_jvm_before_importing_structlog_and_logs_the_launch_as_configured(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_TESTING", "EOS_"))}
    env |= {"PYTHONHASHSEED": "0", "EOS_CLASS_DATA_CACHE": str(tmp_path)}  # (no archive there)
    done = subprocess.run([sys.executable, "-c", LAUNCH], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"structlog at the launch": False}
    # held until logging was configured, then logged in its format (JSON lines), in order
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    assert [(line["level"], line["event"].split(":")[0]) for line in lines] == [
        ("info", "no class-data archive for this Java and Spark yet"),
        ("warning", "could not launch Spark's JVM early; the context launches it")]
    assert lines[1]["error"] == "OSError: no JVM in this test"


def test_held_logs_come_out_once_logging_is_configured_at_its_level(capsys):
    import io

    from eos import logs

    logs.reset_logging()
    logs.hold_logs()
    try:
        logs.logger("eos.x").info("held", n=1)
        logs.logger("eos.x").debug("below the level")
        assert capsys.readouterr().err == ""
        out = io.StringIO()
        logs.configure_logging("json", "INFO", stream=out)
        assert [json.loads(line)["event"] for line in out.getvalue().splitlines()] == ["held"]
        assert not isinstance(logs.logger("eos.x"), logs._HeldLogger)  # (nothing held from here on)
    finally:
        logs.reset_logging()


def _launched(tmp_path: Path, executable: str, *args: str) -> LaunchedJvm:
    """A LaunchedJvm around a real process running `executable` under the name it has."""
    jvm = object.__new__(LaunchedJvm)
    jvm._conn_dir = str(tmp_path / "conn")
    os.mkdir(jvm._conn_dir)
    jvm.proc = subprocess.Popen([executable, *args], stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    return jvm


def test_a_discarded_jvm_still_starting_is_ended_at_once_and_a_launch_script_by_its_stdin(tmp_path):
    import shutil
    import signal

    # a JVM that does not read its stdin yet (still starting): a `java` that sleeps
    (tmp_path / "bin").mkdir()
    java = shutil.copy(shutil.which("sleep") or "/bin/sleep", tmp_path / "bin" / "java")
    starting = _launched(tmp_path, str(java), "60")
    starting.discard(timeout=30)
    assert starting.proc.returncode == -signal.SIGTERM  # ended at once, not killed after the timeout
    assert not os.path.exists(starting._conn_dir)
    # spark-submit's scripts before they exec the JVM, running their launcher (here a shell running a process that
    # holds 256 MiB, as a JVM holds its heap): killed with what runs below them, and waited for until that has ended
    # too. A process killed takes a while to give its memory back (~15 ms for these 256 MiB), and it is not this
    # process's child to wait for: a run that failed at once ended while its launcher's JVM was still exiting.
    started = tmp_path / "launcher.pid"
    holder = (f"import os, time; b = bytearray(1 << 28); open({str(started)!r}, 'w').write(str(os.getpid())); "
              "time.sleep(60)")
    script = _launched(tmp_path, shutil.which("sh") or "/bin/sh", "-c", f"{sys.executable} -c \"{holder}\" & wait")
    while not started.exists() or not started.read_text().strip():
        time.sleep(0.01)
    launcher = int(started.read_text())
    script.discard(timeout=30)
    assert script.proc.returncode == -signal.SIGKILL
    assert not _alive(launcher)
