"""The process Spark launched as a local master's Python daemon stands for the daemon the zygote forked as `cat -u`,
whose output is that daemon's stdin (eos.worker.daemon.stand_in). Killed while a task is inside its transaction,
it takes the daemon and the daemon's workers with it: Spark launches another daemon, and the job's committed
output still holds every input exactly once, with every key's totals equal to those recomputed from the input."""

from __future__ import annotations

import os
import signal
import time

from chaos.processes import alive, job_processes
from eos.worker.daemon import STAND_IN
from integration_tests.engine.test_kill_restart import (
    assert_pipeline_exact,
    kill_group,
    pipeline_run,
    start_job,
    wait_for,
)

N = 30_000


def _stand_ins(pgid: int) -> list[int]:
    return [p.pid for p in job_processes(pgid) if p.cmdline.strip() == " ".join(STAND_IN)]


def _daemons(pgid: int, stand_in: int) -> list[int]:
    """The job's Python daemon loops: processes that lead a group of their own, not the driver or the stand-in."""
    return [p.pid for p in job_processes(pgid) if p.pgid == p.pid and p.pid not in (pgid, stand_in)
            and "python" in p.cmdline.split(" ", 1)[0]]


def test_a_stand_in_killed_mid_transaction_takes_its_daemon_along_and_loses_nothing(kafka, topic_factory,
                                                                                   unique_name, tmp_path):
    env, topics = pipeline_run(kafka, topic_factory, unique_name, tmp_path, N)
    marks, log = tmp_path / "marks", tmp_path / "job.log"
    proc = start_job(env, log)
    try:
        assert wait_for(lambda: any(marks.iterdir()) and len(_stand_ins(proc.pid)) == 1, 120, proc), \
            f"no task inside a transaction with the daemon's stand-in running; see {log}"
        [stand_in] = _stand_ins(proc.pid)
        daemons = _daemons(proc.pid, stand_in)
        assert len(daemons) == 1, daemons
        os.kill(stand_in, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while alive(daemons[0]):  # a zombie has ended; so has one reaped while its state is read
            assert time.monotonic() < deadline, "the daemon outlived its stand-in"
            time.sleep(0.01)
        assert proc.poll() is None, f"the job ended before its daemon did; see {log}"  # (which would end it too)
        assert proc.wait(600) == 0, f"the run did not recover from the stand-in's death; see {log}"
    finally:
        if proc.poll() is None:
            kill_group(proc)
    assert "Assuming that daemon unexpectedly quit, attempting to restart" in log.read_text(), \
        f"Spark did not launch another daemon; see {log}"
    assert_pipeline_exact(kafka.bootstrap_servers, topics, N)
