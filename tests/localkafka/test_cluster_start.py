"""A start watches the broker JVMs it started (`LocalCluster._check_started`): one that has exited fails the
start with the end of its log, during the wait and after it, since once a dead broker's port is free another
process's broker may take it and answer the readiness probes. One killed on purpose is not watched."""

from __future__ import annotations

import subprocess

import pytest

from localkafka import cluster as module
from localkafka.cluster import ClusterError, LocalCluster
from localkafka.config import NodeSpec


def cluster_with_exited_broker(tmp_path) -> LocalCluster:
    cluster = LocalCluster(tmp_path / "cluster")
    cluster.nodes = [NodeSpec(1, 9001, 9101, 9201)]
    child = subprocess.Popen(["sh", "-c", "exit 1"])
    child.wait()
    cluster._children[1], cluster.nodes[0].pid = child, child.pid
    cluster._starting.add(1)
    cluster.log_path(1).parent.mkdir(parents=True)
    cluster.log_path(1).write_text("Unrecognized VM option 'NoSuchOption'\n")
    return cluster


def test_an_exited_broker_fails_the_wait_though_another_broker_answers_its_port(tmp_path, monkeypatch):
    cluster = cluster_with_exited_broker(tmp_path)
    monkeypatch.setattr(module, "wait_ready", lambda *args: None)  # an impostor: every probe answered
    with pytest.raises(ClusterError, match=r"(?s)broker 1 exited while starting \(status 1\).*NoSuchOption"):
        cluster.wait_ready(timeout=5, brokers=1)


def test_an_exited_broker_fails_the_wait_between_its_tries(tmp_path, monkeypatch):
    cluster = cluster_with_exited_broker(tmp_path)
    monkeypatch.setattr(module, "wait_ready", lambda bootstrap, brokers, timeout, alive: alive())
    with pytest.raises(ClusterError, match="broker 1 exited while starting"):
        cluster.wait_ready(timeout=5, brokers=1)


def test_a_broker_killed_on_purpose_is_not_watched(tmp_path, monkeypatch):
    cluster = cluster_with_exited_broker(tmp_path)
    cluster.kill(1)
    monkeypatch.setattr(module, "wait_ready", lambda bootstrap, brokers, timeout, alive: alive())
    cluster.wait_ready(timeout=5, brokers=0)
