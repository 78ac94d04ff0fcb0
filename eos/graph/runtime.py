"""Running one sub-topology's processor graph inside a task.

`GraphProcessor` is the task's one `eos.Processor`: for each input record (one record scope of the task,
`eos.worker.processing`) it calls the children of the source that reads the record's topic, depth first,
as Kafka Streams does; each processor forwards to its children (or the one named by `to=`) and sinks hand
their records to the task, which serializes them for its one transaction. So a record's processing is
atomic across the whole graph: if any node raises, nothing any node forwarded or wrote for that record
stays, and the record goes to the dead-letter topic once.

Records travel between nodes as (key, value, timestamp, headers), headers None meaning "the input
record's"; a `eos.Processor` node gets them as a `Record` carrying the input record's topic, partition
and offset (empty during a punctuation).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import timedelta
from typing import Any, NamedTuple, cast

from eos.errors import TopologyError
from eos.graph.graph import GraphPart
from eos.graph.nodes import ProcessorNode, SinkNode, hold_slots
from eos.graph.operators import require_functions
from eos.processor import Cancellable, Kept, Processor, ProcessorContext, PunctuationType, RecordMetadata
from eos.records import FORWARDABLE, Record, forwarded

__all__ = ["GraphProcessor", "NodeContext", "FixedKeyContext", "Emit", "DirectStep"]

#: what a node calls to pass a record on: (key, value, timestamp, headers or None for the input's)
Emit = Callable[[Any, Any, int, Any], None]


class DirectStep(NamedTuple):
    """A graph of one function between its source and its sink (`GraphProcessor.direct_step`)."""

    fn: Callable[[Record], Any]
    #: (key, value, timestamp) to the task, as the sink passes a record on
    to_sink: Callable[[Any, Any, int], None]
    #: (record, what the function returned for it): forwarded as the function's own `process` forwards it
    forward_result: Callable[[Record, Any], None]
    #: the sink's topic
    topic: str


class GraphProcessor(Processor):
    """All nodes of one sub-topology, built per task."""

    def __init__(self, part: GraphPart) -> None:
        self.part = part
        self.current: Record | None = None  # the input record being processed (None in a punctuation)
        self.processors: list[tuple[ProcessorNode, Processor]] = []

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        part = self.part
        built: dict[str, Any] = {}  # node name -> its entry: a Sink, a _ProcessorEntry or an operator's step
        contexts: list[tuple[NodeContext, Processor]] = []
        slots = hold_slots(part.processors)
        for sink in part.sinks:
            built[sink.name] = Sink(sink, context)
        for node in reversed(part.processors):  # children before parents
            kids = [built[c] for c in part.children[node.name]]
            if node.operator:
                built[node.name] = node.factory().bind([_call(k) for k in kids])
                continue
            processor = node.factory()
            fixed = node.fixed_key
            node_ctx = (FixedKeyContext if fixed else NodeContext)(
                context, self, node, dict(zip(part.children[node.name], kids, strict=True)),
                frozenset(part.stores[node.name]), slots.get(node.name, (0, 1)))
            built[node.name] = (_FixedKeyEntry if fixed else _ProcessorEntry)(processor, node_ctx, self)
            contexts.append((node_ctx, processor))
            self.processors.append((node, processor))
        self.processors.reverse()
        for node_ctx, processor in reversed(contexts):  # parents first, in the order they were added
            if isinstance(processor, Processor):  # (its context, had its init not called Processor.init)
                processor.context = node_ctx
            processor.init(node_ctx)
        self._takes: dict[str, list[Callable[[Record], None]]] = {}
        for source in part.sources:
            takes = [_take(built[c]) for c in part.children[source.name]]
            for topic in source.topics:
                self._takes[topic] = takes

    def fold_chain(self) -> tuple[Processor, Callable[[Emit], Emit] | None] | None:
        """The processor every input record reaches first and alone, directly or through a line of stateless
        operators (each with one child and no store): that processor, and how to build the line again toward
        another last step (None: no operators). None when the graph is not so (`eos.worker.folding`)."""
        part = self.part
        if len(part.sources) != 1:
            return None
        nodes = {node.name: node for node in part.processors}
        line: list[ProcessorNode] = []
        kids = part.children[part.sources[0].name]
        while len(kids) == 1 and kids[0] in nodes and nodes[kids[0]].operator and not part.stores.get(kids[0]):
            line.append(nodes[kids[0]])
            kids = part.children.get(kids[0], ())
        target = next((p for node, p in self.processors if len(kids) == 1 and node.name == kids[0]), None)
        if target is None:
            return None
        if not line:
            return target, None

        def build(last: Emit) -> Emit:
            step = last
            for node in reversed(line):
                step = node.factory().bind([step])
            return step
        return target, build

    def stateless_after(self, processor: Processor) -> bool:
        """Whether what `processor` forwards meets only stateless operators and sinks (no processor, which
        would see the input record being processed, and no store)."""
        names = [node.name for node, p in self.processors if p is processor]
        part, seen = self.part, set()
        sinks = {sink.name for sink in part.sinks}
        operators = {node.name for node in part.processors if node.operator and not part.stores.get(node.name)}
        while names:
            for child in part.children.get(names.pop(), ()):
                if child in sinks or child in seen:
                    continue
                if child not in operators:
                    return False
                seen.add(child)
                names.append(child)
        return True

    def plain_sink(self, processor: Processor) -> str | None:
        """The topic of the one sink all `processor` forwards goes to, when it has no partitioner and is not
        named; else None."""
        names = [node.name for node, p in self.processors if p is processor]
        kids = self.part.children.get(names[0], ()) if len(names) == 1 else ()
        sink = next((s for s in self.part.sinks if len(kids) == 1 and s.name == kids[0]), None)
        if sink is None or sink.partitioner is not None or sink.named:
            return None
        return sink.topic

    def sink_forward(self, processor: Processor) -> Callable[[Any, Any, int], None] | None:
        """When all `processor` forwards goes to one sink (`plain_sink`): `forward(key, value, timestamp)`
        straight to the task, as that sink passes it on."""
        topic = self.plain_sink(processor)
        if topic is None:
            return None
        emit = emitter(self.context)

        def to_sink(key: Any, value: Any, timestamp: int) -> None:
            emit(topic, key, value, None, None, timestamp)
        return to_sink

    def direct_step(self) -> DirectStep | None:
        """When the graph is a source, one function (`Application.process`) and one plain sink, as a sink that
        writes the function's topic: the function, how a (key, value) it returns reaches the task (as the sink
        passes it on), and how anything else it returns is forwarded (in the function's context, as its
        `process` forwards it). None for any other graph (`eos.worker.processing`)."""
        from eos.processor import FunctionProcessor

        part = self.part
        if len(part.sources) != 1 or len(part.processors) != 1 or len(self.processors) != 1:
            return None
        node, processor = self.processors[0]
        if (type(processor) is not FunctionProcessor or part.stores.get(node.name)
                or tuple(part.children[part.sources[0].name]) != (node.name,)):
            return None
        topic = self.plain_sink(processor)
        to_sink = self.sink_forward(processor) if topic is not None else None
        if topic is None or to_sink is None or any(s.requires_key for s in part.sinks):
            return None
        ctx = processor.context
        assert isinstance(ctx, NodeContext)
        emit = processor.emit

        def forward_result(record: Record, result: Any) -> None:
            self.current = record
            saved = ctx._ts, ctx._headers, ctx._in
            ctx._ts, ctx._headers, ctx._in = record.timestamp, None, True
            try:
                emit(result)
            finally:
                ctx._ts, ctx._headers, ctx._in = saved
        return DirectStep(processor.fn, to_sink, forward_result, topic)

    def process(self, record: Record) -> None:
        self.current = record
        for take in self._takes[record.topic]:
            take(record)

    def punctuate(self, stream_time: int) -> None:
        self.current = None
        for _, processor in self.processors:
            processor.punctuate(stream_time)

    def close(self) -> None:
        for _, processor in self.processors:
            processor.close()


def _call(entry: Any) -> Emit:
    """How a parent calls a child: a sink's or processor's `receive`, an operator's step itself."""
    return entry.receive if isinstance(entry, Sink | _ProcessorEntry) else entry


