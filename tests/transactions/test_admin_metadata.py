"""A new admin client asks for the cluster's metadata before its first request
(`transactions.settings.learn_brokers`)."""

from __future__ import annotations

import concurrent.futures
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

import transactions.admin as admin_module
from transactions.admin import KafkaAdmin


class FakeAdminClient:
    """Records the calls every client made, in order, in one shared list."""

    def __init__(self, calls: list[tuple[int, str]], settings: dict[str, Any], metadata_fails: bool) -> None:
        self.calls, self.settings, self.metadata_fails = calls, settings, metadata_fails
        self.id = sum(1 for _, name in calls if name == "created")
        calls.append((self.id, "created"))

    def poll(self, timeout: float) -> int:
        return 0

    def list_topics(self, timeout: float = -1) -> None:
        self.calls.append((self.id, "list_topics"))
        if self.metadata_fails:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))

    def list_offsets(self, request: dict, **kwargs: Any) -> dict:
        self.calls.append((self.id, "list_offsets"))
        out = {}
        for tp in request:
            fut: concurrent.futures.Future = concurrent.futures.Future()
            fut.set_result(SimpleNamespace(offset=7))
            out[tp] = fut
        return out


@pytest.fixture
def clients(monkeypatch: pytest.MonkeyPatch):
    calls: list[tuple[int, str]] = []
    made: list[FakeAdminClient] = []
    state = {"metadata_fails": False}

    def factory(settings: dict[str, Any]) -> FakeAdminClient:
        client = FakeAdminClient(calls, settings, state["metadata_fails"])
        made.append(client)
        return client

    monkeypatch.setattr(admin_module, "AdminClient", factory)
    return SimpleNamespace(calls=calls, made=made, state=state)


def test_a_new_client_asks_for_metadata_once_before_its_first_request(clients):
    admin = KafkaAdmin("broker:9092")
    assert admin.end_offsets([("t", 0)]) == {("t", 0): 7}
    assert admin.earliest_offsets([("t", 1)]) == {("t", 1): 7}
    assert clients.calls == [(0, "created"), (0, "list_topics"), (0, "list_offsets"), (0, "list_offsets")]


def test_a_replaced_client_asks_again(clients):
    admin = KafkaAdmin("broker:9092")
    admin.end_offsets([("t", 0)])
    admin._replace = True  # as after a transport error or a stale answer
    admin.end_offsets([("t", 0)])
    assert clients.calls[-3:] == [(1, "created"), (1, "list_topics"), (1, "list_offsets")]
    assert admin.replacements == 1


def test_unanswered_metadata_is_left_to_the_request_itself(clients):
    clients.state["metadata_fails"] = True
    admin = KafkaAdmin("broker:9092")
    assert admin.end_offsets([("t", 0)]) == {("t", 0): 7}
    admin.end_offsets([("t", 0)])
    # asked once: a client that did not get its metadata is not held up again at every request
    assert [name for _, name in clients.calls] == ["created", "list_topics", "list_offsets", "list_offsets"]


def test_a_learned_broker_is_connected_at_once_unless_overridden(clients):
    KafkaAdmin("broker:9092")
    KafkaAdmin("broker:9092", {"reconnect.backoff.ms": 250})
    assert [c.settings["reconnect.backoff.ms"] for c in clients.made] == [10, 250]
