"""Fault injectors. Each takes the harness context and a scheduled fault, performs the fault (blocking for
its duration), and records its start and end on the timeline.

Processes: driver, Spark executor JVM (local-cluster), Python worker: SIGKILL, SIGTERM, SIGSTOP/SIGCONT.
Brokers (3-node cluster): hard bounce (SIGKILL + restart), clean bounce, pause.
Network between clients and brokers (TCP proxy per broker): latency, connection resets, blackhole, and
a full partition of one broker (its client and inter-broker traffic).
Zombies: a Python worker stopped inside a transaction past the transaction timeout, then resumed.
Poison: a burst of malformed input records.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chaos.processes import Proc, alive, executors, job_processes, python_workers
from chaos.scenario import ScheduledFault

if TYPE_CHECKING:
    from chaos.harness import Context
    from chaos.proxy import ProxyGroup

__all__ = ["KINDS", "FaultKind", "inject"]


@dataclass(frozen=True)
class FaultKind:
    run: Callable[[Context, ScheduledFault], str]
    brokers: bool = False  # needs a 3-broker cluster
    cluster_mode: bool = False  # needs Spark local-cluster (executor JVMs)
    network: bool = False  # needs the proxies
    in_transaction: bool = False  # waits for a task to be between producing and committing


def _pick(items: list[Any], choice: float) -> Any:
    return items[int(choice * len(items)) % len(items)]


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


PROCESS_WAIT_S = 90.0  # how long a fault waits for its target process to exist
# how long an `in_transaction` kill waits for a task inside a transaction before it strikes outside one
DRIVER_MARK_WAIT_S, WORKER_MARK_WAIT_S = 30.0, 20.0


def _wait_for(find: Callable[[], list[Any]], timeout: float = 30.0) -> list[Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = find()
        if found:
            return found
        time.sleep(0.05)
    return []


def _live_marks(directory: str) -> list[int]:
    """Pids of Python workers inside a transaction right now (their MarkWhile marker exists). Markers
    left by killed processes are removed."""
    pids = []
    for mark in Path(directory).iterdir():
        try:
            pid = int(mark.name.rsplit("-", 1)[1])
        except (IndexError, ValueError):
            continue
        if alive(pid):
            pids.append(pid)
        else:
            mark.unlink(missing_ok=True)
    return pids


def _marked_pid(ctx: Context, timeout: float = 30.0) -> int | None:
    """A Python worker inside a transaction, left stopped there (`_frozen_inside`) for the fault to strike."""
    def find() -> list[int]:
        return next(([pid] for pid in _live_marks(ctx.marks_dir) if _frozen_inside(ctx.marks_dir, pid)), [])

    pids = _wait_for(find, timeout)
    return pids[0] if pids else None


OUTSIDE = " (outside a transaction)"


def _outside(ctx: Context, kind: str, waited: float) -> None:
    """An `in_transaction` kill that caught no task inside a transaction strikes anyway, outside one: the
    timeline says so, and the report notes that the run did not try that kill mid-transaction."""
    ctx.timeline.record(kind, "outside_transaction", reason=f"no task was inside a transaction within {waited:g} s")


# ---------------------------------------------------------------- processes
def driver_kill(ctx: Context, f: ScheduledFault) -> str:
    """SIGKILL the driver. `in_transaction`: once a task is between producing and committing, the driver
    and every process under it (in local mode its executor and the Python workers) at once, as when the
    driver's machine dies: killing the driver alone leaves the worker to finish its commit."""
    if f.params.get("in_transaction"):
        pid, marked = _driver_in_transaction(ctx, DRIVER_MARK_WAIT_S)  # (the worker found is frozen inside)
        if marked is None:
            _outside(ctx, "driver_kill", DRIVER_MARK_WAIT_S)
        where = "" if marked is not None else OUTSIDE
        with ctx.timeline.span("driver_kill", f"driver pid {pid} and its processes{where}"):
            for proc in sorted(job_processes(pid), key=lambda p: p.pid == pid):  # the worker first
                _signal(proc.pid, signal.SIGKILL)
        return f"driver {pid} and its processes{where}"
    pid = _driver(ctx)
    with ctx.timeline.span("driver_kill", f"driver pid {pid}"):
        _signal(pid, signal.SIGKILL)
    return f"driver {pid}"


def _driver_in_transaction(ctx: Context, timeout: float = 30.0) -> tuple[int, int | None]:
    """The job's driver and a Python worker of its own inside a transaction right now (None if none was within
    `timeout`). The driver is read again at every look: a fault just before may have killed the one there was,
    and a worker of the driver the supervisor starts next is not in the old one's tree (the old pid's tree is
    empty, and freezing that worker while killing nothing would leave the new driver stuck)."""
    def find() -> list[tuple[int, int]]:
        pid, marked = ctx.job.pid, _live_marks(ctx.marks_dir)
        for worker in marked:
            if not _frozen_inside(ctx.marks_dir, worker):
                continue
            if worker in {p.pid for p in job_processes(pid)}:
                return [(pid, worker)]
            _signal(worker, signal.SIGCONT)  # (another driver's)
        return []

    found = _wait_for(find, timeout)
    return found[0] if found else (ctx.job.pid, None)