def _take(entry: Any) -> Callable[[Record], None]:
    """How a source hands an input record to a child: a processor gets the record itself."""
    if isinstance(entry, _ProcessorEntry):
        return entry.take
    call = _call(entry)
    return lambda r: call(r.key, r.value, r.timestamp, None)


#: forward to a topic, positional: (topic, key, value, partition, headers, timestamp)
ToTopic = Callable[[str, Any, Any, "int | None", Any, "int | None"], None]


def emitter(task: ProcessorContext) -> ToTopic:
    """The task's forward to a topic with positional arguments (`TaskContext.emit`: a sink's path, once per
    output, without `forward`'s keywords); for another context, its `forward`."""
    emit: ToTopic | None = getattr(task, "emit", None)
    if emit is not None:
        return emit
    forward = task.forward
    return lambda topic, key, value, partition, headers, timestamp: forward(
        key, value, topic=topic, partition=partition, headers=headers, timestamp=timestamp)


class Sink:
    """A sink: hands records to the task (`ProcessorContext.forward` to its topic)."""

    def __init__(self, node: SinkNode, task: ProcessorContext) -> None:
        self.node, self.topic, self._emit = node, node.topic, emitter(task)
        self._requires_key = node.requires_key
        self._partitioner, self._task = node.partitioner, task

    def receive(self, key: Any, value: Any, timestamp: int, headers: Any, partition: int | None = None) -> None:
        if key is None and self._requires_key:
            raise ValueError(f"a record without a key cannot be grouped (sink {self.node.name!r} to the repartition "
                             f"topic {self.topic})")
        if partition is None and self._partitioner is not None:
            count = self._task.partition_count(self.topic)  # type: ignore[attr-defined]
            partition = self._partitioner(key, value, count)  # None: murmur2 of the key, as without one
            if partition is not None and (type(partition) is not int or not 0 <= partition < count):
                raise ValueError(f"the partitioner of sink {self.node.name!r} returned {partition!r}: topic "
                                 f"{self.topic} has partitions 0 to {count - 1}")
        self._emit(self.topic, key, value, partition, headers, timestamp)


