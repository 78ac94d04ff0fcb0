"""A transactional producer with an explicit lifecycle.

    CREATED --init()--> READY --begin()--> IN_TRANSACTION --commit()/abort()--> READY
    any state --fenced--> FENCED (terminal)      any state --fatal--> FAILED (terminal)
    any state --close()--> CLOSED (terminal; close is idempotent)

Illegal transitions raise `IllegalStateError`. Delivery is checked before commit: a transaction in which
any record failed delivery is never committed (`DeliveryFailedError`, which is abortable).

Delivery reports cost a Python call per record, so only records produced with `track=True` get one (their
offsets land in `last_offsets`: stores record the changelog offset they reflect). An untracked record that
fails delivery still fails the commit: librdkafka puts the transaction in its abortable state ("message(s)
failed delivery"), without saying which record or why. The producer then reports every record of its next
transaction, so that the retried batch learns the broker's reason (a record too large, say: the caller
reads the topic's rules again and routes the record to the dead-letter topic).

A commit that fails with a retriable error (e.g. a timeout) is retried with the same call, not aborted:
librdkafka keeps the commit in progress and a repeated `commit_transaction()` resumes it.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from transactions.deadline import StuckClientError, call_with_deadline, park
from transactions.errors import (
    TOO_LARGE_CODES,
    DeliveryFailedError,
    FatalKafkaError,
    KafkaEosError,
    ProducerFencedError,
    RecordRejectedError,
    RecordTooLargeError,
    TransactionAbortableError,
    classify,
)
from transactions.records import ProducerRecord, producer_token
from transactions.retry import DEFAULT_POLICY, RetryPolicy, call
from transactions.settings import learn_brokers, producer_settings

__all__ = ["TransactionalProducer", "TxnState", "IllegalStateError"]

_GRACE = 5.0  # seconds a call may overrun its own timeout before the client is declared stuck
_CONNECTION_LOST = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN})


def _client_error(exc: SystemError) -> BaseException:
    """The client's own error inside a SystemError. When the client raises a fatal error (fencing, say)
    while it serves delivery callbacks in poll() or flush(), the next callback returns with that
    exception still set and Python reports "returned a result with an exception set" as a SystemError,
    whose context is the client's KafkaException: that is the error to classify."""
    seen = exc.__cause__ or exc.__context__
    while seen is not None and not isinstance(seen, KafkaException):
        seen = seen.__cause__ or seen.__context__
    if seen is None:
        raise exc
    return seen


class TxnState(enum.Enum):
    CREATED = "created"
    READY = "ready"
    IN_TRANSACTION = "in_transaction"
    FENCED = "fenced"
    FAILED = "failed"
    CLOSED = "closed"


class IllegalStateError(RuntimeError):
    pass


