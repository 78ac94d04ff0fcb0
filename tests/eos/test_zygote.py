"""The daemon zygote (eos.worker.zygote): a daemon launched as Spark launches it is forked from the zygote with
the launched process's pipes, environment and arguments, and answers on them as PySpark's daemon does; the
launched process stands for it until it exits. A zygote that would not import the same code refuses, and the
daemon runs by itself. No Spark here: the test plays the JVM's part (reads the daemon's port from its stdout,
closes its stdin to stop it)."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time

import pytest

from chaos.processes import alive
from eos.worker.daemon import STAND_IN
from eos.worker.zygote import ZYGOTE_ENV, start_zygote

SPARK_ENV = {"PYTHONHASHSEED": "0", "PYTHONUNBUFFERED": "YES", "PYTHONDONTWRITEBYTECODE": "1",
             "SPARK_REUSE_WORKER": "1", "PYTHON_WORKER_FACTORY_SECRET": "secret"}


@pytest.fixture
def zygote(monkeypatch):
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    monkeypatch.delenv(ZYGOTE_ENV, raising=False)
    proc = start_zygote()
    path = os.environ[ZYGOTE_ENV]
    monkeypatch.delenv(ZYGOTE_ENV)  # (start_zygote names it in this process's environment, for the JVM)
    deadline = time.monotonic() + 30
    while not os.path.exists(path):
        assert proc.poll() is None and time.monotonic() < deadline, "the zygote did not listen"
        time.sleep(0.01)
    yield proc, path
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def _launch(socket_path: str, **env: str) -> subprocess.Popen[bytes]:
    """`python -m eos.worker.daemon pyspark.worker`, as Spark launches a local master's daemon."""
    return subprocess.Popen([sys.executable, "-m", "eos.worker.daemon", "pyspark.worker"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env={**os.environ, **SPARK_ENV, ZYGOTE_ENV: socket_path, **env})


def _port(daemon: subprocess.Popen[bytes]) -> int:
    assert daemon.stdout is not None
    return struct.unpack(">i", daemon.stdout.read(4))[0]


def _daemon_pid(port: int) -> int:
    """The pid of the process listening on `port` (the daemon loop that wrote it)."""
    inode = next(line.split()[9] for name in ("/proc/net/tcp",) for line in open(name).readlines()[1:]
                 if int(line.split()[1].split(":")[1], 16) == port and line.split()[3] == "0A")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inode}]" for fd in os.listdir(f"/proc/{pid}/fd")):
                return int(pid)
        except OSError:
            continue
    raise AssertionError(f"no process listens on {port}")


