"""Lineage audit: every committed input record must appear exactly once in the committed output, by the
`eos.origin` header (for 1-to-n processing: each (origin, index) exactly once, indexes without gaps), or
exactly once in the dead-letter topic, and never in both. Outputs derived from one input partition must
appear in an output partition in input-offset order.

Expected records are the visible (read_committed) input records below the job's committed group offsets
(or below the last stable offset when no group is given). Partitions are scanned independently (here, or
as Spark tasks) and their bitmaps merged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyroaring import BitMap64

from eos.audit.executors import Executor, LocalExecutor
from eos.audit.ledger import PartitionLedger, add_starts, read_ledger
from eos.audit.partials import (
    InputPartial,
    OutputPartial,
    PartitionScan,
    scan_input_partition,
    scan_output_partition,
)
from eos.audit.scan import first_offsets
from eos.ledger import ledger_topic as default_ledger_topic
from eos.origin import reserved_from_top, top_level
from transactions import Isolation, KafkaAdmin, admin_for

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
    #: offsets covered by two committed batches (from the ledger: invariant I1 broken)
    overlapping_batches: int = 0
    #: records the ledger says produced nothing, that have an output or a dead letter all the same
    filtered_but_output: int = 0
    # Accounted for, not violations:
    ledger: bool = False  # the job's lineage ledger was found and used
    #: whether outputs were checked to follow input order (not behind a repartition topic: `ordered`)
    order_checked: bool = True
    #: whether each scope's run of output indices was checked (`numbered`)
    runs_checked: bool = True
    filtered: int = 0  # committed input records that produced nothing, by the job's design (a filter)
    #: of those, records an operator held back that have no output yet (a stream-table join's grace period:
    #: still held, or let go with nothing, as by an inner join without a row)
    held: int = 0
    input_deleted: int = 0  # outputs of records processed, then deleted from the input by retention
    earlier_topic: int = 0  # outputs (and their copies) of an earlier topic of the same name
    #: outputs of records of a topic the step no longer reads (a topic a pattern matched, since deleted; an
    #: input taken out of the job), each of a record the ledger says a committed batch of the step read
    no_longer_read: int = 0
    skipped_by_retention: int = 0  # input offsets deleted by retention before the job processed them
    #: committed input records before where the job started reading (auto_offset_reset "latest" or a duration):
    #: not its input
    not_read: int = 0
    other_dead_letters: int = 0  # dead letters of other sub-topologies (the dead-letter topic is shared)
    #: records others wrote to an output topic the job reads too (a cycle, a topic others write too): its
    #: input, not output
    written_by_others: int = 0
    #: outputs of the job's other steps that write the same topic from other inputs: checked by their audits
    other_steps: int = 0
    derived: int = 0  # outputs derived by a task (punctuation, final window results): see `eos audit window`
    #: derived outputs committed twice (the same task, position, time, punctuation and index)
    derived_duplicates: int = 0
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def violations(self) -> int:
        return (self.duplicates + self.lost + self.unexpected + self.index_gaps + self.output_and_dead_lettered
                + self.order_violations + self.aborted_visible + self.overlapping_batches + self.filtered_but_output
                + self.derived_duplicates)

    def sample(self, kind: str, limit: int, **detail: Any) -> None:
        bucket = self.samples.setdefault(kind, [])
        if len(bucket) < limit:
            bucket.append(detail)


def input_scans(admin: KafkaAdmin, inputs: Iterable[str], group: str | None,
                groups: Mapping[str, str] | None = None) -> list[PartitionScan]:
    """`groups`: inputs whose progress is committed under another group than `group` (eos.topology)."""
    scans = []
    for topic in inputs:
        tps = admin.topic_partitions(topic)
        low = first_offsets(admin, tps)  # (an input the job writes too: where its last reset found it)
        if group is not None:
            committed = admin.group_offsets((groups or {}).get(topic, group), tps, stable=True)
            # (capped at the partition's end: an offset committed for an earlier topic of the name may lie past it,
            # and a read up to it would wait for records that never come)
            ends = admin.end_offsets(tps, committed=False)
            bound = {tp: min(committed.get(tp) or 0, ends[tp]) for tp in tps}
        else:
            bound = admin.settled_ends(tps)
        scans += [PartitionScan(admin.bootstrap_servers, t, p, low[(t, p)], max(low[(t, p)], bound[(t, p)]))
                  for t, p in tps]
    return scans


def output_scans(admin: KafkaAdmin, topics: Iterable[str], isolation: Isolation) -> list[PartitionScan]:
    scans = []
    for topic in topics:
        tps = admin.topic_partitions(topic)
        low = first_offsets(admin, tps)  # (what the job wrote since its last reset)
        ends = (admin.settled_ends(tps) if isolation == "read_committed"  # (the markers of a last commit)
                else admin.end_offsets(tps, committed=False))
        scans += [PartitionScan(admin.bootstrap_servers, t, p, low[(t, p)], ends[(t, p)]) for t, p in tps]
    return scans


def audit_lineage(bootstrap_servers: str, inputs: Iterable[str], outputs: Iterable[str], *,
                  dead_letter_topic: str | None = None, group: str | None = None, admin: KafkaAdmin | None = None,
                  isolation: Isolation = "read_committed", max_samples: int = 10,
                  executor: Executor | None = None, progress: Callable[[int], None] | None = None,
                  ledger_topic: str | None = None, through: Iterable[str] = (),
                  subtopologies: frozenset[str] | None = None,
                  groups: Mapping[str, str] | None = None, ordered: bool = True,
                  numbered: bool | None = None, read_by_job: Iterable[str] = (),
                  other_steps: Iterable[str] = ()) -> LineageResult:
    """Audit `outputs` (and the dead letters of `inputs`) against `inputs`. The ledger (default: the one of
    the application `group` names) accounts for filtered records, topics created again and input deleted
    by retention; without one those show up as lost or unexpected. `through`: repartition topics between
    `inputs` and `outputs` (lineage reaches through them; their records are deleted once consumed).
    `subtopologies`: only their ledger entries and dead letters count (a topic several sub-topologies read);
    `groups`: inputs whose progress another group than `group` holds. `ordered=False`: outputs of one input
    partition need not follow its order (they passed through a repartition topic, whose partitions spread one
    input partition's records over several tasks before they meet again in an output partition), and a
    record's outputs need not be in one transaction (several tasks made them, on each of the paths it took,
    some of them filtering it: `eos.origin.output_indices`); an input is accounted for by an output on any
    path. Each scope's run of indices is checked (`_check_gaps`): with the ledger, by what became of every
    index a scope gave (an output, a dead letter, a record of a repartition topic that made outputs or one, or
    that the ledger's `paths` say ended where it was read); without it, where `numbered` (default: `ordered`)
    says every index a scope gives is an output's (not so where a step writes both a repartition topic and an
    output). A record without an origin in an output that `inputs` or `read_by_job` (the topics other steps of
    the job read) hold too was written there by others: input of the job, not an output of these steps (a
    cycle of steps, a topic the job and other producers write), counted as `written_by_others`. `other_steps`: the
    inputs of the job's other steps that write these outputs too; their records there are left out, counted as
    `other_steps` (their own audits check them)."""
    inputs = list(inputs)
    admin = admin or admin_for(bootstrap_servers, settle_once=True)
    executor = executor or LocalExecutor()
    dlq_topics = [dead_letter_topic] if dead_letter_topic and admin.partition_counts(
        [dead_letter_topic])[dead_letter_topic] is not None else []
    if ledger_topic is None and group is not None:
        ledger_topic = default_ledger_topic(group)
    ledger = (read_ledger(bootstrap_servers, ledger_topic, inputs, admin=admin, through=through,
                          subtopologies=None if subtopologies is None else set(subtopologies))
              if ledger_topic else None)
    if ledger is not None and group is not None:  # (a partition started at its end with no batch since)
        add_starts(ledger, admin, inputs, group, groups)
    ins = executor.map(scan_input_partition, input_scans(admin, inputs, group, groups), progress)
    outputs = list(outputs)
    read_too = frozenset((*inputs, *read_by_job)) & frozenset(outputs)
    outs = executor.map(_OutputScan(isolation, max_samples, read_too=read_too,
                                    others=frozenset(other_steps) - frozenset(inputs)),
                        output_scans(admin, outputs, isolation), progress)
    dead = executor.map(_OutputScan(isolation, max_samples, frozenset(inputs), subtopologies),
                        output_scans(admin, dlq_topics, isolation), progress)
    # outputs of topics the step read once and reads no more (deleted, or taken out): the ledger's word on them
    former = {key[0] for part in outs for key in part.origins} - set(inputs) - set(through)
    if former and ledger is not None and ledger_topic:
        ledger.update(read_ledger(bootstrap_servers, ledger_topic, former, admin=admin,
                                  subtopologies=None if subtopologies is None else set(subtopologies)) or {})
    return merge(ins, outs, dead, max_samples, ledger, ordered, numbered, frozenset(former))


class _OutputScan:
    """Picklable scan function with its options (runs in Spark tasks too)."""

    def __init__(self, isolation: Isolation, max_samples: int, origin_topics: frozenset[str] | None = None,
                 subtopologies: frozenset[str] | None = None, read_too: frozenset[str] = frozenset(),
                 others: frozenset[str] = frozenset()) -> None:
        self.isolation, self.max_samples, self.origin_topics = isolation, max_samples, origin_topics
        self.subtopologies, self.read_too, self.others = subtopologies, read_too, others

    def __call__(self, scan: PartitionScan, progress: Callable[[int], None] | None = None) -> OutputPartial:
        return scan_output_partition(scan, isolation=self.isolation, max_samples=self.max_samples, progress=progress,
                                     origin_topics=self.origin_topics, subtopologies=self.subtopologies,
                                     read_too=scan.topic in self.read_too, others=self.others)


Origins = dict[tuple[str, int, int], BitMap64]


def _union(partials: list[OutputPartial], result: LineageResult, max_samples: int,
           ordered: bool = True) -> tuple[Origins, Origins]:
    """Merge origin bitmaps of several partitions; origins seen twice (in one partition or in two) are
    duplicates. Returns (origins, duplicated origins)."""
    merged: Origins = {}
    twice: Origins = {}
    for part in partials:
        result.duplicates += part.duplicates
        result.order_violations += part.order_breaks_beyond if ordered else 0
        result.aborted_visible += part.aborted_visible
        result.unexpected += part.without_origin
        result.other_dead_letters += part.foreign
        result.written_by_others += part.written_by_others
        result.other_steps += part.other_steps
        result.derived += part.derived
        result.derived_duplicates += part.derived_duplicates
        for kind, items in part.samples.items():
            for item in items:
                result.sample(kind, max_samples, **item)
        for key, raw in part.duplicate_origins.items():
            twice.setdefault(key, BitMap64()).update(BitMap64.deserialize(raw))
        for key, raw in part.origins.items():
            bm = BitMap64.deserialize(raw)
            if key in merged:
                both = merged[key] & bm
                result.duplicates += len(both)
                twice.setdefault(key, BitMap64()).update(both)
                for offset in list(both)[:max_samples]:
                    result.sample("duplicates", max_samples, origin=f"{key[0]}:{key[1]}:{offset}:{key[2]}",
                                  where=f"{part.topic}[{part.partition}] and another partition")
                merged[key] |= bm
            else:
                merged[key] = bm
    return merged, twice


def merge(inputs: list[InputPartial], outputs: list[OutputPartial], dead: list[OutputPartial],
          max_samples: int = 10, ledger: dict[TP, PartitionLedger] | None = None,
          ordered: bool = True, numbered: bool | None = None, former: frozenset[str] = frozenset()) -> LineageResult:
    """The accounts of input, output and dead-letter partitions put together. `former`: topics the step read
    once and reads no more, whose outputs the ledger must say a committed batch read (`no_longer_read`)."""
    numbered = ordered if numbered is None else numbered
    result = LineageResult(ledger=ledger is not None, order_checked=ordered,
                           runs_checked=numbered or ledger is not None)
    ledger = ledger or {}
    expected: dict[TP, BitMap64] = {(p.topic, p.partition): p.bitmap() for p in inputs}
    for tp, want in expected.items():  # (records the job started after, as its reset policy says: not its input)
        if (account := ledger.get(tp)) is not None and account.not_read:
            result.not_read += len(want & account.not_read)
            expected[tp] = want - account.not_read
    low = {(p.topic, p.partition): p.low for p in inputs}
    result.expected = sum(len(bm) for bm in expected.values())
    result.output_records = sum(p.records for p in outputs)
    seen, seen_twice = _union(outputs, result, max_samples, ordered)
    dlq, dlq_twice = _union(dead, result, max_samples)
    gone: dict[TP, BitMap64] = {}
    earlier: dict[TP, BitMap64] = {}
    dropped: dict[TP, BitMap64] = {}
    for origins, twice in ((seen, seen_twice), (dlq, dlq_twice)):
        for (topic, partition, index), bm in origins.items():
            tp = (topic, partition)
            _explain_copies(twice.get((topic, partition, index)), ledger.get(tp), result, (topic, partition, index),
                            max_samples)
            bogus = bm - expected.get(tp, BitMap64())
            account = ledger.get(tp)
            if bogus and account is not None and topic in former:  # (read by a committed batch, no more since)
                dropped.setdefault(tp, BitMap64()).update(bogus & account.now)
                bogus -= account.now
            if bogus and account is not None:
                deleted = bogus & account.now & _below(low.get(tp, 0))  # processed, then deleted by retention
                old = (bogus - deleted) & account.earlier  # an earlier topic of the same name
                gone.setdefault(tp, BitMap64()).update(deleted)
                earlier.setdefault(tp, BitMap64()).update(old)
                bogus -= deleted | old
            if bogus:
                result.unexpected += len(bogus)
                for offset in list(bogus)[:max_samples]:
                    result.sample("unexpected", max_samples, origin=f"{topic}:{partition}:{offset}:{index}",
                                  reason="names an origin that is not a committed input record below the "
                                         "committed offsets")
                bm -= bogus
    result.input_deleted += sum(len(bm) for bm in gone.values())  # (each input once, whatever its outputs)
    result.earlier_topic += sum(len(bm) for bm in earlier.values())
    result.no_longer_read += sum(len(bm) for bm in dropped.values())
    if ordered:
        _check_order(outputs, ledger, result, max_samples)
    result.unique_origins = sum(len(bm) for bm in seen.values())
    result.dead_lettered = sum(len(bm) for bm in dlq.values())
    if result.runs_checked:
        _check_gaps(seen, dlq, ledger if result.ledger else None, result, max_samples)
    got_any, dead_any = _per_partition(seen), _per_partition(dlq)
    for (topic, partition), want in expected.items():
        tp = (topic, partition)
        account = ledger.get(tp)
        filtered = (account.filtered & want) if account is not None else BitMap64()
        got, dead_bm = got_any.get(tp, BitMap64()), dead_any.get(tp, BitMap64())
        missing = want - got - dead_bm - filtered
        both = seen.get((topic, partition, 0), BitMap64()) & dlq.get((topic, partition, 0), BitMap64())
        result.filtered += len(filtered - got - dead_bm)
        if account is not None and account.held:
            result.held += len((filtered & account.held) - got - dead_bm)
        # filtered where it was read itself, yet with outputs (filtered on one path behind a repartition topic
        # while another path made outputs is no contradiction)
        # (nor is a record held back, whose outputs or dead letter come when it is let go)
        contradicted = (filtered - account.through - account.held if account is not None else filtered) & (
            got | dead_bm)
        result.filtered_but_output += len(contradicted)
        result.lost += len(missing)
        result.output_and_dead_lettered += len(both)
        for offset in list(missing)[:max_samples]:
            result.sample("lost", max_samples, origin=f"{topic}:{partition}:{offset}")
        for offset in list(both)[:max_samples]:
            result.sample("output_and_dead_lettered", max_samples, origin=f"{topic}:{partition}:{offset}")
        for offset in list(contradicted)[:max_samples]:
            result.sample("filtered_but_output", max_samples, origin=f"{topic}:{partition}:{offset}",
                          reason="the ledger says this record produced nothing")
    for (topic, partition), account in ledger.items():
        result.overlapping_batches += len(account.overlaps)
        result.skipped_by_retention += account.retention_skipped
        for offset in list(account.overlaps)[:max_samples]:
            result.sample("overlapping_batches", max_samples, origin=f"{topic}:{partition}:{offset}",
                          reason="covered by two committed batches")
    return result


def _check_gaps(seen: Origins, dead: Origins, ledger: dict[TP, PartitionLedger] | None, result: LineageResult,
                max_samples: int) -> None:
    """The outputs of one scope are made in one transaction and numbered in turn: an input record's 0, 1, ...;
    a record's of a repartition topic, or a held record's when it is let go, one level above the index it
    carries or reserved (`eos.origin.output_indices`: its top level 1, 2, ...; a held record reserves one from
    the top of its level down, `eos.origin.HELD_TOP`). An index given without the one before it on its level
    is an output lost, on whichever path it was.

    Without the `ledger`, the indices given are those of the outputs and dead letters: every index a scope
    gives must be an output's. With it, an index a scope gave to a record of a repartition topic is given too
    where that record made outputs or a dead letter (whose indices extend it) or ended there (the ledger's
    `paths`), so a step may write both; a record the ledger names without its path (an entry written before
    paths were kept) is not asked for a run, nor is an index a held record reserved and its outputs extend
    (a record may be held by two operators, let go by one of them first)."""
    direct: Origins = {}  # indices of outputs, dead letters and records of repartition topics that ended
    above: Origins = {}  # indices outputs and dead letters extend
    for origins in (seen, dead, {(*tp, i): bm for tp, a in (ledger or {}).items() for i, bm in a.paths.items()}):
        for (topic, partition, index), bm in origins.items():
            _give(direct, (topic, partition, index), bm)
            while ledger is not None and (shift := top_level(index)):
                index &= (1 << shift) - 1
                _give(above, (topic, partition, index), bm)
    given = dict(direct)
    for key, bm in above.items():
        _give(given, key, bm)
    empty = BitMap64()
    for (topic, partition, index), bm in given.items():
        shift = top_level(index)
        if index >> shift <= (1 if shift else 0) or reserved_from_top(index >> shift):  # (a scope's first output, or
            continue  # an index a held record reserved: its outputs' run is checked on the level above)
        gaps = bm - given.get((topic, partition, index - (1 << shift)), empty)
        if gaps and ledger is not None and (account := ledger.get((topic, partition))) is not None:
            gaps -= account.paths_unknown | (account.held - direct.get((topic, partition, index), empty))
        result.index_gaps += len(gaps)
        for offset in list(gaps)[:max_samples]:
            result.sample("index_gaps", max_samples, origin=f"{topic}:{partition}:{offset}:{index}")


def _give(given: Origins, key: tuple[str, int, int], offsets: BitMap64) -> None:
    found = given.get(key)
    given[key] = BitMap64(offsets) if found is None else found | offsets


def _per_partition(origins: Origins) -> dict[TP, BitMap64]:
    """The origins' offsets per partition, whatever their indices."""
    out: dict[TP, BitMap64] = {}
    for (topic, partition, _), bm in origins.items():
        out.setdefault((topic, partition), BitMap64()).update(bm)
    return out


