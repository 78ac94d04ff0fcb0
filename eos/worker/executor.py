"""Where a Python worker runs: the Spark executor id and its location string.

PySpark's TaskContext does not expose the executor id. A Python worker is forked by the pyspark daemon,
whose parent is the executor JVM; an executor JVM of a cluster (CoarseGrainedExecutorBackend) carries
`--executor-id <id> --hostname <host>` on its command line. In local mode the driver JVM runs tasks:
executor "driver".
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

__all__ = ["current_executor", "executor_location"]


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


@functools.lru_cache(maxsize=1)
def _executor_identity() -> tuple[str, str] | None:
    pid = os.getpid()
    for _ in range(6):  # worker -> daemon -> executor JVM (a few levels at most)
        pid = _parent(pid)
        if pid <= 1:
            break
        args = _cmdline(pid)
        if "--executor-id" in args:
            i = args.index("--executor-id")
            host = args[args.index("--hostname") + 1] if "--hostname" in args else "127.0.0.1"
            return args[i + 1], host
        if any(a.endswith("SparkSubmit") or a == "org.apache.spark.deploy.SparkSubmit" for a in args):
            return "driver", "127.0.0.1"
    return None


def current_executor() -> str | None:
    """The executor id this worker belongs to ("driver" in local mode), or None if unknown."""
    ident = _executor_identity()
    return ident[0] if ident else None


def executor_location() -> str | None:
    """Spark's preferred-location string of this worker's executor: `executor_<host>_<id>`."""
    ident = _executor_identity()
    if ident is None or ident[0] == "driver":
        return None
    return f"executor_{ident[1]}_{ident[0]}"