def _frozen_inside(directory: str, pid: int) -> bool:
    """Stop worker `pid` (SIGSTOP) and say whether it is still inside its transaction: its marker is there after
    it stopped (a worker removes its marker before it commits). Else it is let go again. Stopping first closes
    the window in which a look at the process tree, slow on a busy machine, let the worker commit before the
    kill: its outputs then came once, and an at-least-once job under the kill passed its audit."""
    _signal(pid, signal.SIGSTOP)
    if any(mark.name.endswith(f"-{pid}") for mark in Path(directory).iterdir()):
        return True
    _signal(pid, signal.SIGCONT)
    return False


def _driver(ctx: Context) -> int:
    """The job's driver, once there is a live one: just after a fault killed the last, the supervisor is still
    reaping its processes before it starts the next, and a signal to the dead one's pid would hit nothing."""
    live = _wait_for(lambda: [pid] if alive(pid := ctx.job.pid) else [], PROCESS_WAIT_S)
    return live[0] if live else ctx.job.pid


def driver_term(ctx: Context, f: ScheduledFault) -> str:
    pid = _driver(ctx)
    with ctx.timeline.span("driver_term", f"driver pid {pid}"):
        _signal(pid, signal.SIGTERM)
        ctx.job.wait_exit(60)
    return f"driver {pid}"


def _pause(ctx: Context, kind: str, proc_pid: int, target: str, seconds: float) -> str:
    with ctx.timeline.span(kind, target):
        _signal(proc_pid, signal.SIGSTOP)
        time.sleep(seconds)
        _signal(proc_pid, signal.SIGCONT)
    return target


def driver_pause(ctx: Context, f: ScheduledFault) -> str:
    pid = _driver(ctx)
    return _pause(ctx, "driver_pause", pid, f"driver pid {pid}", f.duration or 8)


def _procs(ctx: Context, find: Callable[[int], list[Proc]]) -> list[Proc]:
    """The job's processes `find` returns, waited for: after a fault that restarted the job, its executors
    and Python workers appear only once the new driver runs its first batch (tens of seconds on a busy
    machine), and a fault skipped for that reason would leave the scenario untested."""
    return _wait_for(lambda: find(ctx.job.pid), PROCESS_WAIT_S)


def _target(ctx: Context, f: ScheduledFault, find: Callable[[int], list[Proc]]) -> int | None:
    """The pid the fault's seeded choice picks among the job's processes that `find` returns (None: none)."""
    procs = _procs(ctx, find)
    return _pick(sorted(p.pid for p in procs), f.choice) if procs else None


def executor_kill(ctx: Context, f: ScheduledFault) -> str:
    pid = _target(ctx, f, executors)
    if pid is None:
        return ctx.timeline.skip("executor_kill", "no executor JVM found")
    with ctx.timeline.span("executor_kill", f"executor pid {pid}"):
        _signal(pid, signal.SIGKILL)
    return f"executor {pid}"


def executor_pause(ctx: Context, f: ScheduledFault) -> str:
    pid = _target(ctx, f, executors)
    if pid is None:
        return ctx.timeline.skip("executor_pause", "no executor JVM found")
    return _pause(ctx, "executor_pause", pid, f"executor pid {pid}", f.duration or 20)


def worker_kill(ctx: Context, f: ScheduledFault) -> str:
    pid = _marked_pid(ctx, WORKER_MARK_WAIT_S) if f.params.get("in_transaction") else None
    where = OUTSIDE if f.params.get("in_transaction") and pid is None else ""
    if pid is None:
        pid = _target(ctx, f, python_workers)
    if pid is None:
        return ctx.timeline.skip("worker_kill", "no Python worker found")
    if where:
        _outside(ctx, "worker_kill", WORKER_MARK_WAIT_S)
    with ctx.timeline.span("worker_kill", f"python worker pid {pid}{where}"):
        _signal(pid, signal.SIGKILL)
    return f"worker {pid}{where}"


def worker_pause(ctx: Context, f: ScheduledFault) -> str:
    pid = _target(ctx, f, python_workers)
    if pid is None:
        return ctx.timeline.skip("worker_pause", "no Python worker found")
    return _pause(ctx, "worker_pause", pid, f"python worker pid {pid}", f.duration or 5)


def zombie(ctx: Context, f: ScheduledFault) -> str:
    """Stop a worker inside its transaction for longer than the transaction timeout: the broker aborts the
    transaction; when the worker wakes up its commit must fail."""
    pid = _marked_pid(ctx)
    if pid is None:
        return ctx.timeline.skip("zombie", "no task was caught inside a transaction")
    seconds = f.duration or ctx.scenario.transaction_timeout_ms / 1000 + 6
    return _pause(ctx, "zombie", pid, f"python worker pid {pid} (in transaction)", seconds)


