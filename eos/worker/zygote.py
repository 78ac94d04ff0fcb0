"""A warm start for the Python daemon of a local master: a process that imports what the daemon imports
while Spark's JVM is still starting, and forks the daemon when Spark launches it.

Spark starts its Python daemon (`eos.worker.daemon` on local masters) when the first Python task runs: after
the driver's JVM and SparkContext are up. Its imports (PySpark's worker loop and the framework's task code,
~0.4-0.6 s of CPU) then sit between the context and the first task. The driver of a local master starts this
zygote beside the JVM (`python -m eos.worker.zygote SOCKET`, `start_zygote`), or forks it from itself where
it can (`fork_zygote`: `eos run`, before it loads the job; the two then share the modules both import), and
names its socket in `$EOS_DAEMON_ZYGOTE`, which the JVM and so the daemon Spark launches inherit. That
daemon, instead of importing, hands the zygote what Spark gave it (its stdin, stdout and stderr,
environment, arguments, working directory and module path) and the zygote forks; the child takes them on and
runs PySpark's daemon loop, which forks the workers as always. The launched process stays as the daemon Spark
knows, as `cat -u`: the child's stdin is a pipe from it, which relays Spark's and ends when it ends
(`eos.worker.daemon.stand_in`).

The zygote serves one daemon, and exits when the driver does (its stdin closes). It refuses a
request (the daemon then imports by itself, as without it) when the two would not import the same code:
another Python, another `pyspark` or `eos` than the one the zygote loaded, or other settings read only when
Python starts (hash seed, unbuffered output, bytecode writing), which the driver gives the zygote as PySpark
gives its workers. Like the daemon's own preload, nothing the zygote imports starts a thread, so the fork
copies a whole process.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import io
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Sequence
from typing import Any

__all__ = ["ZYGOTE_ENV", "ForkedZygote", "forkable", "fork_zygote", "start_zygote", "zygote_socket_path",
           "request_daemon", "serve"]

#: the zygote's socket, for the daemon Spark launches
ZYGOTE_ENV = "EOS_DAEMON_ZYGOTE"
#: the largest request a daemon sends (its environment, arguments and path, as JSON)
_MAX_REQUEST = 1 << 20


def _pyspark_startup() -> dict[str, str]:
    """Settings Python reads only when it starts (a daemon forked from the zygote must have them as the zygote
    has), as PySpark gives them to its daemon and workers."""
    return {"PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0"), "PYTHONUNBUFFERED": "YES",
            "PYTHONDONTWRITEBYTECODE": "1"}


def _module_file(name: str, path: list[str]) -> str | None:
    """Where `name` (a top-level package) would be imported from on `path`, without importing it."""
    saved = sys.path[:]
    try:
        sys.path[:] = path
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    finally:
        sys.path[:] = saved
    return spec.origin if spec is not None else None


def _identity(path: list[str]) -> dict[str, Any]:
    """What must be equal between the daemon and the zygote for the zygote's imports to be the daemon's."""
    return {"executable": os.path.realpath(sys.executable),
            "pyspark": _module_file("pyspark", path), "eos": _module_file("eos", path),
            "startup": {key: os.environ.get(key) for key in _pyspark_startup()}}


# ---------------------------------------------------------------------------------------------- the driver side
#: a zygote's directory in the temporary directory: this prefix, then the pid of the driver it serves and a dash
_DIRECTORY_PREFIX = "eos-zygote-"
#: the temporary directories this process has looked through for the zygote directories of dead drivers
_LOOKED_THROUGH: set[str] = set()


def zygote_socket_path() -> str:
    """A new socket path for a zygote, in a directory of its own, named after this process, the driver the zygote
    serves (the zygote removes it when it ends). A process's first call removes the directories left by drivers
    that are gone (`remove_left_behind`)."""
    base = tempfile.gettempdir()
    if base not in _LOOKED_THROUGH:
        _LOOKED_THROUGH.add(base)
        remove_left_behind(base)
    return os.path.join(tempfile.mkdtemp(prefix=f"{_DIRECTORY_PREFIX}{os.getpid()}-", dir=base), "socket")


def remove_left_behind(base: str) -> None:
    """Remove the zygote directories in `base` whose driver is no longer running. A zygote ends with its driver
    and removes its directory as it ends, or as soon as it has forked its daemon; a directory stays only when both
    were killed outright (SIGKILL to the job's processes, a node's crash) or the driver died between making the
    directory and forking the zygote. Only this user's directories named after a pid that no process has now are
    removed (a pid reused since keeps its directory, which costs nothing)."""
    try:
        entries = list(os.scandir(base))
    except OSError:
        return
    for entry in entries:
        pid = entry.name[len(_DIRECTORY_PREFIX):].split("-", 1)[0]
        if not (entry.name.startswith(_DIRECTORY_PREFIX) and pid.isdigit()) or _running(int(pid)):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
        except OSError:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)


def _running(pid: int) -> bool:
    """Whether a process with this pid exists (of any user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # (another user's: it exists)
        return True
    return True


def start_zygote(socket_path: str | None = None) -> subprocess.Popen[bytes]:
    """Start a zygote for the daemon of the local master whose JVM this process is about to launch (or has
    launched naming `socket_path`), and name its socket in this process's environment, which a JVM launched
    later inherits. The zygote gets Python's start-up settings as PySpark gives them to its daemon and workers."""
    if socket_path is None:
        socket_path = zygote_socket_path()
    env = {**os.environ, **_pyspark_startup()}
    env.pop(ZYGOTE_ENV, None)
    zygote = subprocess.Popen([sys.executable, "-m", "eos.worker.zygote", socket_path], stdin=subprocess.PIPE,
                              env=env)
    os.environ[ZYGOTE_ENV] = socket_path
    return zygote


# ------------------------------------------------------------------------------------ a zygote forked from the driver
class ForkedZygote:
    """A zygote forked from the driver itself (`fork_zygote`). Like the `Popen` of a started one: `poll()`; and
    `name()` names its socket for the JVM about to be launched, `stop()` ends it unused."""

    def __init__(self, pid: int, pipe: int, socket_path: str) -> None:
        self.pid, self.socket_path = pid, socket_path
        self.returncode: int | None = None
        self._pipe = pipe  # the write end of the zygote's stdin: it exits when this closes (with this process)

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # (reaped elsewhere)
                pid, status = self.pid, 0
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def name(self) -> None:
        os.environ[ZYGOTE_ENV] = self.socket_path

    def stop(self) -> None:
        if self._pipe >= 0:
            os.close(self._pipe)
            self._pipe = -1
        if self.returncode is None:
            try:
                self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
            except ChildProcessError:
                self.returncode = 0


def forkable() -> bool:
    """Whether a fork of this process can be the daemon's zygote: one OS thread (a fork copies only the thread
    that forks; Linux's /proc tells, elsewhere the answer is no), and strings hashed as PySpark's workers hash
    them (PYTHONHASHSEED=0 at start-up, which PySpark gives its workers unless the environment sets another)."""
    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError:
        return False
    return threads == 1 and not sys.flags.hash_randomization and os.environ.get("PYTHONHASHSEED", "0") == "0"


def fork_zygote(socket_path: str | None = None, driver_only: Sequence[int] = ()) -> ForkedZygote | None:
    """Fork the daemon's zygote from this process (`forkable`), which has imported much of what the daemon and
    its workers import: both then share those pages instead of holding a copy each. The objects made so far
    are frozen out of this process's collector (`gc.freeze`), whose passes would otherwise write to, and so
    copy, the pages the zygote shares. None when the process cannot be forked: start one (`start_zygote`).

    `socket_path`: where to listen (a JVM launched already names it); `driver_only`: descriptors of the driver's
    that the zygote closes, such as the pipe whose end tells the driver's JVM that the driver is gone (its daemon
    and workers, forked from the zygote, would otherwise hold that JVM up after the driver's death)."""
    if not forkable():
        return None
    if socket_path is None:
        socket_path = zygote_socket_path()
    directory = os.path.dirname(socket_path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stdin = pipe = -1
    try:
        listener.bind(socket_path)
        listener.listen(8)
        stdin, pipe = os.pipe()
        for stream in (sys.stdout, sys.stderr):  # (else what they hold would be written twice)
            with contextlib.suppress(Exception):
                stream.flush()
        gc.freeze()
        pid = os.fork()
    except OSError:  # (no socket, pipe or process to be had: the caller starts a zygote, or goes without)
        for fd in (stdin, pipe):
            if fd >= 0:
                os.close(fd)
        listener.close()
        shutil.rmtree(directory, ignore_errors=True)
        return None
    if pid == 0:
        code = 1
        try:
            for fd in (pipe, *driver_only):
                with contextlib.suppress(OSError):
                    os.close(fd)
            _start_afresh(stdin)
            serve(socket_path, listener)
            code = 0
        except BaseException:  # on the driver's stderr
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(stdin)
    listener.close()
    return ForkedZygote(pid, pipe, socket_path)


#: the driver's standard streams, replaced in its fork but not closed
_DRIVERS_STREAMS: list[Any] = []


def _start_afresh(stdin: int) -> None:
    """In a zygote forked from the driver, what one started as `python -m eos.worker.zygote` has: stdin the pipe
    from the driver; Python's signal handlers, not the driver's; PySpark's start-up settings in the environment
    and in effect (output unbuffered, no bytecode written; the hash seed `forkable` checked); no logging set-up."""
    from eos.logs import reset_logging

    os.dup2(stdin, 0)
    os.close(stdin)
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _DRIVERS_STREAMS.extend((sys.stdout, sys.stderr))
    sys.stdout, sys.stderr = _unbuffered(1, sys.stdout, "strict"), _unbuffered(2, sys.stderr, "backslashreplace")
    sys.dont_write_bytecode = True
    os.environ.update(_pyspark_startup())
    os.environ.pop(ZYGOTE_ENV, None)
    reset_logging()


def _unbuffered(fd: int, was: Any, errors: str) -> io.TextIOWrapper:
    """A standard stream as `python -u` makes it: text written straight through to the descriptor."""
    return io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding=getattr(was, "encoding", None) or "utf-8",
                            errors=errors, write_through=True)


# ---------------------------------------------------------------------------------------------- the daemon side
def request_daemon(socket_path: str, path: list[str], timeout: float = 10.0, stdin: int = 0) -> int | None:
    """Ask the zygote at `socket_path` to fork this daemon, with the descriptor `stdin` as its stdin, this
    process's stdout and stderr, environment, arguments, working directory and module path `path`. Returns the
    forked daemon's pid, or None when the zygote is not there or refused (the caller then runs the daemon
    itself)."""
    env = {k: v for k, v in os.environ.items() if k != ZYGOTE_ENV}  # a daemon launched again goes alone
    request = json.dumps({"identity": _identity(path), "env": env, "argv": sys.argv,
                          "cwd": os.getcwd(), "path": path}).encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(socket_path)
            socket.send_fds(conn, [len(request).to_bytes(4, "big") + request], [stdin, 1, 2])
            reply = conn.recv(64).decode()
    except OSError:
        return None
    return int(reply[3:]) if reply.startswith("ok ") else None


# ---------------------------------------------------------------------------------------------- the zygote side
def serve(socket_path: str, listener: socket.socket | None = None) -> None:
    """Import the daemon's modules, fork one daemon for the first request that can use them, then wait for the
    driver to exit (stdin, a pipe from the driver, closes), so that the daemon stays among the driver's
    descendants, where tools that look for a job's processes find it (`chaos.processes`). `listener`: bound to
    `socket_path` already (a zygote forked from the driver)."""
    from eos.worker.daemon import prefer_installed_pyspark, preload

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C at the driver's terminal is the driver's to handle
    served = False
    if listener is None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(socket_path)  # before importing: a daemon that comes early waits instead of going alone
        listener.listen(8)
    with listener:
        try:
            sys.path[:] = prefer_installed_pyspark(sys.path)
            from pyspark import daemon  # noqa: F401  (what the forked daemon runs)

            preload()
            own = _identity(sys.path)
            while not served:
                ready = select.select([listener, sys.stdin], [], [])[0]
                if sys.stdin in ready and not os.read(sys.stdin.fileno(), 1024):
                    return  # the driver is gone
                if listener in ready:
                    conn, _ = listener.accept()
                    with conn:
                        served = _fork_daemon(conn, own, listener)
        finally:
            try:
                os.unlink(socket_path)  # a daemon Spark launches again goes alone
                os.rmdir(os.path.dirname(socket_path))
            except OSError:
                pass
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the daemon is reaped when it exits
    while os.read(sys.stdin.fileno(), 1024):
        pass


def _fork_daemon(conn: socket.socket, own: dict[str, Any], listener: socket.socket) -> bool:
    """Serve one request; True when a daemon was forked (in this, the zygote's, process)."""
    conn.settimeout(10)
    try:
        data, fds, _flags, _addr = socket.recv_fds(conn, _MAX_REQUEST, 3)
        size = int.from_bytes(data[:4], "big")
        while len(data) < size + 4:
            more = conn.recv(_MAX_REQUEST)
            if not more:
                raise OSError("the daemon's request ended early")
            data += more
        request = json.loads(data[4:size + 4])
    except (OSError, ValueError):
        return False
    try:
        if len(fds) != 3 or request.get("identity") != own:
            conn.sendall(b"no")
            return False
        pid = os.fork()
        if pid == 0:
            listener.close()
            conn.close()
            _become_daemon(request, fds)  # never returns
        conn.sendall(f"ok {pid}".encode())
        return True
    finally:
        for fd in fds:
            os.close(fd)


def _become_daemon(request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: take on the launched daemon's descriptors, environment, arguments, directory and
    path, then run PySpark's daemon loop."""
    code = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.argv[:] = request["argv"]
        sys.path[:] = request["path"]
        # (sys.stdin, stdout and stderr are the zygote's objects, unbuffered as PySpark starts its daemon, on
        # descriptors 0-2, which now are Spark's pipes)
        from pyspark import daemon

        from eos.worker.daemon import quiet_closed_connections

        quiet_closed_connections(daemon)
        daemon.manager()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # reported on the daemon's stderr, which Spark logs
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def main() -> None:
    serve(sys.argv[1])


if __name__ == "__main__":
    main()
