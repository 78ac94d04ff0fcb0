"""Exactly-once Kafka pipelines on Apache Spark.

Every micro-batch of a task consumes a range of input offsets, updates the task's state stores, writes
outputs and changelog records and commits the consumed offsets inside one Kafka transaction.

The public API is what this package exports; `eos.driver` (the driver loop) and `eos.worker` (the code
that runs in Spark tasks) are the engine behind it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
        DecimalSerde,
        DoubleSerde,
        IntegerSerde,
        JsonSerde,
        LongSerde,
        Serde,
        StringSerde,
    )
    from eos.topology import SubTopology, TaskId
    from recovery import KeyValueStore, StoreSpec

#: each exported name and the module it comes from: imported on first use (PEP 562), so that `eos run`
#: and Spark's Python daemon, which import this package first, do not pay for the whole API up front
_EXPORTS = {
    "Application": "eos.app",
    "store": "eos.app",
    "EosConfig": "eos.config",
    "BadRecordError": "eos.errors",
    "ConfigError": "eos.errors",
    "EosError": "eos.errors",
    "JobFailedError": "eos.errors",
    "LateRecordsError": "eos.errors",
    "OutputSerializationError": "eos.errors",
    "SerdeError": "eos.errors",
    "TaskFailedError": "eos.errors",
    "FaultHooks": "eos.hooks",
    "FaultPoint": "eos.hooks",
    "HookPoint": "eos.hooks",
    "ORIGIN_HEADER": "eos.origin",
    "Origin": "eos.origin",
    "decode_origin": "eos.origin",
    "encode_origin": "eos.origin",
    "Processor": "eos.processor",
    "ProcessorContext": "eos.processor",
    "Output": "eos.records",
    "Record": "eos.records",
    "BytesSerde": "eos.serde",
    "DecimalSerde": "eos.serde",
    "DoubleSerde": "eos.serde",
    "IntegerSerde": "eos.serde",
    "JsonSerde": "eos.serde",
    "LongSerde": "eos.serde",
    "Serde": "eos.serde",
    "StringSerde": "eos.serde",
    "SubTopology": "eos.topology",
    "TaskId": "eos.topology",
    "KeyValueStore": "recovery",
    "StoreSpec": "recovery",
}

__all__ = [
    "Application",
    "BadRecordError",
    "BytesSerde",
    "ConfigError",
    "DecimalSerde",
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


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'eos' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
