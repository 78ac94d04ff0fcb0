"""The processor topology: nodes (`eos.graph.nodes`), the graph and its cut into sub-topologies
(`eos.graph.graph`), the DSL's stateless operators (`eos.graph.operators`) and the runtime that runs a
sub-topology's nodes in a task (`eos.graph.runtime`)."""

from eos.graph.graph import GraphPart, ProcessorGraph
from eos.graph.nodes import ProcessorNode, SinkNode, SourceNode

__all__ = ["GraphPart", "ProcessorGraph", "ProcessorNode", "SinkNode", "SourceNode"]
