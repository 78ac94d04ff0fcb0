"""Exactly-once Kafka pipelines on Apache Spark.

Every micro-batch of a task consumes a range of input offsets, updates the task's state stores, writes
outputs and changelog records and commits the consumed offsets inside one Kafka transaction.

The public API is what this package exports; `eos.driver` (the driver loop) and `eos.worker` (the code
that runs in Spark tasks) are the engine behind it.
"""

from eos.app import Application, store
from eos.config import EosConfig
from eos.errors import (
    BadRecordError,
    ConfigError,
    EosError,
    JobFailedError,
    LateRecordsError,
    OutputSerializationError,
    SerdeError,
    TaskFailedError,
)
from eos.hooks import FaultHooks, FaultPoint, HookPoint
from eos.origin import ORIGIN_HEADER, Origin, decode_origin, encode_origin
from eos.processor import Processor, ProcessorContext
from eos.records import Output, Record
from eos.serde import (
    BytesSerde,
    DoubleSerde,
    IntegerSerde,
    JsonSerde,
    LongSerde,
    Serde,
    StringSerde,
)
from eos.topology import SubTopology, TaskId
from recovery import KeyValueStore, StoreSpec

__all__ = [
    "Application",
    "BadRecordError",
    "BytesSerde",
    "ConfigError",
    "DoubleSerde",
    "EosConfig",
    "EosError",
    "FaultHooks",
    "FaultPoint",
    "HookPoint",
    "IntegerSerde",
    "JobFailedError",
    "LateRecordsError",
    "JsonSerde",
    "KeyValueStore",
    "LongSerde",
    "ORIGIN_HEADER",
    "Origin",
    "Output",
    "OutputSerializationError",
    "Processor",
    "ProcessorContext",
    "Record",
    "Serde",
    "SerdeError",
    "StoreSpec",
    "StringSerde",
    "SubTopology",
    "TaskFailedError",
    "TaskId",
    "decode_origin",
    "encode_origin",
    "store",
]
