"""The driver's JVM, launched before its SparkContext is asked for (`eos run` launches it before loading the job).

A driver's JVM takes ~1.3 s to start (spark-submit's launcher JVM, then Spark's own, up to its Py4J gateway), and
only then can the SparkContext start in it. PySpark launches it when the context is created, after the driver
has imported what it needs, loaded the job and checked it. `LaunchedJvm` launches it as PySpark does
(`pyspark.java_gateway.launch_gateway`: spark-submit with the context's settings as `--conf`, told where to
write the gateway's port and secret, stdin a pipe whose end tells it the driver is gone), so that the two
starts overlap; `context()` connects to it through PySpark's own code (as to the JVM of a driver that
spark-submit launched) and creates the context there.

Only what the launch needs is imported here (no pyspark): the point is to launch early.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from eos.driver.classdata import spark_home

if TYPE_CHECKING:
    from pyspark import SparkConf, SparkContext

__all__ = ["LaunchedJvm", "launch_environment"]

#: environment variables the launch of a driver's JVM depends on (spark-submit's scripts and PySpark read them)
_LAUNCH_PREFIXES = ("SPARK_", "PYSPARK_", "JAVA_", "HADOOP_", "YARN_")


def launch_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of `env` (default: this process's) that a driver JVM's launch depends on."""
    env = os.environ if env is None else env
    return {k: v for k, v in env.items() if k.startswith(_LAUNCH_PREFIXES) or k == "CLASSPATH"}


def _ignore_sigint() -> None:  # a Ctrl-C at the terminal is the driver's to handle (as PySpark launches it)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class LaunchedJvm:
    """A driver JVM launched with `settings` (the context's Spark settings but its application name) and the
    environment `env`, its gateway not yet connected. `settings` and `launched_with` say what it was launched
    for; a context that wants anything else discards it (`discard`) and launches its own."""

    #: the socket of the daemon's zygote that `env` names to the JVM (set by the launching driver), if any
    zygote_socket: str | None = None

    def __init__(self, settings: Mapping[str, str], env: Mapping[str, str]) -> None:
        self.settings = dict(settings)
        self.launched_with = launch_environment(env)
        self.launched_at = time.monotonic()
        command = [os.path.join(spark_home(), "bin", "spark-submit")]
        for key, value in self.settings.items():
            command += ["--conf", f"{key}={value}"]
        submit_args = env.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell")
        if env.get("SPARK_TESTING"):
            submit_args = f"--conf spark.ui.enabled=false {submit_args}"
        self._conn_dir = tempfile.mkdtemp(prefix="eos-jvm-")
        self._conn_file = os.path.join(self._conn_dir, "gateway")
        try:
            # Its stderr (its start-up lines; later Spark's log and, through Spark, the Python workers' stderr) is
            # held in a pipe until a context takes it (`context`, which passes it on to this process's stderr):
            # a run that fails its checks meanwhile ends with its error, not with the lines of a JVM it ends.
            self.proc = subprocess.Popen(
                [*command, *shlex.split(submit_args)], stdin=subprocess.PIPE, stderr=subprocess.PIPE,
                preexec_fn=_ignore_sigint,
                env={**env, "SPARK_CONNECT_MODE": "0", "_PYSPARK_DRIVER_CONN_INFO_PATH": self._conn_file})
        except BaseException:
            shutil.rmtree(self._conn_dir, ignore_errors=True)
            raise

    def driver_only_fds(self) -> tuple[int, ...]:
        """The descriptors a process forked from the driver must close: the write end of the JVM's stdin, whose
        closing tells the JVM that the driver is gone, and the read end of its stderr (held elsewhere, the JVM
        would neither fail nor block when it writes after the driver's death, but fill the pipe and hang)."""
        return tuple(stream.fileno() for stream in (self.proc.stdin, self.proc.stderr)
                     if stream is not None and not stream.closed)

    def _pass_stderr_on(self) -> None:
        """Copy the JVM's stderr to this process's, from now until the JVM closes it (a daemon thread)."""
        stderr, self.proc.stderr = self.proc.stderr, None  # the thread's from now on: it closes it at the end
        assert stderr is not None

        def copy() -> None:
            with stderr, contextlib.suppress(OSError):
                while chunk := os.read(stderr.fileno(), 1 << 16):
                    while chunk:
                        chunk = chunk[os.write(2, chunk):]

        threading.Thread(target=copy, name="eos-jvm-stderr", daemon=True).start()

    def fits(self, settings: Mapping[str, str]) -> bool:
        """Whether a context with `settings` (its application name aside), created now, can run in this JVM."""
        wanted = {k: v for k, v in settings.items() if k != "spark.app.name"}
        return (self.proc.poll() is None and wanted == self.settings
                and launch_environment() == self.launched_with)

    def context(self, conf: SparkConf, timeout: float = 120.0) -> SparkContext:
        """Wait for the JVM's gateway, connect to it as PySpark connects to a JVM spark-submit launched, and
        create the SparkContext with `conf` in it."""
        from pyspark import SparkContext
        from pyspark.errors import PySparkRuntimeError
        from pyspark.java_gateway import launch_gateway
        from pyspark.serializers import UTF8Deserializer, read_int

        self._pass_stderr_on()
        deadline = time.monotonic() + timeout
        try:
            while not os.path.isfile(self._conn_file):  # (PySpark polls every 100 ms)
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.discard()
                    raise PySparkRuntimeError(errorClass="JAVA_GATEWAY_EXITED", messageParameters={})
                time.sleep(0.01)
            with open(self._conn_file, "rb") as info:
                port, secret = read_int(info), UTF8Deserializer().loads(info)
        finally:
            shutil.rmtree(self._conn_dir, ignore_errors=True)
        saved = {k: os.environ.get(k) for k in ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET")}
        os.environ.update(PYSPARK_GATEWAY_PORT=str(port), PYSPARK_GATEWAY_SECRET=secret)
        try:
            gateway: Any = launch_gateway()  # connects (and imports PySpark's classes) without launching
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        gateway.proc = self.proc
        return SparkContext(conf=conf, gateway=gateway)

    def discard(self, timeout: float = 10.0) -> None:
        """Stop the JVM, dropping what it wrote to stderr unless a context took it: it exits when its stdin closes
        (PySpark's gateway server watches it)."""
        for stream in (self.proc.stdin, self.proc.stderr):
            if stream is not None and not stream.closed:
                stream.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self._conn_dir, ignore_errors=True)
