"""Lineage audit: every committed input record must appear exactly once in the committed output, by the
`eos.origin` header (for 1-to-n processing: each (origin, index) exactly once, indexes without gaps), or
exactly once in the dead-letter topic, and never in both.

Expected records are the visible (read_committed) input records below the job's committed group offsets
(or below the last stable offset when no group is given). Outputs are read with fresh read_committed
consumers up to their last stable offset.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Message

from eos.audit.origins import OffsetSets, OriginSet
from eos.audit.scan import scan_topic
from eos.lineage import ORIGIN_HEADER, Origin, decode_origin
from transactions import KafkaAdmin

__all__ = ["LineageResult", "audit_lineage", "expected_inputs"]


@dataclass
class LineageResult:
    expected: int = 0
    output_records: int = 0
    unique_origins: int = 0
    dead_lettered: int = 0
    duplicates: int = 0
    lost: int = 0
    unexpected: int = 0
    index_gaps: int = 0
    output_and_dead_lettered: int = 0
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def violations(self) -> int:
        return self.duplicates + self.lost + self.unexpected + self.index_gaps + self.output_and_dead_lettered

    def sample(self, kind: str, limit: int, **detail: Any) -> None:
        bucket = self.samples.setdefault(kind, [])
        if len(bucket) < limit:
            bucket.append(detail)


def expected_inputs(admin: KafkaAdmin, inputs: Iterable[str], *, group: str | None,
                    progress: Callable[[int], None] | None = None) -> tuple[OffsetSets, dict[tuple[str, int], int]]:
    """Visible input offsets below the group's committed offsets (or the last stable offsets)."""
    expected = OffsetSets()
    bounds: dict[tuple[str, int], int] = {}
    for topic in inputs:
        tps = admin.topic_partitions(topic)
        lso = admin.end_offsets(tps, committed=True)
        if group is not None:
            committed = admin.group_offsets(group, tps, stable=True)
            bound = {tp: committed.get(tp) or 0 for tp in tps}
        else:
            bound = lso
        bounds.update(bound)
        for batch in scan_topic(admin.bootstrap_servers, topic, admin=admin, until=bound, progress=progress):
            for msg in batch:
                expected.add(msg.topic(), msg.partition(), msg.offset())
        for tp in tps:  # make empty partitions visible in the result
            expected.maps[tp]
    return expected, bounds


def _origin(msg: Message) -> Origin | None:
    headers = msg.headers()
    if not headers:
        return None
    raw = None
    for key, value in headers:
        if key == ORIGIN_HEADER:
            raw = value
    return decode_origin(raw)


def audit_lineage(bootstrap_servers: str, inputs: Iterable[str], outputs: Iterable[str], *,
                  dead_letter_topic: str | None = None, group: str | None = None, admin: KafkaAdmin | None = None,
                  max_samples: int = 10, progress: Callable[[int], None] | None = None) -> LineageResult:
    admin = admin or KafkaAdmin(bootstrap_servers)
    result = LineageResult()
    expected, _ = expected_inputs(admin, inputs, group=group, progress=progress)
    result.expected = len(expected)
    seen = OriginSet()
    for topic in outputs:
        for batch in scan_topic(bootstrap_servers, topic, admin=admin, progress=progress):
            for msg in batch:
                result.output_records += 1
                _account(msg, expected, seen, result, max_samples, "output")
    dead, dlq_seen = OffsetSets(), OriginSet()
    if dead_letter_topic is not None and admin.partition_counts([dead_letter_topic])[dead_letter_topic] is not None:
        for batch in scan_topic(bootstrap_servers, dead_letter_topic, admin=admin, progress=progress):
            for msg in batch:
                if _account(msg, expected, dlq_seen, result, max_samples, "dead letter"):
                    origin = _origin(msg)
                    assert origin is not None
                    dead.add(origin.topic, origin.partition, origin.offset)
        result.dead_lettered = len(dead)
    result.unique_origins = len(seen)
    result.duplicates = seen.duplicates + dlq_seen.duplicates
    result.index_gaps = seen.index_gaps()
    for key in expected.keys():
        want, got, dlq = expected.get(key), seen.first(key), dead.get(key)
        missing = want - got - dlq
        both = got & dlq
        result.lost += len(missing)
        result.output_and_dead_lettered += len(both)
        for offset in list(missing)[:max_samples]:
            result.sample("lost", max_samples, origin=f"{key[0]}:{key[1]}:{offset}")
        for offset in list(both)[:max_samples]:
            result.sample("output_and_dead_lettered", max_samples, origin=f"{key[0]}:{key[1]}:{offset}")
    return result


def _account(msg: Message, expected: OffsetSets, seen: OriginSet, result: LineageResult, max_samples: int,
             where: str) -> bool:
    """Record one output (or dead letter); True when it is a first sighting of a valid origin."""
    origin = _origin(msg)
    at = {"topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset()}
    if origin is None:
        result.unexpected += 1
        result.sample("unexpected", max_samples, reason=f"{where} without a valid {ORIGIN_HEADER} header", **at)
        return False
    if (origin.topic, origin.partition, origin.offset) not in expected:
        result.unexpected += 1
        result.sample("unexpected", max_samples, reason=f"{where} names an origin that is not a committed input "
                      "record below the committed offsets", origin=":".join(map(str, origin)), **at)
        return False
    if not seen.add(origin.topic, origin.partition, origin.offset, origin.index):
        result.sample("duplicates", max_samples, origin=":".join(map(str, origin)), where=where, **at)
        return False
    return True
