"""Readiness probes: a cluster is ready when the expected brokers answer metadata, the consumer-offsets
topic exists and a transactional producer can initialise (which needs the transaction state log)."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

__all__ = ["live_broker_ids", "node_answers", "wait_ready"]

def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.connection.setup.timeout.ms": 2000,
                        "reconnect.backoff.max.ms": 500, "log_level": 0})


def live_broker_ids(bootstrap: str, timeout: float = 3.0) -> set[int]:
    try:
        md = _admin(bootstrap).list_topics(timeout=timeout)
    except KafkaException:
        return set()
    return set(md.brokers)


def node_answers(address: str, timeout: float = 2.0) -> bool:
    """True when the broker at `address` itself answers a Kafka ApiVersions request.

    Asked on a raw socket on purpose: a client bootstrapped from one address may send its metadata
    request to any broker it learns about, and a SIGKILLed broker stays registered in the cluster
    metadata for its session timeout."""
    host, _, port = address.rpartition(":")
    client_id = b"localkafka"
    # Request header v1: api_key=18 (ApiVersions), api_version=0, correlation_id, client_id; empty body.
    body = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(struct.pack(">i", len(body)) + body)
            head = _recv_exactly(sock, 10)
    except OSError:
        return False
    _size, correlation_id, error_code = struct.unpack(">iih", head)
    return correlation_id == 7 and error_code == 0


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return buf


def wait_ready(bootstrap: str, brokers: int, timeout: float, alive: Callable[[], None] = lambda: None) -> None:
    """Until `brokers` brokers are in metadata at `bootstrap` and transactions work; `alive` is called between
    the tries of every step and raises when a broker being waited for has exited (its JVM refused an option,
    say). It is the only sure sign: once a dead broker's port is free, another process may take it and answer."""
    deadline = time.monotonic() + timeout
    while len(live_broker_ids(bootstrap, 2.0)) < brokers:
        alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{brokers} broker(s) did not appear in metadata at {bootstrap} within {timeout:.0f}s")
        time.sleep(0.3)
    _warm_group_coordinator(bootstrap, deadline, alive)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "localkafka-readiness-probe",
                         "log_level": 0})
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"transactional producers could not initialise at {bootstrap} within {timeout:.0f}s")
        try:
            producer.init_transactions(min(remaining, 30.0))
            return
        except KafkaException as exc:
            if exc.args[0].fatal():
                raise
            alive()
            time.sleep(0.3)


def _warm_group_coordinator(bootstrap: str, deadline: float, alive: Callable[[], None]) -> None:
    """Fetch a committed offset once so that `__consumer_offsets` exists before the first job.

    (An explicit partition list is used on purpose: confluent-kafka 2.16 crashes on
    `list_consumer_group_offsets` for a group without partitions.)"""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "localkafka-readiness-probe", "log_level": 0})
    try:
        while time.monotonic() < deadline:
            try:
                consumer.committed([TopicPartition("localkafka-readiness-probe", 0)], timeout=5)
                return
            except KafkaException:
                alive()
                time.sleep(0.3)
    finally:
        consumer.close()
    raise TimeoutError(f"the group coordinator at {bootstrap} did not come up")
