"""Pick a real Kafka cluster for tests, demos and benchmarks.

In this order (as confluent-kafka-python's own integration tests do):

1. an existing cluster named by `EOS_BOOTSTRAP_SERVERS`;
2. a testcontainers Kafka container, when a Docker daemon answers a ping (a `docker` binary alone is not
   enough: a client without an engine is common);
3. a local KRaft cluster started from the Maven-resolved Apache Kafka jars.

Three-broker clusters always come from (3): the tests that need them also kill and restart brokers,
which only the local cluster manager can do.
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from localkafka.cluster import ClusterError, LocalCluster, check_features
from localkafka.readiness import live_broker_ids, wait_ready

__all__ = ["KafkaEndpoint", "provide_kafka", "docker_daemon_answers", "docker_wanted", "exit_on_sigterm",
           "ENV_BOOTSTRAP"]

ENV_BOOTSTRAP = "EOS_BOOTSTRAP_SERVERS"
TESTCONTAINERS_IMAGE = os.environ.get("EOS_TESTCONTAINERS_IMAGE", "confluentinc/cp-kafka:7.9.0")


@dataclass(frozen=True)
class KafkaEndpoint:
    bootstrap_servers: str
    source: Literal["environment", "testcontainers", "local"]
    brokers: int
    cluster: LocalCluster | None = None  # set for local clusters: per-broker fault controls


def docker_daemon_answers(timeout: float = 3.0) -> bool:
    try:
        import docker  # shipped with testcontainers

        client = docker.from_env(timeout=timeout)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # no socket, no permission, no engine: all mean "no Docker"
        return False


def docker_wanted() -> bool:
    """Containers for the tests: a Docker daemon answers and `EOS_NO_DOCKER=1` does not turn them off."""
    return os.environ.get("EOS_NO_DOCKER") != "1" and docker_daemon_answers()


@contextmanager
def provide_kafka(brokers: int = 1, root: str | Path | None = None, *,
                  features: dict[str, int] | None = None) -> Iterator[KafkaEndpoint]:
    """`features`: a local cluster formatted with these feature levels (`LocalCluster`), whatever a Docker
    daemon or `EOS_BOOTSTRAP_SERVERS` offers: a running cluster's levels are its own."""
    if features and os.environ.get(ENV_BOOTSTRAP):
        raise ClusterError(f"broker features {features} are set where this process formats its own broker; "
                           f"unset {ENV_BOOTSTRAP}, or set the levels on that cluster (kafka-features.sh)")
    if brokers == 1 and (env := os.environ.get(ENV_BOOTSTRAP)):
        yield KafkaEndpoint(env, "environment", _count_brokers(env))
        return
    if brokers == 1 and not features and docker_wanted():
        with _testcontainers_kafka() as bootstrap:
            yield KafkaEndpoint(bootstrap, "testcontainers", 1)
        return
    with _local_cluster(brokers, root, features) as cluster:
        yield KafkaEndpoint(cluster.bootstrap_servers, "local", brokers, cluster)


@contextmanager
def _local_cluster(brokers: int, root: str | Path | None,
                   features: dict[str, int] | None = None) -> Iterator[LocalCluster]:
    features = check_features(features or {})  # (before a directory is made for a cluster that would refuse them)
    cluster = LocalCluster(Path(root) if root else Path(tempfile.mkdtemp(prefix=f"eos-kafka-{brokers}b-")), brokers,
                           features=features)
    with exit_on_sigterm():
        try:
            cluster.up()
            yield cluster
        finally:
            cluster.down(timeout=15)


@contextmanager
def exit_on_sigterm() -> Iterator[None]:
    """SIGTERM unwinds (SystemExit) instead of ending the process on the spot, so the brokers this process
    started are stopped too. Only where nobody else handles SIGTERM, and only on the main thread."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    def unwind(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, unwind)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextmanager
def _testcontainers_kafka() -> Iterator[str]:
    from testcontainers.community.kafka import KafkaContainer

    container = (
        KafkaContainer(TESTCONTAINERS_IMAGE)
        .with_kraft()
        # Single broker: transaction log RF 1 / min ISR 1, or transactional producers never initialise.
        .with_env("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1")
        .with_env("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1")
        .with_env("KAFKA_AUTO_CREATE_TOPICS_ENABLE", "false")
        .with_env("KAFKA_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS", "2000")
    )
    with container:
        bootstrap = container.get_bootstrap_server()
        wait_ready(bootstrap, 1, timeout=120)
        yield bootstrap


def _count_brokers(bootstrap: str) -> int:
    return max(1, len(live_broker_ids(bootstrap, timeout=10)))
