"""`eos kafka archive` makes a class-data archive that local brokers really map (`/proc/<pid>/maps` names it),
and a broker started on it serves transactions: committed records are read, aborted ones are not. A broker
whose JVM exits as it starts fails the start at once, with the end of its log."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from integration_tests.foundation.test_transactions_on_broker import commit_one_abort_one
from integration_tests.helpers import read_values
from localkafka.classdata import archive_path
from localkafka.cluster import JVM_OPTIONS_ENV, ClusterError, LocalCluster
from localkafka.jars import check_java, ensure_kafka_jars
from transactions import KafkaAdmin, TopicSpec


def maps(pid: int, path: Path) -> bool:
    return str(path) in Path(f"/proc/{pid}/maps").read_text()


def test_the_cli_makes_an_archive_that_local_brokers_map(kafka, tmp_path, unique_name):
    # The cache is the user's, as for the driver's archive: the one `make setup` made is checked here; where
    # set-up made none, the first command makes it (~15 s).
    made = subprocess.run([sys.executable, "-m", "eos.cli", "kafka", "archive", "--strict"], text=True,
                          capture_output=True, timeout=300)
    assert made.returncode == 0, made.stdout + made.stderr
    path = archive_path(ensure_kafka_jars(), check_java())
    assert path.is_file() and str(path) in made.stdout.replace("\n", "")
    written = path.stat().st_mtime_ns
    again = subprocess.run([sys.executable, "-m", "eos.cli", "kafka", "archive"], text=True, capture_output=True,
                           timeout=60)
    assert again.returncode == 0 and path.stat().st_mtime_ns == written  # made once

    session = kafka.cluster
    if session is not None and session.nodes[0].pid and maps(session.nodes[0].pid, path):
        bootstrap = kafka.bootstrap_servers  # the suite's own broker, started after set-up made the archive
        cluster = None
    else:  # (a broker from elsewhere, or one started before the archive existed)
        cluster = LocalCluster(tmp_path / "cluster").up()
        bootstrap = cluster.bootstrap_servers
        assert cluster.nodes[0].pid is not None and maps(cluster.nodes[0].pid, path)
    try:
        topic = unique_name("class-data")
        KafkaAdmin(bootstrap).create_topics([TopicSpec(topic, 1)])
        commit_one_abort_one(bootstrap, topic, unique_name("txn"))
        assert read_values(bootstrap, topic, isolation="read_committed") == [b"committed-%d" % i for i in range(5)]
    finally:
        if cluster is not None:
            cluster.down()


def test_a_broker_whose_jvm_exits_while_starting_fails_the_start_at_once_with_its_log(tmp_path, monkeypatch):
    # (it waited out the whole timeout before, three minutes for `eos cluster up`, and the reason was in a log)
    monkeypatch.setenv(JVM_OPTIONS_ENV, "-XX:TieredStopAtLevel=1 -XX:+NoSuchOption")
    cluster = LocalCluster(tmp_path / "cluster")
    try:
        with pytest.raises(ClusterError, match=r"(?s)broker 1 exited while starting .*Unrecognized VM option"):
            cluster.up(timeout=120)
    finally:
        cluster.down()
