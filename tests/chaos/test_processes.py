"""Finding a job's processes, as the fault injectors do (real processes, Linux /proc)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest

from chaos.processes import alive, executor_pid, job_processes, python_workers, session_processes

# A session leader whose child makes a process group of its own, as the pyspark daemon does.
FORKS = """
import os, time
if os.fork() == 0:
    os.setpgid(0, 0)
    if os.fork() == 0:
        time.sleep(60)
    time.sleep(60)
time.sleep(60)
"""


def test_job_processes_include_descendants_in_other_process_groups():
    leader = subprocess.Popen([sys.executable, "-c", FORKS], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while len(found := job_processes(leader.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(found) == 3
        assert {p.pid for p in found if p.pgid == leader.pid} == {leader.pid}  # two live in another group
    finally:
        for p in job_processes(leader.pid):
            os.kill(p.pid, signal.SIGKILL)
        leader.wait()


def test_executor_pid_names_the_executor_of_one_application_only():
    """Executor ids restart at 0 in every application: two applications' "executor 0" on one machine (two
    tests side by side) must not be mistaken for one another, or a test kills the other's JVM."""
    def fake_executor(app_id: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                                 "org.apache.spark.executor.CoarseGrainedExecutorBackend", "--executor-id", "0",
                                 "--app-id", app_id], start_new_session=True)

    ours, theirs = fake_executor("app-ours"), fake_executor("app-theirs")
    try:
        deadline, found = time.monotonic() + 10, None
        while time.monotonic() < deadline:
            try:
                found = executor_pid("0", "app-ours"), executor_pid("0", "app-theirs")
                break
            except LookupError:
                time.sleep(0.1)
        assert found == (ours.pid, theirs.pid)
        with pytest.raises(LookupError, match="no executor JVM with id 1 in application app-ours"):
            executor_pid("1", "app-ours")
    finally:
        for proc in (ours, theirs):
            proc.kill()
            proc.wait()


# A driver whose child is a daemon (a process group of its own, as PySpark's daemon loop makes one) that forks
# two workers, named on its command line as Spark starts one.
DAEMON = """
import os, sys, time
os.setpgid(0, 0)
for _ in range(2):
    if os.fork() == 0:
        time.sleep(60)
time.sleep(60)
"""