# ---------------------------------------------------------------- brokers
def _broker(ctx: Context, f: ScheduledFault) -> int:
    return _pick([n.node_id for n in ctx.cluster.nodes], f.choice)


def _broker_outage(ctx: Context, f: ScheduledFault, kind: str, down: Callable[[int], Any],
                   up: Callable[[int], Any], default_seconds: float) -> str:
    """Take one broker down (`down`), keep it so for the fault's duration, bring it back (`up`)."""
    node = _broker(ctx, f)
    with ctx.timeline.span(kind, f"broker {node}"):
        down(node)
        time.sleep(f.duration or default_seconds)
        up(node)
    return f"broker {node}"


def broker_hard_bounce(ctx: Context, f: ScheduledFault) -> str:
    return _broker_outage(ctx, f, "broker_hard_bounce", ctx.cluster.kill,
                          lambda node: ctx.cluster.start(node, wait=True), 5)


def broker_clean_bounce(ctx: Context, f: ScheduledFault) -> str:
    return _broker_outage(ctx, f, "broker_clean_bounce", ctx.cluster.stop,
                          lambda node: ctx.cluster.start(node, wait=True), 2)


def broker_pause(ctx: Context, f: ScheduledFault) -> str:
    return _broker_outage(ctx, f, "broker_pause", ctx.cluster.pause, ctx.cluster.resume, 8)


# ---------------------------------------------------------------- network
def _proxies(ctx: Context) -> ProxyGroup:
    if ctx.proxies is None:
        raise RuntimeError("network faults need the scenario's proxies (Scenario.needs_proxies)")
    return ctx.proxies


def net_latency(ctx: Context, f: ScheduledFault) -> str:
    ms = float(f.params.get("ms", 250))
    with ctx.timeline.span("net_latency", f"all brokers +{ms:.0f} ms"):
        _proxies(ctx).latency(ms)
        time.sleep(f.duration or 10)
        _proxies(ctx).heal()
    return f"+{ms:.0f} ms"


def net_reset(ctx: Context, f: ScheduledFault) -> str:
    with ctx.timeline.span("net_reset", "all client and inter-broker connections"):
        for _ in range(int(f.params.get("times", 3))):  # resets in quick succession during the window
            _proxies(ctx).reset()
            time.sleep((f.duration or 3) / int(f.params.get("times", 3)))
    return "reset"


def net_blackhole(ctx: Context, f: ScheduledFault) -> str:
    with ctx.timeline.span("net_blackhole", "all brokers unreachable (timeouts)"):
        _proxies(ctx).blackhole()
        time.sleep(f.duration or 10)
        _proxies(ctx).heal()
    return "blackhole"


def net_partition(ctx: Context, f: ScheduledFault) -> str:
    node = _broker(ctx, f)
    with ctx.timeline.span("net_partition", f"broker {node} cut off from clients and brokers"):
        _proxies(ctx).blackhole([node])
        time.sleep(f.duration or 15)
        _proxies(ctx).heal([node])
    return f"broker {node}"


# ---------------------------------------------------------------- input
def poison(ctx: Context, f: ScheduledFault) -> str:
    ratio, before = float(f.params.get("ratio", 0.2)), ctx.load.poisoned
    with ctx.timeline.span("poison", f"{ratio:.0%} malformed input records"):
        ctx.load.poison(ratio)
        time.sleep(f.duration or 5)
        ctx.load.poison(0.0)
    if ctx.load.poisoned == before:  # (not injected: the run then fails, saying how many faults were)
        return ctx.timeline.skip("poison", "no input record was made malformed: the load had ended; a scenario's "
                                 "faults fall 6-12 s after its load starts at the least, so give it more records")
    return "poison"


KINDS: dict[str, FaultKind] = {
    "driver_kill": FaultKind(driver_kill),
    "driver_term": FaultKind(driver_term),
    "driver_pause": FaultKind(driver_pause),
    "executor_kill": FaultKind(executor_kill, cluster_mode=True),
    "executor_pause": FaultKind(executor_pause, cluster_mode=True),
    "worker_kill": FaultKind(worker_kill),
    "worker_pause": FaultKind(worker_pause),
    "zombie": FaultKind(zombie, in_transaction=True),
    "broker_hard_bounce": FaultKind(broker_hard_bounce, brokers=True),
    "broker_clean_bounce": FaultKind(broker_clean_bounce, brokers=True),
    "broker_pause": FaultKind(broker_pause, brokers=True),
    "net_latency": FaultKind(net_latency, network=True),
    "net_reset": FaultKind(net_reset, network=True),
    "net_blackhole": FaultKind(net_blackhole, network=True),
    "net_partition": FaultKind(net_partition, brokers=True, network=True),
    "poison": FaultKind(poison),
}


def inject(ctx: Context, fault: ScheduledFault) -> str:
    return KINDS[fault.kind].run(ctx, fault)
