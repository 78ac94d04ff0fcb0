"""The DSL's stateless operators, run as plain functions between a task's processors.

Each operator is a small spec whose `bind(children)` returns the step called per record,
`step(key, value, timestamp, headers)`, which calls its children zero or more times. No `Record` is built
and no context is consulted: `stream.filter(...).map_values(...)` costs a function call per operator. The
same steps replay a recorded input outside a task (the window audit of a fused sub-topology does), since
they keep no state.

User functions follow Kafka Streams' signatures: predicates, `map`, `flat_map`, `select_key` and `peek`
take `(key, value)`; `map_values` and `flat_map_values` take the value.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Filter", "Map", "MapValues", "FlatMap", "FlatMapValues", "Peek", "SelectKey", "Branch", "Route",
           "PassThrough",
           "Cogrouped", "OperatorPaths", "TARGET", "Operator", "fan_out", "require_functions"]

Emit = Callable[[Any, Any, int, Any], None]


def require_functions(step: str, *, takes: Mapping[str, Sequence[str]] | None = None, **functions: Any) -> None:
    """Refuse, where the topology is built, what is not callable among a step's `functions` (by their role), and
    a function that cannot be called with the arguments `takes` names for its role (a predicate written
    `lambda v: ...` where the step calls it with the key and the value), so that the mistake stops the build
    instead of sending every record to the dead-letter topic. A callable whose signature Python cannot tell
    (some built-ins) is taken as it is."""
    for role, fn in functions.items():
        if not callable(fn):
            raise TypeError(f"{step}: {role} must be a function (callable), got {fn!r} of type "
                            f"{type(fn).__name__}")
        arguments = (takes or {}).get(role)
        if arguments is None:
            continue
        try:
            signature = inspect.signature(fn, follow_wrapped=False)  # (what is called: a wrapper)
        except (TypeError, ValueError):
            continue
        try:
            signature.bind(*arguments)
        except TypeError as exc:
            own = getattr(fn, "__name__", type(fn).__name__)
            raise TypeError(f"{step}: {role} is called as {role}({', '.join(arguments)}), which {own}{signature} "
                            f"cannot take ({exc}); give it a function of {len(arguments)} argument"
                            f"{'' if len(arguments) == 1 else 's'}") from None


class _OfOneFunction:
    """An operator that calls the user's `fn`: refused where it is added unless `fn` is callable."""

    kind: str
    fn: Callable[..., Any]
    takes: tuple[str, ...] = ("key", "value")  # what `fn` is called with

    def __post_init__(self) -> None:
        require_functions(self.kind, fn=self.fn, takes={"fn": self.takes})


def fan_out(children: Sequence[Emit]) -> Emit:
    """One callable that passes a record to every child."""
    if len(children) == 1:
        return children[0]
    if not children:
        return _nowhere
    kids = tuple(children)

    def emit(key: Any, value: Any, timestamp: int, headers: Any) -> None:
        for child in kids:
            child(key, value, timestamp, headers)

    return emit


def _nowhere(key: Any, value: Any, timestamp: int, headers: Any) -> None:
    pass