_RETURNED = ("%s.process() returned a value, which goes nowhere: a processor forwards its outputs, "
             "self.context.forward(key, value), and returns None")


class _ProcessorEntry:
    """A `Processor` node: records in as `Record`s, with its context telling it the current one's time."""

    __slots__ = ("_process", "ctx", "graph", "processor")

    def __init__(self, processor: Processor, ctx: NodeContext, graph: GraphProcessor) -> None:
        self.processor, self.ctx, self.graph, self._process = processor, ctx, graph, processor.process

    def take(self, record: Record) -> None:
        ctx = self.ctx
        saved = ctx._ts, ctx._headers, ctx._in
        ctx._ts, ctx._headers, ctx._in = record.timestamp, None, True
        try:
            if self._process(record) is not None:
                raise TypeError(_RETURNED % type(self.processor).__name__)
        finally:
            ctx._ts, ctx._headers, ctx._in = saved

    def receive(self, key: Any, value: Any, timestamp: int, headers: Any) -> None:
        src = self.graph.current
        if src is None:
            record = Record(key, value, "", -1, -1, timestamp, headers)
        else:
            record = Record(key, value, src.topic, src.partition, src.offset, timestamp,
                            src.headers if headers is None else headers)
        ctx = self.ctx
        saved = ctx._ts, ctx._headers, ctx._in
        ctx._ts, ctx._headers, ctx._in = timestamp, headers, True
        try:
            if self._process(record) is not None:
                raise TypeError(_RETURNED % type(self.processor).__name__)
        finally:
            ctx._ts, ctx._headers, ctx._in = saved


