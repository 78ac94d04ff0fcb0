"""A peer's run ends with every process of its session (`benchmarks.peers.launched`, `outlived`): a process that
outlived the one the benchmark launched would share the cores with the next peer's run."""

from __future__ import annotations

import subprocess
import sys
import time

from benchmarks.peers.__main__ import Run, launched, outlived
from chaos.processes import session_processes


def pids(session: int) -> list[int]:
    return [p.pid for p in session_processes(session)]


# a leader that starts a child and exits at SIGTERM at once; the child takes a second to exit at SIGTERM, as a
# JVM runs its shutdown hooks
LEADER = """
import signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", '''
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: (time.sleep(1.0), sys.exit(0)))
print("ready", flush=True)
while True:
    time.sleep(0.05)
'''], stdout=subprocess.PIPE)
child.stdout.readline()
print("started", flush=True)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    time.sleep(0.05)
"""


def test_a_run_ends_once_every_process_of_its_session_has_exited(tmp_path):
    run = Run("peer", "stateless", 1)
    with launched([sys.executable, "-c", LEADER], {}, tmp_path, run) as proc:
        deadline = time.monotonic() + 30
        while b"started" not in (tmp_path / "run.log").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(pids(proc.pid)) == 2
    assert proc.returncode is not None and pids(proc.pid) == []
    assert 0.7 < run.outlived_s < 10, run.outlived_s


def test_processes_left_past_the_timeout_are_killed(tmp_path):
    proc = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 60 & exit 0"], start_new_session=True)
    proc.wait()
    assert len(pids(proc.pid)) == 1  # the sleep, its leader gone
    took = outlived(proc.pid, 0.5)
    assert 0.5 <= took < 10 and pids(proc.pid) == []
    assert outlived(proc.pid, 5.0) < 5.0  # nothing left: it returns without waiting out its timeout

