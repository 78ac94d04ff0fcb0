"""What every family of topology-building methods shares: the sub-topologies built so far, the internal
topics they need, and the one way to add a sub-topology."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from eos.config import EosConfig
from eos.records import Record
from eos.serde import Serde, serde_for
from eos.time import TimestampSpec, timestamp_extractor
from eos.topology import SubTopology

__all__ = ["TopologyBuilder", "InternalTopic", "SerdeSpec"]

SerdeSpec = Serde | str | None


@dataclass(frozen=True)
class InternalTopic:
    """A topic the framework creates at start-up (a repartition topic): `partitions`, or as many as
    `like` (an input topic) has."""

    name: str
    partitions: int | None = None
    like: str | None = None
    config: dict[str, str] = field(default_factory=dict)
    #: consumed records are deleted once committed (repartition topics), as Kafka Streams purges them
    purge: bool = False


class TopologyBuilder:
    config: EosConfig
    subtopologies: dict[str, SubTopology]
    internal_topics: dict[str, InternalTopic]
    default_timestamp: Callable[[Record], int] | None

    def _internal_name(self, name: str, suffix: str) -> str:
        return f"{self.config.application_id}-{name}-{suffix}"

    def _add(self, name: str, inputs: str | Sequence[str], output: str | None, key_serde: SerdeSpec,
             value_serde: SerdeSpec, output_key_serde: SerdeSpec, output_value_serde: SerdeSpec,
             extra_outputs: Iterable[str], *, timestamp: TimestampSpec = None, **kind: Any) -> SubTopology:
        if name in self.subtopologies:
            raise ValueError(f"a sub-topology named {name!r} already exists; pass name=... to tell them apart")
        ks, vs = serde_for(key_serde), serde_for(value_serde)
        extractor = timestamp_extractor(timestamp) if timestamp is not None else self.default_timestamp
        sub = SubTopology(name=name, inputs=(inputs,) if isinstance(inputs, str) else tuple(inputs), output=output,
                          key_serde=ks, value_serde=vs, output_key_serde=serde_for(output_key_serde, ks),
                          output_value_serde=serde_for(output_value_serde, vs), extra_outputs=tuple(extra_outputs),
                          timestamp=extractor, **kind)
        self.subtopologies[name] = sub
        return sub
