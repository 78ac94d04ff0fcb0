"""Local state directory: `<state_dir>/<application_id>/<task>/<store>`, one lock per task.

The lock (flock on `<task>/.lock`) is held while a process has the task's stores open: Spark may run the
task in any Python worker of an executor, and RocksDB allows one opener at a time. `{executor}` in the
configured state directory expands to the Spark executor id, which gives each executor its own
directory (as separate hosts would have).
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from recovery.backends import StoreError

__all__ = ["TaskDirectory", "StateDirectoryError"]


class StateDirectoryError(StoreError):
    """The state directory cannot be created or written (a configuration problem, not a transient one)."""


class TaskDirectory:
    def __init__(self, root: Path, task: str) -> None:
        self.path = root / task
        self._fd: int | None = None

    def store_path(self, store: str) -> Path:
        return self.path / store

    def lock(self, timeout: float = 60.0) -> None:
        """Take the task's lock, waiting up to `timeout` for another process (e.g. a zombie attempt) to let go."""
        if self._fd is not None:
            return
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StateDirectoryError(f"cannot use the state directory {self.path}: {exc.strerror or exc}") from exc
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._fd = fd
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise StoreError(f"state of task {self.path.name} is locked by another process "
                                     f"({self.path / '.lock'}) for more than {timeout:.0f}s") from None
                time.sleep(0.05)

    def unlock(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
