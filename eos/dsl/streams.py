"""Record-at-a-time and vectorized processing, the Processor API, and re-keying through repartition
topics."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from functools import partial
from typing import Any

from eos.dsl.base import InternalTopic, SerdeSpec, TopologyBuilder, topic_tuple
from eos.graph.operators import require_functions
from eos.operators.repartition import RepartitionProcessor
from eos.processor import FunctionProcessor
from eos.records import Record
from eos.time import TimestampSpec
from eos.topology import BatchFormat

__all__ = ["StreamMethods"]


class StreamMethods(TopologyBuilder):
    def process(self, input: str | Sequence[str], output: str | None = None, *, name: str | None = None,
                key_serde: SerdeSpec = None, value_serde: SerdeSpec = None, output_key_serde: SerdeSpec = None,
                output_value_serde: SerdeSpec = None, extra_outputs: Iterable[str] = (),
                timestamp: TimestampSpec = None,
                auto_offset_reset: str | timedelta | None = None) -> Callable[[Any], Any]:
        """Decorator: `fn(record) -> None | Output | (key, value) | iterable of those`, called once per record.
        Outputs keep the record's timestamp (as `timestamp` extracts it) unless an `Output` gives one.
        `auto_offset_reset`: where the step starts a partition nothing was committed for, as `app.stream`'s."""

        def register(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
            self._add(_step_name(name, fn, "process"), input, output, key_serde, value_serde, output_key_serde,
                      output_value_serde, extra_outputs, timestamp=timestamp,
                      processor_factory=partial(FunctionProcessor, fn), auto_offset_reset=auto_offset_reset)
            return fn

        return register

    def process_batch(self, input: str | Sequence[str], output: str | None = None, *, format: BatchFormat = "pandas",
                      name: str | None = None, key_serde: SerdeSpec = None, value_serde: SerdeSpec = None,
                      output_key_serde: SerdeSpec = None, output_value_serde: SerdeSpec = None,
                      extra_outputs: Iterable[str] = (), timestamp: TimestampSpec = None,
                      auto_offset_reset: str | timedelta | None = None) -> Callable[[Any], Any]:
        """Decorator: `fn(table) -> table`, called once per task and batch with a pandas DataFrame or a pyarrow
        Table (see `eos.worker.vectorized` for the columns). Must be free of side effects. `auto_offset_reset`:
        as `process`'s."""
        if format not in ("pandas", "arrow"):
            raise ValueError(f"format must be 'pandas' or 'arrow', got {format!r}")

        def register(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
            self._add(_step_name(name, fn, "process_batch"), input, output, key_serde, value_serde,
                      output_key_serde, output_value_serde, extra_outputs, timestamp=timestamp, batch_fn=fn,
                      batch_format=format, auto_offset_reset=auto_offset_reset)
            return fn

        return register

    def repartition(self, input: str | Sequence[str], *, name: str, key: Callable[[Record], Any] | None = None,
                    partitions: int | None = None, key_serde: SerdeSpec = "string", value_serde: SerdeSpec = "json",
                    output_key_serde: SerdeSpec = None, timestamp: TimestampSpec = None,
                    subtopology: str | None = None) -> str:
        """Re-key records with `key(record)` (default: keep the key) and write them, in the reading task's
        transaction, to the internal topic `<application_id>-<name>-repartition` (created at start-up with
        `partitions`, default as many as the input has), where each key lands in one partition. Returns the
        topic's name, to read it from the next step: `app.count(app.repartition(...), ...)`. Records are
        deleted from the topic once the next step has committed them, as Kafka Streams purges them. The
        sub-topology that writes it is `subtopology` (default: `name`)."""
        if key is not None:
            require_functions(f"repartition {name!r}", key=key, takes={"key": ("record",)})
        topic = self.internal_name(name, "repartition")
        first = topic_tuple(input, f"repartition {name!r}")[0]
        self.internal_topics[topic] = InternalTopic(topic, partitions, like=None if partitions else first,
                                                    purge=True)
        self._add(subtopology or name, input, topic, key_serde, value_serde, output_key_serde, value_serde, (),
                  timestamp=timestamp, processor_factory=partial(RepartitionProcessor, key))
        return topic


def _step_name(name: str | None, fn: Callable[[Any], Any], decorator: str) -> str:
    """The step's name: `name`, else the decorated function's own (a lambda has none)."""
    require_functions(f"app.{decorator}", function=fn,
                      takes={"function": ("table",) if decorator == "process_batch" else ("record",)})
    if name is not None:
        return name
    own = getattr(fn, "__name__", None)
    if not isinstance(own, str) or own == "<lambda>":
        nameless = "a lambda has no name" if own == "<lambda>" else f"{fn!r} has no __name__"
        raise ValueError(f"app.{decorator}(...) names its step after the function it decorates, and {nameless}: "
                         f"give one, app.{decorator}(..., name=\"clean\")")
    return own
