"""The peers benchmark's memory sample: every process of a run's session, by role, RSS and PSS."""

from __future__ import annotations

import subprocess
import sys
import time

from benchmarks.peers.__main__ import _memory, _role, _shares

#: a process that forks two children like it; each then holds 30 MiB of its own
_FORKS = """
import os, time
for _ in range(2):
    if os.fork() == 0:
        break
x = bytearray(30 << 20)
time.sleep(30)
"""


def test_a_sample_sums_the_sessions_processes_and_splits_them_by_role():
    proc = subprocess.Popen([sys.executable, "-c", _FORKS], start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while True:
            sample = _memory(proc.pid)
            if ("python workers x2" in sample.processes and sample.pss_mib > 90) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert set(sample.processes) == {"python main", "python workers x2"}, sample
        assert 90 < sample.pss_mib <= sample.rss_mib  # three processes with 30 MiB of their own each
        assert abs(sum(sample.processes.values()) - sample.pss_mib) < 0.01
    finally:
        proc.kill()
        subprocess.run(["pkill", "-s", str(proc.pid)], check=False)


def test_roles_by_command_line():
    assert _role("/usr/lib/jvm/java-17/bin/java -cp x org.apache.spark.deploy.SparkSubmit", forked=False) == "JVM"
    assert _role("/venv/bin/python -m eos.worker.daemon", forked=False) == "python daemon"
    assert _role("/venv/bin/python -m eos.worker.daemon", forked=True) == "python workers"
    assert _role("cat -u", forked=False) == "daemon stand-in"  # what the launched daemon becomes (eos.worker.daemon)
    assert _role("/venv/bin/python -m eos.cli run job.py", forked=False) == "python main"


def test_shares_print_small_processes_with_a_decimal():
    assert _shares({"python main": 33.4, "JVM": 162.6, "daemon stand-in": 0.25}) == \
        "JVM 163, python main 33, daemon stand-in 0.2"