def _worker_answers(port: int, secret: bytes = b"secret") -> bytes:
    """Ask the daemon for a worker as the JVM does and authenticate; the worker's answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        stream = conn.makefile("rwb")
        struct.unpack(">i", stream.read(4))  # the worker's pid
        stream.write(struct.pack(">i", len(secret)) + secret)
        stream.flush()
        return stream.read(struct.unpack(">i", stream.read(4))[0])


def _parent(pid: int) -> int:
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])


def _wait_ended(pid: int, what: str, timeout: float = 10) -> None:
    """Until `pid` has exited (a zombie counts). `alive` reads /proc once and takes a process gone while it reads as
    ended: a check of the directory and then a read of its stat could see the process between the two vanish
    (ProcessLookupError), which failed this test once on a loaded machine."""
    deadline = time.monotonic() + timeout
    while alive(pid):
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _stand_in_command(pid: int) -> list[str]:
    """The command line `pid` runs once it has become the stand-in (`cat -u`)."""
    deadline = time.monotonic() + 10
    while (command := open(f"/proc/{pid}/cmdline").read().split("\0")[:-1]) != list(STAND_IN):
        assert time.monotonic() < deadline, command
        time.sleep(0.01)
    return command


def test_the_launched_daemon_is_forked_from_the_zygote_and_stops_when_spark_closes_its_stdin(zygote):
    proc, path = zygote
    launched = _launch(path)
    port = _port(launched)
    daemon = _daemon_pid(port)
    assert daemon != launched.pid and _parent(daemon) == proc.pid  # the zygote's fork runs the daemon loop
    assert _worker_answers(port) == b"ok"  # its worker knows Spark's secret: the environment is the launched one
    assert not os.path.exists(path)  # one daemon served: a daemon Spark launches again goes alone
    assert proc.poll() is None  # until the driver exits, the daemon stays among its descendants
    assert launched.poll() is None  # it stands for the daemon, as `cat -u`, in a process group of its own
    _stand_in_command(launched.pid)
    assert os.getpgid(launched.pid) == launched.pid
    assert launched.stdin is not None
    launched.stdin.close()  # how Spark stops its daemon
    assert launched.wait(10) == 0
    _wait_ended(daemon, "the forked daemon outlived its stdin")


def test_a_worker_spark_asks_to_kill_is_killed_through_the_stand_in(zygote):
    _proc, path = zygote
    launched = _launch(path)
    port = _port(launched)
    _stand_in_command(launched.pid)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        stream = conn.makefile("rwb")
        worker = struct.unpack(">i", stream.read(4))[0]
        stream.write(struct.pack(">i", 6) + b"secret")
        stream.flush()
        assert stream.read(struct.unpack(">i", stream.read(4))[0]) == b"ok"
        assert launched.stdin is not None
        launched.stdin.write(struct.pack(">i", worker))  # PythonWorkerFactory.stopWorker: the pid on the stdin
        launched.stdin.flush()
        _wait_ended(worker, "the worker Spark asked the daemon to kill lives on")
    assert launched.poll() is None
    launched.stdin.close()
    assert launched.wait(10) == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_spark_destroying_the_launched_daemon_ends_the_forked_one(zygote, sig):
    _proc, path = zygote
    launched = _launch(path)
    daemon = _daemon_pid(_port(launched))
    _stand_in_command(launched.pid)
    launched.send_signal(sig)  # Process.destroy(), or destroyForcibly()
    assert launched.wait(10) == -sig
    _wait_ended(daemon, "the forked daemon outlived the destroyed one")


def test_after_the_forked_daemon_was_killed_the_stand_in_ends_quietly_at_sparks_next_request(zygote):
    _proc, path = zygote
    launched = subprocess.Popen([sys.executable, "-m", "eos.worker.daemon", "pyspark.worker"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env={**os.environ, **SPARK_ENV, ZYGOTE_ENV: path})
    daemon = _daemon_pid(_port(launched))
    _stand_in_command(launched.pid)
    os.kill(daemon, signal.SIGKILL)
    _wait_ended(daemon, "SIGKILL")
    assert launched.poll() is None  # (as PySpark's own daemon's would be: Spark finds it gone when it connects)
    assert launched.stdin is not None and launched.stderr is not None
    launched.stdin.write(struct.pack(">i", 12345))  # a worker to kill, for a daemon no longer there
    launched.stdin.flush()
    assert launched.wait(10) == -signal.SIGPIPE
    assert launched.stderr.read() == b""  # not "cat: write error: Broken pipe" in the executor's log


# the launched daemon, destroyed by Spark at a moment of its own (the forked daemon answers on its port, by which
# Spark finds it, before the zygote has answered the launched process), with the zygote at `sys.argv[1]`; the
# forked daemon's pid on its stderr
DESTROYED_MEANWHILE = """
import os, signal, sys
import eos.worker.daemon as d

def then(call, destroyed):
    def meanwhile(*args, **kwargs):
        result = call(*args, **kwargs)
        if call is request:
            print(result, file=sys.stderr, flush=True)
        if destroyed:
            os.kill(os.getpid(), signal.SIGTERM)
        return result
    return meanwhile

