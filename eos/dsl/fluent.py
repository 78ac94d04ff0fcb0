"""The fluent DSL (Kafka Streams' `StreamsBuilder`/`KStream`, Quix's `StreamingDataFrame`), a surface over
the processor graph: every call adds nodes, and the graph is cut into sub-topologies only at topics, so

    app.stream("clicks").filter(lambda k, v: v["ok"]).map_values(enrich).group_by_key() \\
       .window(TumblingWindows(60_000)).count().to_stream().to("clicks-per-minute")

is one sub-topology: one task per partition, one transaction per batch, no topic between the steps. A key
change (`map`, `select_key`, `flat_map`, `process`, `group_by`) followed by a stateful step (an aggregation,
a join) inserts a repartition topic there, and only there.

Names: every node gets one (`<kind>-<n>`, n its position in the graph) unless `name=` pins it. Stores and
internal topics are named after their step, so pin the names of stateful steps: a generated name shifts
when a step is added before it, and its state would start empty under the new name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from eos.dsl.base import first_topic, no_such_step
from eos.graph import ProcessorNode, SinkNode, SourceNode
from eos.graph.operators import (
    Branch,
    Filter,
    FlatMap,
    FlatMapValues,
    Map,
    MapValues,
    PassThrough,
    Peek,
    Route,
    SelectKey,
    require_functions,
)
from eos.operators.windows import LatePolicy
from eos.serde import Serde, serde_for
from eos.tables import GlobalTable, JoinKind, JoinWindows, history_retention
from eos.time import RECORD_TIME
from eos.windows import WindowedSerde
from recovery import StoreSpec

if TYPE_CHECKING:
    from eos.dsl.grouped import GroupedStream
    from eos.dsl.processor_api import GraphMethods
    from eos.dsl.tables import Table

__all__ = ["Stream", "BranchedStream", "Const"]


class Const:
    """A node factory that returns the same (stateless) operator every time; picklable."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __call__(self) -> Any:
        return self.value


_GROUP_FIRST = ("a stream is grouped before it is aggregated or windowed, as in Kafka Streams: "
                "stream.group_by_key().{0}(...), or stream.group_by(fn).{0}(...) to key it anew")
_STREAM_HINTS = {**{step: _GROUP_FIRST.format(step) for step in ("count", "aggregate", "reduce", "sum", "cogroup")},
                 **{step: _GROUP_FIRST.format("window") + " (a window, e.g. TumblingWindows(60_000), then the "
                    "aggregation)" for step in ("window", "windowed_by", "windowedBy")},
                 "apply": "map_values(fn) gives fn the value, map(fn) the key and the value",
                 "print": "peek(lambda key, value: print(key, value)) prints each record and passes it on (a "
                          "retried batch prints it again)",
                 **dict.fromkeys(("transform", "flatTransform", "transformValues", "flatTransformValues"),
                                 "Kafka Streams' transform steps are process(ProcessorClass) here (process_values "
                                 "for one that keeps keys, as processValues)"),
                 "branch": "split().branch(predicate, name=...)...default_branch() returns the branches by name, as "
                           "Kafka Streams' split()",
                 "suppress": "suppress holds a table's updates back, as in Kafka Streams: aggregate first "
                             "(stream.group_by_key().count().suppress(time_limit)), or stream.to_table().suppress(...)"}