class _FixedKeyEntry(_ProcessorEntry):
    """A `process_values` node: its context knows the key of the record it is processing."""

    __slots__ = ()

    def take(self, record: Record) -> None:
        ctx = cast(FixedKeyContext, self.ctx)
        saved, ctx._key = ctx._key, record.key
        try:
            super().take(record)
        finally:
            ctx._key = saved

    def receive(self, key: Any, value: Any, timestamp: int, headers: Any) -> None:
        ctx = cast(FixedKeyContext, self.ctx)
        saved, ctx._key = ctx._key, key
        try:
            super().receive(key, value, timestamp, headers)
        finally:
            ctx._key = saved


class NodeContext(ProcessorContext):
    """A processor's view of its task: `forward` goes to its children (all, or `to=` one of them by name);
    stores are those connected to it (and global tables); the rest is the task's."""

    def __init__(self, task: ProcessorContext, graph: GraphProcessor, node: ProcessorNode, children: dict[str, Any],
                 stores: frozenset[str], hold_slot: tuple[int, int] = (0, 1)) -> None:
        self._task, self._graph, self._node = task, graph, node
        self._hold_slot = hold_slot  # (`eos.graph.nodes.hold_slots`)
        self.application_id, self.subtopology = task.application_id, task.subtopology
        self.partition, self.task_id = task.partition, task.task_id
        self.name = node.name
        self._children = children
        self._emits = [_call(c) for c in children.values() if not (isinstance(c, Sink) and c.node.named)]
        self._sinks = {c.topic: c for c in children.values() if isinstance(c, Sink)}
        self._stores = stores
        self.record_cache = getattr(task, "record_cache", None)
        self._ts: int = -1
        self._headers: Any = None
        self._in = False  # while a record is being processed by this node

    @property  # the task's, read live
    def stream_time(self) -> int:  # type: ignore[override]
        return self._task.stream_time

    @property
    def timestamp(self) -> int:  # type: ignore[override]
        return self._ts if self._in else self._task.timestamp

    def forward(self, key: Any = None, value: Any = None, *, topic: str | None = None, partition: int | None = None,
                headers: list[tuple[str, bytes]] | None = None, timestamp: int | None = None,
                to: str | None = None) -> None:
        """Pass a record to every child, or to the child named `to`; `topic=` writes it to that topic (through
        this processor's sink for it, or as one of its declared outputs). `timestamp=None`: the current
        record's (in a punctuation: the punctuation's time); `headers=None`: the current record's."""
        if value is None and type(key) in FORWARDABLE:
            key, value, topic, partition, headers, timestamp = forwarded(key, topic, partition, headers, timestamp)
        ts = timestamp if timestamp is not None else (self._ts if self._in else self._task.timestamp)
        if headers is None and self._in:
            headers = self._headers
        if topic is not None:
            sink = self._sinks.get(topic)
            if sink is None:
                raise ValueError(f"processor {self.name!r} cannot write topic {topic!r}: it has no sink for it "
                                 f"(its sinks: {sorted(self._sinks) or 'none'}); add one with add_sink(..., "
                                 f"{self.name!r})")
            sink.receive(key, value, ts, headers, partition)
            return
        if to is not None:
            child = self._children.get(to)
            if child is None:
                raise ValueError(f"processor {self.name!r} has no child {to!r}; its children: "
                                 f"{', '.join(self._children) or 'none'}")
            if partition is not None and isinstance(child, Sink):
                child.receive(key, value, ts, headers, partition)
            else:
                _call(child)(key, value, ts, headers)
            return
        if not self._emits:
            if self._node.may_be_leaf:
                return
            raise ValueError(f"processor {self.name!r} forwarded a record but has no children (add a sink or a "
                             "processor after it)")
        if partition is not None:
            if len(self._children) != 1 or not self._sinks:
                raise ValueError(f"processor {self.name!r}: partition= needs a sink as its only child")
            next(iter(self._sinks.values())).receive(key, value, ts, headers, partition)
            return
        for emit in self._emits:
            emit(key, value, ts, headers)

    def cached_headers(self) -> list[tuple[str, bytes]]:
        """The headers the current record's outputs would carry (kept by the record cache with an update)."""
        if self._in and self._headers is not None:
            return list(self._headers)
        return self._task.cached_headers()  # type: ignore[attr-defined]

    def sole_user_of(self, store: str) -> bool:
        """Whether this processor is the only one of its sub-topology connected to `store` (so none other
        reads what it writes there during a batch)."""
        return store in self._stores and not any(store in names for node, names in self._graph.part.stores.items()
                                                 if node != self.name)

    def store(self, name: str) -> Any:
        if name not in self._stores:
            try:
                found = self._task.store(name)
            except KeyError:
                found = None
            if found is None or not _is_global(self._graph, name):
                raise TopologyError(f"processor {self.name!r} is not connected to a store {name!r}; its stores: "
                                    f"{sorted(self._stores) or 'none'} (connect one with add_state_store(spec, "
                                    f"{self.name!r}), connect_processor_and_state_stores, or process(..., "
                                    f"connect=[{name!r}]))", task=self.task_id)
            return found
        return self._task.store(name)

    def commit(self) -> None:
        self._task.commit()

    def schedule(self, interval: int | timedelta, callback: Callable[[int], None],
                 type: PunctuationType = "stream") -> Cancellable:
        graph = self._graph
        # (before it is wrapped)
        require_functions(f"{self.name}: schedule", callback=callback, takes={"callback": ("timestamp",)})

        @functools.wraps(callback)
        def punctuation(timestamp: int) -> None:
            graph.current = None
            callback(timestamp)

        return self._task.schedule(interval, punctuation, type)

    def record_metadata(self) -> RecordMetadata | None:
        return self._task.record_metadata()

    def record_dropped(self, reason: str) -> None:
        self._task.record_dropped(reason, self.name)  # type: ignore[call-arg]  # (the task's context: TaskContext)

    def hold(self) -> Kept:
        return self._task.hold(*self._hold_slot)  # type: ignore[call-arg]  # (the task's context: TaskContext)

    def release(self, kept: Kept | None, run: Callable[[], None]) -> None:
        graph = self._graph

        def in_its_scope() -> None:  # (what this node's children are given names the record let go)
            graph.current = None if kept is None else Record(None, None, kept[0], kept[1], kept[2], kept[6],
                                                             kept[5] or None)
            run()
        self._task.release(kept, in_its_scope)


class FixedKeyContext(NodeContext):
    """The context of a `process_values` node (Kafka Streams' `FixedKeyProcessor`): what it forwards while it
    processes a record keeps that record's key; another key is an error (the record goes to the dead-letter
    topic), since the records after it are not repartitioned. In a punctuation it forwards what it kept, keyed
    as its task's records were."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._key: Any = None

    def forward(self, key: Any = None, value: Any = None, **kwargs: Any) -> None:
        given = key.key if value is None and type(key) in FORWARDABLE else key
        if self._in and given is not self._key and given != self._key:
            raise ValueError(f"processor {self.name!r} (process_values) forwarded the key {given!r} for a "
                             f"record keyed {self._key!r}: it may change values, not keys (nothing after it is "
                             "repartitioned); use process() to key records anew")
        super().forward(key, value, **kwargs)


def _is_global(graph: GraphProcessor, name: str) -> bool:
    return any(getattr(g, "name", None) == name for p in graph.part.processors for g in p.global_tables)
