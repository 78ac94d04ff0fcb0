"""One error taxonomy for every Kafka call of the framework, named by the action each error requires.

| class                      | meaning                                          | what the caller does              |
|----------------------------|--------------------------------------------------|-----------------------------------|
| `ProducerFencedError`      | another attempt of this task owns the txn id     | stop this attempt; never retry it |
| `TransactionAbortableError`| the current transaction cannot commit            | abort it, re-plan the batch       |
| `RetriableKafkaError`      | transient (timeouts, leader moves, coordinator)  | retry the same call, bounded      |
| `FatalKafkaError`          | the client instance is unusable                  | recreate the producer or fail     |

Classification uses the flags librdkafka sets on `KafkaError` (`fatal()`, `retriable()`,
`txn_requires_abort()`) and happens here only: callers branch on the type, never on message text.
"""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

__all__ = [
    "KafkaEosError",
    "ProducerFencedError",
    "TransactionAbortableError",
    "DeliveryFailedError",
    "RecordRejectedError",
    "RecordTooLargeError",
    "OffsetOutOfRangeError",
    "TOO_LARGE_CODES",
    "RetriableKafkaError",
    "FatalKafkaError",
    "classify",
    "FENCING_CODES",
    "TRANSIENT_CODES",
    "STALE_METADATA_CODES",
    "unknown_topic",
]

FENCING_CODES = frozenset({
    KafkaError._FENCED,
    KafkaError.PRODUCER_FENCED,
    KafkaError.INVALID_PRODUCER_EPOCH,
})


# The client's view of partition leadership is out of date (a broker restarted, leadership moved): the
# request can succeed once the client has fresh metadata. The Java clients refresh metadata before
# retrying these (KAFKA-9535); librdkafka 2.16 admin ListOffsets does not, and keeps sending the stale
# leader epoch, so callers that see one of these should replace the client.
STALE_METADATA_CODES = frozenset({
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH,
})

# Broker or network conditions that pass on their own (leader moves, coordinator loading, timeouts), even
# when the client does not flag them retriable (admin results often do not).
TRANSIENT_CODES = frozenset({
    KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN, KafkaError._WAIT_COORD,
    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.REQUEST_TIMED_OUT, KafkaError.NETWORK_EXCEPTION, KafkaError.UNSTABLE_OFFSET_COMMIT,
    KafkaError.CONCURRENT_TRANSACTIONS, KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    # a new leader whose high watermark has not caught up yet answers ListOffsets so (a three-broker test's
    # look-up right after a broker was killed got it unflagged and stopped the job)
    KafkaError.OFFSET_NOT_AVAILABLE,
}) | STALE_METADATA_CODES


class KafkaEosError(Exception):
    """Base class; `kafka_error` is the client's error when there is one."""

    def __init__(self, message: str, kafka_error: KafkaError | None = None) -> None:
        super().__init__(message)
        self.kafka_error = kafka_error

    @property
    def code(self) -> int | None:
        return self.kafka_error.code() if self.kafka_error is not None else None


class ProducerFencedError(KafkaEosError):
    """A newer attempt of the same task called `init_transactions()`: this attempt is a zombie."""


class TransactionAbortableError(KafkaEosError):
    """The open transaction must be aborted; the batch can be planned and run again."""


class DeliveryFailedError(TransactionAbortableError):
    """At least one record of the transaction was not delivered: it must not commit."""


class RecordRejectedError(DeliveryFailedError):
    """The broker refused a record (too large, no key for a compacted topic, a timestamp out of the topic's
    range). The transaction must not commit; the caller reads the topic's rules again and routes the record
    elsewhere (the dead-letter topic)."""


class RecordTooLargeError(RecordRejectedError):
    """A record is larger than the producer or the topic accepts."""


TOO_LARGE_CODES = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE})
REJECTED_CODES = frozenset({KafkaError.INVALID_RECORD, KafkaError.INVALID_TIMESTAMP})


class OffsetOutOfRangeError(KafkaEosError):
    """A read started at an offset the partition no longer has (deleted by retention, or the topic was
    created again): where to start instead is a planning decision, not a retry."""


OUT_OF_RANGE_CODES = frozenset({KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE})


class RetriableKafkaError(KafkaEosError):
    """Transient: the same call with the same arguments may succeed."""


class FatalKafkaError(KafkaEosError):
    """The client instance cannot be used any more."""


def unknown_topic(exc: KafkaEosError) -> bool:
    """Whether the broker answered that a topic (or a partition of it) does not exist: deleted, say."""
    return exc.kafka_error is not None and exc.kafka_error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def classify(exc: KafkaException | KafkaError, operation: str) -> KafkaEosError:
    """Map a client error to the taxonomy. Fencing is checked first: librdkafka also flags it fatal."""
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else exc
    if not isinstance(err, KafkaError):
        return FatalKafkaError(f"{operation}: {exc}")
    message = f"{operation}: {err.str()} ({err.name()})"
    if err.code() in FENCING_CODES:
        return ProducerFencedError(message, err)
    if err.code() in TOO_LARGE_CODES:
        return RecordTooLargeError(message, err)
    if err.code() in REJECTED_CODES:
        return RecordRejectedError(message, err)
    if err.code() in OUT_OF_RANGE_CODES:
        return OffsetOutOfRangeError(message, err)
    if err.txn_requires_abort():
        return TransactionAbortableError(message, err)
    if err.retriable():
        return RetriableKafkaError(message, err)
    if not err.fatal() and err.code() in TRANSIENT_CODES:
        return RetriableKafkaError(message, err)
    return FatalKafkaError(message, err)
