"""`app.describe()` and `eos describe job.py`: the application's topology, in the layout of Kafka Streams'
`Topology#describe()` (sub-topologies, each with its sources, processors and sinks, the stores a processor
is connected to, and the links between nodes), or as a picture (`mermaid`, `dot`).

The internal topics the framework adds (repartition, foreign-key subscription and response) are named as
such, and every store's changelog topic is listed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from recovery import shared_stores

if TYPE_CHECKING:
    from eos.app import Application

__all__ = ["TopologyDescription", "SubTopologyDescription", "NodeDescription", "describe", "Format"]

Format = Literal["text", "mermaid", "dot"]


@dataclass(frozen=True)
class NodeDescription:
    """One node: `role` is source, processor or sink; `detail` the topics of a source, the kind and stores of
    a processor, the topic of a sink."""

    name: str
    role: Literal["source", "processor", "sink"]
    children: tuple[str, ...]
    parents: tuple[str, ...]
    topics: tuple[str, ...] = ()
    kind: str = ""
    stores: tuple[str, ...] = ()


@dataclass(frozen=True)
class SubTopologyDescription:
    index: int
    name: str
    nodes: tuple[NodeDescription, ...]

    @property
    def sources(self) -> tuple[str, ...]:
        return tuple(t for n in self.nodes if n.role == "source" for t in n.topics)

    @property
    def sinks(self) -> tuple[str, ...]:
        return tuple(t for n in self.nodes if n.role == "sink" for t in n.topics)


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
            lines.append(f"   Sub-topology: {sub.index} ({sub.name})")
            for node in sub.nodes:
                if node.role == "source":
                    lines.append(f"    Source: {node.name} (topics: [{', '.join(map(self._topic, node.topics))}])")
                elif node.role == "processor":
                    lines.append(f"    Processor: {node.name} ({node.kind}; stores: [{', '.join(node.stores)}])")
                else:
                    lines.append(f"    Sink: {node.name} (topic: {self._topic(node.topics[0])})")
                if node.role != "sink":
                    lines.append(f"      --> {', '.join(node.children) or 'none'}")
                if node.role != "source":
                    lines.append(f"      <-- {', '.join(node.parents)}")
            lines.append("")
        return "\n".join(lines).rstrip() + "\n"

    def _topic(self, topic: str) -> str:
        what = self.internal_topics.get(topic)
        return f"{topic} ({what})" if what else topic

    def _edges(self, node_id: dict[str, str], topic_id: dict[str, str]) -> list[tuple[str, str]]:
        edges = []
        for sub in self.subtopologies:
            for node in sub.nodes:
                if node.role == "source":
                    edges += [(topic_id[t], node_id[node.name]) for t in node.topics]
                elif node.role == "sink":
                    edges.append((node_id[node.name], topic_id[node.topics[0]]))
                edges += [(node_id[node.name], node_id[c]) for c in node.children]
        return edges

    def _ids(self, quoted: bool = False) -> tuple[dict[str, str], dict[str, str]]:
        """Node and topic ids: short (Mermaid) or the quoted names (Graphviz)."""
        nodes = [n.name for s in self.subtopologies for n in s.nodes]
        topics = sorted({t for s in self.subtopologies for n in s.nodes for t in n.topics})
        if quoted:
            return {n: f'"node:{n}"' for n in nodes}, {t: f'"topic:{t}"' for t in topics}
        return {n: f"n{i}" for i, n in enumerate(nodes)}, {t: f"t{i}" for i, t in enumerate(topics)}

    @staticmethod
    def _label(node: NodeDescription, newline: str) -> str:
        if node.role != "processor":
            return f"{node.name}"
        return newline.join([node.name, node.kind, *(f"store: {s}" for s in node.stores)])

    def mermaid(self) -> str:
        """A flowchart: topics as stadiums, one subgraph per sub-topology with its nodes (processors as boxes
        naming their kind and stores)."""
        node_id, topic_id = self._ids()
        lines = ["flowchart LR"]
        lines += [f'    {i}(["{self._topic(t)}"])' for t, i in topic_id.items()]
        for sub in self.subtopologies:
            lines.append(f'    subgraph sub{sub.index}["Sub-topology {sub.index} ({sub.name})"]')
            for node in sub.nodes:
                shape = ('["', '"]') if node.role == "processor" else ('>"', '"]')
                lines.append(f"        {node_id[node.name]}{shape[0]}{self._label(node, '<br/>')}{shape[1]}")
            lines.append("    end")
        lines += [f"    {a} --> {b}" for a, b in self._edges(node_id, topic_id)]
        return "\n".join(lines) + "\n"

    def dot(self) -> str:
        """Graphviz: topics as ellipses, nodes as boxes in a cluster per sub-topology."""
        node_id, topic_id = self._ids(quoted=True)
        lines = [f'digraph "{self.application_id}" {{', "  rankdir=LR;", "  node [fontname=Helvetica];"]
        lines += [f'  {i} [shape=ellipse, label="{self._topic(t)}"];' for t, i in topic_id.items()]
        for sub in self.subtopologies:
            lines.append(f'  subgraph "cluster_{sub.index}" {{ label="Sub-topology {sub.index} ({sub.name})";')
            for node in sub.nodes:
                shape = "box" if node.role == "processor" else "cds"
                lines.append(f'    {node_id[node.name]} [shape={shape}, label="{self._label(node, chr(92) + "n")}"];')
            lines.append("  }")
        lines += [f"  {a} -> {b};" for a, b in self._edges(node_id, topic_id)]
        lines.append("}")
        return "\n".join(lines) + "\n"

    def render(self, format: Format = "text") -> str:
        if format not in ("text", "mermaid", "dot"):
            raise ValueError(f"format must be text, mermaid or dot, got {format!r}")
        return {"text": self.text, "mermaid": self.mermaid, "dot": self.dot}[format]()


def describe(app: Application) -> TopologyDescription:
    from eos.graph import SinkNode, SourceNode

    cfg = app.config
    out = TopologyDescription(cfg.application_id)
    for topic in app.internal_topics.values():
        out.internal_topics[topic.name] = "repartition" if topic.purge else "internal"
        for suffix in ("subscription", "response"):
            if topic.name.endswith(f"-{suffix}"):
                out.internal_topics[topic.name] = f"foreign-key {suffix}"
    for index, sub in enumerate(app.every_step().values()):
        part = sub.graph
        nodes = []
        for node in (*part.sources, *part.processors, *part.sinks):
            children, parents = part.children[node.name], node.parents
            if isinstance(node, SourceNode):
                nodes.append(NodeDescription(node.name, "source", children, parents, node.topics))
            elif isinstance(node, SinkNode):
                nodes.append(NodeDescription(node.name, "sink", children, parents, (node.topic,)))
            else:
                versioned = {s.name: s.retention_ms for s in sub.stores if s.kind == "versioned"}
                grace = node.join.grace_ms if node.join is not None else None
                held = {s.name for s in sub.stores if s.kind == "time_ordered_buffer"}
                reused = {s.name: s.source_topic for s in sub.stores if s.source_topic is not None}
                kept_in = shared_stores(sub.stores)
                stores = (*((f"{s} (versioned, history {versioned[s]} ms)" if s in versioned
                             else f"{s} (stream records held back, grace {grace} ms)" if s in held else s)
                            + (f" (changelog: the table's topic {reused[s]})" if s in reused else "")
                            + (f" (one store with {kept_in[s]})" if s in kept_in else "")
                            for s in part.stores[node.name]),
                          *(f"{g.name} (global" + (f", versioned, history {g.history_retention_ms} ms)"
                                                   if g.history_retention_ms is not None else ")")
                            for g in node.global_tables))
                nodes.append(NodeDescription(node.name, "processor", children, parents, kind=node.kind,
                                             stores=stores))
        out.subtopologies.append(SubTopologyDescription(index, sub.name, tuple(nodes)))
        for spec in sub.stores:
            out.changelogs[spec.name] = spec.restore_topic(cfg.application_id)
    return out