request = d.request_daemon
d.request_daemon = then(request, sys.argv[2] == "request")  # the daemon forked, the zygote's answer not yet taken
d.os.setpgid = then(d.os.setpgid, sys.argv[2] == "exec")  # about to become `cat`
d.main()
"""


@pytest.mark.parametrize("moment", ["request", "exec"])
def test_a_launched_daemon_destroyed_before_it_stands_in_ends_the_forked_one(zygote, moment):
    _proc, path = zygote
    launched = subprocess.Popen([sys.executable, "-c", DESTROYED_MEANWHILE, path, moment], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env={**os.environ, **SPARK_ENV, ZYGOTE_ENV: path})
    assert launched.stderr is not None
    daemon = int(launched.stderr.readline())
    assert launched.wait(10) == -signal.SIGTERM
    assert launched.stdin is not None and not launched.stdin.closed  # (the test, as Spark, holds it open)
    _wait_ended(daemon, "the forked daemon outlived the launched one")


def test_without_cat_the_launched_daemon_relays_by_itself(zygote):
    _proc, path = zygote
    launched = _launch(path, PATH="/nowhere")
    port = _port(launched)
    daemon = _daemon_pid(port)
    assert _worker_answers(port) == b"ok"
    assert launched.poll() is None and open(f"/proc/{launched.pid}/cmdline").read().split("\0")[1:3] == [
        "-m", "eos.worker.daemon"]
    assert launched.stdin is not None
    launched.stdin.close()
    assert launched.wait(10) == 0
    _wait_ended(daemon, "the forked daemon outlived its stdin")


def test_a_daemon_with_other_start_up_settings_runs_by_itself_and_the_zygote_waits(zygote):
    proc, path = zygote
    launched = _launch(path, PYTHONHASHSEED="7")  # the zygote's string hashes would not be this daemon's
    assert _daemon_pid(_port(launched)) == launched.pid
    assert proc.poll() is None and os.path.exists(path)
    assert launched.stdin is not None
    launched.stdin.close()
    launched.wait(10)  # (PySpark's daemon loop exits with status 1 when its stdin closes)


def test_no_zygote_there_and_the_daemon_runs_by_itself(tmp_path):
    launched = _launch(str(tmp_path / "gone"))
    assert _daemon_pid(_port(launched)) == launched.pid
    assert launched.stdin is not None
    launched.stdin.close()
    launched.wait(10)


def test_the_zygote_exits_with_the_driver(zygote):
    proc, path = zygote
    assert proc.stdin is not None
    proc.stdin.close()  # the driver's end of the pipe: closed when the driver exits
    assert proc.wait(10) == 0 and not os.path.exists(path)


@pytest.mark.parametrize("master, conf", [
    ("local[2]", {"spark.python.daemon.module": "eos.worker.daemon", "spark.eos.daemonZygote": "false"}),
    ("local[2]", {"spark.python.daemon.module": "pyspark.daemon"}),
    ("local-cluster[2,1,1024]", {"spark.python.daemon.module": "eos.worker.daemon"}),
])
def test_a_jvm_launched_without_a_zygote_does_not_inherit_an_earlier_ones_socket(monkeypatch, master, conf):
    from pyspark import SparkContext

    from eos.driver import spark

    monkeypatch.setattr(SparkContext, "_gateway", None)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.setenv(ZYGOTE_ENV, "/tmp/an-earlier-contexts-zygote/socket")
    spark._start_zygote(master, conf)
    assert ZYGOTE_ENV not in os.environ


# A driver that writes a line it does not flush, forks the zygote (`fork_zygote`), names its socket and waits.
FORKING_DRIVER = """
import json, os, sys, threading, time
from eos.worker.zygote import fork_zygote
if sys.argv[1] == "thread":
    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
sys.stdout.write("written before the fork\\n")
zygote = fork_zygote()
print(json.dumps(zygote and {"pid": zygote.pid, "socket": zygote.socket_path}), flush=True)
if sys.argv[1] == "stop":
    zygote.stop()
    print(json.dumps({"stopped": zygote.returncode}), flush=True)
