"""The driver's JVM, launched before its SparkContext is asked for (`eos run` launches it before loading the job).

A driver's JVM takes ~1.3 s to start (spark-submit's launcher JVM, then Spark's own, up to its Py4J gateway), and
only then can the SparkContext start in it. PySpark launches it when the context is created, after the driver
has imported what it needs, loaded the job and checked it. `LaunchedJvm` launches it as PySpark does
(`pyspark.java_gateway.launch_gateway`: spark-submit with the context's settings as `--conf`, told where to
write the gateway's port and secret, stdin a pipe whose end tells it the driver is gone), so that the two
starts overlap; `context()` connects to it through PySpark's own code (as to the JVM of a driver that
spark-submit launched) and creates the context there.

spark-submit's scripts start a JVM of their own first (Spark's launcher, ~0.3 s) only to print the java command
to run. Where the scripts can read nothing but what the launch is keyed on (an empty configuration directory:
no `spark-env.sh`), the first launch records that command and what the scripts added to the environment, read
from the JVM's `/proc` entry once it runs, and the next launch with the same arguments, environment, Java,
jars and scripts runs it directly (`LaunchedJvm.recorded`; off with `spark.eos.launchRecord=false`). The record
lives beside the class-data archive (`eos.driver.classdata.cache_root`); one whose JVM does not start is
removed.

Only what the launch needs is imported here (no pyspark): the point is to launch early.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eos.driver.classdata import cache_root, classpath, spark_home

if TYPE_CHECKING:
    from pyspark import SparkConf, SparkContext

__all__ = ["LaunchedJvm", "launch_environment", "RECORD_KEY"]

#: Spark setting: whether a launch may run the java command recorded from an earlier launch of the same
#: (`--spark-conf spark.eos.launchRecord=false`: always through spark-submit's scripts and launcher)
RECORD_KEY = "spark.eos.launchRecord"

#: environment variables the launch of a driver's JVM depends on (spark-submit's scripts and PySpark read them)
_LAUNCH_PREFIXES = ("SPARK_", "PYSPARK_", "JAVA_", "HADOOP_", "YARN_")


def launch_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of `env` (default: this process's) that a driver JVM's launch depends on."""
    env = os.environ if env is None else env
    return {k: v for k, v in env.items() if k.startswith(_LAUNCH_PREFIXES) or k == "CLASSPATH"}


