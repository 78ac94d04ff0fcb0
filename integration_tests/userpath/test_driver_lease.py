"""A second driver of a running application is refused, naming the one that runs; once that one stops (or
dies) the next driver starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from eos import Application, ConfigError
from integration_tests.helpers import assert_exactly_once, produce

JOB = """
    from eos import Application

    app = Application("{app}")

    @app.process(input="{src}", output="{dst}")
    def copy(record):
        return record.key, record.value
"""


def copy_app(app_id: str, bootstrap: str, src: str, dst: str) -> Application:
    app = Application(app_id, bootstrap, log_level="ERROR", driver_lease_timeout=8)

    @app.process(input=src, output=dst)
    def copy(record):
        return record.key, record.value

    return app


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_a_second_driver_is_refused_while_the_first_runs(kafka, spark, topic_factory, unique_name, tmp_path):
    src, dst = topic_factory("in", partitions=2), topic_factory("out", partitions=2)
    produce(kafka.bootstrap_servers, src, ((f"k{i}".encode(), b"v") for i in range(100)))
    app_id = unique_name("app")
    (tmp_path / "job.py").write_text(textwrap.dedent(JOB.format(app=app_id, src=src, dst=dst)))
    log = open(tmp_path / "first.log", "w")
    first = subprocess.Popen([sys.executable, "-m", "eos.cli", "run", "job.py", "--log-format", "json"],
                             cwd=tmp_path, env={**os.environ, "EOS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
                                                "HOME": str(tmp_path)},
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: '"batch done"' in (tmp_path / "first.log").read_text(), 120, "the first driver's batch")
        second = copy_app(app_id, kafka.bootstrap_servers, src, dst)
        with pytest.raises(ConfigError) as err:
            second.run(spark, until_caught_up=True)
        assert f"another driver of application {app_id!r} is running" in str(err.value)
        assert f"eos-driver-{os.uname().nodename}-{first.pid}" in str(err.value)  # which one
    finally:
        os.kill(first.pid, signal.SIGTERM)  # a clean stop leaves the group: the lease is free at once
        first.wait(60)
    produce(kafka.bootstrap_servers, src, ((f"k{i}".encode(), b"v") for i in range(100, 150)))
    started = time.monotonic()
    summary = copy_app(app_id, kafka.bootstrap_servers, src, dst).run(spark, until_caught_up=True)
    assert time.monotonic() - started < 30 and summary.records_in == 50
    assert_exactly_once(kafka.bootstrap_servers, inputs=[src], outputs=[dst], group=app_id, expected_inputs=150)