@dataclass(frozen=True)
class Filter:
    """Keep the records for which `predicate(key, value)` is true (`negate`: false)."""

    predicate: Callable[[Any, Any], Any]
    negate: bool = False
    kind = "filter"

    def __post_init__(self) -> None:
        require_functions(self.kind, predicate=self.predicate, takes={"predicate": ("key", "value")})

    def bind(self, children: Sequence[Emit]) -> Emit:
        test, emit = self.predicate, fan_out(children)
        if self.negate:
            def step_not(key: Any, value: Any, timestamp: int, headers: Any) -> None:
                if not test(key, value):
                    emit(key, value, timestamp, headers)
            return step_not

        def step(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            if test(key, value):
                emit(key, value, timestamp, headers)
        return step


@dataclass(frozen=True)
class Map(_OfOneFunction):
    """`fn(key, value) -> (new key, new value)`."""

    fn: Callable[[Any, Any], tuple[Any, Any]]
    kind = "map"

    def bind(self, children: Sequence[Emit]) -> Emit:
        fn, emit = self.fn, fan_out(children)

        def step(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            new_key, new_value = _pair(fn(key, value), "map")
            emit(new_key, new_value, timestamp, headers)
        return step


@dataclass(frozen=True)
class MapValues(_OfOneFunction):
    """`fn(value) -> new value` (the key is kept: no repartitioning needed after it)."""

    fn: Callable[[Any], Any]
    kind = "map_values"
    takes = ("value",)

    def bind(self, children: Sequence[Emit]) -> Emit:
        fn, emit = self.fn, fan_out(children)

        def step(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            emit(key, fn(value), timestamp, headers)
        return step


@dataclass(frozen=True)
class FlatMap(_OfOneFunction):
    """`fn(key, value) -> iterable of (key, value)`."""

    fn: Callable[[Any, Any], Iterable[tuple[Any, Any]]]
    kind = "flat_map"

    def bind(self, children: Sequence[Emit]) -> Emit:
        fn, emit = self.fn, fan_out(children)

        def step(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            for pair in _iterable(fn(key, value), "flat_map"):
                new_key, new_value = _pair(pair, "flat_map")
                emit(new_key, new_value, timestamp, headers)
        return step


@dataclass(frozen=True)
class FlatMapValues(_OfOneFunction):
    """`fn(value) -> iterable of values`, each with the record's key."""

    fn: Callable[[Any], Iterable[Any]]
    kind = "flat_map_values"
    takes = ("value",)

    def bind(self, children: Sequence[Emit]) -> Emit:
        fn, emit = self.fn, fan_out(children)

        def step(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            for item in _iterable(fn(value), "flat_map_values"):
                emit(key, item, timestamp, headers)
        return step


@dataclass(frozen=True)
class Peek(_OfOneFunction):
    """`fn(key, value)` for its side effect; the record passes unchanged (side effects are not exactly-once:
    a retried batch calls it again)."""

    fn: Callable[[Any, Any], Any]
    kind = "peek"

    def bind(self, children: Sequence[Emit]) -> Emit:
        fn, emit = self.fn, fan_out(children)

        def step(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            fn(key, value)
            emit(key, value, timestamp, headers)
        return step


@dataclass(frozen=True)
class SelectKey(_OfOneFunction):
    """`fn(key, value) -> new key`."""

    fn: Callable[[Any, Any], Any]
    kind = "select_key"

    def bind(self, children: Sequence[Emit]) -> Emit:
        fn, emit = self.fn, fan_out(children)

        def step(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            emit(fn(key, value), value, timestamp, headers)
        return step


@dataclass(frozen=True)
class Branch:
    """Each record to the first branch whose predicate holds (None: the default branch, taking the rest);
    records no branch takes are dropped. Children are the branches, in order."""

    predicates: tuple[Callable[[Any, Any], Any] | None, ...]
    kind = "split"

    def bind(self, children: Sequence[Emit]) -> Emit:
        routes = tuple(zip(self.predicates, children, strict=True))

        def step(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            for test, child in routes:
                if test is None or test(key, value):
                    child(key, value, timestamp, headers)
                    return
        return step


@dataclass(frozen=True)
class Route:
    """Each record to the topic `topic_of(key, value)` chooses, one of `topics` (Kafka Streams'
    `TopicNameExtractor`): the children are the topics' sinks, in their order. A topic not among them is the
    record's error (a dead letter), saying which."""

    topic_of: Callable[[Any, Any], Any]
    topics: tuple[str, ...]
    kind = "route"

    def __post_init__(self) -> None:
        require_functions("to", topic_of=self.topic_of, takes={"topic_of": ("key", "value")})

    def bind(self, children: Sequence[Emit]) -> Emit:
        topic_of, topics = self.topic_of, self.topics
        sinks = dict(zip(topics, children, strict=True))

        def step(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            topic = topic_of(key, value)
            sink = sinks.get(topic) if isinstance(topic, str) else None
            if sink is None:
                raise ValueError(f"to(): the topic chosen for this record, {topic!r:.80}, is not one of topics="
                                 f"{list(topics)}")
            sink(key, value, timestamp, headers)
        return step


@dataclass(frozen=True)
class PassThrough:
    """A named point of the graph (a branch, a merge): records pass unchanged."""

    kind: str = "pass-through"

    def bind(self, children: Sequence[Emit]) -> Emit:
        return fan_out(children)


@dataclass(frozen=True)
class Cogrouped:
    """The records of the `index`-th stream of a cogroup, each value marked `(index, value)` (a tombstone stays
    None), so that the cogroup's one aggregation folds it with that stream's aggregator
    (`eos.operators.aggregate.CogroupAggregator`)."""

    index: int
    kind = "cogroup"

    def bind(self, children: Sequence[Emit]) -> Emit:
        index, emit = self.index, fan_out(children)

        def step(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            emit(key, None if value is None else (index, value), timestamp, headers)
        return step


#: in `OperatorPaths`, the child that is the node the paths lead to
TARGET = ""


@dataclass(frozen=True)
class OperatorPaths:
    """The stateless operators on the paths from a source to one node of its task, replayed as one operator:
    `bind([step])` passes `step` what reaches the node of a record the source hands on, in the order the task's
    graph passes it (the window audit replays a windowed aggregation's input so, behind filters, maps, branches
    and the marking steps of a cogroup). `roots`: the source's children on those paths; `operators`: each
    one's operator and its children, by name: another of them, `TARGET`, or None for a child off the paths
    (what goes there is not followed)."""

    roots: tuple[str, ...]
    operators: tuple[tuple[str, Any, tuple[str | None, ...]], ...]

    def bind(self, children: Sequence[Emit]) -> Emit:
        target, specs = fan_out(children), {name: (op, kids) for name, op, kids in self.operators}
        built: dict[str, Emit] = {}

        def build(name: str | None) -> Emit:
            if name is None:
                return _nowhere
            if name == TARGET:
                return target
            if name not in built:
                operator, kids = specs[name]
                built[name] = operator.bind([build(k) for k in kids])
            return built[name]
        return fan_out([build(r) for r in self.roots])


def _iterable(result: Any, what: str) -> Iterable[Any]:
    if result is None:
        return ()
    if isinstance(result, (str, bytes, dict)) or not hasattr(result, "__iter__"):
        raise TypeError(f"{what} must return an iterable (a list, a generator), got {type(result).__name__}")
    return result


Operator = Filter | Map | MapValues | FlatMap | FlatMapValues | Peek | SelectKey | Branch | PassThrough | Cogrouped


def _pair(pair: Any, operator: str) -> tuple[Any, Any]:
    """What a key-changing function returned, checked: a (key, value) tuple."""
    if type(pair) is not tuple or len(pair) != 2:
        raise TypeError(f"{operator} must return a (key, value) tuple, got {type(pair).__name__}")
    return pair