def _check_order(outputs: list[OutputPartial], ledger: dict[TP, PartitionLedger], result: LineageResult,
                 max_samples: int) -> None:
    """Outputs of one input partition must appear in input order. One exception: where the input topic was
    deleted and created again, outputs of the new topic follow those of the old one and its offsets start
    over; the ledger says so (the earlier offset was covered by the old topic, the later by the new)."""
    for part in outputs:
        for topic, partition, offset, previous, at in part.order_breaks:
            account = ledger.get((topic, partition))
            if account is not None and previous in account.earlier and offset in account.now:
                continue
            result.order_violations += 1
            result.sample("order_violations", max_samples, origin=f"{topic}:{partition}:{offset}",
                          previous_origin_offset=previous, topic=part.topic, partition=part.partition, offset=at)


def _below(offset: int) -> BitMap64:
    bm = BitMap64()
    if offset > 0:
        bm.add_range(0, offset)
    return bm


def _explain_copies(twice: BitMap64 | None, account: PartitionLedger | None, result: LineageResult,
                    where: tuple[str, int, int], max_samples: int) -> None:
    """A second copy of an origin is no duplicate when two incarnations of the topic (deleted and created
    again) both had a record at that offset and both were processed: one copy each. The samples then show
    the copies that are duplicates, not those collisions."""
    if not twice or account is None or not account.earlier:
        return
    explained = twice & account.earlier & account.now
    if not explained:
        return
    result.duplicates -= len(explained)
    result.earlier_topic += len(explained)
    prefix = f"{where[0]}:{where[1]}:"
    kept = [s for s in result.samples.get("duplicates", []) if not _sample_in(s, prefix, where[2], explained)]
    sampled = {s.get("origin") for s in kept}
    for offset in twice - explained:
        if len(kept) >= max_samples:
            break
        origin = f"{prefix}{offset}:{where[2]}"
        if origin not in sampled:
            kept.append({"origin": origin})
    if kept:
        result.samples["duplicates"] = kept
    else:
        result.samples.pop("duplicates", None)


def _sample_in(sample: dict[str, Any], prefix: str, index: int, offsets: BitMap64) -> bool:
    origin = str(sample.get("origin", ""))
    if not origin.startswith(prefix):
        return False
    offset, _, idx = origin[len(prefix):].partition(":")
    return offset.isdigit() and idx == str(index) and int(offset) in offsets
