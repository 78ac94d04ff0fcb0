"""Finding a job's processes, as the fault injectors do (real processes, Linux /proc)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from chaos.processes import job_processes

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
