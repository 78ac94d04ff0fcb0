"""Read a job's lineage ledger (`eos.ledger`) for the auditor: per input partition, which offsets committed
batches covered (of the topic as it is now, and of earlier topics of the same name), which of them
produced nothing on purpose, and which were covered twice."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from pyroaring import BitMap64

from eos.audit.scan import scan_topic
from eos.ledger import LedgerEntry
from eos.worker.progress import CommitMetadata
from transactions import KafkaAdmin

__all__ = ["PartitionLedger", "read_ledger", "add_starts"]

TP = tuple[str, int]


@dataclass
class PartitionLedger:
    #: offsets covered by committed batches of the topic as it is now
    now: BitMap64 = field(default_factory=BitMap64)
    #: offsets covered by committed batches of earlier topics of the same name (deleted, created again)
    earlier: BitMap64 = field(default_factory=BitMap64)
    #: offsets of the topic as it is now that produced no output and no dead letter
    filtered: BitMap64 = field(default_factory=BitMap64)
    #: offsets covered by two committed batches of one topic incarnation (invariant I1 broken)
    overlaps: BitMap64 = field(default_factory=BitMap64)
    #: offsets of the records a windowed operator dropped as late (of this partition's own records: those of
    #: a repartition topic under it, not under their origins), as entries written before steps were named say
    #: (for every step)
    late: BitMap64 = field(default_factory=BitMap64)
    #: the same per step that dropped them (`LedgerEntry.late_by`): `late_for(step)`
    late_by: dict[str, BitMap64] = field(default_factory=dict)
    #: of the filtered offsets, those an entry written before `late` was kept by place said were late (by
    #: origin: every record an input made on a repartition topic)
    late_origins: BitMap64 = field(default_factory=BitMap64)
    #: of the filtered offsets, those filtered after a repartition topic (on one of their input's paths)
    through: BitMap64 = field(default_factory=BitMap64)
    #: of the filtered offsets, those an operator held back (their outputs come later, named after them)
    held: BitMap64 = field(default_factory=BitMap64)
    #: `through` by path: the index a record of a repartition topic carried -> the offsets of its origins whose
    #: record on that path produced nothing
    paths: dict[int, BitMap64] = field(default_factory=dict)
    #: of `through`, the offsets an entry written before `paths` were kept names without their paths
    paths_unknown: BitMap64 = field(default_factory=BitMap64)
    #: offsets skipped because retention deleted them before they were processed
    retention_skipped: int = 0
    #: offsets the job started after (auto_offset_reset "latest" or a duration): not its input
    not_read: BitMap64 = field(default_factory=BitMap64)
    #: earlier topic ids seen
    incarnations: set[str] = field(default_factory=set)
    entries: int = 0

    def late_for(self, step: str | None) -> BitMap64:
        """The offsets of the records `step` dropped as late (those of entries that name no steps included)."""
        named = self.late_by.get(step) if step is not None else None
        return self.late if named is None else self.late | named


def read_ledger(bootstrap_servers: str, topic: str, inputs: Iterable[str], *, admin: KafkaAdmin,
                through: Iterable[str] = (), progress: Callable[[int], None] | None = None,
                subtopologies: set[str] | None = None,
                entries: list[LedgerEntry] | None = None) -> dict[TP, PartitionLedger] | None:
    """The ledger's account of `inputs` (and of the repartition topics `through` which lineage reaches),
    per partition; None when the ledger topic does not exist. `subtopologies`: only their tasks' entries
    (a topic read by several sub-topologies is consumed once by each). `entries`: gets those entries' input
    ranges and global tables' pins, in commit order (inputs of earlier topics of the same name left out; no
    offset sets)."""
    if admin.partition_counts([topic])[topic] is None:
        return None
    origins, covered = set(inputs), set(inputs) | set(through)
    current = admin.topic_ids(sorted(covered))
    coverage: dict[tuple[TP, str | None], BitMap64] = {}
    out: dict[TP, PartitionLedger] = {}
    for batch in scan_topic(bootstrap_servers, topic, admin=admin, progress=progress):
        for msg in batch:
            entry = LedgerEntry.decode(msg.value())
            if entry is None or (subtopologies is not None
                                 and entry.task.rpartition("-")[0] not in subtopologies):
                continue
            now_ids: dict[TP, bool] = {}
            for item in entry.inputs:
                if item.topic not in covered:
                    continue
                tp = (item.topic, item.partition)
                ledger = out.setdefault(tp, PartitionLedger())
                ledger.entries += 1
                span = BitMap64()
                if item.end > item.start:
                    span.add_range(item.start, item.end)
                is_now = now_ids[tp] = item.topic_id is None or current.get(item.topic) in (None, item.topic_id)
                seen = coverage.setdefault((tp, item.topic_id), BitMap64())
                ledger.overlaps |= seen & span
                seen |= span
                if is_now:
                    ledger.now |= span
                    if item.reset_reason == "retention" and item.reset_from is not None:
                        ledger.retention_skipped += max(0, item.start - item.reset_from)
                    if item.not_read_from is not None and item.start > item.not_read_from:
                        ledger.not_read.add_range(item.not_read_from, item.start)
                else:
                    ledger.earlier |= span
                    ledger.incarnations.add(item.topic_id or "")
            if entries is not None:
                entries.append(LedgerEntry(entry.task, entry.batch, tuple(  # (the ranges and pins only: a long
                    i for i in entry.inputs if now_ids.get((i.topic, i.partition), True)),  # run's bitmaps stay out)
                    pins=entry.pins))
            for tp, offsets in entry.filtered.items():
                if tp[0] in origins and now_ids.get(tp, True):  # (an earlier topic's filtered records are gone)
                    out.setdefault(tp, PartitionLedger()).filtered |= offsets
            if entry.late_by is None:
                for tp, offsets in entry.late.items():
                    if tp[0] in covered and now_ids.get(tp, True):
                        out.setdefault(tp, PartitionLedger()).late |= offsets
            for step, sets in (entry.late_by or {}).items():
                for tp, offsets in sets.items():
                    if tp[0] in covered and now_ids.get(tp, True):
                        by_step = out.setdefault(tp, PartitionLedger()).late_by
                        by_step[step] = by_step.get(step, BitMap64()) | offsets
            for tp, offsets in entry.late_origins.items():
                if tp[0] in origins and now_ids.get(tp, True):
                    out.setdefault(tp, PartitionLedger()).late_origins |= offsets
            for tp, offsets in entry.through.items():
                if tp[0] in origins and now_ids.get(tp, True):
                    account = out.setdefault(tp, PartitionLedger())
                    account.through |= offsets
                    if entry.paths is None:
                        account.paths_unknown |= offsets
            for tp, by_index in (entry.paths or {}).items():
                if tp[0] in origins and now_ids.get(tp, True):
                    account = out.setdefault(tp, PartitionLedger())
                    for index, offsets in by_index.items():
                        account.paths[index] = account.paths.get(index, BitMap64()) | offsets
            for tp, offsets in entry.held.items():
                if tp[0] in origins and now_ids.get(tp, True):
                    out.setdefault(tp, PartitionLedger()).held |= offsets
    return out


def add_starts(ledger: dict[TP, PartitionLedger], admin: KafkaAdmin, inputs: Iterable[str], group: str,
               groups: Mapping[str, str] | None = None) -> None:
    """Add to `ledger` the records each input partition's job started after, as its committed offset still says
    (`CommitMetadata.not_read_from`: set at the end at start-up under auto_offset_reset="latest", and no batch
    of the partition committed since, so no ledger entry of it says so yet)."""
    for topic in inputs:
        tps = admin.topic_partitions(topic)
        for tp, commit in admin.group_commits((groups or {}).get(topic, group), tps, stable=True).items():
            start = CommitMetadata.decode(commit.metadata).not_read_from
            if start is not None and commit.offset is not None and commit.offset > start:
                ledger.setdefault(tp, PartitionLedger()).not_read.add_range(start, commit.offset)
