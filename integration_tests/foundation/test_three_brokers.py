"""The local cluster manager through the CLI, and transactions on 3 brokers (RF 3, min ISR 2) with a
broker SIGKILLed between transactions."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from eos.config import EosConfig
from eos.driver.checks import check_broker
from integration_tests.foundation.test_transactions_on_broker import commit_one_abort_one
from integration_tests.helpers import read_values
from transactions import KafkaAdmin

EOS = [sys.executable, "-m", "eos.cli.__main__"]


def eos(*args: str) -> str:
    out = subprocess.run([*EOS, *args], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 0, f"eos {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def processes_in(directory: Path) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if str(directory) in cmd and "kafka.Kafka" in cmd:
                found.append(f"{proc.name}: {cmd[:120]}")
    return found


def wait_until_stable(admin: KafkaAdmin, topic: str, timeout: float) -> None:
    """Until every partition's last stable offset reaches its high watermark (no transaction pending)."""
    partitions = admin.topic_partitions(topic)
    deadline = time.monotonic() + timeout
    while True:
        stable, ends = admin.end_offsets(partitions), admin.end_offsets(partitions, committed=False)
        if stable == ends:
            return
        assert time.monotonic() < deadline, f"{topic}: last stable offsets {stable} never reached {ends}"
        time.sleep(0.2)


def test_cli_three_broker_cluster_survives_a_killed_broker(tmp_path):
    root = tmp_path / "cluster"
    out = eos("cluster", "up", "--brokers", "3", "--dir", str(root))
    assert "Kafka cluster up (3 broker(s))" in out
    bootstrap = (root / "bootstrap.env").read_text().strip().split("=", 1)[1]
    try:
        assert "already running" in eos("cluster", "up", "--brokers", "3", "--dir", str(root))
        assert "3 of 3 broker(s) live" in eos("cluster", "status", "--dir", str(root))

        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("rf3", 3, 3, config={"min.insync.replicas": "2"})])["rf3"].result(60)
        described = admin.list_topics("rf3", timeout=10).topics["rf3"]
        assert all(len(p.replicas) == 3 for p in described.partitions.values())

        commit_one_abort_one(bootstrap, "rf3", "txn-3b", b"-first")
        eos("cluster", "kill", "2", "--dir", str(root))
        assert "2 of 3 broker(s) live" in eos("cluster", "status", "--dir", str(root))
        commit_one_abort_one(bootstrap, "rf3", "txn-3b", b"-second")  # min ISR 2 still met
        # a job (re)started now must not take the outage for a misconfiguration: the transaction log exists
        check_broker(KafkaAdmin(bootstrap), EosConfig(application_id="rf3", bootstrap_servers=bootstrap))

        # A commit or abort returns once the coordinator has logged it; it writes the partitions' markers after,
        # and a marker for a partition whose leader was just killed waits for the new leader. Until then the
        # partition's last stable offset stays below the transaction, and a read_committed reader ends there.
        wait_until_stable(KafkaAdmin(bootstrap), "rf3", timeout=60)
        values = read_values(bootstrap, "rf3", isolation="read_committed", timeout=60)
        assert sorted(values) == sorted(b"committed-%d%s" % (i, tag) for i in range(5)
                                        for tag in (b"-first", b"-second"))

        eos("cluster", "start", "2", "--dir", str(root))  # rejoins
        assert "3 of 3 broker(s) live" in eos("cluster", "status", "--dir", str(root))

        group_offsets_survive_a_coordinator_move(root, bootstrap)
    finally:
        eos("cluster", "down", "--dir", str(root))
    assert processes_in(root) == []
    assert not root.exists()


# Reads a group's committed offsets through KafkaAdmin in a loop until the stop file appears; says "ready"
# after its first read. "fresh": every read is a new KafkaAdmin's first (a driver starting).
READER = """
import os, sys, time
from transactions import KafkaAdmin
bootstrap, group, stop, mode = sys.argv[1:5]
admin, reads = KafkaAdmin(bootstrap), 0
while not os.path.exists(stop):
    if mode == "fresh" and reads:
        admin.close()
        admin = KafkaAdmin(bootstrap)
    got = admin.group_offsets(group, [("rf3", p) for p in range(3)], stable=False, timeout=10)
    assert got == {("rf3", p): 7 for p in range(3)}, got
    reads += 1
    if reads == 1:
        print("ready", flush=True)
    time.sleep(0.02)
print("reads", reads)
"""


def group_offsets_survive_a_coordinator_move(root: Path, bootstrap: str, mode: str = "reused") -> int:
    """The group's coordinator is stopped cleanly and started again while its offsets are read: the broker
    answers NOT_COORDINATOR meanwhile, which crashed readers using the admin API (librdkafka #5040). A reader
    through a consumer gets it as an error and asks again; once, a first read answered "nothing committed"
    instead. `KafkaAdmin` asks again for offsets it has seen committed, so the reader reads once before the
    move (a reader whose first read falls in the move: README, "Known limits"; "fresh" mode, the soak test).
    Returns the reader's reads."""
    group = "coordinator-move"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition("rf3", p, 7) for p in range(3)], asynchronous=False)
    consumer.close()
    # (a client of its own, kept until it answers: one that saw the last move may wait out its timeout first)
    describer = AdminClient({"bootstrap.servers": bootstrap})
    coordinator = describer.describe_consumer_groups([group], request_timeout=30)[group].result(60).coordinator.id
    stop = root.parent / "stop-reader"
    stop.unlink(missing_ok=True)
    reader = subprocess.Popen([sys.executable, "-c", READER, bootstrap, group, str(stop), mode],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert reader.stdout is not None
        if reader.stdout.readline().strip() == "ready":  # (else it died: its exit status says why, below)
            eos("cluster", "stop", str(coordinator), "--dir", str(root))
            eos("cluster", "start", str(coordinator), "--dir", str(root))
    finally:
        stop.touch()
        out, err = reader.communicate(timeout=120)
    assert reader.returncode == 0, f"the reader died (exit {reader.returncode}):\n{err[-3000:]}"
    reads = int(out.split()[-1])
    assert reads > 0
    return reads


@pytest.mark.soak
@pytest.mark.xfail(reason="README, Known limits: librdkafka 2.16 at times answers a first read during a coordinator "
                          "move as nothing committed (2 of 4 runs on 2026-11-25, 5 of 22 on 2026-12-01)", strict=False)
def test_first_reads_of_fresh_readers_across_coordinator_moves(tmp_path):
    """The gap in README's "Known limits": a reader whose *first* read of a group falls in a coordinator move.
    Hundreds of fresh readers read through each of eight moves; any "nothing committed" fails the test."""
    root = tmp_path / "cluster"
    eos("cluster", "up", "--brokers", "3", "--dir", str(root))
    bootstrap = (root / "bootstrap.env").read_text().strip().split("=", 1)[1]
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("rf3", 3, 3, config={"min.insync.replicas": "2"})])["rf3"].result(60)
        reads = [group_offsets_survive_a_coordinator_move(root, bootstrap, "fresh") for _ in range(8)]
        assert min(reads) > 1, f"fresh first reads per move: {reads}"  # (each reader's first read checks)
    finally:
        eos("cluster", "down", "--dir", str(root))
