"""`app.describe()` and `eos describe job.py`: the application's topology, in the layout of Kafka Streams'
`Topology#describe()` (sub-topologies, each a source, its processors and sinks, with the stores a processor
is connected to and the topics between them), or as a picture (`mermaid`, `dot`).

A sub-topology here runs one processing step per task; the topics it reads are its source, the topics it
writes its sinks, and the internal topics the framework adds (repartition, foreign-key subscription and
response, changelogs) are named as such.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from eos.app import Application

__all__ = ["TopologyDescription", "SubTopologyDescription", "describe", "Format"]

Format = Literal["text", "mermaid", "dot"]


@dataclass(frozen=True)
class SubTopologyDescription:
    index: int
    name: str
    sources: tuple[str, ...]
    processor: str
    kind: str
    stores: tuple[str, ...]
    sinks: tuple[str, ...]
    global_stores: tuple[str, ...] = ()


@dataclass
class TopologyDescription:
    application_id: str
    subtopologies: list[SubTopologyDescription] = field(default_factory=list)
    internal_topics: dict[str, str] = field(default_factory=dict)  # topic -> what it is
    changelogs: dict[str, str] = field(default_factory=dict)  # store -> its changelog topic

    def __str__(self) -> str:
        return self.text()

    def text(self) -> str:
        """Kafka Streams' layout: `Topologies:`, then per sub-topology its nodes and their links."""
        lines = ["Topologies:"]
        for sub in self.subtopologies:
            source, sinks = f"{sub.name}.source", [f"{sub.name}.sink-{i}" for i in range(len(sub.sinks))]
            lines.append(f"   Sub-topology: {sub.index} ({sub.name})")
            lines.append(f"    Source: {source} (topics: [{', '.join(self._topic(t) for t in sub.sources)}])")
            lines.append(f"      --> {sub.processor}")
            stores = [*sub.stores, *(f"{g} (global)" for g in sub.global_stores)]
            lines.append(f"    Processor: {sub.processor} ({sub.kind}; stores: [{', '.join(stores)}])")
            lines.append(f"      --> {', '.join(sinks) if sinks else 'none'}")
            lines.append(f"      <-- {source}")
            for sink, topic in zip(sinks, sub.sinks, strict=True):
                lines.append(f"    Sink: {sink} (topic: {self._topic(topic)})")
                lines.append(f"      <-- {sub.processor}")
            lines.append("")
        return "\n".join(lines).rstrip() + "\n"

    def _topic(self, topic: str) -> str:
        what = self.internal_topics.get(topic)
        return f"{topic} ({what})" if what else topic

    def mermaid(self) -> str:
        """A flowchart: topics as stadiums, steps as boxes (with their stores), one subgraph per sub-topology."""
        lines = ["flowchart LR"]
        ids: dict[str, str] = {}

        def topic_id(topic: str) -> str:
            if topic not in ids:
                ids[topic] = f"t{len(ids)}"
                lines.append(f'    {ids[topic]}(["{self._topic(topic)}"])')
            return ids[topic]

        for sub in self.subtopologies:
            step = f"s{sub.index}"
            stores = "<br/>".join(f"store: {s}" for s in (*sub.stores, *sub.global_stores))
            label = f"{sub.processor}<br/>{sub.kind}" + (f"<br/>{stores}" if stores else "")
            lines.append(f'    subgraph sub{sub.index}["Sub-topology {sub.index}"]')
            lines.append(f'        {step}["{label}"]')
            lines.append("    end")
            for topic in sub.sources:
                lines.append(f"    {topic_id(topic)} --> {step}")
            for topic in sub.sinks:
                lines.append(f"    {step} --> {topic_id(topic)}")
        return "\n".join(lines) + "\n"

    def dot(self) -> str:
        """Graphviz: topics as ellipses, steps as boxes in a cluster per sub-topology."""
        lines = [f'digraph "{self.application_id}" {{', "  rankdir=LR;", "  node [fontname=Helvetica];"]
        topics = sorted({t for s in self.subtopologies for t in (*s.sources, *s.sinks)})
        for topic in topics:
            lines.append(f'  "topic:{topic}" [shape=ellipse, label="{self._topic(topic)}"];')
        for sub in self.subtopologies:
            stores = "\\n".join(f"store: {s}" for s in (*sub.stores, *sub.global_stores))
            label = f"{sub.processor}\\n{sub.kind}" + (f"\\n{stores}" if stores else "")
            lines.append(f'  subgraph "cluster_{sub.index}" {{ label="Sub-topology {sub.index}"; '
                         f'"step:{sub.name}" [shape=box, label="{label}"]; }}')
            lines += [f'  "topic:{t}" -> "step:{sub.name}";' for t in sub.sources]
            lines += [f'  "step:{sub.name}" -> "topic:{t}";' for t in sub.sinks]
        lines.append("}")
        return "\n".join(lines) + "\n"

    def render(self, format: Format = "text") -> str:
        if format not in ("text", "mermaid", "dot"):
            raise ValueError(f"format must be text, mermaid or dot, got {format!r}")
        return {"text": self.text, "mermaid": self.mermaid, "dot": self.dot}[format]()


def describe(app: Application) -> TopologyDescription:
    cfg = app.config
    out = TopologyDescription(cfg.application_id)
    for topic in app.internal_topics.values():
        out.internal_topics[topic.name] = "repartition" if topic.purge else "internal"
    for name in app.internal_topics:
        for suffix in ("subscription", "response"):
            if name.endswith(f"-{suffix}"):
                out.internal_topics[name] = f"foreign-key {suffix}"
    for index, sub in enumerate(app.subtopologies.values()):
        out.subtopologies.append(SubTopologyDescription(
            index, sub.name, sub.inputs, sub.name, _kind(sub), tuple(s.name for s in sub.stores),
            sub.output_topics, tuple(g.name for g in sub.global_tables)))
        for spec in sub.stores:
            out.changelogs[spec.name] = spec.changelog_topic(cfg.application_id)
    return out


def _kind(sub: object) -> str:
    """What the step is, in a word or two."""
    from eos.topology import SubTopology

    assert isinstance(sub, SubTopology)
    if sub.batch_fn is not None:
        return f"vectorized ({sub.batch_format})"
    if sub.join is not None:
        return f"{sub.join.kind} join ({sub.join.how})"
    if sub.windowing is not None:
        return f"windowed aggregation ({type(sub.windowing.windows).__name__}, emit={sub.windowing.emit})"
    factory = sub.processor_factory
    name = getattr(getattr(factory, "func", factory), "__name__", "processor")
    return {"FunctionProcessor": "process", "RepartitionProcessor": "re-key", "AggregateProcessor": "aggregation",
            "TableRegroup": "table re-group", "TableAggregate": "table aggregation",
            "ForeignKeyRight": "foreign-key join (right side)"}.get(name, f"Processor API ({name})")
