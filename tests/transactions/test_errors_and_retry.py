from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from transactions import (
    FatalKafkaError,
    ProducerFencedError,
    RetriableKafkaError,
    RetryPolicy,
    TransactionAbortableError,
    call,
    classify,
)

FAST = RetryPolicy(attempts=4, max_seconds=5, initial_backoff=0.001, max_backoff=0.002)


@pytest.mark.parametrize("code", [KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH])
def test_fencing_is_classified_first_even_when_fatal(code):
    err = classify(KafkaException(KafkaError(code, "fenced", fatal=True)), "commit")
    assert isinstance(err, ProducerFencedError)
    assert err.code == code


def test_abortable_retriable_fatal():
    assert isinstance(classify(KafkaError(KafkaError._STATE, txn_requires_abort=True), "x"), TransactionAbortableError)
    assert isinstance(classify(KafkaError(KafkaError._TIMED_OUT, retriable=True), "x"), RetriableKafkaError)
    assert isinstance(classify(KafkaError(KafkaError._STATE, fatal=True), "x"), FatalKafkaError)
    assert isinstance(classify(KafkaError(KafkaError._STATE), "x"), FatalKafkaError)  # unknown: not retried


def test_retriable_calls_are_retried_with_the_same_arguments():
    seen = []

    def flaky(a, b):
        seen.append((a, b))
        if len(seen) < 3:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "timeout", retriable=True))
        return a + b

    assert call("add", flaky, 1, 2, policy=FAST) == 3
    assert seen == [(1, 2)] * 3


def test_retries_are_bounded():
    calls = []

    def always_timeout():
        calls.append(1)
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, retriable=True))

    with pytest.raises(RetriableKafkaError):
        call("commit", always_timeout, policy=FAST)
    assert len(calls) == FAST.attempts


def test_fenced_and_abortable_are_never_retried():
    for err in (KafkaError(KafkaError.PRODUCER_FENCED, fatal=True), KafkaError(KafkaError._STATE, txn_requires_abort=True)):
        calls = []

        def fail(err=err):
            calls.append(1)
            raise KafkaException(err)

        with pytest.raises((ProducerFencedError, TransactionAbortableError)):
            call("commit", fail, policy=FAST)
        assert len(calls) == 1


def test_calls_past_their_deadline_declare_the_client_stuck():
    import threading

    from transactions.deadline import StuckClientError, call_with_deadline

    release = threading.Event()
    with pytest.raises(StuckClientError, match="did not return within"):
        call_with_deadline("send_offsets_to_transaction", lambda: release.wait(30), 0.2)
    release.set()
    assert call_with_deadline("fine", lambda: 42, 5) == 42
    with pytest.raises(ValueError):
        call_with_deadline("raises", lambda: (_ for _ in ()).throw(ValueError("x")), 5)