def _ignore_sigint() -> None:  # a Ctrl-C at the terminal is the driver's to handle (as PySpark launches it)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class LaunchedJvm:
    """A driver JVM launched with `settings` (the context's Spark settings but its application name) in the
    driver's environment `env` with `overrides` (what the context would set for its launch only), its gateway
    not yet connected. `settings` and `launched_with` say what it was launched for; a context that wants
    anything else discards it (`discard`) and launches its own."""

    #: the socket of the daemon's zygote that `env` names to the JVM (set by the launching driver), if any
    zygote_socket: str | None = None

    def __init__(self, settings: Mapping[str, str], env: Mapping[str, str],
                 overrides: Mapping[str, str] | None = None) -> None:
        self.settings = dict(settings)
        self.launched_with = launch_environment(env)
        env = {**env, **(overrides or {})}
        arguments: list[str] = []
        for key, value in self.settings.items():
            arguments += ["--conf", f"{key}={value}"]
        submit_args = env.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell")
        if env.get("SPARK_TESTING"):
            submit_args = f"--conf spark.ui.enabled=false {submit_args}"
        arguments += shlex.split(submit_args)
        self._passed = {**env, "SPARK_CONNECT_MODE": "0"}
        self._record_file = (_record_file(arguments, env)
                             if str(self.settings.get(RECORD_KEY, "true")).lower() != "false" else None)
        recorded = _recorded(self._record_file) if self._record_file is not None else None
        #: whether the JVM was started with the java command spark-submit's launcher gave for the same launch before
        self.recorded = recorded is not None
        if recorded is not None:
            command = recorded["command"]
            launch_env = {**{k: v for k, v in self._passed.items() if k not in recorded["unset"]}, **recorded["env"]}
        else:
            command = [os.path.join(spark_home(), "bin", "spark-submit"), *arguments]
            launch_env = self._passed
        self._conn_dir = tempfile.mkdtemp(prefix="eos-jvm-")
        self._conn_file = os.path.join(self._conn_dir, "gateway")
        try:
            # Its stderr (its start-up lines; later Spark's log and, through Spark, the Python workers' stderr) is
            # held in a pipe until a context takes it (`context`, which passes it on to this process's stderr):
            # a run that fails its checks meanwhile ends with its error, not with the lines of a JVM it ends.
            self.proc = subprocess.Popen(
                command, stdin=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_ignore_sigint,
                env={**launch_env, "_PYSPARK_DRIVER_CONN_INFO_PATH": self._conn_file})
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
        if not self.wait_ready(timeout):
            self.discard()
            if self.recorded and self._record_file is not None:
                self._record_file.unlink(missing_ok=True)  # (the next launch goes through spark-submit again)
            raise PySparkRuntimeError(errorClass="JAVA_GATEWAY_EXITED", messageParameters={})
        try:
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

    def wait_ready(self, timeout: float = 120.0) -> bool:
        """Wait until the JVM's gateway has written where it listens (False: the JVM exited first, or the time
        ran out). Then, launched by spark-submit, the process is the JVM its launcher gave the command of: that
        command and what the scripts added to the environment are recorded for the next launch of the same."""
        deadline = time.monotonic() + timeout
        while not os.path.isfile(self._conn_file):  # (PySpark polls every 100 ms)
            if self.proc.poll() is not None or time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        if not self.recorded and self._record_file is not None:
            _record(self._record_file, self.proc.pid, self._passed)
        return True

    def discard(self, timeout: float = 10.0) -> None:
        """Stop the JVM, dropping what it wrote to stderr unless a context took it: it exits when its stdin closes
        (PySpark's gateway server watches it). One that is already `java` is sent SIGTERM, and ends at once, its
        shutdown hooks run; spark-submit's scripts still running their launcher (whose JVM would first finish
        its start, ~1 s and ~2 CPU-s of a run that failed its checks) are killed with the launcher."""
        for stream in (self.proc.stdin, self.proc.stderr):
            if stream is not None and not stream.closed:
                stream.close()
        if self.proc.poll() is None:
            if _runs_java(self.proc.pid):
                with contextlib.suppress(ProcessLookupError):
                    self.proc.terminate()
            elif os.path.isdir(f"/proc/{self.proc.pid}"):  # (where processes cannot be seen, it ends by itself)
                self._kill()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._kill()
            self.proc.wait()
        shutil.rmtree(self._conn_dir, ignore_errors=True)

    def _kill(self) -> None:
        """SIGKILL the launched process and those below it (a shell's launcher JVM: killing the shell alone would
        leave it running), and wait until they are gone. The shell is stopped first, so that it starts nothing
        after its processes are listed; a killed grandchild is not this process's to reap, and a JVM takes a
        while to give its memory back: without the wait, a run that failed at once ended while its launcher's
        JVM was still exiting."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGSTOP)
        below = _descendants(self.proc.pid)
        for pid in [*below, self.proc.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _wait_gone(below, KILLED_WAIT_S)


#: How long a killed launch's processes are waited for (a JVM's exit takes milliseconds, more under load)
KILLED_WAIT_S = 10.0


def _wait_gone(pids: list[int], timeout: float) -> None:
    """Wait until none of `pids` is alive: gone from /proc, or a zombie its new parent has yet to reap."""
    deadline = time.monotonic() + timeout
    while (alive := [pid for pid in pids if _alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.01)
        pids = alive


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _descendants(pid: int) -> list[int]:
    """The processes below `pid` (its children, theirs, ...), as /proc lists them now; none where it cannot."""
    parents: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc") if os.path.isdir("/proc") else ()):
        try:
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], list(parents.get(pid, ()))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(parents.get(child, ()))
    return found


def _runs_java(pid: int) -> bool:
    """Whether process `pid` runs a `java` executable (not a shell running spark-submit's scripts, whose launcher
    JVM a signal to the shell would leave behind). False where that cannot be told (no /proc)."""
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")).startswith("java")
    except OSError:
        return False


# ------------------------------------------------------------------------------- spark-submit's command, recorded
#: Changes when the way launches are recorded changes, so that older records are not used
_RECORD_FORMAT = "1"
#: Spark's launch scripts (spark-submit runs spark-class, which sources the others and runs the launcher)
_SCRIPTS = ("spark-submit", "spark-class", "load-spark-env.sh", "find-spark-home")
#: variables a shell sets for itself, not for the programs it runs
_SHELLS_OWN = ("_", "SHLVL", "PWD", "OLDPWD")


def _record_file(arguments: list[str], env: Mapping[str, str]) -> Path | None:
    """Where the launch of spark-submit with `arguments` in `env` is recorded: a digest of everything spark-submit's
    scripts and launcher read to make the JVM's command (the Java, Spark's jars, its configuration directory,
    which must be empty, the scripts themselves, the arguments and the launch's environment). None where no
    record can be trusted: a configuration directory with files in it (`spark-env.sh` can set anything), or
    no Linux `/proc` to read the command from."""
    if not os.path.isdir("/proc/self"):
        return None
    try:
        cp = classpath()
        if cp.digest is None:
            return None
        digest = hashlib.sha256(f"{_RECORD_FORMAT}\0{cp.digest}\0".encode())
        bin_dir = spark_home() / "bin"
        for script in _SCRIPTS:
            stat = os.stat(bin_dir / script)
            digest.update(f"{script}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    except OSError:
        return None
    digest.update(json.dumps([arguments, sorted(launch_environment(env).items())]).encode())
    return cache_root() / f"launch-{digest.hexdigest()[:24]}.json"


def _recorded(path: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    command, env, unset = record.get("command"), record.get("env"), record.get("unset")
    if not (isinstance(command, list) and command and isinstance(env, dict) and isinstance(unset, list)
            and os.access(command[0], os.X_OK)):
        return None
    return {"command": command, "env": env, "unset": unset}


def _record(path: Path, pid: int, passed: Mapping[str, str]) -> None:
    """Record the command and environment of process `pid`, the JVM spark-submit's launcher made (spark-class
    ends in `exec` of it), as what differs from the environment `passed` to spark-submit. Best effort: a launch
    that cannot be recorded is made by spark-submit again next time."""
    try:
        command = [part.decode() for part in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]]
        environ = dict(entry.decode().split("=", 1) for entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                       if b"=" in entry)
    except (OSError, UnicodeDecodeError):
        return
    if "org.apache.spark.deploy.SparkSubmit" not in command or not os.path.isabs(command[0]):
        return  # (not the JVM: a launch that failed, or a wrapper of Spark's scripts)
    environ.pop("_PYSPARK_DRIVER_CONN_INFO_PATH", None)
    added = {k: v for k, v in environ.items() if passed.get(k) != v and k not in _SHELLS_OWN}
    unset = sorted(k for k in passed if k not in environ)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.stem + ".", dir=path.parent)
        with os.fdopen(fd, "w") as out:
            json.dump({"command": command, "env": added, "unset": unset}, out)
        os.replace(tmp, path)
    except OSError:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
