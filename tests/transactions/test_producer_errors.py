"""TransactionalProducer's error paths against a fake client (the broker paths are in integration_tests)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

import transactions.producer
from transactions import ProducerFencedError, TransactionalProducer
from transactions.producer import TxnState


class FencedClient:
    """A client fenced mid-transaction: calls fail with _FATAL, and the cause comes out of poll() itself."""

    def __init__(self, settings):
        self.polls = 0

    def init_transactions(self, timeout):
        pass

    def begin_transaction(self):
        pass

    def produce(self, *args, **kwargs):
        raise KafkaException(KafkaError(KafkaError._FATAL, "fatal error", fatal=True))

    def poll(self, timeout):
        self.polls += 1
        raise KafkaException(KafkaError(KafkaError._FENCED, "This instance has been fenced by a newer instance",
                                        fatal=True))


def test_fencing_raised_out_of_poll_is_classified_as_fencing(monkeypatch):
    monkeypatch.setattr(transactions.producer, "Producer", FencedClient)
    producer = TransactionalProducer("127.0.0.1:1", "task-0", transaction_timeout_ms=10_000)
    producer.init()
    producer.begin()
    with pytest.raises(ProducerFencedError, match="fenced"):
        producer.produce("out", b"v", b"k")
    assert producer.state is TxnState.FENCED
    assert not producer.usable


class FencedInsideDeliveryCallbacks(FencedClient):
    """The client raises fencing while serving delivery callbacks: Python sees the next callback return
    with an exception set and raises SystemError, the client's KafkaException as its cause."""

    def produce(self, *args, **kwargs):
        pass

    def flush(self, timeout):
        fenced = KafkaException(KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True))
        raise SystemError("<function _on_delivery> returned a result with an exception set") from fenced


def test_fencing_surfacing_as_a_system_error_in_flush_is_classified_as_fencing(monkeypatch):
    monkeypatch.setattr(transactions.producer, "Producer", FencedInsideDeliveryCallbacks)
    producer = TransactionalProducer("127.0.0.1:1", "task-0", transaction_timeout_ms=10_000)
    producer.init()
    producer.begin()
    producer.produce("out", b"v", b"k")
    with pytest.raises(ProducerFencedError, match="fenced"):
        producer.commit(timeout=5)
    assert producer.state is TxnState.FENCED


def test_a_system_error_without_a_client_error_inside_is_not_hidden():
    with pytest.raises(SystemError, match="something else"):
        transactions.producer._client_error(SystemError("something else"))
