"""Lineage audit: every committed input record must appear exactly once in the committed output, by the
`eos.origin` header (for 1-to-n processing: each (origin, index) exactly once, indexes without gaps), or
exactly once in the dead-letter topic, and never in both. Outputs derived from one input partition must
appear in an output partition in input-offset order.

Expected records are the visible (read_committed) input records below the job's committed group offsets
(or below the last stable offset when no group is given). Partitions are scanned independently (here, or
as Spark tasks) and their bitmaps merged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pyroaring import BitMap64

from eos.audit.executors import Executor, LocalExecutor
from eos.audit.partials import (
    InputPartial,
    OutputPartial,
    PartitionScan,
    scan_input_partition,
    scan_output_partition,
)
from transactions import Isolation, KafkaAdmin

__all__ = ["LineageResult", "audit_lineage", "input_scans", "output_scans"]

TP = tuple[str, int]


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
    order_violations: int = 0
    aborted_visible: int = 0
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def violations(self) -> int:
        return (self.duplicates + self.lost + self.unexpected + self.index_gaps + self.output_and_dead_lettered
                + self.order_violations + self.aborted_visible)

    def sample(self, kind: str, limit: int, **detail: Any) -> None:
        bucket = self.samples.setdefault(kind, [])
        if len(bucket) < limit:
            bucket.append(detail)


def input_scans(admin: KafkaAdmin, inputs: Iterable[str], group: str | None) -> list[PartitionScan]:
    scans = []
    for topic in inputs:
        tps = admin.topic_partitions(topic)
        low = admin.earliest_offsets(tps)
        if group is not None:
            committed = admin.group_offsets(group, tps, stable=True)
            bound = {tp: committed.get(tp) or 0 for tp in tps}
        else:
            bound = admin.end_offsets(tps, committed=True)
        scans += [PartitionScan(admin.bootstrap_servers, t, p, low[(t, p)], max(low[(t, p)], bound[(t, p)]))
                  for t, p in tps]
    return scans


def output_scans(admin: KafkaAdmin, topics: Iterable[str], isolation: Isolation) -> list[PartitionScan]:
    scans = []
    for topic in topics:
        tps = admin.topic_partitions(topic)
        low = admin.earliest_offsets(tps)
        ends = admin.end_offsets(tps, committed=isolation == "read_committed")
        scans += [PartitionScan(admin.bootstrap_servers, t, p, low[(t, p)], ends[(t, p)]) for t, p in tps]
    return scans


def audit_lineage(bootstrap_servers: str, inputs: Iterable[str], outputs: Iterable[str], *,
                  dead_letter_topic: str | None = None, group: str | None = None, admin: KafkaAdmin | None = None,
                  isolation: Isolation = "read_committed", max_samples: int = 10,
                  executor: Executor | None = None, progress: Callable[[int], None] | None = None) -> LineageResult:
    admin = admin or KafkaAdmin(bootstrap_servers)
    executor = executor or LocalExecutor()
    dlq_topics = [dead_letter_topic] if dead_letter_topic and admin.partition_counts(
        [dead_letter_topic])[dead_letter_topic] is not None else []
    ins = executor.map(scan_input_partition, input_scans(admin, inputs, group), progress)
    scan_out = _OutputScan(isolation, max_samples)
    outs = executor.map(scan_out, output_scans(admin, outputs, isolation), progress)
    dead = executor.map(scan_out, output_scans(admin, dlq_topics, isolation), progress)
    return merge(ins, outs, dead, max_samples)


class _OutputScan:
    """Picklable scan function with its options (runs in Spark tasks too)."""

    def __init__(self, isolation: Isolation, max_samples: int) -> None:
        self.isolation, self.max_samples = isolation, max_samples

    def __call__(self, scan: PartitionScan, progress: Callable[[int], None] | None = None) -> OutputPartial:
        return scan_output_partition(scan, isolation=self.isolation, max_samples=self.max_samples, progress=progress)


def _union(partials: list[OutputPartial], result: LineageResult,
           max_samples: int) -> dict[tuple[str, int, int], BitMap64]:
    """Merge origin bitmaps of several partitions; origins seen in two partitions are duplicates."""
    merged: dict[tuple[str, int, int], BitMap64] = {}
    for part in partials:
        result.duplicates += part.duplicates
        result.order_violations += part.order_violations
        result.aborted_visible += part.aborted_visible
        result.unexpected += part.without_origin
        for kind, items in part.samples.items():
            for item in items:
                result.sample(kind, max_samples, **item)
        for key, raw in part.origins.items():
            bm = BitMap64.deserialize(raw)
            if key in merged:
                both = merged[key] & bm
                result.duplicates += len(both)
                for offset in list(both)[:max_samples]:
                    result.sample("duplicates", max_samples, origin=f"{key[0]}:{key[1]}:{offset}:{key[2]}",
                                  where=f"{part.topic}[{part.partition}] and another partition")
                merged[key] |= bm
            else:
                merged[key] = bm
    return merged


def merge(inputs: list[InputPartial], outputs: list[OutputPartial], dead: list[OutputPartial],
          max_samples: int = 10) -> LineageResult:
    result = LineageResult()
    expected: dict[TP, BitMap64] = {(p.topic, p.partition): p.bitmap() for p in inputs}
    result.expected = sum(len(bm) for bm in expected.values())
    result.output_records = sum(p.records for p in outputs)
    seen = _union(outputs, result, max_samples)
    dlq = _union(dead, result, max_samples)
    for origins in (seen, dlq):
        for (topic, partition, index), bm in origins.items():
            bogus = bm - expected.get((topic, partition), BitMap64())
            if bogus:
                result.unexpected += len(bogus)
                for offset in list(bogus)[:max_samples]:
                    result.sample("unexpected", max_samples, origin=f"{topic}:{partition}:{offset}:{index}",
                                  reason="names an origin that is not a committed input record below the "
                                         "committed offsets")
                bm -= bogus
    result.unique_origins = sum(len(bm) for bm in seen.values())
    result.dead_lettered = sum(len(bm) for bm in dlq.values())
    for (topic, partition, index), bm in seen.items():
        if index > 0:
            gaps = bm - seen.get((topic, partition, index - 1), BitMap64())
            result.index_gaps += len(gaps)
            for offset in list(gaps)[:max_samples]:
                result.sample("index_gaps", max_samples, origin=f"{topic}:{partition}:{offset}:{index}")
    for (topic, partition), want in expected.items():
        got, dead_bm = seen.get((topic, partition, 0), BitMap64()), dlq.get((topic, partition, 0), BitMap64())
        missing, both = want - got - dead_bm, got & dead_bm
        result.lost += len(missing)
        result.output_and_dead_lettered += len(both)
        for offset in list(missing)[:max_samples]:
            result.sample("lost", max_samples, origin=f"{topic}:{partition}:{offset}")
        for offset in list(both)[:max_samples]:
            result.sample("output_and_dead_lettered", max_samples, origin=f"{topic}:{partition}:{offset}")
    return result
