"""Sub-topologies: co-partitioned input topics, one processing step, outputs.

A task is one partition index of a sub-topology (Kafka Streams' model): task count = partition count of
its inputs. Each task has the stable transactional id `<application_id>-<subtopology>-<partition>`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from eos.processing import Processor
from eos.serde import Serde
from eos.vectorized import BatchFormat

__all__ = ["SubTopology", "TaskId"]

_NAME = re.compile(r"^[A-Za-z0-9_.]{1,100}$")


@dataclass(frozen=True, order=True)
class TaskId:
    subtopology: str
    partition: int

    def __str__(self) -> str:
        return f"{self.subtopology}-{self.partition}"

    def transactional_id(self, application_id: str) -> str:
        return f"{application_id}-{self.subtopology}-{self.partition}"


@dataclass(frozen=True)
class SubTopology:
    name: str
    inputs: tuple[str, ...]
    output: str | None
    key_serde: Serde
    value_serde: Serde
    output_key_serde: Serde
    output_value_serde: Serde
    processor_factory: Callable[[], Processor] | None = None
    batch_fn: Callable[[Any], Any] | None = None
    batch_format: BatchFormat = "pandas"
    #: State stores used by the processor (recovery.StoreSpec), one instance per task.
    stores: tuple[Any, ...] = ()
    #: Topics the processor may forward to besides `output`.
    extra_outputs: tuple[str, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"sub-topology name {self.name!r} must be 1-100 characters of [A-Za-z0-9_.] "
                             "(it is part of each task's transactional id; '-' separates the id's parts)")
        if not self.inputs:
            raise ValueError(f"sub-topology {self.name!r} has no input topic")
        if (self.processor_factory is None) == (self.batch_fn is None):
            raise ValueError(f"sub-topology {self.name!r} needs exactly one of a processor or a batch function")

    @property
    def output_topics(self) -> tuple[str, ...]:
        return tuple(t for t in (self.output, *self.extra_outputs) if t)

    @property
    def stateful(self) -> bool:
        return bool(self.stores)
