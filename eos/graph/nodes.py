"""The nodes of a processor topology (Kafka Streams' model): sources read topics, processors have one or
more parents and any number of children, sinks write topics, and state stores are connected to the
processors that use them.

These are definitions only: `eos.graph.topology.ProcessorGraph` holds and checks them and cuts them into
sub-topologies; `eos.graph.runtime.GraphProcessor` runs one sub-topology's nodes inside a task.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from eos.serde import Serde

__all__ = ["SourceNode", "ProcessorNode", "SinkNode", "Node"]


@dataclass(eq=False)
class SourceNode:
    """Reads `topics` with one pair of serdes and one timestamp extractor (None: the application's default;
    `eos.time.RECORD_TIME` for internal topics, read at their records' own timestamps)."""

    name: str
    topics: tuple[str, ...]
    key_serde: Serde
    value_serde: Serde
    timestamp: Callable[[Any], int] | None = None
    #: where it starts reading a partition its group has committed nothing for (`eos.offset_reset`; None: the
    #: application's auto_offset_reset)
    offset_reset: str | None = None
    #: reads every topic whose whole name matches (Kafka Streams' `stream(Pattern)`): `topics` are those matched
    #: when the job started or last looked (`ProcessorGraph.match_patterns`), empty until then
    pattern: re.Pattern[str] | None = None

    @property
    def parents(self) -> tuple[str, ...]:
        return ()


@dataclass(eq=False)
class ProcessorNode:
    """A processor: `factory()` makes, per task, a `eos.Processor` (records in, `context.forward` out), or,
    with `operator=True`, a stateless DSL operator (`eos.graph.operators`), which runs without a context and
    can be replayed outside a task (the audits do)."""

    name: str
    parents: tuple[str, ...]
    factory: Callable[[], Any]
    #: what the step is, for `describe` ("filter", "windowed aggregation (...)", "Processor API (Cls)")
    kind: str = "process"
    operator: bool = False
    #: the processor may schedule punctuation (Processor API)
    may_punctuate: bool = False
    #: a windowed aggregation's definition (eos.windows.Windowing) or a join's (eos.tables.JoinSpec),
    #: for the audits and `describe`
    windowing: Any = None
    join: Any = None
    global_tables: tuple[Any, ...] = ()
    #: a vectorized step: (fn(table) -> table, "pandas" | "arrow"); alone in its sub-topology
    batch: tuple[Callable[[Any], Any], str] | None = None
    #: what it forwards may go nowhere (a DSL aggregation nothing reads but queries); otherwise forwarding
    #: without children is an error (a step whose output was forgotten would lose records silently)
    may_be_leaf: bool = False
    #: it may change values, never keys (`stream.process_values`): what it forwards while it processes a
    #: record must keep that record's key, so no repartition is needed after it
    fixed_key: bool = False
    #: a built-in step that holds records back (`context.hold()`: a table's suppression)
    holds: bool = False

    @property
    def may_hold(self) -> bool:
        """Whether it may hold records back (`context.hold()`): a Processor API processor, a stream-table join
        with a grace period, a table's suppression (`hold_slots`)."""
        return self.may_punctuate or self.holds or getattr(self.join, "grace_ms", None) is not None


def hold_slots(processors: Iterable[ProcessorNode]) -> dict[str, tuple[int, int]]:
    """(slot, slots) of each of a sub-topology's processors that may hold records back (`ProcessorNode.may_hold`),
    in the order they were added: the k-th record one of them holds of an input record reserves the place
    `k * slots + slot` among that record's held ones (`TaskContext.hold`), so that a join audit tells its own held
    records from another step's of the same input (`JoinSpec.hold_slot`). With one such processor, k itself."""
    holders = [p.name for p in processors if p.may_hold]
    return {name: (slot, len(holders)) for slot, name in enumerate(holders)}


@dataclass(eq=False)
class SinkNode:
    """Writes `topic` with its serdes (`raw`: the records come serialized), each record to the partition of
    murmur2 of its serialized key (as the Java client and Kafka Streams) unless the processor names one."""

    name: str
    topic: str
    parents: tuple[str, ...]
    key_serde: Serde
    value_serde: Serde
    raw: bool = False
    #: written only by `forward(topic=...)` naming its topic, never by a plain `forward()` (a step's extra
    #: outputs)
    named: bool = False
    #: a record without a key is a bad record (a repartition topic: it could not be grouped)
    requires_key: bool = False
    #: `partitioner(key, value, partitions) -> partition` chooses each record's partition (Kafka Streams'
    #: StreamPartitioner); None: murmur2 of the serialized key
    partitioner: Callable[[Any, Any, int], int | None] | None = None


Node = SourceNode | ProcessorNode | SinkNode