time.sleep(30)
"""


def _forking_driver(*args: str, **env: str) -> tuple[subprocess.Popen[str], dict | None]:
    driver = subprocess.Popen([sys.executable, "-c", FORKING_DRIVER, *args], stdout=subprocess.PIPE, text=True,
                              env={**{k: v for k, v in os.environ.items() if k != ZYGOTE_ENV}, **env})
    assert driver.stdout is not None
    assert driver.stdout.readline() == "written before the fork\n"
    return driver, json.loads(driver.stdout.readline())


def test_a_zygote_forked_from_the_driver_forks_the_daemon_spark_launches():
    driver, zygote = _forking_driver("serve", PYTHONHASHSEED="0")
    try:
        assert zygote is not None and _parent(zygote["pid"]) == driver.pid
        launched = _launch(zygote["socket"])
        port = _port(launched)
        daemon = _daemon_pid(port)
        assert _parent(daemon) == zygote["pid"] and _worker_answers(port) == b"ok"
        assert launched.stdin is not None
        launched.stdin.close()
        assert launched.wait(10) == 0
        driver.kill()  # the zygote ends with the driver (its pipe closes), without a word on the driver's stdout
        driver.wait()
        _wait_ended(zygote["pid"], "the forked zygote outlived the driver")
        assert driver.stdout is not None and driver.stdout.read() == ""  # the unflushed line was written once
    finally:
        driver.kill()
        driver.wait()


@pytest.mark.parametrize("case, env", [("thread", {"PYTHONHASHSEED": "0"}),  # a fork copies only its own thread
                                       ("serve", {"PYTHONHASHSEED": "random"}),  # not the workers' string hashes
                                       ("serve", {"PYTHONHASHSEED": "7"})])  # nor the seed PySpark gives them
def test_a_driver_that_cannot_be_forked_forks_no_zygote(case, env):
    driver, zygote = _forking_driver(case, **env)
    driver.kill()
    driver.wait()
    assert zygote is None


def test_an_unused_forked_zygote_stops_when_asked():
    driver, zygote = _forking_driver("stop", PYTHONHASHSEED="0")
    try:
        assert zygote is not None and driver.stdout is not None
        assert json.loads(driver.stdout.readline()) == {"stopped": 0}
        assert not os.path.exists(zygote["socket"])
    finally:
        driver.kill()
        driver.wait()


def test_a_forked_zygote_starts_afresh():
    # what a zygote started as its own process has, and the driver's fork must be given: stdin from the driver,
    # Python's signal handlers, unbuffered output, no bytecode written, PySpark's start-up settings, no logging
    probe = """
import json, os, signal, sys
from eos.logs import configure_logging
from eos.worker import zygote
configure_logging("console", "DEBUG")
signal.signal(signal.SIGTERM, lambda *a: None)
signal.signal(signal.SIGINT, signal.SIG_IGN)
os.environ[zygote.ZYGOTE_ENV] = "/tmp/an-earlier-zygote"
read, write = os.pipe()
os.write(write, b"from the driver")
zygote._start_afresh(read)
import eos.logs
print(json.dumps({"stdin": os.read(0, 100).decode(), "term": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
                  "int": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
                  "write_through": sys.stdout.write_through and sys.stderr.write_through,
                  "bytecode": sys.dont_write_bytecode, "zygote": os.environ.get(zygote.ZYGOTE_ENV),
                  "env": {k: os.environ.get(k)
                          for k in ("PYTHONHASHSEED", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE")},
                  "logging": eos.logs._configured}))
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False,
                          env={k: v for k, v in os.environ.items() if k not in ("PYTHONHASHSEED", "PYTHONUNBUFFERED")})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "stdin": "from the driver", "term": True, "int": True, "write_through": True, "bytecode": True, "zygote": None,
        "env": {"PYTHONHASHSEED": "0", "PYTHONUNBUFFERED": "YES", "PYTHONDONTWRITEBYTECODE": "1"}, "logging": None}


