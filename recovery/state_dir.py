"""Local state directory: `<state_dir>/<application_id>/<task>/<store>`, one lock per task.

The lock (flock on `<task>/.lock`) is held while a process has the task's stores open: Spark may run the
task in any Python worker of an executor, and RocksDB allows one opener at a time. `{executor}` in the
configured state directory expands to the Spark executor id, which gives each executor its own
directory (as separate hosts would have).

A process that ran a task keeps its stores open between batches (`HOLDER`), as Kafka Streams keeps a task's
stores open while it owns the task: opening and closing a RocksDB store cost ~15 ms a task and batch, most
of a stateful batch's time on many partitions. The holder writes its pid into the lock file; another process
that needs the directory asks the holder to let go (a datagram to the holder's abstract Unix socket), and the
holder closes the stores at once unless its task is running; stores idle for `idle_s` are closed anyway, so
a finished run's stores are released without being asked.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import structlog

from recovery.backends import StoreError

__all__ = ["TaskDirectory", "StateDirectoryError", "StoreHolder", "HOLDER", "locked_task_directories"]

log = structlog.get_logger(__name__)

#: How often a process waiting for a task's lock asks its holder again to let go, and looks again meanwhile
ASK_EVERY_S = 0.5
POLL_S = 0.005


def _address(pid: int) -> str:
    """The abstract Unix socket a holder process listens on (Linux; no file to clean up)."""
    return f"\0eos-stores-{pid}"


@dataclass
class _Kept:
    let_go: Callable[[], None]
    until: float


class StoreHolder:
    """The task directories whose stores this process keeps open between batches, by key (the directory's
    resolved path).

    `keep` hands a directory's open stores over (with `let_go`, which closes them and unlocks the directory);
    `take` takes them back for a batch: True if they are still open, False if they were let go meanwhile (the
    caller opens them again). A thread lets a kept directory go when another process asks for it, or when it
    has been idle for its `idle_s`. `let_go` runs under the holder's lock, so it never overlaps a `take`."""

    def __init__(self) -> None:
        self._mu = threading.Lock()
        self._kept: dict[str, _Kept] = {}
        self._pid = 0
        self._wake = threading.Event()
        self._sock: socket.socket | None = None

    def keep(self, key: str, let_go: Callable[[], None], idle_s: float) -> None:
        with self._mu:
            self._started()
            self._kept[key] = _Kept(let_go, time.monotonic() + idle_s)
        self._wake.set()

    def take(self, key: str) -> bool:
        with self._mu:
            if self._pid != os.getpid():  # a forked child: nothing here is its own
                return False
            return self._kept.pop(key, None) is not None

    def let_go(self, key: str) -> bool:
        """Close the kept stores of `key` now (a request, or the process dropping the task). True if it held them."""
        with self._mu:
            kept = self._kept.pop(key, None) if self._pid == os.getpid() else None
            if kept is not None:
                _quietly(kept.let_go, key)
        return kept is not None

    @property
    def keys(self) -> list[str]:
        return list(self._kept)

    def _started(self) -> None:
        """(Under `_mu`.) The listening thread of this process, started on the first `keep`."""
        if self._pid == os.getpid():
            return
        self._pid, self._kept = os.getpid(), {}
        self._sock = None
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.bind(_address(self._pid))
            self._sock = sock
        except OSError as exc:  # no abstract sockets (not Linux): kept stores are let go only when idle
            log.debug("stores are kept without a release socket", error=str(exc))
        threading.Thread(target=self._serve, name="eos-store-holder", daemon=True).start()

    def _serve(self) -> None:
        pid = self._pid
        while pid == os.getpid():
            with self._mu:
                deadline = min((k.until for k in self._kept.values()), default=None)
            wait = 1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
            asked = self._receive(wait)
            if asked is not None:
                self.let_go(asked)
            now = time.monotonic()
            for key in [k for k, kept in list(self._kept.items()) if kept.until <= now]:
                self.let_go(key)

    def _receive(self, wait: float) -> str | None:
        if self._sock is None:
            self._wake.wait(wait)
            self._wake.clear()
            return None
        self._sock.settimeout(wait if wait > 0 else 0.001)
        try:
            return self._sock.recv(4096).decode(errors="replace")
        except TimeoutError:
            return None
        except OSError:  # (not expected: the socket is this thread's alone) idle timers still run
            time.sleep(wait)
            return None


def _quietly(let_go: Callable[[], None], key: str) -> None:
    try:
        let_go()
    except Exception as exc:  # a store whose directory was deleted under it: the process lets it go all the same
        log.warning("closing kept stores failed", directory=key, error=str(exc))


#: This process's kept stores
HOLDER = StoreHolder()


def ask_to_let_go(path: Path, fd: int) -> None:
    """Ask the process that holds `path`'s lock (its pid is in the lock file, `fd`) to let the directory go."""
    try:
        pid = int(os.pread(fd, 32, 0).decode().strip() or "0")
    except (OSError, ValueError):
        return
    if pid <= 0:
        return
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.sendto(str(path.resolve()).encode(), _address(pid))


class StateDirectoryError(StoreError):
    """The state directory cannot be created or written (a configuration problem, not a transient one)."""


class TaskDirectory:
    def __init__(self, root: Path, task: str) -> None:
        self.path = root / task
        self._fd: int | None = None

    def store_path(self, store: str) -> Path:
        return self.path / store

    def lock(self, timeout: float = 60.0) -> None:
        """Take the task's lock, waiting up to `timeout` for another process (e.g. a zombie attempt) to let go;
        a process that keeps the task's stores open between batches is asked to (`StoreHolder`). Timeout 0:
        one try, nobody asked."""
        if self._fd is not None:
            return
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StateDirectoryError(f"cannot use the state directory {self.path}: {exc.strerror or exc}") from exc
        deadline = time.monotonic() + timeout
        asked = 0.0
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                now = time.monotonic()
                if now > deadline:
                    os.close(fd)
                    raise StoreError(f"state of task {self.path.name} is locked by another process "
                                     f"({self.path / '.lock'}) for more than {timeout:.0f}s") from None
                if now - asked >= ASK_EVERY_S:
                    ask_to_let_go(self.path, fd)
                    asked = now
                time.sleep(POLL_S)
                continue
            self._fd = fd
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)  # whom to ask (`ask_to_let_go`)
            return

    @property
    def locked(self) -> bool:
        return self._fd is not None

    def unlock(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


@contextlib.contextmanager
def locked_task_directories(app_dir: Path, timeout: float = 30.0) -> Iterator[list[Path]]:
    """Every task directory under `app_dir` (`<state_dir>/<application_id>`) locked by this process, for a tool
    that reads, changes or removes local state: the processes that keep a task's stores open are asked to let
    them go (`HOLDER`). Raises StoreError when one is still held after `timeout` (a job running)."""
    directories = [TaskDirectory(app_dir, p.parent.name) for p in sorted(Path(app_dir).glob("*/.lock"))]
    try:
        for directory in directories:
            directory.lock(timeout=timeout)
        yield [d.path for d in directories]
    finally:
        for directory in directories:
            directory.unlock()