class Stream:
    """Records flowing out of one node of the graph. Methods add a node after it and return the stream
    of that node's output (`to` ends it)."""

    def __init__(self, app: GraphMethods, node: str, key_serde: Serde, value_serde: Serde, topics: tuple[str, ...],
                 rekeyed: bool = False, changed_value_serde: Serde | None = None) -> None:
        self.app, self.node = app, node
        self.key_serde, self.value_serde = key_serde, value_serde
        #: the value serde once a step changes the values, when the framework chose this one (a count's long):
        #: None keeps it
        self.changed_value_serde = changed_value_serde
        #: the topics its records were last read from (a repartition topic's partition count follows them)
        self.topics = topics
        #: its key is no longer the one its records were partitioned by
        self.rekeyed = rekeyed

    def __repr__(self) -> str:
        return f"Stream({self.node!r})"

    def __getattr__(self, name: str) -> Any:  # (only for what the class has not)
        raise no_such_step(Stream, name, _STREAM_HINTS)

    def _then(self, kind: str, operator: Any, name: str | None, changes_key: bool = False,
              changes_value: bool = False) -> Stream:
        node = self.app.graph.add(ProcessorNode(self.app.node_name(kind, name), (self.node,), Const(operator),
                                                kind=kind, operator=True))
        return self._after(node.name, changes_key, changes_value)

    def _after(self, node: str, changes_key: bool, changes_value: bool) -> Stream:
        """The stream of `node`, a step after this one that may change the keys or the values. A serde the
        framework chose for an aggregation's results holds only while the step keeps that part, as in Kafka
        Streams, where a step that changes it leaves the result's serde for the default: a window's key
        changed is the grouping's key serde again (`map(lambda window, n: (window.key, n))`), a count changed
        is JSON (`map_values(lambda n: {"views": n})`). A serde the job gave is kept."""
        ks = self.key_serde.inner if changes_key and isinstance(self.key_serde, WindowedSerde) else self.key_serde
        vs, changed = self.value_serde, self.changed_value_serde
        if changes_value and changed is not None:
            vs, changed = changed, None
        return Stream(self.app, node, ks, vs, self.topics, self.rekeyed or changes_key, changed)

    # ------------------------------------------------------------------ stateless
    def filter(self, predicate: Callable[[Any, Any], Any], *, name: str | None = None) -> Stream:
        """The records for which `predicate(key, value)` is true."""
        return self._then("filter", Filter(predicate), name)

    def filter_not(self, predicate: Callable[[Any, Any], Any], *, name: str | None = None) -> Stream:
        """The records for which `predicate(key, value)` is false."""
        return self._then("filter_not", Filter(predicate, negate=True), name)

    def map(self, fn: Callable[[Any, Any], tuple[Any, Any]], *, name: str | None = None) -> Stream:
        """`fn(key, value) -> (key, value)`: a new key too (a stateful step after it repartitions)."""
        return self._then("map", Map(fn), name, changes_key=True, changes_value=True)

    def map_values(self, fn: Callable[[Any], Any], *, name: str | None = None) -> Stream:
        """`fn(value) -> value`, the key kept."""
        return self._then("map_values", MapValues(fn), name, changes_value=True)

    def flat_map(self, fn: Callable[[Any, Any], Iterable[tuple[Any, Any]]], *, name: str | None = None) -> Stream:
        """`fn(key, value) -> iterable of (key, value)`."""
        return self._then("flat_map", FlatMap(fn), name, changes_key=True, changes_value=True)

    def flat_map_values(self, fn: Callable[[Any], Iterable[Any]], *, name: str | None = None) -> Stream:
        """`fn(value) -> iterable of values`, each with the record's key."""
        return self._then("flat_map_values", FlatMapValues(fn), name, changes_value=True)

    def peek(self, fn: Callable[[Any, Any], Any], *, name: str | None = None) -> Stream:
        """Call `fn(key, value)` and pass the record on (a retried batch calls it again)."""
        return self._then("peek", Peek(fn), name)

    def foreach(self, fn: Callable[[Any, Any], Any], *, name: str | None = None) -> None:
        """Call `fn(key, value)` for each record, and end the stream there (Kafka Streams' `foreach`). What `fn`
        does outside Kafka is not exactly-once: a retried batch calls it again."""
        self._then("foreach", Peek(fn), name)

    def select_key(self, fn: Callable[[Any, Any], Any], *, name: str | None = None) -> Stream:
        """`fn(key, value) -> new key`."""
        return self._then("select_key", SelectKey(fn), name, changes_key=True)

    def split(self, *, name: str | None = None) -> BranchedStream:
        """Route each record to the first branch whose predicate holds (Kafka Streams' `split`):
        `.split().branch(p1, name="a").branch(p2, name="b").default_branch(name="rest")` returns {"a": stream,
        "b": ..., "rest": ...}; `split(name="route-")` prefixes each key ("route-a"), a branch without a name is
        its position ("1", "2", ...; the default branch "0")."""
        return BranchedStream(self, self.app.node_name("split", name), name or "")

    def merge(self, *others: Stream, name: str | None = None) -> Stream:
        """One stream of this one's records and the others' (each keeps its order), with this one's serdes. When the
        others' values have serdes of other kinds, a step that changes the values (`map_values` to one form)
        writes JSON after it, as Kafka Streams' merged stream has the default serdes."""
        streams = (self, *others)
        node = self.app.graph.add(ProcessorNode(self.app.node_name("merge", name), tuple(s.node for s in streams),
                                                Const(PassThrough("merge")), kind="merge", operator=True))
        topics = tuple(dict.fromkeys(t for s in streams for t in s.topics))
        mixed = any(type(s.value_serde) is not type(self.value_serde) for s in others)
        return Stream(self.app, node.name, self.key_serde, self.value_serde, topics, any(s.rekeyed for s in streams),
                      serde_for("json") if mixed else self.changed_value_serde)

    # ------------------------------------------------------------------ the Processor API
    def process(self, processor: Callable[[], Any], *, name: str | None = None, stores: Iterable[StoreSpec] = (),
                connect: Iterable[str] = ()) -> Stream:
        """A `eos.Processor` (made per task by `processor()`, e.g. its class), with `stores` declared for it and
        the already declared stores `connect` shared with it; what it forwards is the returned stream.
        It may schedule punctuation; its output may be keyed anew (an aggregation or a join after it goes
        through a repartition topic first: `process_values` when it keeps keys)."""
        return self._processor("process", processor, name, stores, connect, fixed_key=False)

    def process_values(self, processor: Callable[[], Any], *, name: str | None = None,
                       stores: Iterable[StoreSpec] = (), connect: Iterable[str] = ()) -> Stream:
        """`process` for a processor that changes values, never keys (Kafka Streams' `processValues`): what it
        forwards while it processes a record keeps that record's key (another key is an error: the record
        goes to the dead-letter topic), so an aggregation or a join after it needs no repartition topic."""
        return self._processor("process_values", processor, name, stores, connect, fixed_key=True)

    def _processor(self, kind: str, processor: Callable[[], Any], name: str | None, stores: Iterable[StoreSpec],
                   connect: Iterable[str], *, fixed_key: bool) -> Stream:
        graph, label = self.app.graph, getattr(processor, "__name__", type(processor).__name__)
        try:  # (a class is checked by the graph, which calls it with no arguments too)
            require_functions(kind, processor=processor, takes={} if isinstance(processor, type) else {"processor": ()})
        except TypeError as exc:
            raise TypeError(f"{exc}. {kind} takes a Processor class (or a function of no arguments that makes one); "
                            "a function of each record is map_values(fn), flat_map(fn) or filter(fn)") from None
        given: object = stores  # (what a caller gives may not be what it says)
        if isinstance(given, StoreSpec | str) or not isinstance(given, Iterable):
            raise TypeError(f"{kind}: stores= takes a list of stores, stores=[store(...)], got {stores!r:.80}")
        node = graph.add(ProcessorNode(self.app.node_name(kind, name), (self.node,), processor,
                                       kind=f"Processor API ({label}{', values' if fixed_key else ''})",
                                       may_punctuate=True, fixed_key=fixed_key))
        for spec in stores:
            graph.add_store(spec, [node.name])
        graph.connect([node.name], connect)
        return self._after(node.name, changes_key=not fixed_key, changes_value=True)

    # ------------------------------------------------------------------ topics
    def to(self, topic: str | Callable[[Any, Any], str], *, topics: Iterable[str] | None = None,
           key_serde: Serde | str | None = None, value_serde: Serde | str | None = None, name: str | None = None,
           partitioner: Callable[[Any, Any, int], int | None] | None = None) -> None:
        """Write the records to `topic` (in the batch's transaction), with the stream's serdes unless given;
        `partitioner(key, value, partitions) -> partition` chooses each record's partition (None, or no
        partitioner: murmur2 of the serialized key, as the Java client). `topic` may be a function,
        `topic(key, value) -> topic name`, choosing each record's topic among `topics` (Kafka Streams'
        `TopicNameExtractor`; given, so that start-up checks they exist and the audit reads them): a topic not
        among them sends the record to the dead-letter topic."""
        ks, vs = serde_for(key_serde, self.key_serde), serde_for(value_serde, self.value_serde)
        if isinstance(topic, str):
            if topics is not None:
                raise TypeError(f"to({topic!r}, topics=...): topics= goes with a function choosing each record's "
                                "topic, to(lambda key, value: ..., topics=[...]); a fixed topic is to(topic)")
            self.app.graph.add(SinkNode(self.app.node_name(f"{topic}.sink", name, numbered=False), topic,
                                        (self.node,), ks, vs, partitioner=partitioner))
            return
        if not callable(topic):
            raise TypeError(f"to() takes a topic's name or a function of (key, value) choosing one, got {topic!r}")
        if topics is None or isinstance(topics, str):
            raise TypeError("to(fn) chooses each record's topic among topics=[...]: name them, e.g. to(lambda key, "
                            "value: f\"events-{value['region']}\", topics=[\"events-eu\", \"events-us\"]) (start-up "
                            "checks they exist and the audit reads them)")
        chosen = tuple(topics)
        if not chosen or len(set(chosen)) != len(chosen) or not all(isinstance(t, str) for t in chosen):
            raise ValueError(f"to(fn, topics=...) takes distinct topic names, at least one; got {list(chosen)}")
        route = self.app.graph.add(ProcessorNode(self.app.node_name("to", name), (self.node,),
                                                 Const(Route(topic, chosen)), kind="route", operator=True))
        for t in chosen:
            self.app.graph.add(SinkNode(self.app.node_name(f"{t}.sink", None, numbered=False), t, (route.name,),
                                        ks, vs, partitioner=partitioner))

    def through(self, topic: str, *, key_serde: Serde | str | None = None, value_serde: Serde | str | None = None,
                name: str | None = None, partitioner: Callable[[Any, Any, int], int | None] | None = None) -> Stream:
        """Write the records to `topic` and go on from what is read back: a new sub-topology starts there."""
        ks, vs = serde_for(key_serde, self.key_serde), serde_for(value_serde, self.value_serde)
        self.to(topic, key_serde=ks, value_serde=vs, name=name, partitioner=partitioner)
        read = self.app.stream(topic, key_serde=ks, value_serde=vs, timestamp=RECORD_TIME)
        read.changed_value_serde = None if value_serde else self.changed_value_serde
        return read

    def repartition(self, *, name: str | None = None, partitions: int | None = None,
                    key_serde: Serde | str | None = None, value_serde: Serde | str | None = None) -> Stream:
        """Through the internal topic `<application_id>-<name>-repartition` (created at start-up with
        `partitions`, default as many as the stream's input has; records deleted once consumed), so each
        key's records are in one task."""
        return self._repartitioned(self.app.node_name("repartition", name), partitions, None, key_serde, value_serde)

    def keyed(self, name: str, *, like: str | None = None, key_serde: Serde | None = None,
              value_serde: Serde | None = None) -> Stream:
        """This stream, or, after a key change, this stream through a repartition topic named after `name`
        (with as many partitions as the topic `like`, by default as its input), written and read with
        `key_serde` and `value_serde` (a grouping's: Kafka Streams' `Grouped`), by default the stream's."""
        return self._repartitioned(name, None, like, key_serde, value_serde) if self.rekeyed else self

    def _repartitioned(self, name: str, partitions: int | None, like: str | None, key_serde: Serde | str | None,
                       value_serde: Serde | str | None) -> Stream:
        from eos.dsl.base import InternalTopic

        app = self.app
        topic = app.internal_name(name, "repartition")
        likes = None if partitions else like or self.topics or None
        # (read by a topic pattern: sized like the widest topic it matches as well, known once matched)
        pattern = None if partitions or like else next(iter(app.graph.pattern_sources(self.node)), None)
        app.internal_topics[topic] = InternalTopic(topic, partitions, like=likes, purge=True, like_source=pattern)
        ks, vs = serde_for(key_serde, self.key_serde), serde_for(value_serde, self.value_serde)
        app.graph.add(SinkNode(f"{name}-repartition.sink", topic, (self.node,), ks, vs, requires_key=True))
        source = app.graph.add(SourceNode(f"{name}-repartition.source", (topic,), ks, vs, RECORD_TIME))
        return Stream(app, source.name, ks, vs, (topic,), changed_value_serde=None if value_serde else
                      self.changed_value_serde)

    def to_table(self, *, name: str | None = None, versioned: int | timedelta | None = None) -> Table:
        """This stream as a table (Kafka Streams' `toTable`): each record is the new row of its key, a record
        whose value is None deletes the row. After a key change its records go through the repartition topic
        `<application_id>-<name>-repartition` first. It keeps no store of its own: a join or an aggregation of
        it keeps the rows it needs in its own (`versioned=history retention`: versioned stores, as
        `app.table(versioned=...)`)."""
        from eos.dsl.tables import Table

        app = self.app
        name = app.node_name("to_table", name)
        keyed = self.keyed(name)
        node = app.graph.add(ProcessorNode(name, (keyed.node,), Const(PassThrough("to_table")), kind="to_table",
                                           operator=True))
        return Table(app, keyed.key_serde, keyed.value_serde, keyed.topics, node=node.name,
                     history_retention_ms=history_retention(versioned, f"to_table {name!r}"))

    # ------------------------------------------------------------------ grouping
    def group_by_key(self, *, key_serde: Serde | str | None = None,
                     value_serde: Serde | str | None = None) -> GroupedStream:
        """Group by the current key (repartitioned first if the key was changed) for an aggregation."""
        from eos.dsl.grouped import GroupedStream

        return GroupedStream(self, serde_for(key_serde, self.key_serde), serde_for(value_serde, self.value_serde))

    def group_by(self, fn: Callable[[Any, Any], Any], *, key_serde: Serde | str | None = None,
                 value_serde: Serde | str | None = None, name: str | None = None) -> GroupedStream:
        """Group by `fn(key, value)` (records are repartitioned by it before the aggregation)."""
        require_functions("group_by", key_selector=fn, takes={"key_selector": ("key", "value")})
        return self._then("group_by", SelectKey(_required_key(fn)), name, changes_key=True).group_by_key(
            key_serde=key_serde, value_serde=value_serde)

    # ------------------------------------------------------------------ joins
    def join(self, other: Stream | Table | GlobalTable, joiner: Callable[[Any, Any], Any], *in_order: Any,
             windows: JoinWindows | None = None, key: Callable[[Any, Any], Any] | None = None,
             name: str | None = None, how: JoinKind = "inner", late_records: LatePolicy = "drop",
             persistent: bool = True, value_serde: Serde | str = "json",
             grace: int | timedelta | None = None) -> Stream:
        """Join with a table (`app.table`, an aggregation's result, a filtered or joined table: each record
        with the table's current value for its key), a global table (`key(key, value)` gives the table key)
        or another stream (`windows=JoinWindows(...)`); `joiner(left value, right value)` makes the output
        value. Keyed sides are repartitioned first if their key was changed. `grace=` (a versioned table):
        hold each record back until the stream's time has passed it by that long, then join it as of its
        timestamp (Kafka Streams' KIP-923: `app.join`). Kafka Streams' order of arguments is taken too:
        `join(stream, joiner, JoinWindows(...))` and `join(global_table, key_selector, joiner)`."""
        from eos.dsl.joins import _kind
        from eos.dsl.tables import Table

        if in_order:
            joiner, windows, key = _in_kafka_streams_order(other, joiner, in_order, windows, key)
        app = self.app
        name = app.node_name("join", name)
        if key is not None:  # the joiner is checked by the join step, the key here before it is wrapped
            require_functions(f"join {name!r}", key=key, takes={"key": ("key", "value")})
        right: Any = (first_topic(other.topics, f"join {name!r}") if isinstance(other, Stream) else
                      other.spec if isinstance(other, Table) else other)
        kind = _kind(first_topic(self.topics, f"join {name!r}"), right, windows)
        if kind == "stream-global":
            assert isinstance(other, GlobalTable)
            if key is None:
                raise ValueError(f"join {name!r}: a global table join needs key=fn(key, value) -> the table's key")
            step = app.join_step(name, kind, self.topics[0], other, joiner, how, windows, _record_key_of(key),
                                 self.key_serde, self.value_serde, self.value_serde, None, late_records, persistent,
                                 frozenset(self.topics), grace=grace)
            parents: tuple[str, ...] = (self.node,)
        else:
            if key is not None:
                raise ValueError(f"join {name!r}: key= is for global table joins; re-key the stream with "
                                 "select_key or map first")
            left = self.keyed(f"{name}-left")
            if isinstance(other, Stream):
                other = other.keyed(f"{name}-right")
                right = first_topic(other.topics, f"join {name!r}")
            else:
                assert isinstance(other, Table)
                other._joinable(name)
            if set(other.topics) & set(left.topics):
                both = sorted(set(other.topics) & set(left.topics))
                raise ValueError(f"join {name!r}: both sides read {both}; " + (
                    "a stream joined with itself needs one side through a topic (repartition())"
                    if isinstance(other, Stream) else
                    "a stream joined with the table of its own topic: a record with its key's value before it is "
                    "an aggregate, stream.group_by_key().aggregate(...) (or a store of a process() step); or read "
                    "one side through a topic (repartition())"))
            first = first_topic(left.topics, f"join {name!r}")
            step = app.join_step(name, kind, first, right, joiner, how, windows, None, left.key_serde,
                                 left.value_serde, other.value_serde, None, late_records, persistent,
                                 frozenset(left.topics), frozenset(other.topics), grace=grace)
            parents = (left.node, other.node)
        node = app.graph.add(ProcessorNode(name, parents, step.factory, kind=f"{kind} join ({how})",
                                           join=step.spec, global_tables=step.global_tables))
        for spec in step.stores:
            app.graph.add_store(spec, [node.name])
        return Stream(app, node.name, step.key_serde, serde_for(value_serde), self.topics)

    def left_join(self, other: Stream | Table | GlobalTable, joiner: Callable[[Any, Any], Any], *in_order: Any,
                  **kwargs: Any) -> Stream:
        """`join(..., how="left")`: every left record, joined with None when there is no partner."""
        return self.join(other, joiner, *in_order, how="left", **kwargs)

    def outer_join(self, other: Stream, joiner: Callable[[Any, Any], Any], *in_order: Any, **kwargs: Any) -> Stream:
        """`join(..., how="outer")` of two streams: partnerless records of either side, once, with None."""
        return self.join(other, joiner, *in_order, how="outer", **kwargs)


