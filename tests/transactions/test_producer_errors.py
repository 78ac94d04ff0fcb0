"""TransactionalProducer's error paths against a fake client (the broker paths are in integration_tests)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

import transactions.producer
from transactions import DeliveryFailedError, ProducerFencedError, ProducerRecord, TransactionalProducer
from transactions.producer import TxnState


class FencedClient:
    """A client fenced mid-transaction: calls fail with _FATAL, and the cause comes out of poll() itself."""

    def __init__(self, settings):
        self.polls = 0

    def list_topics(self, timeout):
        pass

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


class RecordingClient:
    """Records each produce call's delivery callback; the first commit fails the way librdkafka fails a
    transaction in which records without a delivery report failed: abortable, without the cause."""

    def __init__(self, settings):
        self.callbacks: list[object] = []
        self.commits = 0

    def list_topics(self, timeout):
        pass

    def init_transactions(self, timeout):
        pass

    def begin_transaction(self):
        pass

    def abort_transaction(self, timeout):
        pass

    def produce(self, topic, value, key, partition, callback, on_delivery, timestamp, headers):
        self.callbacks.append(callback)

    def poll(self, timeout):
        return 0

    def flush(self, timeout):
        return 0

    def commit_transaction(self, timeout):
        self.commits += 1
        if self.commits == 1:
            raise KafkaException(KafkaError(KafkaError._INCONSISTENT, "1 message(s) failed delivery",
                                            txn_requires_abort=True))


def test_outputs_go_without_delivery_reports_until_a_transaction_fails_without_saying_why(monkeypatch):
    monkeypatch.setattr(transactions.producer, "Producer", RecordingClient)
    producer = TransactionalProducer("127.0.0.1:1", "task-0", transaction_timeout_ms=10_000)
    client = producer._producer
    producer.init()
    records = [ProducerRecord("out", None, b"k", b"v", [], None)] * 2
    changelog = [ProducerRecord("store-changelog", 0, b"k", b"v", [], None)]

    producer.begin()
    assert producer.produce_all(records) == 4
    producer.produce_all(changelog, track=True)
    assert client.callbacks == [None, None, producer._on_delivery]
    with pytest.raises(DeliveryFailedError, match="reports every record"):
        producer.commit(timeout=5)
    assert producer.report_all
    producer.abort(timeout=5)

    client.callbacks.clear()
    producer.begin()
    producer.produce_all(records)
    assert client.callbacks == [producer._on_delivery] * 2  # the retry learns which record fails, and why
    producer.commit(timeout=5)
    assert not producer.report_all

    client.callbacks.clear()
    producer.begin()
    producer.produce_all(records)
    assert client.callbacks == [None, None]


class MetadataFirstClient(RecordingClient):
    """Records the order of the calls init() makes; its metadata request fails like an unreachable cluster's."""

    def __init__(self, settings):
        super().__init__(settings)
        self.calls: list[str] = []

    def list_topics(self, timeout):
        self.calls.append("list_topics")
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "all brokers down"))

    def init_transactions(self, timeout):
        self.calls.append("init_transactions")


def test_init_asks_for_metadata_first_and_leaves_errors_to_init_transactions(monkeypatch):
    monkeypatch.setattr(transactions.producer, "Producer", MetadataFirstClient)
    producer = TransactionalProducer("127.0.0.1:1", "task-0", transaction_timeout_ms=10_000)
    producer.init(timeout=5)
    assert producer._producer.calls == ["list_topics", "init_transactions"]
    assert producer.state is TxnState.READY
