"""The process Spark launched as a local master's Python daemon stands for the daemon the zygote forked as `cat -u`,
whose output is that daemon's stdin (eos.worker.daemon.stand_in). Killed while a task is inside its transaction,
it takes the daemon and the daemon's workers with it: Spark launches another daemon, and the job's committed
output still holds every input exactly once, with every key's totals equal to those recomputed from the input."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from chaos.processes import job_processes
from eos.worker.daemon import STAND_IN
from integration_tests.engine.test_kill_restart import kill_group, start_job, wait_for
from integration_tests.helpers import assert_exactly_once, assert_totals_exact, produce

N = 30_000


def _stand_ins(pgid: int) -> list[int]:
    return [p.pid for p in job_processes(pgid) if p.cmdline.strip() == " ".join(STAND_IN)]


def _daemons(pgid: int, stand_in: int) -> list[int]:
    """The job's Python daemon loops: processes that lead a group of their own, not the driver or the stand-in."""
    return [p.pid for p in job_processes(pgid) if p.pgid == p.pid and p.pid not in (pgid, stand_in)
            and "python" in p.cmdline.split(" ", 1)[0]]


def test_a_stand_in_killed_mid_transaction_takes_its_daemon_along_and_loses_nothing(kafka, topic_factory,
                                                                                   unique_name, tmp_path):
    src, dst, totals = (topic_factory("in", partitions=4), topic_factory("out", partitions=4),
                        topic_factory("totals", partitions=4))
    produce(kafka.bootstrap_servers, src,
            ((f"k{i % 1000}".encode(), json.dumps({"id": i, "n": i}).encode()) for i in range(N)))
    app_id, marks = unique_name("app"), tmp_path / "marks"
    marks.mkdir()
    env = {**os.environ, "EOS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers, "EOS_TEST_APP_ID": app_id,
           "EOS_TEST_INPUT": src, "EOS_TEST_OUTPUT": dst, "EOS_TEST_TOTALS": totals,
           "EOS_TEST_STATE_DIR": str(tmp_path / "state"), "EOS_TEST_MARK_DIR": str(marks), "EOS_TEST_BATCH": "1500"}
    log = tmp_path / "job.log"
    proc = start_job(env, log)
    try:
        assert wait_for(lambda: any(marks.iterdir()) and len(_stand_ins(proc.pid)) == 1, 120, proc), \
            f"no task inside a transaction with the daemon's stand-in running; see {log}"
        [stand_in] = _stand_ins(proc.pid)
        daemons = _daemons(proc.pid, stand_in)
        assert len(daemons) == 1, daemons
        os.kill(stand_in, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{daemons[0]}").exists() and \
                Path(f"/proc/{daemons[0]}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
            assert time.monotonic() < deadline, "the daemon outlived its stand-in"
            time.sleep(0.05)
        assert proc.wait(600) == 0, f"the run did not recover from the stand-in's death; see {log}"
    finally:
        if proc.poll() is None:
            kill_group(proc)
    assert_exactly_once(kafka.bootstrap_servers, inputs=[src], outputs=[dst], group=app_id, expected_inputs=N)
    assert_exactly_once(kafka.bootstrap_servers, inputs=[dst], outputs=[totals], group=app_id, expected_inputs=N)
    result = assert_totals_exact(kafka.bootstrap_servers, inputs=[dst], totals=[totals], group=app_id)
    assert result["count"].keys_expected == 1000 and result["count"].output_records == N
