"""Find the processes of a running job: its driver, Spark executor JVMs and Python workers (Linux /proc).

The job runs in its own session, so what it starts shares its process group: the driver (Python), the
driver JVM, executor JVMs (`CoarseGrainedExecutorBackend`, local-cluster mode). The pyspark daemon
makes a process group of its own for the Python workers it forks, so a job's processes are its group
and every descendant of the group's leader.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["Proc", "job_processes", "session_processes", "executors", "executor_pid", "python_workers", "alive"]


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgid: int
    state: str
    cmdline: str
    sid: int = 0


def _read(pid_dir: Path) -> Proc | None:
    try:
        stat = (pid_dir / "stat").read_text().rsplit(")", 1)[1].split()
        cmd = (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (OSError, IndexError):
        return None
    return Proc(int(pid_dir.name), int(stat[1]), int(stat[2]), stat[0], cmd, int(stat[3]))


def _live() -> list[Proc]:
    """Every live process (zombies, which hold no CPU or memory, left out)."""
    return [p for entry in Path("/proc").iterdir() if entry.name.isdigit()
            if (p := _read(entry)) is not None and p.state not in ("Z", "X")]


def job_processes(pgid: int) -> list[Proc]:
    """Live processes of the job whose session leader is `pgid`: its process group and all descendants."""
    procs = _live()
    children: dict[int, list[Proc]] = {}
    for p in procs:
        children.setdefault(p.ppid, []).append(p)
    found = {p.pid: p for p in procs if p.pgid == pgid}
    todo = [pgid, *found]
    while todo:
        for child in children.get(todo.pop(), []):
            if child.pid not in found:
                found[child.pid] = child
                todo.append(child.pid)
    return list(found.values())


def session_processes(sid: int) -> list[Proc]:
    """Live processes of session `sid`, whatever their group or parent: those of a stopped job whose leader has
    exited (its other processes are then orphans, and PySpark's daemon leads a group of its own)."""
    return [p for p in _live() if p.sid == sid]


def executors(pgid: int) -> list[Proc]:
    return [p for p in job_processes(pgid) if "CoarseGrainedExecutorBackend" in p.cmdline]


def executor_pid(executor_id: str, app_id: str) -> int:
    """The pid of the executor JVM Spark calls `executor_id` in application `app_id` (`sc.applicationId`), in
    any process group. Executor ids restart at 0 in every application, so the id alone could name another
    application's executor on the same machine (a test running beside this one, say)."""
    for entry in Path("/proc").iterdir():
        proc = _read(entry) if entry.name.isdigit() else None
        if proc is None or "CoarseGrainedExecutorBackend" not in proc.cmdline or proc.state in ("Z", "X"):
            continue
        args = proc.cmdline.split()
        if _arg(args, "--executor-id") == executor_id and _arg(args, "--app-id") == app_id:
            return proc.pid
    raise LookupError(f"no executor JVM with id {executor_id} in application {app_id}")


def _arg(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args[:-1] else None


def python_workers(pgid: int) -> list[Proc]:
    """Forked Python workers, not the daemons themselves. PySpark's daemon loop leads a process group of its own
    (never the job's, whose leader is the driver), and forks the workers into it: they carry its command line,
    whatever that is (`python -m pyspark.daemon`, `python -m eos.worker.daemon`, or the driver's own for a daemon
    forked from the zygote that is the driver's fork, eos/worker/zygote.py)."""
    procs = job_processes(pgid)
    leaders = {p.pid: p for p in procs if p.pgid == p.pid and p.pid != pgid}
    return [p for p in procs
            if p.ppid in leaders and p.pgid == p.ppid and p.cmdline == leaders[p.ppid].cmdline]


def alive(pid: int) -> bool:
    proc = _read(Path(f"/proc/{pid}"))
    return proc is not None and proc.state not in ("Z", "X")
