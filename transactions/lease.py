"""A lease held through a consumer group: the member that is assigned the only partition of a
one-partition topic holds it.

Kafka's group coordinator gives that partition to one live member at a time; with the cooperative-sticky
assignor a member that joins later does not take it from the holder. A holder that stops cleanly leaves
the group and the lease passes at once; one that dies loses it when its session times out
(`session_timeout_ms`). A background thread keeps polling the consumer, which keeps the session alive.
"""

from __future__ import annotations

import enum
import os
import socket
import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import AdminClient

__all__ = ["GroupLease", "LeaseState"]


class LeaseState(enum.StrEnum):
    PENDING = "pending"  # joining, or the group is rebalancing
    HELD = "held"
    ELSEWHERE = "elsewhere"  # the group settled and another member holds the partition


class GroupLease:
    def __init__(self, bootstrap_servers: str, group: str, topic: str, *, session_timeout_ms: int = 6000) -> None:
        self.bootstrap_servers, self.group, self.topic = bootstrap_servers, group, topic
        self.client_id = f"eos-driver-{socket.gethostname()}-{os.getpid()}"
        self._consumer = Consumer({
            "bootstrap.servers": bootstrap_servers, "group.id": group, "client.id": self.client_id,
            "session.timeout.ms": session_timeout_ms, "heartbeat.interval.ms": min(1000, session_timeout_ms // 3),
            "partition.assignment.strategy": "cooperative-sticky", "enable.auto.commit": False,
            "enable.partition.eof": False, "log_level": 3})
        self.state = LeaseState.PENDING
        self._changed = threading.Condition()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ group callbacks (in the poll thread)
    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        held = any(tp.topic == self.topic for tp in consumer.assignment()) or any(
            tp.topic == self.topic for tp in partitions)
        self._set(LeaseState.HELD if held else LeaseState.ELSEWHERE)

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        if any(tp.topic == self.topic for tp in partitions):
            self._set(LeaseState.PENDING)

    def _set(self, state: LeaseState) -> None:
        with self._changed:
            self.state = state
            self._changed.notify_all()

    def _poll(self) -> None:
        while not self._stopping.is_set():
            try:
                self._consumer.poll(0.2)
            except (KafkaException, RuntimeError):
                time.sleep(0.2)

    # ------------------------------------------------------------------ API
    def acquire(self, timeout: float) -> bool:
        """Join the group and wait up to `timeout` seconds for the lease. True when held."""
        self._consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                 on_lost=self._on_revoke)
        self._thread = threading.Thread(target=self._poll, name=f"lease-{self.group}", daemon=True)
        self._thread.start()
        return self.wait_held(timeout)

    def wait_held(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._changed:
            while self.state is not LeaseState.HELD:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True

    @property
    def held(self) -> bool:
        return self.state is LeaseState.HELD

    def holders(self, timeout: float = 10.0) -> list[str]:
        """Client ids and hosts of the group's members other than this one (for error messages)."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0})
        try:
            description = admin.describe_consumer_groups([self.group], request_timeout=timeout)[self.group].result(
                timeout)
        except Exception:  # only used to name the other driver; never decides anything
            return []
        return [f"{m.client_id} ({m.host.lstrip('/')})" for m in description.members if m.client_id != self.client_id]

    def release(self) -> None:
        """Leave the group: the next driver gets the lease at once. Idempotent."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
            try:
                self._consumer.close()
            except (KafkaException, RuntimeError):
                pass