@pytest.mark.parametrize("module", ["pyspark.daemon", "eos.worker.daemon"])
def test_python_workers_are_the_children_of_either_daemon(module):
    driver = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time\n"
                               f"subprocess.Popen([sys.executable, '-c', {DAEMON!r}, '-m', {module!r}, "
                               "'pyspark.worker'])\ntime.sleep(60)"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while len(workers := python_workers(driver.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        procs = {p.pid: p for p in job_processes(driver.pid)}
        assert len(workers) == 2 and all(procs[w.ppid].ppid == driver.pid for w in workers)
    finally:
        for p in job_processes(driver.pid):
            os.kill(p.pid, signal.SIGKILL)
        driver.wait()


# A driver that starts a zygote, which forks a daemon (a process group of its own, as PySpark's daemon loop
# makes one) that forks two workers: all four Python processes but the driver carry the zygote's command line,
# or, where the zygote is the driver's own fork, all five carry the driver's. A child of a worker in the
# daemon's group, and a process that leads a group of its own and has a child there, are not workers.
ZYGOTE = """
import os, subprocess, sys, time
if os.fork() == 0:
    os.setpgid(0, 0)
    for _ in range(2):
        if os.fork() == 0:
            subprocess.Popen(["sleep", "60"])  # what a worker's task may start
            time.sleep(60)
    time.sleep(60)
subprocess.Popen(["setsid", "sh", "-c", "sleep 60 & sleep 60"])
time.sleep(60)
"""


@pytest.mark.parametrize("forked_from_the_driver", [False, True])
def test_python_workers_of_a_daemon_forked_from_the_zygote_are_the_daemons_children_only(forked_from_the_driver):
    # (the driver's own command line must not name the zygote, as `eos run`'s does not)
    zygote = (f"if os.fork() == 0:\n    exec({ZYGOTE!r})" if forked_from_the_driver else
              f"subprocess.Popen([sys.executable, '-c', {ZYGOTE!r}, '-m', 'eos.worker.' + 'zygote', 's'])")
    driver = subprocess.Popen([sys.executable, "-c", f"import os, subprocess, sys, time\n{zygote}\ntime.sleep(60)"],
                              start_new_session=True)
    try:
        deadline, seen = time.monotonic() + 10, 0
        while len(python_workers(driver.pid)) < 2 or seen < 9 or len(job_processes(driver.pid)) != seen:
            assert time.monotonic() < deadline, job_processes(driver.pid)
            seen = len(job_processes(driver.pid))  # (until all are up: the workers' children, the other group)
            time.sleep(0.3)
        workers = python_workers(driver.pid)
        procs = {p.pid: p for p in job_processes(driver.pid)}
        daemon = procs[workers[0].ppid]
        assert len(workers) == 2 and all(w.ppid == daemon.pid for w in workers)
        assert daemon.pgid == daemon.pid and procs[daemon.ppid].ppid == driver.pid  # daemon <- zygote <- driver
        assert (procs[daemon.ppid].cmdline == procs[driver.pid].cmdline) == forked_from_the_driver
    finally:
        for p in job_processes(driver.pid):
            os.kill(p.pid, signal.SIGKILL)
        driver.wait()


# A session leader that exits once its child, leading a process group of its own, has forked a grandchild that
# exits at once and is never reaped (a zombie).
ORPHAN = """
import os, sys, time
if os.fork() == 0:
    os.setpgid(0, 0)
    if os.fork() == 0:
        os._exit(0)
    print(os.getpid(), flush=True)
    time.sleep(30)
    os._exit(0)
"""


def test_a_session_s_processes_are_the_live_ones_whatever_their_group_or_parent():
    """What is left of a stopped job whose leader has exited: an orphan in a group of its own is still the
    session's; a zombie (exited, never reaped) holds neither CPU nor memory and is left out."""
    leader = subprocess.Popen([sys.executable, "-c", ORPHAN], stdout=subprocess.PIPE, start_new_session=True)
    assert leader.stdout is not None
    orphan = int(leader.stdout.readline())
    try:
        leader.wait(10)
        deadline = time.monotonic() + 10
        while [p.pid for p in session_processes(leader.pid)] != [orphan] and time.monotonic() < deadline:
            time.sleep(0.05)  # (the grandchild exits)
        found = session_processes(leader.pid)
        assert [p.pid for p in found] == [orphan]
        assert found[0].pgid == orphan and found[0].sid == leader.pid
        assert job_processes(leader.pid) == []  # (a group and descendants of a leader that is gone: nothing)
    finally:
        os.kill(orphan, signal.SIGKILL)


def test_alive_is_a_running_process_not_a_zombie_nor_one_reaped():
    """What the tests that wait for a process's end rely on: an exited child not yet reaped (a zombie) has ended,
    and so has a pid no longer in /proc."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert alive(proc.pid)
        assert proc.stdin is not None
        proc.stdin.close()
        deadline = time.monotonic() + 10
        while open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":  # exited, not reaped
            assert time.monotonic() < deadline, "the child did not exit"
            time.sleep(0.01)
        assert not alive(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert not alive(proc.pid)


def test_a_driver_kill_right_after_another_waits_for_the_next_driver_and_kills_its_own_worker(tmp_path):
    """Two kills close together: the supervisor is still reaping the first kill's driver when the second fault
    starts. The fault must kill the next driver with the worker of its own it froze, not the dead pid (which
    would kill nothing and leave the next driver's worker stopped, its job stuck)."""
    import threading
    from types import SimpleNamespace

    from chaos.faults import driver_kill
    from chaos.scenario import ScheduledFault
    from chaos.timeline import Timeline

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    marks = tmp_path / "marks"
    marks.mkdir()
    for in_transaction in (True, False):
        leader = subprocess.Popen([sys.executable, "-c", FORKS], start_new_session=True)
        try:
            deadline = time.monotonic() + 10
            while len(found := job_processes(leader.pid)) < 3 and time.monotonic() < deadline:
                time.sleep(0.1)
            # the grandchild, in a group of its own as a Python worker is (not the largest pid: pids wrap around)
            worker = next(p.pid for p in found if p.pid != leader.pid and p.ppid != leader.pid)
            (marks / f"task-{worker}").write_text("")
            ctx = SimpleNamespace(job=SimpleNamespace(pid=dead.pid), marks_dir=str(marks), timeline=Timeline())
            restart = threading.Timer(0.5, lambda ctx=ctx, pid=leader.pid: setattr(ctx.job, "pid", pid))
            restart.start()
            said = driver_kill(ctx, ScheduledFault(0.0, "driver_kill", 0.0, 0.0, {"in_transaction": in_transaction}))
            restart.join()
            assert said == (f"driver {leader.pid} and its processes" if in_transaction else f"driver {leader.pid}")
            assert leader.wait(10) == -signal.SIGKILL
            if in_transaction:  # (its whole tree, the frozen worker too; a SIGKILL takes effect when it is run)
                deadline = time.monotonic() + 10
                while alive(worker) and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert not alive(worker)
        finally:
            for p in found:  # (the dead leader's orphans are no longer in its tree)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGKILL)
            leader.wait()
            (marks / f"task-{worker}").unlink(missing_ok=True)


@pytest.mark.parametrize("kind", ["driver_kill", "worker_kill"])
def test_an_in_transaction_kill_that_catches_no_task_in_one_strikes_outside_and_says_so(tmp_path, monkeypatch, kind):
    """No task marks a transaction within the wait: the kill still strikes (the driver with its processes, a
    Python worker), and the timeline records that it was outside a transaction, which the report then notes."""
    from types import SimpleNamespace

    import chaos.faults
    from chaos.harness import ChaosResult
    from chaos.report import finish_result
    from chaos.scenario import ScheduledFault
    from chaos.timeline import Timeline

    monkeypatch.setattr(chaos.faults, "DRIVER_MARK_WAIT_S", 0.2)
    monkeypatch.setattr(chaos.faults, "WORKER_MARK_WAIT_S", 0.2)
    (tmp_path / "marks").mkdir()
    leader = subprocess.Popen([sys.executable, "-c", FORKS], start_new_session=True)
    found = []
    try:
        deadline = time.monotonic() + 10
        while len(found := job_processes(leader.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        worker = next(p.pid for p in found if p.pid != leader.pid and p.ppid != leader.pid)
        timeline = Timeline()
        ctx = SimpleNamespace(job=SimpleNamespace(pid=leader.pid), marks_dir=str(tmp_path / "marks"), timeline=timeline)
        said = chaos.faults.KINDS[kind].run(ctx, ScheduledFault(0.0, kind, 0.0, 0.0, {"in_transaction": True}))
        assert said == (f"driver {leader.pid} and its processes (outside a transaction)" if kind == "driver_kill"
                        else f"worker {worker} (outside a transaction)")
        victim = leader.pid if kind == "driver_kill" else worker
        deadline = time.monotonic() + 10
        while alive(victim) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(victim)
        assert [e["phase"] for e in timeline.events] == ["outside_transaction", "start", "end"]
        result = ChaosResult(scenario={}, schedule=[{"kind": kind}], faults_injected=1, timeline=timeline.events,
                             audits=[{"mode": "lineage", "verdict": "PASS", "violations": 0}])
        finish_result(result, tmp_path, timeline)
        assert result.verdict == "PASS"  # (a kill outside a transaction is still a fault the job survived)
        assert result.notes[0] == f"{kind} at {timeline.events[0]['t']:.1f} s struck outside a transaction: no " \
                                  "task was inside a transaction within 0.2 s, so the run did not try that kill " \
                                  "mid-transaction"
        assert result.notes[1:] == [f"{kind} at {result.recovery[0]['start_s']:.1f} s: no recovery time (\"-\"), as no "
                                    "batch that started after it committed before the run ended"]  # (no batch here)
    finally:
        for p in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)
        leader.wait()
