"""Exactly-once Kafka pipelines on Apache Spark.

Every micro-batch of a task consumes a range of input offsets, updates the task's state stores, writes
outputs and changelog records and commits the consumed offsets inside one Kafka transaction.
"""

from eos.app import Application, store
from eos.config import ConfigError, EosConfig
from eos.deadletter import BadRecordError
from eos.lineage import ORIGIN_HEADER, Origin, decode_origin, encode_origin
from eos.processing import Processor, ProcessorContext
from eos.records import Output, Record
from recovery import KeyValueStore, StoreSpec
from eos.serde import (
    BytesSerde,
    DoubleSerde,
    IntegerSerde,
    JsonSerde,
    LongSerde,
    Serde,
    SerdeError,
    StringSerde,
)

__all__ = [
    "Application",
    "KeyValueStore",
    "StoreSpec",
    "store",
    "BadRecordError",
    "BytesSerde",
    "ConfigError",
    "DoubleSerde",
    "EosConfig",
    "IntegerSerde",
    "JsonSerde",
    "LongSerde",
    "ORIGIN_HEADER",
    "Origin",
    "Output",
    "Processor",
    "ProcessorContext",
    "Record",
    "Serde",
    "SerdeError",
    "StringSerde",
    "decode_origin",
    "encode_origin",
]
