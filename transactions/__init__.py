"""Kafka clients wrapped for exactly-once: the transactional producer lifecycle, the error taxonomy and
retry policy, read_committed reads of exact offset ranges, stable committed-offset reads, topic admin,
and every Kafka client the framework builds.

The lowest layer: imports nothing from `recovery` or `eos`.
"""

import sys

import confluent_kafka.cimpl

from transactions.admin import (
    BrokerUnreachableError,
    KafkaAdmin,
    PartitionOffsets,
    TopicSpec,
    admin_for,
    check_reachable,
)
from transactions.at_least_once import AtLeastOnceProducer
from transactions.clients import (
    Consumer,
    Isolation,
    Message,
    ProduceFailedError,
    TopicPartition,
    input_consumer,
    plain_producer,
    produce_pairs,
    scan_consumer,
)
from transactions.deadline import StuckClientError, close_or_park
from transactions.errors import (
    DeliveryFailedError,
    FatalKafkaError,
    KafkaEosError,
    OffsetOutOfRangeError,
    ProducerFencedError,
    RecordRejectedError,
    RecordTooLargeError,
    RetriableKafkaError,
    TransactionAbortableError,
    classify,
    unknown_topic,
)
from transactions.lease import GroupLease, LeaseState
from transactions.offsets import Committed, stable_committed
from transactions.producer import IllegalStateError, TransactionalProducer, TxnState
from transactions.reader import (
    CHUNK_RECORDS,
    OffsetRange,
    RangeReader,
    prefetch_ranges,
    range_reader,
    read_ranges,
    read_together,
)
from transactions.records import Headers, OutputProducer, ProducerRecord, issued_after, producer_token
from transactions.retry import DEFAULT_POLICY, RetryPolicy, call
from transactions.settings import (
    ClientPropertyError,
    UnsafeClientSetting,
    check_client_properties,
    consumer_settings,
    producer_settings,
)

# confluent_kafka's classes (Producer, Consumer, TopicPartition, KafkaError, ...) name their module "cimpl", the
# extension's own name, which no import finds: cloudpickle, not finding such a class by reference (a job's
# function that names Producer, shipped to Spark's workers), copies it by value, and the copy cannot be loaded
# ("type object 'Producer' has no attribute '__bool__'"). Under that name too, it is pickled by reference.
sys.modules.setdefault("cimpl", confluent_kafka.cimpl)

__all__ = [
    "AtLeastOnceProducer",
    "BrokerUnreachableError",
    "Committed",
    "Consumer",
    "DEFAULT_POLICY",
    "DeliveryFailedError",
    "FatalKafkaError",
    "GroupLease",
    "Headers",
    "IllegalStateError",
    "Isolation",
    "KafkaAdmin",
    "KafkaEosError",
    "LeaseState",
    "Message",
    "OffsetOutOfRangeError",
    "OffsetRange",
    "OutputProducer",
    "PartitionOffsets",
    "ProducerFencedError",
    "ProducerRecord",
    "issued_after",
    "producer_token",
    "prefetch_ranges",
    "RecordRejectedError",
    "RecordTooLargeError",
    "RetriableKafkaError",
    "RetryPolicy",
    "StuckClientError",
    "TopicPartition",
    "TopicSpec",
    "TransactionAbortableError",
    "unknown_topic",
    "TransactionalProducer",
    "TxnState",
    "UnsafeClientSetting",
    "ClientPropertyError",
    "check_client_properties",
    "call",
    "check_reachable",
    "classify",
    "close_or_park",
    "consumer_settings",
    "input_consumer",
    "plain_producer",
    "produce_pairs",
    "ProduceFailedError",
    "producer_settings",
    "read_ranges",
    "read_together",
    "CHUNK_RECORDS",
    "RangeReader",
    "range_reader",
    "scan_consumer",
    "admin_for",
    "stable_committed",
]