def _in_kafka_streams_order(other: Any, first: Any, rest: tuple[Any, ...], windows: JoinWindows | None,
                            key: Callable[[Any, Any], Any] | None,
                            ) -> tuple[Callable[[Any, Any], Any], JoinWindows | None, Any]:
    """(joiner, windows, key) of a join given Kafka Streams' positional arguments after the other side: a
    stream's `JoinWindows` after the joiner, or a global table's key selector before the joiner; anything else
    is a TypeError saying what to write."""
    if len(rest) == 1 and isinstance(rest[0], JoinWindows) and windows is None:
        return first, rest[0], key
    if len(rest) == 1 and isinstance(other, GlobalTable) and callable(rest[0]) and key is None:
        return rest[0], windows, first
    raise TypeError(f"join takes the other side and the joiner, then keywords: windows=JoinWindows(...) for a "
                    f"stream, key=fn(key, value) for a global table (or Kafka Streams' order: join(stream, joiner, "
                    f"JoinWindows(...)), join(global_table, key_selector, joiner)); got {len(rest)} more "
                    f"argument{'s' if len(rest) > 1 else ''}: {', '.join(repr(r) for r in rest)[:200]}")


class BranchedStream:
    """`stream.split()`: branches added in order; a record goes to the first whose predicate holds. The streams
    are returned by name, as Kafka Streams' `BranchedKStream` forms its map: the split's name (if given) and
    the branch's name, or its position ("1", "2", ...; "0" for the default branch); a branch given `chain=`
    is in it as what the function returned (not at all for None)."""

    def __init__(self, stream: Stream, name: str, prefix: str = "") -> None:
        self.stream, self.name, self.prefix = stream, name, prefix
        self._predicates: list[Callable[[Any, Any], Any] | None] = []
        self._branches: dict[str, Stream] = {}
        self._labels: set[str] = set()  # (every branch's, those a chain left out of the map too)
        self._node: str | None = None

    def branch(self, predicate: Callable[[Any, Any], Any], *, name: str | None = None,
               chain: Callable[[Stream], Stream | None] | None = None) -> BranchedStream:
        """The records `predicate(key, value)` takes of those no branch before took; `chain(stream)` (Kafka
        Streams' `Branched.withFunction`/`withConsumer`) adds steps to the branch where it is declared, and
        what it returns (a stream, or None) is the branch's entry."""
        require_functions(f"split {self.name!r}", predicate=predicate, takes={"predicate": ("key", "value")})
        self._add(predicate, name, chain)
        return self

    def default_branch(self, *, name: str | None = None,
                       chain: Callable[[Stream], Stream | None] | None = None) -> dict[str, Stream]:
        """The records no branch took; returns every branch by name."""
        self._add(None, name, chain)
        return dict(self._branches)

    def no_default_branch(self) -> dict[str, Stream]:
        """Records no branch took are dropped; returns every branch by name."""
        return dict(self._branches)

    def _add(self, predicate: Callable[[Any, Any], Any] | None, name: str | None,
             chain: Callable[[Stream], Stream | None] | None) -> None:
        graph, stream = self.stream.app.graph, self.stream
        if None in self._predicates:
            raise ValueError(f"split {self.name!r}: the default branch must be the last")
        if chain is not None:
            require_functions(f"split {self.name!r}", chain=chain, takes={"chain": ("stream",)})
        if self._node is None:
            graph.add(ProcessorNode(self.name, (stream.node,), _Branches(self._predicates), kind="split",
                                    operator=True))
            self._node = self.name
        label = self.prefix + (name or str(0 if predicate is None else len(self._predicates) + 1))
        if label in self._labels:
            raise ValueError(f"split {self.name!r} already has a branch {label!r}")
        self._predicates.append(predicate)
        self._labels.add(label)
        node = graph.add(ProcessorNode(label if self.prefix else f"{self.name}-{label}", (self.name,),
                                       Const(PassThrough("branch")), kind="branch", operator=True))
        branch = stream._after(node.name, changes_key=False, changes_value=False)
        if chain is None:
            self._branches[label] = branch
            return
        chained = chain(branch)
        if chained is not None:
            if not isinstance(chained, Stream):
                raise TypeError(f"split {self.name!r}: the chain of branch {label!r} returns a stream (or None), "
                                f"got {type(chained).__name__}")
            self._branches[label] = chained


class _Branches:
    """The split's operator, made when a task starts (after every branch was added)."""

    def __init__(self, predicates: list[Callable[[Any, Any], Any] | None]) -> None:
        self.predicates = predicates

    def __call__(self) -> Branch:
        return Branch(tuple(self.predicates))


def _required_key(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def key_of(key: Any, value: Any) -> Any:
        new = fn(key, value)
        if new is None:
            raise ValueError("group_by returned None: a record without a key cannot be grouped")
        return new
    return key_of


def _record_key_of(fn: Callable[[Any, Any], Any]) -> Callable[[Any], Any]:
    """A global table join's key function over (key, value), as the join processor calls it (with a Record)."""
    def key_of(record: Any) -> Any:
        return fn(record.key, record.value)
    return key_of

