"""What every family of topology-building methods shares: the processor graph built so far, the internal
topics it needs, and the one way the step-per-call methods (`process`, `aggregate`, `join`, ...) add a
step: a source, one processor and a sink, which the graph makes a sub-topology of their own."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from eos.config import EosConfig
from eos.graph import ProcessorGraph, ProcessorNode, SinkNode, SourceNode
from eos.offset_reset import offset_reset
from eos.records import Record
from eos.serde import Serde, serde_for
from eos.time import RECORD_TIME, TimestampSpec, timestamp_extractor
from eos.topology import SubTopology

__all__ = ["TopologyBuilder", "InternalTopic", "SerdeSpec", "step_kind", "topic_tuple", "no_such_step"]

SerdeSpec = Serde | str | None


def no_such_step(kind: type, name: str, hints: Mapping[str, str] = {}) -> AttributeError:
    """The AttributeError of a DSL object's missing `name`, saying what to write instead where a user of
    Kafka Streams would reach for it: `hints[name]`, or the method a camelCase name means (`groupByKey`)."""
    why = hints.get(name)
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()
    if why is None and snake != name and hasattr(kind, snake):
        why = f"it is {snake}() here"
    own = f"{kind.__name__!r} object has no attribute {name!r}"
    return AttributeError(own if why is None else f"{own}: {why}")


def topic_tuple(topics: str | Sequence[str] | re.Pattern[str], reader: str) -> tuple[str, ...]:
    """`topics` (a topic's name, or several) as a tuple; `reader` names who reads them in the error."""
    if isinstance(topics, str):
        return (topics,)
    if isinstance(topics, re.Pattern) or (isinstance(topics, Sequence) and any(isinstance(t, re.Pattern)
                                                                               for t in topics)):
        raise TypeError(no_pattern(reader))
    if not isinstance(topics, Sequence | set | frozenset):  # a set: read alike, in no order
        raise TypeError(f"{reader} reads topics: a topic's name or a list of names, got {topics!r}")
    if not topics:
        raise ValueError(f"{reader} has no input topic")
    return tuple(topics)


def no_pattern(reader: str) -> str:
    """The error of `reader` given a topic pattern where it reads named topics."""
    return (f"{reader} reads named topics, not a topic pattern: a pattern is read by a stream, "
            "app.stream(re.compile(\"events-.*\")) (or add_source(name, pattern)), alone")


def first_topic(topics: tuple[str, ...], what: str) -> str:
    """The first of the topics a stream or table was last read from, for `what` (a join) that needs one; a
    stream read by a topic pattern has none until the job runs: refused, saying how to give it one."""
    if not topics:
        raise ValueError(f"{what}: this side is read by a topic pattern, whose topics are known only when the job "
                         "runs; give it one topic first with repartition() (sized like the pattern's topics)")
    return topics[0]


@dataclass(frozen=True)
class InternalTopic:
    """A topic the framework creates at start-up (a repartition topic): `partitions`, or as many as the
    widest of the topics it is `like` (the topics the step before it reads, as Kafka Streams sizes them), those
    the pattern source `like_source` matches among them (`matched`, set when the pattern is matched)."""

    name: str
    partitions: int | None = None
    like: str | tuple[str, ...] | None = None
    config: dict[str, str] = field(default_factory=dict)
    #: consumed records are deleted once committed (repartition topics), as Kafka Streams purges them
    purge: bool = False
    like_source: str | None = None
    matched: tuple[str, ...] = ()

    @property
    def likes(self) -> tuple[str, ...]:
        """Every topic whose partition count this one takes the largest of."""
        named = (self.like,) if isinstance(self.like, str) else self.like or ()
        return (*named, *self.matched)


class TopologyBuilder:
    config: EosConfig
    graph: ProcessorGraph
    #: table topic -> the source node that reads it (the DSL's joins with one table share it)
    table_sources: dict[str, str]
    internal_topics: dict[str, InternalTopic]
    default_timestamp: Callable[[Record], int] | None
    _cut: tuple[tuple[int, bool], dict[str, SubTopology]] | None = None

    @property
    def subtopologies(self) -> dict[str, SubTopology]:
        """The sub-topologies the processor graph is cut into (Kafka Streams' rule: at topics), by name."""
        cut, reuse = self._cut, self.config.topology_optimization != "none"
        if cut is None or cut[0] != (self.graph.version, reuse):
            cut = self._cut = ((self.graph.version, reuse),
                               self.graph.subtopologies(self.default_timestamp, reuse_source_topics=reuse))
        return cut[1]

    def every_step(self) -> dict[str, SubTopology]:
        """The sub-topologies, a step that reads a topic pattern among them whether it matched a topic or not,
        its pattern standing for its topics (for `describe` and the topics a job names)."""
        if not self.graph.patterns:
            return self.subtopologies
        return self.graph.subtopologies(self.default_timestamp, patterns_as_topics=True,
                                        reuse_source_topics=self.config.topology_optimization != "none")

    @property
    def repartition_topics(self) -> frozenset[str]:
        """The internal topics whose records are deleted once consumed (repartition topics): a record of one
        carries the origin of the input it came from, so lineage reaches through them (`eos.origin`)."""
        return frozenset(t.name for t in self.internal_topics.values() if t.purge)

    def internal_name(self, name: str, suffix: str) -> str:
        return f"{self.config.application_id}-{name}-{suffix}"

    def _unused(self, name: str) -> None:
        """A step-per-call method's `name` names its sub-topology: refused when taken."""
        if name in self.subtopologies or name in self.graph.nodes:
            raise ValueError(f"a sub-topology named {name!r} already exists; pass name=... to tell them apart")
        SubTopology.check_name(name)

    def _add(self, name: str, inputs: str | Sequence[str], output: str | None, key_serde: SerdeSpec,
             value_serde: SerdeSpec, output_key_serde: SerdeSpec, output_value_serde: SerdeSpec,
             extra_outputs: Iterable[str], *, timestamp: TimestampSpec = None,
             processor_factory: Callable[[], Any] | None = None, batch_fn: Callable[[Any], Any] | None = None,
             batch_format: str = "pandas", stores: Iterable[Any] = (),
             per_topic: dict[str, tuple[Any, Any, Any]] | None = None,
             raw_outputs: frozenset[str] = frozenset(), auto_offset_reset: str | timedelta | None = None,
             **info: Any) -> SubTopology:
        """One step of its own: a source reading `inputs` (topics in `per_topic` each with their own serdes
        and timestamps, None there meaning the record's own), the processor `name`, a sink to `output`.
        `auto_offset_reset`: where its sources start a partition nothing was committed for (`eos.offset_reset`;
        the application's unless given)."""
        self._unused(name)
        topics = topic_tuple(inputs, f"sub-topology {name!r}")
        ks, vs = serde_for(key_serde), serde_for(value_serde)
        extractor = timestamp_extractor(timestamp) if timestamp is not None else None
        own = per_topic or {}
        graph = self.graph
        groups = [(topics, (ks, vs, extractor))] if not own else [
            ((t,), (*own[t][:2], own[t][2] if own[t][2] is not None else RECORD_TIME) if t in own
             else (ks, vs, extractor)) for t in topics]
        reset = None if auto_offset_reset is None else offset_reset(auto_offset_reset,
                                                                     f"sub-topology {name!r}: auto_offset_reset")
        sources = [graph.add(SourceNode(f"{name}.source" + (f".{i}" if i else ""), group, key_serde=reading[0],
                                        value_serde=reading[1], timestamp=reading[2], offset_reset=reset)).name
                   for i, (group, reading) in enumerate(groups)]
        batch = (batch_fn, batch_format) if batch_fn is not None else None
        factory = processor_factory if processor_factory is not None else _no_processor
        graph.add(ProcessorNode(name, tuple(sources), factory, step_kind(factory, batch_format if batch else None,
                                                                          info),
                                batch=batch, **info))
        for spec in stores:
            graph.add_store(spec, [name])
        oks, ovs = serde_for(output_key_serde, ks), serde_for(output_value_serde, vs)
        if output is not None:
            graph.add(SinkNode(f"{name}.sink", output, (name,), oks, ovs, raw=output in raw_outputs))
        for i, topic in enumerate(t for t in extra_outputs if t != output):  # written by forward(topic=...)
            graph.add(SinkNode(f"{name}.sink.{i + 1}", topic, (name,), oks, ovs, raw=topic in raw_outputs, named=True))
        return self.subtopologies[name]


def _no_processor() -> Any:
    raise TypeError("a vectorized step has no processor")


def step_kind(factory: Callable[[], Any], batch_format: str | None, info: dict[str, Any]) -> str:
    """What a step is, in a word or two (`describe`)."""
    if batch_format is not None:
        return f"vectorized ({batch_format})"
    join, windowing = info.get("join"), info.get("windowing")
    if join is not None:
        return f"{join.kind} join ({join.how})"
    if windowing is not None:
        return f"windowed aggregation ({type(windowing.windows).__name__}, emit={windowing.emit})"
    name = getattr(getattr(factory, "func", factory), "__name__", "processor")
    return {"FunctionProcessor": "process", "RepartitionProcessor": "re-key", "AggregateProcessor": "aggregation",
            "TableRegroup": "table re-group", "TableAggregate": "table aggregation",
            "ForeignKeyRight": "foreign-key join (right side)"}.get(name, f"Processor API ({name})")
