"""PySpark's Python daemon, started faster: `spark.python.daemon.module` of local masters.

Spark starts one daemon per executor at the first Python task, and the daemon forks a worker per task slot.
Spark puts `$SPARK_HOME/python/lib/pyspark.zip` (and py4j's zip) first on the daemon's path, and a module
imported from a zip is compiled from source at every start: importing PySpark's daemon took 1.9 s here,
against 0.45 s from the same release installed in site-packages (compiled once, at install). When the
executors' Python has that very release installed (local masters run the driver's Python), this daemon
puts the installed copy first, then imports PySpark's worker loop and the framework's task code once,
before forking, so that every worker starts with them loaded instead of importing them for its first task.
Anything unexpected leaves PySpark's own behaviour: the zips first, imports on demand.
"""

from __future__ import annotations

import gc
import importlib
import importlib.machinery
import os
import signal
import sys
import zipfile
from contextlib import suppress
from types import ModuleType
from typing import Any

from eos.worker.memory import cap_arenas
from eos.worker.zygote import ZYGOTE_ENV, request_daemon

__all__ = ["prefer_installed_pyspark", "preload", "quiet_closed_connections", "stand_in", "main", "PRELOADED",
           "STAND_IN"]

#: (module, file compared between the zip and the installed copy, zip name test)
_PACKAGES = (("pyspark", "version.py", lambda name: name == "pyspark.zip"),
             ("py4j", "version.py", lambda name: name.startswith("py4j-") and name.endswith("-src.zip")))


def _installed_file(package: str, path: list[str], name: str) -> bytes | None:
    spec = importlib.machinery.PathFinder.find_spec(package, path)
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        with open(os.path.join(next(iter(spec.submodule_search_locations)), name), "rb") as f:
            return f.read()
    except OSError:
        return None


def prefer_installed_pyspark(path: list[str]) -> list[str]:
    """`path` with Spark's pyspark and py4j zips moved behind the other entries, when those entries hold the
    same releases (the zips' and the installed `version.py` are equal); else `path` unchanged."""
    zips = {p for p in path for _, _, is_zip in _PACKAGES if is_zip(os.path.basename(p))}
    if not zips:
        return path
    rest = [p for p in path if p not in zips]
    for package, name, is_zip in _PACKAGES:
        archive = next((p for p in zips if is_zip(os.path.basename(p))), None)
        if archive is None:
            continue
        try:
            with zipfile.ZipFile(archive) as z:
                zipped = z.read(f"{package}/{name}")
        except (OSError, KeyError, zipfile.BadZipFile):
            return path
        if _installed_file(package, rest, name) != zipped:
            return path
    return rest + [p for p in path if p in zips]


#: What a worker imports for its first task: PySpark's worker loop, then the framework's task entry point.
#: Neither starts a thread when imported (a fork copies only the forking thread; tested), which is why
#: PySpark leaves its worker module to after the fork in general (pandas and pyarrow start threads).
PRELOADED = ("pyspark.worker", "eos.worker.entry")


def preload() -> None:
    """Import `PRELOADED`, then freeze what the imports made: the collector of a forked worker then never
    walks (and so never copies) the pages of those objects it shares with this process. The workers of the
    phases benchmark's stateless job held 172-174 MiB (PSS, together) against 195-197 (docs/measurements.md).
    The workers forked from here share at most `eos.worker.memory.ARENAS` malloc arenas."""
    cap_arenas()
    for module in PRELOADED:
        try:
            importlib.import_module(module)
        except Exception:  # the worker then meets it for its task, as it would without this daemon
            pass
    gc.freeze()


def quiet_closed_connections(daemon: ModuleType) -> None:
    """Make a worker whose connection Spark has closed exit without a traceback. Spark closes it when it stops
    the executor (a SIGTERM to a job's process group stops the JVM, not this daemon, which has a process group
    of its own) or kills the task; the worker's last flush then fails, and PySpark's daemon (with
    `spark.python.daemon.killWorkerOnFlushFailure`, on by default) prints that failure as a traceback on the
    executor's stderr, where a clean stop looked like a crash. No one is left to read the worker's output, so the
    worker exits as PySpark exits a worker that failed (a nonzero code: the daemon does not reuse it); any other
    error is PySpark's to report, as before."""
    run_worker = daemon.worker

    def worker(sock: Any, authenticated: bool) -> int:
        try:
            return int(run_worker(sock, authenticated))
        except (BrokenPipeError, ConnectionResetError):
            return 1

    setattr(daemon, "worker", worker)  # noqa: B010  (a module attribute the type checker cannot see)


#: the stand-in's command: POSIX `cat`, unbuffered (`-u`: each read written at once)
STAND_IN = ("cat", "-u")
#: the signals that end the stand-in: Spark's destroy (SIGTERM), a hang-up, a gone reader
_ENDING = {signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE}


def stand_in(relay: int) -> None:
    """Stand for the daemon the zygote forked, whose stdin is the read end of the pipe `relay` writes to: relay
    Spark's stdin to it (the pids of workers Spark asks the daemon to kill), and nothing more. This process
    becomes `cat -u` with `relay` as its stdout (0.25 MiB against 4.5 for a bare interpreter here), and only it
    holds the pipe's write end. However it ends (Spark closes its stdin or destroys it, a SIGKILL), the pipe
    closes and the daemon reads the end of its stdin, on which PySpark's daemon loop shuts down with its
    workers, as it does when Spark closes the stdin of a daemon it launched itself. Where there is no `cat`,
    this process relays itself. Like PySpark's daemon, the stand-in leaves the driver's process group first,
    so that a Ctrl-C at the driver's terminal does not reach it."""
    os.setpgid(0, 0)
    os.dup2(relay, 1)
    os.close(relay)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # (Python ignores it, and an ignored signal stays so in `cat`)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _ENDING)  # (as is a blocked one: whatever launched this process)
    with suppress(OSError):
        os.execvp(STAND_IN[0], list(STAND_IN))
    _relay_stdin()


def _relay_stdin() -> None:
    """What `cat -u` does: copy stdin to stdout as it comes, until stdin ends or stdout's reader has gone."""
    with suppress(OSError):
        while data := os.read(0, 4096):
            while data:
                data = data[os.write(1, data):]


def main() -> None:
    sys.path[:] = prefer_installed_pyspark(sys.path)
    zygote = os.environ.get(ZYGOTE_ENV)
    if zygote:  # a warm copy of this daemon is waiting (eos.worker.zygote): it runs as this daemon instead
        # its stdin is a pipe from this process, which stands for it: when this process ends, however early, so
        # does that stdin and with it the forked daemon
        stdin, relay = os.pipe()
        pid = request_daemon(zygote, sys.path, stdin=stdin)
        os.close(stdin)
        if pid is not None:
            stand_in(relay)
            return
        os.close(relay)
    from pyspark import daemon

    preload()
    quiet_closed_connections(daemon)
    daemon.manager()


if __name__ == "__main__":
    main()
