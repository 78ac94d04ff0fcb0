"""The process Spark launched as its Python daemon, standing for the daemon the zygote forked (eos.worker.zygote).

Spark knows the daemon it launched by that process: it destroys it (SIGTERM) to stop the daemon and launches
another when it has exited. Once the zygote has forked the real daemon, the launched process only passes
those signals on and exits when the real daemon does, so it replaces itself (`exec`) with a bare interpreter
running this file: `python -I -S standin.py PID`, no site, no packages. It held ~14 MiB (PSS) as the
daemon module that had imported the framework's package, ~7 MiB this way (docs/measurements.md).

This file imports nothing but the interpreter's own modules, and must keep it that way: it runs without
the framework on its path.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

__all__ = ["wait_for", "main"]


def wait_for(pid: int) -> None:
    """Stand for the daemon `pid` (not this process's child): pass Spark's SIGTERM and SIGHUP on to it, and
    return when it has exited. Like PySpark's daemon, this process leaves the driver's process group first,
    so that a Ctrl-C at the driver's terminal reaches neither."""
    os.setpgid(0, 0)
    forwarded = {signal.SIGTERM, signal.SIGHUP}
    for sig in forwarded:
        signal.signal(sig, lambda number, frame: _signal(pid, number))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, forwarded)  # (the launched daemon held them back until now)
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:  # gone already
        return
    except (AttributeError, OSError):  # no pidfds here (not Linux, or a kernel before 5.3): look every 0.2 s
        while _exists(pid):
            time.sleep(0.2)
        return
    try:
        while not select.select([fd], [], [], 1.0)[0]:
            pass
    finally:
        os.close(fd)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal(pid: int, number: int) -> None:
    try:
        os.kill(pid, number)
    except OSError:
        pass


def main() -> None:
    wait_for(int(sys.argv[1]))


if __name__ == "__main__":
    main()
