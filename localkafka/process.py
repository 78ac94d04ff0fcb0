"""Small helpers for inspecting and signalling broker processes that may not be our children."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["ProcState", "proc_state", "send", "wait_dead"]


class ProcState:
    RUNNING = "running"
    PAUSED = "paused"
    DEAD = "dead"


def _reap(pid: int) -> None:
    """Collect the exit status if the process is our child, so it does not linger as a zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def proc_state(pid: int | None, marker: str | None = None) -> str:
    """State of `pid`; `marker` must occur in its command line (guards against pid reuse)."""
    if not pid:
        return ProcState.DEAD
    _reap(pid)
    stat = Path(f"/proc/{pid}/stat")
    if stat.parent.parent.is_dir() and sys.platform.startswith("linux"):
        try:
            state = stat.read_text().rsplit(")", 1)[1].split()[0]
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (FileNotFoundError, ProcessLookupError, IndexError):
            return ProcState.DEAD
    else:  # macOS and others: ask ps
        out = subprocess.run(["ps", "-o", "stat=,command=", "-p", str(pid)], capture_output=True, text=True)
        if out.returncode != 0 or not out.stdout.strip():
            return ProcState.DEAD
        state, _, cmdline = out.stdout.strip().partition(" ")
        state = state[:1]
    if marker and marker not in cmdline:
        return ProcState.DEAD
    if state in ("Z", "X", "x"):
        return ProcState.DEAD
    if state in ("T", "t"):
        return ProcState.PAUSED
    return ProcState.RUNNING


def send(pid: int | None, sig: signal.Signals) -> bool:
    """Signal a process; False if there is none (no pid, or it is gone)."""
    if pid is None:
        return False
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def wait_dead(pid: int | None, marker: str | None, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc_state(pid, marker) == ProcState.DEAD:
            return True
        time.sleep(0.05)
    return proc_state(pid, marker) == ProcState.DEAD
