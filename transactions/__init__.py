"""Kafka clients wrapped for exactly-once: the transactional producer lifecycle, the error taxonomy and
retry policy, read_committed reads of exact offset ranges, stable committed-offset reads, topic admin.

The lowest layer: imports nothing from `recovery` or `eos`.
"""

from transactions.admin import KafkaAdmin, PartitionOffsets, TopicSpec
from transactions.errors import (
    DeliveryFailedError,
    FatalKafkaError,
    KafkaEosError,
    ProducerFencedError,
    RetriableKafkaError,
    TransactionAbortableError,
    classify,
)
from transactions.offsets import Committed, stable_committed
from transactions.plain import AtLeastOnceProducer
from transactions.producer import IllegalStateError, TransactionalProducer, TxnState
from transactions.reader import OffsetRange, read_ranges
from transactions.retry import DEFAULT_POLICY, RetryPolicy, call
from transactions.settings import UnsafeClientSetting, consumer_settings, producer_settings

__all__ = [
    "AtLeastOnceProducer",
    "Committed",
    "DEFAULT_POLICY",
    "DeliveryFailedError",
    "FatalKafkaError",
    "IllegalStateError",
    "KafkaAdmin",
    "KafkaEosError",
    "OffsetRange",
    "PartitionOffsets",
    "ProducerFencedError",
    "RetriableKafkaError",
    "RetryPolicy",
    "TopicSpec",
    "TransactionAbortableError",
    "TransactionalProducer",
    "TxnState",
    "UnsafeClientSetting",
    "call",
    "classify",
    "consumer_settings",
    "producer_settings",
    "read_ranges",
    "stable_committed",
]