def test_a_fork_the_system_refuses_forks_no_zygote_and_leaves_nothing_behind(tmp_path):
    probe = ("import os, tempfile; from eos.worker import zygote\n"
             "def refused(): raise BlockingIOError(11, 'Resource temporarily unavailable')\n"
             "os.fork = refused\n"
             "print(zygote.fork_zygote(), os.listdir(tempfile.gettempdir()), len(os.listdir('/proc/self/fd')))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONHASHSEED": "0", "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split(" ", 2)[:2] == ["None", "[]"]  # no socket directory left
    assert int(done.stdout.split()[-1]) <= 4  # (0-2 and the listing's own): no listener or pipe left open


def test_a_stand_in_launched_with_sparks_signals_blocked_still_ends_when_destroyed(zygote):
    _proc, path = zygote
    blocked = ("import os, signal, sys; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGHUP})\n"
               "os.execv(sys.executable, [sys.executable, '-m', 'eos.worker.daemon', 'pyspark.worker'])")
    launched = subprocess.Popen([sys.executable, "-c", blocked], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                env={**os.environ, **SPARK_ENV, ZYGOTE_ENV: path})
    daemon = _daemon_pid(_port(launched))
    _stand_in_command(launched.pid)
    launched.send_signal(signal.SIGTERM)
    assert launched.wait(10) == -signal.SIGTERM
    _wait_ended(daemon, "the forked daemon outlived the destroyed one")


def test_the_next_driver_removes_the_directory_of_a_driver_killed_with_its_zygote(tmp_path):
    # a driver that starts a zygote, and is killed with it (as SIGKILL to a job's processes does): the
    # zygote's directory stays, named after the driver's pid
    driver = subprocess.Popen(
        [sys.executable, "-c", "import os, sys, time\nfrom eos.worker.zygote import start_zygote\n"
         "zygote = start_zygote()\nwhile not os.path.exists(os.environ['EOS_DAEMON_ZYGOTE']):\n    time.sleep(0.01)\n"
         "print(zygote.pid, os.environ['EOS_DAEMON_ZYGOTE'], flush=True)\ntime.sleep(60)"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp_path)}, start_new_session=True)
    assert driver.stdout is not None
    zygote_pid, left = driver.stdout.readline().split()
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait(10)
    deadline = time.monotonic() + 10
    while alive(int(zygote_pid)):
        assert time.monotonic() < deadline, "the zygote outlived the SIGKILL"
        time.sleep(0.01)
    left_dir = os.path.dirname(left)
    assert os.path.basename(left_dir).startswith(f"eos-zygote-{driver.pid}-") and os.path.exists(left)
    # what is not a dead driver's zygote directory stays: this process's, another's without a pid, a file
    running = tmp_path / f"eos-zygote-{os.getpid()}-kept"
    unnamed = tmp_path / "eos-zygote-abcd1234"
    a_file = tmp_path / f"eos-zygote-{driver.pid}-file"
    for directory in (running, unnamed):
        directory.mkdir()
        (directory / "socket").touch()
    a_file.touch()
    probe = ("import json, os; from eos.worker import zygote\n"
             "paths = [zygote.zygote_socket_path(), zygote.zygote_socket_path()]\n"
             "print(json.dumps([os.getpid(), paths, sorted(os.listdir(os.path.dirname(os.path.dirname(paths[0]))))]))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    pid, paths, listing = json.loads(done.stdout)
    assert not os.path.exists(left_dir)
    assert running.exists() and unnamed.exists() and a_file.exists()
    new = {os.path.basename(os.path.dirname(path)) for path in paths}
    assert len(new) == 2 and all(name.startswith(f"eos-zygote-{pid}-") for name in new)
    assert listing == sorted({*new, running.name, unnamed.name, a_file.name})