class TransactionalProducer:
    def __init__(self, bootstrap_servers: str, transactional_id: str, *, transaction_timeout_ms: int = 60_000,
                 overrides: Mapping[str, Any] | None = None, policy: RetryPolicy = DEFAULT_POLICY) -> None:
        self.transactional_id = transactional_id
        #: Identifies this producer instance (e.g. in offset-commit metadata, to tell who committed last).
        self.token = producer_token()
        self.transaction_timeout_ms = transaction_timeout_ms
        self._policy = policy
        self._delivery_errors: list[KafkaError] = []
        #: Offset of the last tracked record delivered to each (topic, partition) in the current transaction.
        self.last_offsets: dict[tuple[str, int], int] = {}
        settings = producer_settings(bootstrap_servers, transactional_id, transaction_timeout_ms, overrides)
        settings["error_cb"] = self._on_error
        self._fatal: KafkaError | None = None
        self._stuck = False
        self._connection_lost = False
        self._producer = Producer(settings)
        self.state = TxnState.CREATED
        self.records_in_transaction = 0
        self.untracked_in_transaction = 0  # records produced without a delivery report
        #: report every record's delivery (set after untracked records failed delivery, for one transaction)
        self.report_all = False
        self.commits = 0

    # ------------------------------------------------------------------ callbacks (producer thread-safe)
    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self._delivery_errors.append(err)
        else:
            self.last_offsets[(msg.topic(), msg.partition())] = msg.offset()

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self._fatal = err
        elif err.code() in _CONNECTION_LOST:
            self._connection_lost = True

    # ------------------------------------------------------------------ lifecycle
    def _expect(self, *states: TxnState) -> None:
        if self.state not in states:
            raise IllegalStateError(f"{self.transactional_id}: operation not allowed in state {self.state.value}")

    def _fail(self, exc: KafkaException, operation: str) -> KafkaEosError:
        """Classify a client error. librdkafka reports calls on a producer in fatal state as `_FATAL`;
        the cause (e.g. fencing) reaches `error_cb` on the next poll, so poll once and classify the cause."""
        err = exc.args[0] if exc.args else None
        if isinstance(err, KafkaError) and err.code() == KafkaError._FATAL:
            try:
                self._poll(0, operation)
            except KafkaEosError as cause:
                return cause
            if self._fatal is not None:
                return self._guard(classify(self._fatal, operation))
        return self._guard(classify(exc, operation))

    def _poll(self, timeout: float, operation: str) -> None:
        """Serve the client's callbacks. The client can also raise a fatal error (e.g. fencing) out of
        poll() itself instead of passing it to error_cb: it is recorded and raised classified like any other."""
        try:
            try:
                self._producer.poll(timeout)
            except SystemError as wrapped:
                raise _client_error(wrapped) from wrapped
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.fatal() and self._fatal is None:
                self._fatal = err
            raise self._guard(classify(exc, operation)) from exc

    def _guard(self, exc: KafkaEosError) -> KafkaEosError:
        if isinstance(exc, ProducerFencedError):
            self.state = TxnState.FENCED
        elif isinstance(exc, FatalKafkaError):
            self.state = TxnState.FAILED
        return exc

    def _bounded(self, operation: str, fn: Any, timeout: float) -> Any:
        """Run a transactional call with its timeout enforced by us too (see transactions.deadline)."""
        try:
            return call_with_deadline(operation, fn, timeout + _GRACE)
        except StuckClientError:
            self.state = TxnState.FAILED
            self._stuck = True
            raise

    def init(self, timeout: float = 60.0) -> None:
        """`init_transactions()`: fences older attempts of this transactional id and completes (commits or
        aborts) their open transaction before returning."""
        self._expect(TxnState.CREATED)
        started = time.monotonic()
        learn_brokers(self._producer, min(timeout / 2, 5.0))  # (before it asks for its coordinator)
        timeout = max(1.0, timeout - (time.monotonic() - started))
        try:
            call("init_transactions", self._bounded, "init_transactions",
                 lambda: self._producer.init_transactions(timeout), timeout, policy=self._policy)
        except KafkaEosError as exc:
            raise self._guard(exc) from exc
        self.state = TxnState.READY

    def begin(self) -> None:
        self._expect(TxnState.READY)
        self._check_fatal("begin_transaction")
        try:
            self._producer.begin_transaction()
        except KafkaException as exc:
            raise self._fail(exc, "begin_transaction") from exc
        self._delivery_errors.clear()
        self.last_offsets = {}
        self.records_in_transaction = self.untracked_in_transaction = 0
        self.state = TxnState.IN_TRANSACTION

    def produce(self, topic: str, value: bytes | None, key: bytes | None = None, *, partition: int | None = None,
                headers: list[tuple[str, bytes]] | None = None, timestamp: int | None = None,
                track: bool = True) -> None:
        """Produce one record into the open transaction; `track`: its delivery is reported (`last_offsets`)."""
        self.produce_all((ProducerRecord(topic, partition, key, value, headers or [], timestamp),), track=track)

    def produce_all(self, records: Sequence[ProducerRecord], *, track: bool = False) -> int:
        """Produce `records` in order into the open transaction; returns their key and value bytes. With
        `track` (or while `report_all` is set) every record's delivery is reported."""
        if self.state is not TxnState.IN_TRANSACTION:
            self._expect(TxnState.IN_TRANSACTION)
        produce = self._producer.produce
        report = self._on_delivery if track or self.report_all else None
        size = 0
        for topic, partition, key, value, headers, timestamp in records:
            while True:
                try:
                    # positional: topic, value, key, partition (-1: the partitioner), callback, on_delivery,
                    # timestamp (0: now), headers (the stub's header type is invariant)
                    produce(topic, value, key, -1 if partition is None else partition, report, None,
                            timestamp or 0, headers or None)  # type: ignore[arg-type]
                    break
                except BufferError:  # local queue full: let librdkafka drain it
                    self._poll(0.05, f"produce to {topic}")
                except KafkaException as exc:
                    raise self._fail(exc, f"produce to {topic}") from exc
            if key:
                size += len(key)
            if value:
                size += len(value)
        n = len(records)
        if report is None:
            self.untracked_in_transaction += n
        before, self.records_in_transaction = self.records_in_transaction, self.records_in_transaction + n
        if before // 10_000 != self.records_in_transaction // 10_000:
            self._poll(0, "produce")
        return size

    def send_offsets(self, offsets: list[TopicPartition], group_metadata: object, timeout: float = 30.0) -> None:
        """Add the consumed offsets to the transaction (they commit or abort with it)."""
        self._expect(TxnState.IN_TRANSACTION)
        self._check_fatal("send_offsets_to_transaction")
        try:
            call("send_offsets_to_transaction", self._bounded, "send_offsets_to_transaction",
                 lambda: self._producer.send_offsets_to_transaction(offsets, group_metadata, timeout), timeout,
                 policy=self._policy)
        except KafkaEosError as exc:
            raise self._guard(exc) from exc

    def flush(self, timeout: float = 30.0) -> None:
        """Send every record produced into the open transaction and wait up to `timeout` for their delivery,
        as a commit does first: a batch that sends what it has before its top-up's look-up leaves its commit
        only the records read after it (`eos.worker.attempt`). Failed or pending deliveries are not raised
        here: the commit refuses to commit them."""
        self._expect(TxnState.IN_TRANSACTION)
        self._flush(timeout)

    def _flush(self, timeout: float) -> int:
        try:
            try:
                return self._producer.flush(timeout)
            except SystemError as wrapped:
                raise _client_error(wrapped) from wrapped
        except KafkaException as exc:
            raise self._fail(exc, "flush") from exc

    def commit(self, timeout: float = 60.0) -> float:
        """Flush, verify every record was delivered, then commit. Returns the commit latency in seconds.

        Raises `DeliveryFailedError` (abortable) without committing if any record failed delivery."""
        self._expect(TxnState.IN_TRANSACTION)
        started = time.monotonic()
        deadline = started + timeout
        remaining = self._flush(timeout)
        self._check_fatal("commit_transaction")
        if remaining or self._delivery_errors:
            first = self._delivery_errors[0] if self._delivery_errors else None
            too_large = next((e for e in self._delivery_errors if e.code() in TOO_LARGE_CODES), None)
            if too_large is not None:
                raise RecordTooLargeError(f"{self.transactional_id}: the broker refused a record as too large "
                                          f"({too_large.str()}); the transaction must not commit", too_large)
            raise DeliveryFailedError(
                f"{self.transactional_id}: {len(self._delivery_errors)} record(s) failed delivery and "
                f"{remaining} still queued; the transaction must not commit ({first.str() if first else 'timeout'})",
                first)
        def commit_once() -> None:
            remaining = max(1.0, deadline - time.monotonic())
            self._bounded("commit_transaction", lambda: self._producer.commit_transaction(remaining), remaining)

        try:
            call("commit_transaction", commit_once, policy=self._policy)
        except TransactionAbortableError as exc:
            if self.untracked_in_transaction and not isinstance(exc, RecordRejectedError):
                # perhaps an untracked record failed, and the error does not say why: the next transaction will
                self.report_all = True
                raise DeliveryFailedError(f"{self.transactional_id}: the transaction cannot commit ({exc}); the next "
                                          "one reports every record's delivery", exc.kafka_error) from exc
            raise
        except KafkaEosError as exc:
            raise self._guard(exc) from exc
        self.state = TxnState.READY
        self.commits += 1
        self.report_all = False
        return time.monotonic() - started

    def abort(self, timeout: float = 60.0) -> None:
        """Abort the open transaction. A no-op when none is open; on a fenced or failed producer too."""
        if self.state != TxnState.IN_TRANSACTION:
            return
        try:
            call("abort_transaction", self._bounded, "abort_transaction",
                 lambda: self._producer.abort_transaction(timeout), timeout, policy=self._policy)
        except KafkaEosError as exc:
            raise self._guard(exc) from exc
        self.state = TxnState.READY

    def close(self) -> None:
        """Idempotent. Queued records are purged, not delivered: outside a commit they belong to a transaction
        that will never commit. An open transaction is left to the broker (the next init aborts it)."""
        if self.state == TxnState.CLOSED:
            return
        self.state = TxnState.CLOSED
        if self._stuck:  # a call is still inside the handle: never destroy it
            park(self._producer)
            self._producer = None  # type: ignore[assignment]
            return
        try:
            self._producer.purge(in_queue=True, in_flight=True, blocking=False)
        except KafkaException:
            pass
        self._producer = None  # type: ignore[assignment]  # drop the handle: librdkafka destroys it

    @property
    def usable(self) -> bool:
        """Fit for another transaction. A producer that lost a broker connection since it was last used is
        not: librdkafka may then block in coordinator requests past their timeout (see
        transactions.deadline), and a replacement costs one `init_transactions()`."""
        if self._producer is not None and self.state == TxnState.READY:
            try:
                self._poll(0, "poll")  # serve pending error callbacks
            except KafkaEosError:
                return False
        return (self.state in (TxnState.READY, TxnState.IN_TRANSACTION) and self._fatal is None
                and not self._connection_lost)

    def _check_fatal(self, operation: str) -> None:
        if self._fatal is not None:
            raise self._guard(classify(self._fatal, operation))
