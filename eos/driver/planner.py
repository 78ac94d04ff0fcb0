"""The micro-batch planner (driver): for each task, `start` = committed offset, `end` = last stable offset,
capped by `max_records_per_batch`; tasks with nothing to do are skipped.

The committed offsets read here are a hint, read without RequireStable: after a crash, a stable read
would wait for the broker to time out the crashed attempt's transaction. A hint can only be behind the
truth (pending offsets only move forward), so "hint >= end" safely means "nothing to do", and each task
re-reads its offsets with a stable read after fencing older attempts.
"""

from __future__ import annotations

from collections.abc import Mapping

from eos.config import EosConfig
from eos.topology import SubTopology
from eos.worker.plans import TaskPlan
from transactions import KafkaAdmin, OffsetRange

__all__ = ["Planner"]

TP = tuple[str, int]


class Planner:
    def __init__(self, admin: KafkaAdmin, config: EosConfig, subtopologies: Mapping[str, SubTopology],
                 partition_counts: Mapping[str, int]) -> None:
        self.admin = admin
        self.config = config
        self.subtopologies = dict(subtopologies)
        self.partition_counts = dict(partition_counts)

    def task_count(self, sub: SubTopology) -> int:
        return self.partition_counts[sub.inputs[0]]

    def input_partitions(self) -> list[TP]:
        tps: set[TP] = set()
        for sub in self.subtopologies.values():
            for topic in sub.inputs:
                tps.update((topic, p) for p in range(self.partition_counts[topic]))
        return sorted(tps)

    def initialize_offsets(self) -> dict[TP, int]:
        """With auto_offset_reset='latest', pin partitions that have no committed offset to their current end,
        so that the first batch does not chase a moving start. Returns what was pinned."""
        if self.config.auto_offset_reset != "latest":
            return {}
        tps = self.input_partitions()
        committed = self.admin.group_offsets(self.config.group_id, tps, stable=False)
        missing = [tp for tp in tps if committed.get(tp) is None]
        if not missing:
            return {}
        ends = self.admin.end_offsets(missing, committed=True)
        self.admin.set_group_offsets(self.config.group_id, ends)
        return ends

    def plan(self, batch: int) -> list[TaskPlan]:
        tps = self.input_partitions()
        committed = self.admin.group_offsets(self.config.group_id, tps, stable=False, timeout=10)
        ends = self.admin.end_offsets(tps, committed=True, timeout=10)
        missing = [tp for tp in tps if committed.get(tp) is None]
        earliest = self.admin.earliest_offsets(missing) if missing else {}
        cap = self.config.max_records_per_batch
        plans = []
        for sub in self.subtopologies.values():
            for partition in range(self.task_count(sub)):
                ranges = []
                for topic in sub.inputs:
                    tp = (topic, partition)
                    start = committed.get(tp)
                    if start is None:
                        start = earliest[tp]
                    ranges.append(OffsetRange(topic, partition, start, max(start, min(ends[tp], start + cap))))
                if any(not r.empty for r in ranges):
                    plans.append(TaskPlan(sub.task(partition), batch, tuple(ranges)))
        return plans
