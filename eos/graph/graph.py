"""A processor graph and how it is cut into sub-topologies.

Kafka Streams' rule: two nodes are in the same sub-topology when one is the other's parent, or when they
share a state store; a topic between a sink and a source is the only boundary. Every sub-topology becomes
one `eos.topology.SubTopology` (tasks, transactional ids, planning, audits are unchanged), whose processor
is a `eos.graph.runtime.GraphProcessor` running all of its nodes, record by record, in one pass over the
batch: one transaction carries every sink's output, every store's changelog, dead letters and offsets.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from eos.graph.nodes import Node, ProcessorNode, SinkNode, SourceNode, hold_slots
from eos.graph.operators import TARGET, OperatorPaths, Route, require_functions
from eos.serde import BytesSerde, DecimalSerde, DoubleSerde, IntegerSerde, LongSerde, Serde, StringSerde, serde_name
from eos.time import RECORD_TIME, WallClockTime, field
from eos.topology import SubTopology
from recovery import StoreSpec

__all__ = ["ProcessorGraph", "GraphPart", "source_changelogs", "table_stores"]

_INVALID = re.compile(r"[^A-Za-z0-9_.]")
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")  # Kafka's rule for a topic's name (and not "." or "..")


#: serdes whose values have no fields: a `field` timestamp cannot read them
_SCALAR_SERDES = (BytesSerde, StringSerde, IntegerSerde, LongSerde, DoubleSerde, DecimalSerde)


@dataclass(frozen=True)
class GraphPart:
    """The nodes of one sub-topology, in the order they were added, and their links."""

    sources: tuple[SourceNode, ...]
    processors: tuple[ProcessorNode, ...]
    sinks: tuple[SinkNode, ...]
    children: Mapping[str, tuple[str, ...]]
    #: processor -> the stores connected to it
    stores: Mapping[str, tuple[str, ...]]

    def node(self, name: str) -> Node:
        nodes: tuple[Node, ...] = (*self.sources, *self.processors, *self.sinks)
        for node in nodes:
            if node.name == name:
                return node
        raise KeyError(name)


def _check_topics_and_functions(node: Node) -> None:
    """A node's topics are Kafka topic names and its functions callable (a sink's partitioner and a source's
    timestamp extractor are optional)."""
    topics = node.topics if isinstance(node, SourceNode) else (node.topic,) if isinstance(node, SinkNode) else ()
    for topic in topics:
        if not isinstance(topic, str) or not _TOPIC.match(topic) or topic in (".", ".."):
            raise ValueError(f"{node.name!r}: {topic!r} is not a Kafka topic name (1-249 characters of A-Z a-z 0-9 "
                             ". _ -, other than '.' and '..')")
    if isinstance(node, ProcessorNode):
        require_functions(repr(node.name), factory=node.factory, takes={"factory": ()})
    elif isinstance(node, SinkNode) and node.partitioner is not None:
        require_functions(repr(node.name), partitioner=node.partitioner,
                          takes={"partitioner": ("key", "value", "partitions")})
    elif isinstance(node, SourceNode) and node.timestamp is not None:
        require_functions(repr(node.name), timestamp=node.timestamp, takes={"timestamp": ("record",)})


class ProcessorGraph:
    """Nodes and stores as they are added (`eos.dsl` and the Processor API add them); `subtopologies()`
    cuts them into sub-topologies."""

    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        self.stores: dict[str, StoreSpec] = {}
        self.connected: dict[str, list[str]] = {}  # processor -> stores
        self.version = 0  # bumped on every change (an Application caches its sub-topologies by it)

    # ------------------------------------------------------------------ building
    def add(self, node: Node) -> Node:
        if not node.name or not isinstance(node.name, str):
            raise ValueError(f"a node needs a name, got {node.name!r}")
        if node.name in self.nodes:
            raise ValueError(f"a node named {node.name!r} already exists; names are unique in a topology "
                             "(pass name=... to tell them apart)")
        for parent in node.parents:
            if parent not in self.nodes:
                raise ValueError(f"{node.name!r}: parent {parent!r} does not exist; add it first "
                                 f"(known nodes: {', '.join(self.nodes) or 'none'})")
            if isinstance(self.nodes[parent], SinkNode):
                raise ValueError(f"{node.name!r}: parent {parent!r} is a sink, which has no children; read its "
                                 "topic with a source to continue from it")
        if isinstance(node, ProcessorNode | SinkNode) and not node.parents:
            raise ValueError(f"{node.name!r} needs at least one parent (a source or a processor)")
        if isinstance(node, SourceNode) and not node.topics and node.pattern is None:
            raise ValueError(f"source {node.name!r} reads no topic")
        _check_topics_and_functions(node)
        self.nodes[node.name] = node
        if isinstance(node, ProcessorNode):
            self.connected.setdefault(node.name, [])
        self.version += 1
        return node

    def add_store(self, spec: StoreSpec, processors: Iterable[str] = ()) -> None:
        existing = self.stores.get(spec.name)
        if existing is not None and existing != spec:
            raise ValueError(f"a different state store named {spec.name!r} already exists")
        self.stores[spec.name] = spec
        self.connect(processors, [spec.name])

    def connect(self, processors: Iterable[str], stores: Iterable[str]) -> None:
        for name in processors:
            node = self.nodes.get(name)
            if not isinstance(node, ProcessorNode):
                raise ValueError(f"cannot connect stores to {name!r}: no processor has that name")
            for store in stores:
                if store not in self.stores:
                    raise ValueError(f"no state store named {store!r}: add it with add_state_store first")
                if store not in self.connected[name]:
                    self.connected[name].append(store)
        self.version += 1

    def children(self, name: str) -> list[str]:
        return [n.name for n in self.nodes.values() if name in n.parents]

    # ------------------------------------------------------------------ topic patterns
    @property
    def patterns(self) -> dict[str, re.Pattern[str]]:
        """The sources that read the topics a pattern matches: source -> pattern."""
        return {n.name: n.pattern for n in self.nodes.values() if isinstance(n, SourceNode) and n.pattern is not None}

    def pattern_topics(self) -> dict[str, tuple[str, ...]]:
        """The topics each pattern source reads now (those it matched last)."""
        return {name: node.topics for name, node in self.nodes.items()
                if isinstance(node, SourceNode) and node.pattern is not None}

    def pattern_sources(self, node: str) -> list[str]:
        """The pattern sources `node` descends from, in the order they were added."""
        seen, todo = set(), [node]
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(self.nodes[name].parents)
        return [n for n in self.patterns if n in seen]

    def match_patterns(self, topics: Iterable[str], excluded: Iterable[str] = ()) -> bool:
        """Have every pattern source read the topics of `topics` whose whole name its pattern matches, in
        order of name, but for those `excluded` (the application's internal topics) and those its own
        sub-topology writes (a step never reads its own output through a pattern). Returns whether any source's
        topics changed."""
        names, skip = sorted(set(topics)), set(excluded)
        written = {s.name: {k.topic for k in part.sinks} for part in self.parts() for s in part.sources}
        changed = False
        for name, pattern in self.patterns.items():
            node = self.nodes[name]
            assert isinstance(node, SourceNode)
            matched = tuple(t for t in names if pattern.fullmatch(t) and t not in skip and t not in written[name])
            if matched != node.topics:
                self.nodes[name] = replace(node, topics=matched)
                changed = True
        if changed:
            self.version += 1
        return changed

    # ------------------------------------------------------------------ cutting
    def parts(self) -> list[GraphPart]:
        """The sub-topologies: groups of nodes linked by parent/child edges or shared stores, in the order
        of their first node."""
        group = {name: name for name in self.nodes}

        def find(name: str) -> str:
            while group[name] != name:
                group[name] = group[group[name]]
                name = group[name]
            return name

        def union(a: str, b: str) -> None:
            group[find(a)] = find(b)

        for node in self.nodes.values():
            for parent in node.parents:
                union(node.name, parent)
        users: dict[str, str] = {}
        for processor, stores in self.connected.items():
            for store in stores:
                if store in users:
                    union(processor, users[store])
                users.setdefault(store, processor)
        members: dict[str, list[Node]] = {}
        for node in self.nodes.values():
            members.setdefault(find(node.name), []).append(node)
        return [self._part(nodes) for nodes in members.values()]

    def _part(self, nodes: list[Node]) -> GraphPart:
        names = {n.name for n in nodes}
        children = {n.name: tuple(c for c in self.children(n.name) if c in names) for n in nodes}
        processors = tuple(n for n in nodes if isinstance(n, ProcessorNode))
        return GraphPart(tuple(n for n in nodes if isinstance(n, SourceNode)), processors,
                         tuple(n for n in nodes if isinstance(n, SinkNode)), children,
                         {p.name: tuple(self.connected[p.name]) for p in processors})

    def subtopologies(self, default_timestamp: Callable[[Any], int] | None, *,
                      reuse_source_topics: bool = False, patterns_as_topics: bool = False) -> dict[str, SubTopology]:
        """One `SubTopology` per part, named after its first processor (else its first source).
        `reuse_source_topics`: the stores that may be restored from their table's topic are
        (`source_changelogs`; Kafka Streams' topology.optimization). A part whose every source is a pattern
        that matched no topic yet has nothing to read and is left out; `patterns_as_topics` (for `describe`)
        shows each pattern source as reading its pattern instead."""
        from eos.graph.runtime import GraphProcessor

        out: dict[str, SubTopology] = {}
        runs: dict[str, tuple[str, GraphPart]] = {}  # node -> the sub-topology that runs it, and its part
        parts = self.parts()
        if patterns_as_topics:
            parts = [replace(p, sources=tuple(replace(s, topics=(s.pattern.pattern,)) if s.pattern else s
                                              for s in p.sources)) for p in parts]
        parts = [p for p in parts if not p.sources or any(s.topics for s in p.sources)]
        writers = Counter(topic for part in parts for topic in {s.topic for s in part.sinks})
        shared = frozenset(topic for topic, n in writers.items() if n > 1)  # topics several sub-topologies write
        for part in parts:
            stores = self.stores
            if reuse_source_topics and (reused := source_changelogs(part, default_timestamp)):
                stores = {**stores, **{n: replace(stores[n], source_topic=t) for n, t in reused.items()}}
            sub = _subtopology(part, stores, default_timestamp, GraphProcessor, shared)
            if sub.name in out:
                raise ValueError(f"two sub-topologies would be named {sub.name!r} (node names differing only in "
                                 "characters other than [A-Za-z0-9_.]); rename one")
            out[sub.name] = sub
            runs.update((p.name, (sub.name, part)) for p in part.processors)
        for name, sub in out.items():  # a foreign-key join names the node reading its right table
            if any(j.right_reader for j in sub.joins):
                out[name] = _with_right_sides(sub, runs)
        return out


def table_stores(part: GraphPart) -> dict[str, str]:
    """The stores of `part`'s stream-table joins that keep a table read straight from a topic (a source node
    of that topic alone): store -> topic."""
    out: dict[str, str] = {}
    for join in part.processors:
        spec = join.join
        if spec is None or spec.kind != "stream-table" or spec.right_store is None:
            continue
        if any(isinstance(n, SourceNode) and n.topics == (spec.right,) for n in map(part.node, join.parents)):
            out[spec.right_store] = spec.right
    return out


def source_changelogs(part: GraphPart, default_timestamp: Callable[[Any], int] | None) -> dict[str, str]:
    """The stores of `part` that may use their table's topic as their changelog (store -> topic): a stream-table
    join's store of a table read straight from a topic (a source node of that topic alone), whose records reach
    stream-table joins only, each keeping them in a store of its own. Such a store holds exactly what the
    topic's records, in offset order, put there: nothing but the table's records writes it, and nothing that
    could fail takes them (a failure would roll the update back and dead-letter it), so replaying the topic up
    to the task's committed offset restores it. Not where the table's timestamps are the wall clock's, which a
    replay would not see again."""
    joins = {p.name for p in part.processors if p.join is not None and p.join.kind == "stream-table"}
    users = Counter(store for names in part.stores.values() for store in names)
    out: dict[str, str] = {}
    for store, topic in table_stores(part).items():
        table = next(n for n in part.sources if n.topics == (topic,))
        extract = table.timestamp if table.timestamp is not None else default_timestamp
        if users[store] != 1 or isinstance(extract, WallClockTime) or not all(
                c in joins for c in part.children.get(table.name, ())):
            continue
        out[store] = topic
    return out


def _subtopology(part: GraphPart, stores: Mapping[str, StoreSpec], default_timestamp: Callable[[Any], int] | None,
                 runner: Callable[[GraphPart], Any], shared: frozenset[str] = frozenset()) -> SubTopology:
    first = part.processors[0] if part.processors else part.sources[0] if part.sources else part.sinks[0]
    if not part.sources:
        raise ValueError(f"{first.name!r} is not connected to any source: every processor and sink needs a "
                         "path from a source")
    name = _INVALID.sub("_", first.name)[:100]
    batch = [p for p in part.processors if p.batch is not None]
    if batch and (len(part.processors) > 1 or len(part.sinks) > 1 or len(part.sources) > 1):
        raise ValueError(f"the vectorized step {batch[0].name!r} must be alone between one source and at most one "
                         "sink (it runs once per batch, not per record)")
    readings: dict[str, tuple[Serde, Serde, Callable[[Any], int] | None]] = {}
    for source in part.sources:
        for topic in source.topics:
            if topic in readings:
                raise ValueError(f"topic {topic!r} is read by two sources of one sub-topology "
                                 f"({source.name!r} and another); read it once and fan out")
            extract = source.timestamp if source.timestamp is not None else default_timestamp
            if isinstance(extract, field) and isinstance(source.value_serde, _SCALAR_SERDES):
                named = serde_name(source.value_serde) or type(source.value_serde).__name__
                raise ValueError(
                    f"topic {topic!r}: its event time is the field {extract.path!r} of each value, but its values "
                    f"are read as {named} (value_serde), which has no fields: read them as objects "
                    "(value_serde='json', or a Schema Registry serde), or take the time from elsewhere "
                    "(timestamp='record', 'header:<name>' or a function of the record)")
            readings[topic] = (source.key_serde, source.value_serde, None if extract is RECORD_TIME else extract)
    inputs = tuple(readings)
    key_serde, value_serde, timestamp = readings[inputs[0]]
    sinks = {s.topic: s for s in reversed(part.sinks)}  # the first sink of a topic gives its serdes
    # the output topic: the first sink's that a plain forward() writes (named sinks are a step's extra outputs)
    topics = list(dict.fromkeys(s.topic for s in sorted(part.sinks, key=lambda s: s.named)))
    output = topics[0] if topics else None
    main = sinks.get(output) if output else None
    out_ks = main.key_serde if main else key_serde
    out_vs = main.value_serde if main else value_serde
    raw = frozenset(s.topic for s in part.sinks if s.raw)
    windowed = {p.name: _audited_window(part, p, shared) for p in part.processors if p.windowing is not None}
    slots = hold_slots(part.processors)
    joins = {p: _audited_join(part, p, shared, slots.get(p.name, (0, 1))) for p in part.processors
             if p.join is not None}
    used = [s for p in part.processors for s in part.stores[p.name]]
    vectorized = batch[0].batch if batch else None
    kind: dict[str, Any] = {"batch_fn": vectorized[0], "batch_format": vectorized[1]} if vectorized else {
        "processor_factory": partial(runner, part)}
    return SubTopology(
        name=name, inputs=inputs, output=output, key_serde=key_serde, value_serde=value_serde,
        output_key_serde=out_ks, output_value_serde=out_vs, extra_outputs=tuple(topics[1:]),
        timestamp=timestamp, stores=tuple(stores[s] for s in dict.fromkeys(used)),
        may_punctuate=any(p.may_punctuate for p in part.processors),
        windowings=tuple(w for w in windowed.values() if w is not None),
        unreplayed_windows=tuple((n, _UNREPLAYED_WINDOW) for n, w in windowed.items() if w is None),
        joins=tuple(j for j in joins.values() if j is not None),
        unreplayed_joins=tuple((n.name, n.join, _UNREPLAYED_JOIN) for n, j in joins.items() if j is None),
        per_topic={t: r for t, r in readings.items() if r != (key_serde, value_serde, timestamp)},
        offset_resets={t: s.offset_reset for s in part.sources if s.offset_reset is not None for t in s.topics},
        global_tables=tuple(dict.fromkeys(g for p in part.processors for g in p.global_tables)),
        raw_outputs=raw, output_serdes={t: (s.key_serde, s.value_serde) for t, s in sinks.items() if not s.raw},
        graph=part, **kind)


_UNREPLAYED_WINDOW = ("the window audit replays a windowed aggregation whose task reads one source topic, "
                      "through stateless operators only, into a topic only it writes (or topics it is routed "
                      "among, to(fn, topics=[...])); this one's task reads more "
                      "or its results go elsewhere or share their topic, so its results are proven by the lineage "
                      "audit alone (each once, derived from committed inputs), not recomputed")


_UNREPLAYED_JOIN = ("the join audit replays a join whose every side its task reads from one topic, through "
                    "stateless operators only (filters, maps, a stream made a table), into a topic only it writes "
                    "(a join of a stream: or topics it is routed among, to(fn, topics=[...])); "
                    "one of this one's sides comes from several topics or through a stateful step (an "
                    "aggregation, another join, a processor), or its results go elsewhere or share their topic, "
                    "so its results are proven by the lineage audit alone (each once, derived from committed "
                    "inputs), not recomputed")


def _with_right_sides(sub: SubTopology, runs: Mapping[str, tuple[str, GraphPart]]) -> SubTopology:
    """`sub` with each foreign-key join naming the sub-topology that reads its right table and the stateless
    operators between that table's topic and it (`JoinSpec.right_prefix`); a join whose right table comes
    through anything else goes to the joins the join audit cannot replay."""
    joins, unreplayed = [], list(sub.unreplayed_joins)
    named = {p.join.right_reader: p.name for p in sub.graph.processors if p.join is not None}
    for join in sub.joins:
        if join.right_reader is None:
            joins.append(join)
            continue
        reader, part = runs[join.right_reader]
        right = part.node(join.right_reader)
        prefix = _side_prefix(part, right.name, right.parents[1], join.right)
        if prefix is None:
            unreplayed.append((named[join.right_reader], join, _UNREPLAYED_JOIN))
        else:
            joins.append(replace(join, right_reader=reader, right_prefix=prefix))
    return replace(sub, joins=tuple(joins), unreplayed_joins=tuple(unreplayed))


def _audited_window(part: GraphPart, node: ProcessorNode, shared: frozenset[str]) -> Any:
    """The windowed aggregation's definition for the window audit, with the stateless operators on the paths
    between its task's one source and it (`OperatorPaths`), the topic of its results and those between the
    aggregation and that topic; None when the audit could not replay it (another kind of node on those paths,
    several sources, or results that go anywhere but to one sink through stateless operators, or to a topic
    another step writes too: `_to_one_sink`)."""
    found, results = _from_one_source(part, node.name, node.parents), _to_one_sink(part, node, shared)
    routed = _to_one_route(part, node, shared) if results is None else None
    if found is None or len(part.sources) != 1 or (results is None and routed is None):
        return None
    if routed is not None:
        return replace(node.windowing, prefix=found[1], topic=None, suffix=routed[1], route=routed[0])
    assert results is not None
    return replace(node.windowing, prefix=found[1], topic=results[0], suffix=results[1])


def _audited_join(part: GraphPart, node: ProcessorNode, shared: frozenset[str], hold_slot: tuple[int, int]) -> Any:
    """The join's definition for the join audit, with the topic its results go to, each side's stateless
    operators between its topic and the join (`JoinSpec.left_prefix`, `right_prefix`) and, for a join of a
    stream, those between the join and that topic (`JoinSpec.suffix`), and its slot among the steps that may hold
    records back (`JoinSpec.hold_slot`); None when the audit could not replay
    it (a side through anything but stateless operators from its own topic's one source, or results that
    reach anything but one sink, a table join's through anything). A foreign-key join's right side is in
    another sub-topology (`_with_right_sides`); its other parent here is the source of its responses."""
    spec, results = node.join, _to_one_sink(part, node, shared)
    of_a_table = spec.kind in ("table-table", "foreign-key")
    routed = _to_one_route(part, node, shared) if results is None and not of_a_table else None
    sides = (spec.left,) if spec.kind in ("stream-global", "foreign-key") else (spec.left, spec.right)
    prefixes = [_side_prefix(part, node.name, parent, side) for parent, side in zip(node.parents, sides, strict=False)]
    if (results is None and routed is None) or (results is not None and results[1] and of_a_table) or any(
            p is None for p in prefixes) or any(not isinstance(part.node(p), SourceNode)
                                               for p in node.parents[len(sides):]):
        return None
    sides_of = {"left_prefix": prefixes[0], "right_prefix": prefixes[1] if sides[1:] else (), "hold_slot": hold_slot,
                "step": node.name}
    if routed is not None:
        return replace(spec, output=None, suffix=routed[1], route=routed[0], **sides_of)
    assert results is not None
    return replace(spec, output=results[0], suffix=results[1], **sides_of)


def _side_prefix(part: GraphPart, node: str, parent: str, topic: str) -> tuple[Any, ...] | None:
    """The stateless operators a join's side passes from its topic to `node` through `parent`; None when
    the side comes from more than one source or through anything else."""
    found = _from_one_source(part, node, (parent,))
    return found[1] if found is not None and found[0].topics == (topic,) else None


def _from_one_source(part: GraphPart, target: str, parents: Iterable[str]) -> tuple[SourceNode, tuple[Any, ...]] | None:
    """The one source the paths into `target` through `parents` start at, with the stateless operators on
    them as a prefix for an audit to replay: `(OperatorPaths,)`, or () when `parents` is the source itself;
    None when the paths start at several sources or pass any other kind of node."""
    on_paths: set[str] = set()
    sources: list[SourceNode] = []
    todo = list(parents)
    while todo:
        name = todo.pop()
        if name in on_paths:
            continue
        on_paths.add(name)
        parent = part.node(name)
        if isinstance(parent, SourceNode):
            sources.append(parent)
            continue
        if not isinstance(parent, ProcessorNode) or not parent.operator:
            return None
        todo.extend(parent.parents)
    if len(sources) != 1:
        return None
    return sources[0], _paths(part, sources[0].name, target, on_paths)


def _to_one_sink(part: GraphPart, node: ProcessorNode, shared: frozenset[str]) -> tuple[str, tuple[Any, ...]] | None:
    """The topic of the one sink a node's results reach through stateless operators (what goes to a stateful
    step is not followed; named sinks, a step's extra outputs, aside), with those operators for an audit to
    apply to each result (`(OperatorPaths,)`, () when the sink is the node's child); None when they reach
    several sinks or none, or anything else reaches that sink or writes its topic (another sink of the task,
    another sub-topology: `shared`)."""
    below, sinks = _reached(part, node)
    if len(sinks) != 1:
        return None
    sink = part.node(sinks.pop())
    assert isinstance(sink, SinkNode)
    on_paths = _only_from(part, node, sink, below)
    topic = sink.topic
    if on_paths is None or topic in shared or sum(s.topic == topic for s in part.sinks) != 1:
        return None
    return topic, _paths(part, node.name, sink.name, on_paths)


def _to_one_route(part: GraphPart, node: ProcessorNode, shared: frozenset[str]) -> tuple[Any, tuple[Any, ...]] | None:
    """For results routed among topics (`to(fn, topics=[...])`): the `Route` that every one of a node's results
    reaches through stateless operators, and those operators (as `_to_one_sink` gives them); None unless the
    route's sinks are all the node's results reach, nothing else reaches the route, and no other sink or step
    writes its topics."""
    below, sinks = _reached(part, node)
    routes = {p for s in sinks for p in part.node(s).parents}
    if len(routes) != 1:
        return None
    route = part.node(routes.pop())
    operator = route.factory() if isinstance(route, ProcessorNode) else None
    if not isinstance(operator, Route) or set(part.children[route.name]) != sinks:
        return None
    on_paths = _only_from(part, node, route, below - {route.name})
    if on_paths is None or any(t in shared or sum(s.topic == t for s in part.sinks) != 1 for t in operator.topics):
        return None
    return operator, _paths(part, node.name, route.name, on_paths)


def _reached(part: GraphPart, node: ProcessorNode) -> tuple[set[str], set[str]]:
    """The stateless operators a node's results pass and the (unnamed) sinks they reach through them."""
    below: set[str] = set()
    sinks: set[str] = set()
    todo = list(part.children[node.name])
    while todo:
        name = todo.pop()
        child = part.node(name)
        if isinstance(child, SinkNode):
            if not child.named:
                sinks.add(name)
        elif isinstance(child, ProcessorNode) and child.operator and name not in below:
            below.add(name)
            todo.extend(part.children[name])
    return below, sinks


def _only_from(part: GraphPart, node: ProcessorNode, target: Node, below: set[str]) -> set[str] | None:
    """The operators of `below` on the paths from `node` to `target`; None when something besides the node's
    results reaches `target`."""
    on_paths: set[str] = set()
    todo = list(target.parents)
    while todo:
        name = todo.pop()
        if name == node.name or name in on_paths:
            continue
        if name not in below:
            return None
        on_paths.add(name)
        todo.extend(part.node(name).parents)
    return on_paths


def _paths(part: GraphPart, start: str, target: str, on_paths: set[str]) -> tuple[Any, ...]:
    """The stateless operators `on_paths` between node `start` and node `target`, as an audit replays them:
    `(OperatorPaths,)`, or () when there are none."""
    def leads(child: str) -> str | None:
        return TARGET if child == target else child if child in on_paths else None
    operators = tuple((n.name, n.factory(), tuple(leads(c) for c in part.children[n.name]))
                      for n in part.processors if n.name in on_paths)
    roots = tuple(lead for c in part.children[start] if (lead := leads(c)) is not None)
    return (OperatorPaths(roots, operators),) if operators else ()
