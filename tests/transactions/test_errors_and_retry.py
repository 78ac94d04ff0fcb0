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
    errors = (KafkaError(KafkaError.PRODUCER_FENCED, fatal=True),
              KafkaError(KafkaError._STATE, txn_requires_abort=True))
    for err in errors:
        calls: list[int] = []

        def fail(err=err, calls=calls):
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


def test_a_helper_that_returned_takes_the_next_call_and_a_stuck_one_takes_none():
    import threading

    from transactions.deadline import StuckClientError, call_with_deadline

    def ident() -> int:
        return threading.get_ident()

    first = call_with_deadline("first", ident, 5)
    assert first != threading.get_ident()  # (run by a helper)
    assert call_with_deadline("second", ident, 5) == first  # (the same helper, not a new thread)
    release = threading.Event()
    with pytest.raises(StuckClientError):
        call_with_deadline("stuck", lambda: release.wait(30), 0.2)
    try:
        assert call_with_deadline("after", ident, 5) != first  # (the stuck helper is still in its call)
    finally:
        release.set()
    assert {"kafka-call-stuck", "kafka-call-after"} <= {t.name for t in threading.enumerate()}  # (their calls)


def test_calls_from_two_threads_run_at_once():
    import threading

    from transactions.deadline import call_with_deadline

    both = threading.Barrier(2, timeout=5)
    answers: list[int] = []
    other = threading.Thread(target=lambda: answers.append(call_with_deadline("a", both.wait, 10)))
    other.start()
    answers.append(call_with_deadline("b", both.wait, 10))
    other.join(10)
    assert sorted(answers) == [0, 1]


def test_a_forked_child_starts_helpers_of_its_own():
    import os

    from transactions.deadline import call_with_deadline

    assert call_with_deadline("in the parent", lambda: 1, 5) == 1  # (the parent has an idle helper)
    pid = os.fork()
    if pid == 0:  # the child: the parent's helper thread does not exist here
        try:
            code = 0 if call_with_deadline("in the child", lambda: 2, 2) == 2 else 1
        except BaseException:
            code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.parametrize("code", [KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH,
                                  KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE])
def test_stale_leadership_is_retriable_even_unflagged(code):
    # admin results carry these without the retriable flag
    assert isinstance(classify(KafkaException(KafkaError(code)), "list_offsets"), RetriableKafkaError)


def test_a_new_leaders_high_watermark_not_caught_up_is_retriable_even_unflagged():
    # (ListOffsets right after a leader election: the offsets are there once the high watermark catches up)
    error = classify(KafkaException(KafkaError(KafkaError.OFFSET_NOT_AVAILABLE)), "list_offsets")
    assert isinstance(error, RetriableKafkaError)


class _FakeAdminClient:
    """Answers list_offsets with `error` (a KafkaError) or with offset 42 for every partition."""

    def __init__(self, error=None):
        self.error, self.requests = error, 0

    def poll(self, timeout):
        return 0

    def list_topics(self, timeout=-1):  # a new client's first metadata (transactions.settings.learn_brokers)
        return None

    def list_offsets(self, request, **kwargs):
        import concurrent.futures
        from types import SimpleNamespace

        self.requests += 1
        out = {}
        for tp in request:
            fut = concurrent.futures.Future()
            if self.error is not None:
                fut.set_exception(KafkaException(self.error))
            else:
                fut.set_result(SimpleNamespace(offset=42))
            out[tp] = fut
        return out


def test_admin_replaces_its_client_when_leadership_metadata_is_stale(monkeypatch):
    """librdkafka's admin ListOffsets keeps sending a stale leader epoch after a broker bounce; a retry on
    the same client fails the same way, so the retry must go through a new client."""
    from transactions.admin import KafkaAdmin

    stale = _FakeAdminClient(KafkaError(KafkaError.FENCED_LEADER_EPOCH))
    clients = iter([stale, _FakeAdminClient()])
    monkeypatch.setattr(KafkaAdmin, "_new_client", lambda self: next(clients))
    admin = KafkaAdmin("127.0.0.1:1")
    assert admin.end_offsets([("t", 0), ("t", 1)]) == {("t", 0): 42, ("t", 1): 42}
    assert stale.requests == 1 and admin.replacements == 1


def test_admin_keeps_its_client_on_other_errors(monkeypatch):
    from transactions.admin import KafkaAdmin

    failing = _FakeAdminClient(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    monkeypatch.setattr(KafkaAdmin, "_new_client", lambda self: failing)
    admin = KafkaAdmin("127.0.0.1:1")
    with pytest.raises(FatalKafkaError, match="TOPIC_AUTHORIZATION_FAILED"):
        admin.end_offsets([("t", 0)])
    assert failing.requests == 1 and admin.replacements == 0


def test_admin_refuses_an_offset_answer_without_an_offset(monkeypatch):
    """librdkafka can answer ListOffsets with -1001 and no error during a broker restart: asked again
    through a new client, never returned (a bogus changelog end once had a store wiped)."""
    from types import SimpleNamespace

    from transactions.admin import KafkaAdmin

    class NoOffset(_FakeAdminClient):
        def list_offsets(self, request, **kwargs):
            out = super().list_offsets(request, **kwargs)
            for fut in out.values():
                fut._result = SimpleNamespace(offset=-1001)
            return out

    bogus = NoOffset()
    clients = iter([bogus, _FakeAdminClient()])
    monkeypatch.setattr(KafkaAdmin, "_new_client", lambda self: next(clients))
    admin = KafkaAdmin("127.0.0.1:1")
    assert admin.end_offsets([("t", 0)]) == {("t", 0): 42}
    assert bogus.requests == 1 and admin.replacements == 1
