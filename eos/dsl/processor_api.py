"""The Processor API of the processor graph (Kafka Streams' `Topology.addSource/addProcessor/addSink/
addStateStore`) and the entry points of the fluent DSL (`app.stream`), on the Application.

    app.add_source("words", "sentences", value_serde="string")
    app.add_processor("count", WordCount, "words")           # its context.forward goes to its children
    app.add_state_store(store("counts", key_serde="string", value_serde="long"), "count")
    app.add_sink("out", "word-counts", "count", value_serde="long")
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from eos.dsl.base import SerdeSpec, topic_tuple
from eos.dsl.fluent import Stream
from eos.dsl.joins import JoinMethods
from eos.graph import ProcessorNode, SinkNode, SourceNode
from eos.offset_reset import offset_reset
from eos.processor import Processor
from eos.serde import serde_for
from eos.tables import TableSource
from eos.time import TimestampSpec, timestamp_extractor
from recovery import StoreSpec

__all__ = ["GraphMethods"]


class GraphMethods(JoinMethods):
    # ------------------------------------------------------------------ the Processor API
    def add_source(self, name: str, topics: str | Sequence[str] | re.Pattern[str], *, key_serde: SerdeSpec = "string",
                   value_serde: SerdeSpec = "json", timestamp: TimestampSpec = None,
                   auto_offset_reset: str | timedelta | None = None) -> str:
        """A source node reading `topics` (all read alike; the application's timestamp unless given), or, given
        a compiled pattern (`re.compile("events-.*")`, Kafka Streams' `addSource(name, Pattern)`), every topic
        whose whole name it matches: those there at start-up (at least one), and those created while the job
        runs, from their next look (`metadata_refresh_interval`). `auto_offset_reset`: where it starts a
        partition nothing was committed for (`eos.offset_reset`; the application's setting unless given)."""
        pattern = topics if isinstance(topics, re.Pattern) else None
        if pattern is not None and not isinstance(pattern.pattern, str):
            raise TypeError(f"source {name!r}: a topic pattern is a text pattern, re.compile(\"events-.*\"), "
                            f"not {pattern.pattern!r}")
        topics = () if pattern is not None else topic_tuple(topics, f"source {name!r}")
        extract = timestamp_extractor(timestamp) if timestamp is not None else None
        reset = offset_reset(auto_offset_reset, f"source {name!r}: auto_offset_reset") if (
            auto_offset_reset is not None) else None
        return self.graph.add(SourceNode(name, topics, serde_for(key_serde), serde_for(value_serde), extract,
                                         reset, pattern)).name

    def add_processor(self, name: str, processor: Callable[[], Processor], *parents: str) -> str:
        """A processor node: `processor()` makes one `eos.Processor` per task; `context.forward(key, value)`
        goes to all its children, `forward(..., to="child")` to one. It may schedule punctuation."""
        label = getattr(processor, "__name__", type(processor).__name__)
        return self.graph.add(ProcessorNode(name, tuple(parents), processor, kind=f"Processor API ({label})",
                                            may_punctuate=True)).name

    def add_state_store(self, spec: StoreSpec, *processors: str) -> StoreSpec:
        """Declare a store (`eos.store(...)`) and connect it to `processors` (processors sharing a store are in
        one sub-topology)."""
        self.graph.add_store(spec, processors)
        return spec

    def connect_processor_and_state_stores(self, processor: str, *stores: str) -> None:
        self.graph.connect([processor], stores)

    def add_sink(self, name: str, topic: str, *parents: str, key_serde: SerdeSpec = "string",
                 value_serde: SerdeSpec = "json",
                 partitioner: Callable[[Any, Any, int], int | None] | None = None) -> str:
        """A sink node writing what its parents forward to `topic`; `partitioner(key, value, partitions) ->
        partition` chooses each record's partition (None: murmur2 of the serialized key)."""
        return self.graph.add(SinkNode(name, topic, tuple(parents), serde_for(key_serde), serde_for(value_serde),
                                       partitioner=partitioner)).name

    # ------------------------------------------------------------------ the DSL's entry points
    def stream(self, topics: str | Sequence[str] | re.Pattern[str], *, key_serde: SerdeSpec = "string",
               value_serde: SerdeSpec = "json", timestamp: TimestampSpec = None, name: str | None = None,
               auto_offset_reset: str | timedelta | None = None) -> Stream:
        """The records of `topics` as a stream (`eos.dsl.fluent.Stream`): string keys and JSON values unless
        told otherwise; event time from `timestamp` (the application's default, else the record's own).
        A compiled pattern (`re.compile("events-.*")`, Kafka Streams' `stream(Pattern)`) reads every topic
        whose whole name it matches, those created while the job runs too (see `add_source`).
        `auto_offset_reset` (Kafka Streams' `Consumed.withOffsetResetPolicy`): where it starts a partition
        nothing was committed for, "earliest", "latest", "none" or a timedelta back from the start
        (`eos.offset_reset`); the application's auto_offset_reset unless given."""
        if not isinstance(topics, re.Pattern):
            topics = topic_tuple(topics, "stream()")
        ks, vs = serde_for(key_serde), serde_for(value_serde)
        kind = "pattern" if isinstance(topics, re.Pattern) else topics[0]
        source = self.add_source(self.node_name(f"{kind}.source", name, numbered=False), topics, key_serde=ks,
                                 value_serde=vs, timestamp=timestamp, auto_offset_reset=auto_offset_reset)
        return Stream(self, source, ks, vs, () if isinstance(topics, re.Pattern) else topics)

    def table_source(self, table: TableSource) -> str:
        """The source node a table's topic is read by (one per table: the joins that read it share it)."""
        sources = self.table_sources
        if table.topic not in sources:
            sources[table.topic] = self.graph.add(SourceNode(
                self.node_name(f"{table.name}.table", None, numbered=False), (table.topic,), table.key_serde,
                table.value_serde, table.timestamp, table.offset_reset)).name
        return sources[table.topic]

    # ------------------------------------------------------------------ shared by the DSL's classes
    def node_name(self, kind: str, name: str | None, *, numbered: bool = True) -> str:
        """`name` if given; else `<kind>-<n>` (n: the node's position in the graph), or `kind` itself when
        not `numbered` and free (then `<kind>-2`, ...)."""
        if name is not None:
            return name
        nodes = self.graph.nodes
        if not numbered and kind not in nodes:
            return kind
        n = len(nodes) if numbered else 2
        while f"{kind}-{n}" in nodes:
            n += 1
        return f"{kind}-{n}"
