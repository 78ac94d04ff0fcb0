"""Join audit: a join's committed output checked by replaying its committed inputs (`eos audit join`).

The lineage audit already proves that every input record was consumed exactly once. This one proves
that what the join emitted is the join of those inputs:

* stream-stream: the exact reference. Every pair of same-key records within the windows, and (left,
  outer) every record without a partner joined with None, once; records the task dropped as late (the
  lineage ledger names them) or dead-lettered take no part. Outputs are compared as a multiset of
  (key, value, timestamp): a missing, extra or repeated result is a violation.
* stream-table and stream-global-table: each stream record's result must be the joiner applied to a value
  the table held for its key (or None) at some point, and, per key, the table values used must move
  forward through the table's history as the stream's offsets do (a task never reads the table back in
  time). Inner joins: a stream record without output must have met a missing key. Where the lineage ledger
  says what each committed batch read (`TableReads`), the value must moreover be one the table held after
  exactly the table records the task had processed before the stream record: those of earlier batches, and
  those of its own batch that come before it in the order a task merges its inputs (by each partition's
  largest timestamp so far). A store restored past its committed offset, or from a stale changelog, joins a
  value outside that and is named. A global table is read, for each batch, exactly to the ends the driver
  pinned, which the ledger records (`GlobalReads`): each stream record's value must be the one its key held
  there.
* table-table: with the ledger, update by update (`explain_table_table`): each update that changed its
  table's row made the join of its value with the other table's row as the task had read it (a tombstone
  where the key left the join, nothing where it was in neither), named after it; any other update nothing.
  Without it: every output is the joiner applied to values both tables held for the key, and each key's
  last output is the join of the two tables' final values (a tombstone when the key is not in the join).
* foreign-key: every output is the joiner applied to a value the left row held and a value (or None) the
  right row its foreign key named held, and each left key's last output is the join of the final tables.

A side read from a repartition topic (a stream keyed anew) is replayed from that topic's records, which a
job keeps with `repartition_purge_interval=0`; an input that no longer starts at offset 0 stops the audit
with the reason. The records of a repartition topic and the results made of them carry the origin of the
input they came from (`eos.origin`): a result is matched to its stream record by that origin's place and
the index the record carried, which the result's extends. The ledger names a late record by its own place
on that topic: an input keyed anew two ways reaches two tasks, and may be late in one of them only.
"""

from __future__ import annotations

import heapq
import json
from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from operator import attrgetter
from typing import Any, NamedTuple, TypeVar

from eos.audit.ledger import read_ledger
from eos.audit.scan import scan_topic
from eos.audit.windows import _dead_lettered, only, replay_prefix, require_whole
from eos.ledger import LedgerEntry, ledger_topic
from eos.origin import INDEX_LEVEL_BITS, Origin, held_place, origin_of, output_indices, top_level
from eos.records import Record
from eos.serde import Serde
from eos.streamtime import is_marker
from eos.tables import JoinSpec, JoinWindows
from eos.time import RECORD_TIME
from eos.topology import SubTopology
from eos.worker.processing import entries, input_readings
from eos.worker.progress import CommitMetadata
from transactions import KafkaAdmin, Message, admin_for

__all__ = ["JoinAuditResult", "audit_join", "reference_stream_stream", "explain_stream_table",
           "check_table_table", "explain_table_table", "check_foreign_key", "table_reads", "TableReads",
           "GlobalReads"]

Joiner = Callable[[Any, Any], Any]


@dataclass
class JoinAuditResult:
    kind: str = ""
    how: str = ""
    input_records: int = 0
    output_records: int = 0
    expected: int = 0
    late_records: int = 0
    dead_letters: int = 0
    missing: int = 0
    unexpected: int = 0
    wrong_values: int = 0
    #: records checked against what their batch had read of the table (`TableReads`, `GlobalReads`): a
    #: stream-table or stream-global-table join's stream records, a table-table join's updates of either side
    bounded: int = 0
    samples: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def violations(self) -> int:
        return self.missing + self.unexpected + self.wrong_values

    def sample(self, kind: str, limit: int, **detail: Any) -> None:
        bucket = self.samples.setdefault(kind, [])
        if len(bucket) < limit:
            bucket.append(detail)


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr)


#: What the replay gets where the job's joiner raises on a pair of values: no output can equal it (the job
#: sent the record that met that pair to the dead-letter topic).
RAISED = "\x00the joiner raised"


def _join(joiner: Joiner, left: Any, right: Any) -> str:
    """The canonical result of the job's joiner on two values, or RAISED when it raises."""
    try:
        return _canon(joiner(left, right))
    except Exception:
        return RAISED


#: The stateless steps between a join and its results' topic, replayed (`eos.audit.windows.replay_prefix`):
#: a record in, what reaches the topic out; None when the join writes its results straight there.
After = Callable[[Record], list[Record]] | None


def _results(joiner: Joiner, after: After, key: Any, left: Any, right: Any,
             timestamp: int) -> list[tuple[Any, str, int]]:
    """(key, canonical value, timestamp) of what reaches the join's topic of the joiner's result on two
    values (RAISED where a function raises: no output equals it)."""
    if after is None:
        return [(key, _join(joiner, left, right), timestamp)]
    try:
        made = after(Record(key, joiner(left, right), "", 0, 0, timestamp))
    except Exception:
        return [(key, RAISED, timestamp)]
    return [(r.key, _canon(r.value), r.timestamp) for r in made]


# ---------------------------------------------------------------- pure references


def reference_stream_stream(left: Iterable[Record], right: Iterable[Record], windows: JoinWindows, how: str,
                            joiner: Joiner, stream_time: int | None = None,
                            after: After = None) -> Counter[tuple[Any, str, int]]:
    """The outputs (key, canonical value, timestamp) of a windowed stream-stream join of the records given
    (those the task did not drop as late): every pair within the windows, and per `how` the records
    without a partner joined with None, those whose window has closed by `stream_time` (the task's
    stream time when it committed last; None: all); `after`: the steps between the join and its topic."""
    def closed(ts: int, reach: int) -> bool:
        return stream_time is None or ts + reach < stream_time - windows.span

    rights: dict[Any, list[Record]] = defaultdict(list)
    for r in right:
        if r.key is not None and r.value is not None:
            rights[r.key].append(r)
    out: Counter[tuple[Any, str, int]] = Counter()
    matched_right: set[int] = set()  # by identity: a flat map before the join makes several records of one place
    for lrec in left:
        if lrec.key is None or lrec.value is None:
            continue
        partners = [r for r in rights.get(lrec.key, ())
                    if lrec.timestamp - windows.before <= r.timestamp <= lrec.timestamp + windows.after]
        for r in partners:
            out.update(_results(joiner, after, lrec.key, lrec.value, r.value, max(lrec.timestamp, r.timestamp)))
            matched_right.add(id(r))
        if not partners and how in ("left", "outer") and closed(lrec.timestamp, windows.after):
            out.update(_results(joiner, after, lrec.key, lrec.value, None, lrec.timestamp))
    if how == "outer":
        for key, records in rights.items():
            for r in records:
                if id(r) not in matched_right and closed(r.timestamp, windows.before):
                    out.update(_results(joiner, after, key, None, r.value, r.timestamp))
    return out


def explain_stream_table(stream: list[Record], results: Mapping[int, Sequence[Any]], versions: dict[Any, list[Any]],
                         joiner: Joiner, how: str, after: After = None,
                         reads: Reads | None = None) -> list[tuple[str, Record, Any]]:
    """Check a stream-table join of one stream partition. `stream`: what reached the join of each input
    record, in offset order; the records of one input share its offset (what a flat map before the join made
    of it, in order; a record with value None, one filtered out, reaches it with nothing). `results` maps an
    input's offset to its outputs in order (absent: none); `versions[key]` is the key's table history (None
    first, then each update's value, None for a tombstone). Each record is joined with a value its key held
    in the table (a left join's with None too; an inner join's makes nothing where the key had no value) and
    `after` (the steps between the join and its topic, None: none) makes the outputs of that; per key the
    values used move forward through the history as the offsets do (a task never reads the table back in
    time). `reads`: what the task had read of the table at each record (from the ledger), which bounds the
    versions each can have used. Returns (problem, record, output) for what no such replay explains."""
    problems: list[tuple[str, Record, Any]] = []
    position: dict[Any, int] = defaultdict(int)  # per key: the earliest table version still usable
    for offset, group in groupby(stream, key=attrgetter("offset")):
        records = list(group)
        joined = [r for r in records if r.value is not None]
        got = [_canon(v) for v in results.get(offset, ())]
        found = _replay_one(joined, got, versions, position, joiner, how, after, reads)
        if found is not None:
            position.update(found)
        else:
            problems += _name_problems(joined or records[:1], list(results.get(offset, ())), got, versions, position,
                                       joiner, how, after, reads)
    return problems


@dataclass(frozen=True)
class TableReads:
    """What a stream-table join's task had read of its table when it joined each stream record, from the
    lineage ledger's batches (`table_reads`). `before[offset]`: for the stream input record at `offset`, the
    table offsets x such that the task had applied exactly the table records before x (one x, or a range of
    them where timestamps tie and either input may have come first); `updates[key]`: the table offsets of the
    updates the key's history (`versions[key][1:]`) is made of, in order."""

    before: Mapping[int, tuple[int, int]]
    updates: Mapping[Any, Sequence[int]]

    def indices(self, key: Any, offset: int) -> tuple[int, int] | None:
        """The first and last index of the key's history the record at `offset` can have been joined with;
        None where the ledger does not say."""
        read = self.before.get(offset)
        if read is None:
            return None
        offsets = self.updates.get(key, ())
        return bisect_left(offsets, read[0]), bisect_left(offsets, read[1])


@dataclass(frozen=True)
class GlobalReads:
    """What a stream-global-table join's task had read of the global table when it joined each stream record:
    its batch's pins, from the lineage ledger (`global_reads`). A worker's copy is brought to exactly those
    ends before the batch and kept there through it (`eos.worker.global_tables`). `before[offset]`: for the
    stream input record at `offset`, the end each partition of the table's topic had been read to;
    `updates[key]`: the partition the key's updates are in and their offsets, those its history
    (`versions[key][1:]`) is made of, in order; None for a key whose updates are in several partitions (the
    copy's order of reading them decides its row, so any row is allowed)."""

    before: Mapping[int, Mapping[int, int]]
    updates: Mapping[Any, tuple[int, Sequence[int]] | None]

    def indices(self, key: Any, offset: int) -> tuple[int, int] | None:
        """The index of the key's history the record at `offset` was joined with (twice: one index, the
        shape of `TableReads.indices`); None where the ledger does not say."""
        pins = self.before.get(offset)
        found = self.updates.get(key)  # (a key the table never held has one row, None: nothing to bound)
        if pins is None or found is None or found[0] not in pins:
            return None
        at = bisect_left(found[1], pins[found[0]])
        return at, at


#: What bounds the table values a stream-table join's stream record can have been joined with
Reads = TableReads | GlobalReads


#: One committed batch of a join's task, from the ledger: its [start, end) of the stream's and of the table's
#: partition (None: the batch read nothing of it).
BatchReads = tuple[tuple[int, int] | None, tuple[int, int] | None]


def table_reads(batches: Iterable[BatchReads], stream: Sequence[tuple[int, int]],
                table: Sequence[tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """`TableReads.before` of one partition. `batches`: the task's committed batches in commit order;
    `stream`, `table`: (offset, timestamp) of every record of the two partitions, in offset order, each
    timestamp as the task merged it (`eos.worker.processing.entries`: -1 for one it could not read).

    A batch's records are processed in `heapq.merge` order of its partitions by timestamp, each partition in
    offset order: that is the order of (the partition's largest timestamp up to the record, which partition,
    offset), and which partition comes first on a tie is the read's. So within a batch, the table records
    before a stream record are a prefix of the batch's table records: those whose running largest timestamp
    is below the stream record's, and on a tie perhaps those equal to it."""
    out: dict[int, tuple[int, int]] = {}
    table_at = None  # the table offset the task's earlier batches had read to
    for stream_range, table_range in batches:
        if table_range is not None:
            table_at = table_range[0]
        if stream_range is None or table_at is None:
            if table_range is not None:
                table_at = table_range[1]
            continue
        end = table_range[1] if table_range is not None else table_at
        t_offsets, t_highest = _running_highest(table, table_at, end)
        s_offsets, s_highest = _running_highest(stream, *stream_range)
        for offset, highest in zip(s_offsets, s_highest, strict=True):
            lo, hi = bisect_left(t_highest, highest), bisect_right(t_highest, highest)
            out[offset] = (t_offsets[lo] if lo < len(t_offsets) else end,
                           t_offsets[hi] if hi < len(t_offsets) else end)
        table_at = end
    return out


def _running_highest(records: Sequence[tuple[int, int]], start: int, end: int) -> tuple[list[int], list[int]]:
    """The offsets in [start, end) and each one's largest timestamp of the range up to it."""
    offsets, highest, top = [], [], -(1 << 63)
    for offset, ts in records[bisect_left(records, (start, -(1 << 63))):bisect_left(records, (end, -(1 << 63)))]:
        top = max(top, ts)
        offsets.append(offset)
        highest.append(top)
    return offsets, highest


def _history(versions: dict[Any, list[Any]], key: Any) -> list[Any]:
    return versions.get(key, [None]) if key is not None else [None]


class VersionedState(NamedTuple):
    """A versioned table's key after its first `seen` kept updates (`updates`: (timestamp, value) of all of
    them, in offset order), with the least and the most the store's history bound (observed stream time -
    history retention) can have been while the key was so: a stream record is joined with the version at its
    timestamp, or with None where that is before the bound. `optional`: the indices of updates the store may
    not have kept (a versioned global table's copy, whose bound at an update depends on the partitions it had
    read before it: `_global_versioned_states`)."""

    updates: list[tuple[int, Any]]
    seen: int
    bound_lo: int
    bound_hi: int
    optional: frozenset[int] = frozenset()

    def values_at(self, timestamp: int) -> tuple[Any, ...]:
        """The values a lookup at `timestamp` can have found: the newest version at it (a later update at the
        same time replaces), or, where that one may not have been kept, an older one, or none."""
        found: list[Any] = []
        at = sorted((ts, i) for i, (ts, _) in enumerate(self.updates[:self.seen]) if ts <= timestamp)
        for _, i in reversed(at):
            found.append(self.updates[i][1])
            if i not in self.optional:
                break
        else:
            found.append(None)
        if timestamp < self.bound_lo:
            found = []
        if timestamp < self.bound_hi and not any(v is None for v in found):
            found.append(None)
        return tuple(found)


def _values(entry: Any, rec: Record) -> tuple[Any, ...]:
    return entry.values_at(rec.timestamp) if isinstance(entry, VersionedState) else (entry,)


def _choices(rec: Record, got: list[str], ptr: int, history: list[Any], start: int, joiner: Joiner, how: str,
             after: After, reads: Reads | None = None) -> dict[int, int]:
    """What `rec` can make of the table's versions from `start` that `got[ptr:]` begins with: per number of
    outputs, the earliest version that makes them (later ones leave the next records less). `reads`: only the
    versions the task can have held when it joined `rec`."""
    room = len(got) - ptr
    lengths = (({1} if how == "left" else {0, 1}) if after is None else set(range(room + 1))) & set(range(room + 1))
    found: dict[int, int] = {}
    stop = len(history)
    held = reads.indices(rec.key, rec.offset) if reads is not None and rec.key is not None else None
    if held is not None:
        start, stop = max(start, held[0]), min(stop, held[1] + 1)
    for i in range(start, stop):
        if len(found) == len(lengths):
            break
        for value in _values(history[i], rec):
            made = [] if value is None and how != "left" else [
                v for _, v, _ in _results(joiner, after, rec.key, rec.value, value, rec.timestamp)]
            if len(made) in lengths and len(made) not in found and got[ptr:ptr + len(made)] == made:
                found[len(made)] = i
    return found


def _replay_one(records: list[Record], got: list[str], versions: dict[Any, list[Any]], position: dict[Any, int],
                joiner: Joiner, how: str, after: After, reads: Reads | None = None) -> dict[Any, int] | None:
    """The table versions (per key) under which one input's records make exactly `got`, in order, each
    moving forward from `position`; None when none do. A search over how many outputs each record made
    (`_choices`)."""
    keys = list(dict.fromkeys(r.key for r in records))
    start = (0, 0, tuple(position[k] for k in keys))
    todo, seen = [start], {start}
    while todo:
        j, ptr, pos = todo.pop()
        if j == len(records):
            if ptr == len(got):
                return dict(zip(keys, pos, strict=True))
            continue
        rec = records[j]
        slot = keys.index(rec.key)
        for made, i in _choices(rec, got, ptr, _history(versions, rec.key), pos[slot], joiner, how, after,
                                reads).items():
            state = (j + 1, ptr + made, (*pos[:slot], i, *pos[slot + 1:]))
            if state not in seen:
                seen.add(state)
                todo.append(state)
    return None


def _name_problems(records: list[Record], outputs: list[Any], got: list[str], versions: dict[Any, list[Any]],
                   position: dict[Any, int], joiner: Joiner, how: str, after: After,
                   reads: Reads | None = None) -> list[tuple[str, Record, Any]]:
    """What is wrong with one input's `outputs` (`got`: canonical) that no replay explains, found by taking
    each record's first explanation, the one making the most outputs (moving `position` on): an output no
    version explains is a wrong value, a record without an output a missing one, outputs left over
    unexpected."""
    problems, ptr = [], 0
    for n, rec in enumerate(records):
        if rec.value is None:  # (an input that reached the join with nothing)
            continue
        choices = _choices(rec, got, ptr, _history(versions, rec.key), position[rec.key], joiner, how, after, reads)
        most = max(choices, default=0)
        if most:
            position[rec.key], ptr = choices[most], ptr + most
        elif 0 in choices and len(got) - ptr < len(records) - n:  # (fewer outputs left than records)
            position[rec.key] = choices[0]
        elif ptr < len(got):
            problems.append(("wrong_values", rec, outputs[ptr]))
            ptr += 1
        else:
            problems.append(("missing", rec, None))
    problems += [("unexpected", records[-1], value) for value in outputs[ptr:]]
    return problems


def _in_join(how: str, left: Any, right: Any) -> bool:
    """Whether a table-table join of `how` holds a key whose rows are `left` and `right` (None: none)."""
    return {"inner": left is not None and right is not None, "left": left is not None,
            "outer": left is not None or right is not None}[how]


def check_table_table(left: dict[Any, list[Any]], right: dict[Any, list[Any]], outputs: dict[Any, list[Any]],
                      joiner: Joiner, how: str) -> list[tuple[str, Any, Any]]:
    """Check a table-table join: `left`/`right` map a key to its history (values, None for a tombstone),
    `outputs` a key to its outputs in order. Returns (problem, key, detail)."""
    def joined(lv: Any, rv: Any) -> Any:
        return _join(joiner, lv, rv) if _in_join(how, lv, rv) else None

    problems = []
    for key in set(left) | set(right) | set(outputs):
        lh, rh = [None, *left.get(key, [])], [None, *right.get(key, [])]
        possible = {joined(lv, rv) for lv in lh for rv in rh}
        got = outputs.get(key, [])
        for value in got:
            if (None if value is None else _canon(value)) not in possible:
                problems.append(("wrong_values", key, value))
        final = joined(lh[-1], rh[-1])
        last = None if not got or got[-1] is None else _canon(got[-1])
        if last != final and final != RAISED:  # (the job dead-lettered the final pair: no final to expect)
            problems.append(("missing" if final is not None else "unexpected", key,
                             {"expected": final, "last_output": last}))
    return problems


def check_foreign_key(left: dict[Any, list[Any]], right: dict[Any, list[Any]], outputs: dict[Any, list[Any]],
                      joiner: Joiner, how: str, foreign_key: Callable[[Any], Any]) -> list[tuple[str, Any, Any]]:
    """Check a foreign-key join: `left`/`right` map a key to its history (values, None for a tombstone),
    `outputs` a left key to its outputs in order (None: a tombstone, allowed whenever the row may have left
    the join). Returns (problem, key, detail)."""
    def joined(lv: Any, rv: Any) -> Any:
        if lv is None or (rv is None and how == "inner"):
            return None
        return _join(joiner, lv, rv)

    problems = []
    for key in set(left) | set(outputs):
        history = left.get(key, [None])
        possible = {None}
        for lv in history:
            if lv is not None:
                fk = foreign_key(lv)
                possible |= {joined(lv, rv) for rv in [None, *right.get(fk, [])]} if fk is not None else {
                    joined(lv, None)}
        got = outputs.get(key, [])
        for value in got:
            if (None if value is None else _canon(value)) not in possible:
                problems.append(("wrong_values", key, value))
        final_left = history[-1]
        final_fk = None if final_left is None else foreign_key(final_left)
        final_right = None if final_fk is None else right.get(final_fk, [None])[-1]
        final = joined(final_left, final_right)
        last = None if not got or got[-1] is None else _canon(got[-1])
        if last != final and final != RAISED:  # (the job dead-lettered the final pair: no final to expect)
            problems.append(("missing" if final is not None else "unexpected", key,
                             {"expected": final, "last_output": last}))
    return problems


# ---------------------------------------------------------------- the audit on the broker


def audit_join(bootstrap_servers: str, sub: SubTopology, *, group: str, application_id: str,
               dead_letters: str | None = None, admin: KafkaAdmin | None = None,
               max_samples: int = 10, groups: Mapping[str, str] | None = None,
               right_table: SubTopology | None = None, join: JoinSpec | None = None,
               transitive: frozenset[str] = frozenset(),
               since: Mapping[tuple[str, int], int] | None = None) -> JoinAuditResult:
    """Audit the join sub-topology `sub` of an application (its committed inputs up to the group's committed
    offsets, its committed output). `groups`: inputs whose progress another group holds. A foreign-key join
    also needs `right_table`, the sub-topology that reads its right table. `join`: which of the
    sub-topology's joins (needed when it has several). `transitive`: the application's repartition topics,
    whose records carry the origin of the input they came from, as the join's outputs then do. Each side's
    records are passed through the stateless operators between its topic and the join
    (`JoinSpec.left_prefix`, `right_prefix`), as its task passed them, and each result expected through those
    between the join and its topic (`JoinSpec.suffix`). `since`: where the task started reading a partition, the
    records before it not its input (auto_offset_reset "latest" or a duration: `eos.audit.auditor.started_at`)."""
    spec: JoinSpec = join or only(sub.joins, f"sub-topology {sub.name!r}", "join")
    admin = admin or admin_for(bootstrap_servers, settle_once=True)
    result = JoinAuditResult(spec.kind, spec.how)
    skipped = _dead_lettered(bootstrap_servers, dead_letters, sub.name, admin) if dead_letters else set()
    result.dead_letters = len(skipped)
    sides = (spec.left, spec.right) if spec.kind in ("stream-stream", "stream-table", "table-table") else (spec.left,)
    for topic in sides:
        require_whole(admin, topic, f"the join audit of {sub.name!r}")
    times: dict[tuple[str, int], list[tuple[int, int]]] | None = (
        {} if spec.kind in ("stream-table", "table-table") else None)
    inputs = {t: _committed_records(bootstrap_servers, sub, t, (groups or {}).get(t, group), admin, skipped, times,
                                    since)
              for t in sides}
    result.input_records = sum(len(rs) for rs in inputs.values())
    origins = {t: [_carried(r, transitive) for r in rs] for t, rs in inputs.items()}
    # what reached the join of each record (a stream-table join's stream: a stand-in for a record filtered out)
    stand_in = spec.kind in ("stream-table", "stream-global")
    reached = {t: _reaching(inputs[t], origins[t], prefix, stand_in=stand_in and t == spec.left)
               for t, prefix in zip(sides, (spec.left_prefix, spec.right_prefix), strict=False)}
    # (the ledger names a late record of a repartition topic by the origin it carries)
    batches: list[LedgerEntry] = []
    ledger = read_ledger(bootstrap_servers, ledger_topic(application_id),
                         {*sub.inputs, *(o[0] for places in origins.values() for o in places)}, admin=admin,
                         subtopologies={sub.name}, entries=batches)
    # (by each record's place; the records its own step dropped, not another step's of the task)
    late = {(tp, o) for tp, account in (ledger or {}).items() for o in account.late_for(spec.step)}
    late_origins = {(tp, o) for tp, account in (ledger or {}).items() for o in account.late_origins}  # (older)
    routed = list(_outputs(bootstrap_servers, sub, spec, admin))
    _check_routes(spec, routed, result, max_samples)
    outputs = [o[:4] for o in routed]
    result.output_records = len(outputs)
    after = replay_prefix(spec.suffix, stand_in=False) if spec.suffix else None
    if spec.kind == "stream-stream":
        assert spec.windows is not None
        kept = {t: [r for r, o in rs if ((r.topic, r.partition), r.offset) not in late
                    and ((o[0], o[1]), o[2]) not in late_origins] for t, rs in reached.items()}
        result.late_records = sum(map(len, reached.values())) - sum(map(len, kept.values()))
        expected: Counter[tuple[Any, str, int]] = Counter()
        stream_times = _stream_times(admin, sub, group, groups)
        for p in {r.partition for rs in kept.values() for r in rs}:
            expected += reference_stream_stream([r for r in kept[spec.left] if r.partition == p],
                                                [r for r in kept[spec.right] if r.partition == p],
                                                spec.windows, spec.how, spec.joiner, stream_times.get(p, -1), after)
        observed = Counter((k, _canon(v), ts) for k, v, ts, _ in outputs)
        result.expected = sum(expected.values())
        for item, n in (expected - observed).items():
            result.missing += n
            result.sample("missing", max_samples, output=item, times=n)
        for item, n in (observed - expected).items():
            result.unexpected += n
            result.sample("unexpected", max_samples, output=item, times=n)
    elif spec.kind in ("stream-table", "stream-global"):
        _audit_stream_table(spec, sub, inputs[spec.left], origins[spec.left],
                            {t: [r for r, _ in rs] for t, rs in reached.items()}, outputs, result, max_samples,
                            bootstrap_servers, admin, after,
                            None if times is None or ledger is None
                            else _batch_reads(batches, sub, spec.left, spec.right, times),
                            None if spec.kind != "stream-global" or ledger is None
                            else _global_reads(batches, sub, spec.left, spec.right))
    elif spec.kind == "foreign-key":
        assert right_table is not None and spec.key is not None
        right = _committed_records(bootstrap_servers, right_table, spec.right, (groups or {}).get(spec.right, group),
                                   admin, skipped, since=since)
        by_left_key: dict[Any, list[Any]] = defaultdict(list)
        for k, v, _, _ in outputs:
            by_left_key[k].append(v)
        result.input_records += len(right)
        result.expected = len(by_left_key)
        replay = replay_prefix(spec.right_prefix, stand_in=False)
        for problem, key, detail in check_foreign_key(_histories((r for r, _ in reached[spec.left]),
                                                                 _history_of(sub, spec.left_store),
                                                                 absent_tombstones=False),
                                                      _histories((x for r in right for x in replay(r)),
                                                                 _history_of(right_table, spec.right_store)),
                                                      by_left_key,
                                                      spec.joiner, spec.how, spec.key):
            setattr(result, problem, getattr(result, problem) + 1)
            result.sample(problem, max_samples, key=key, detail=detail)
    else:
        histories = {t: _histories((r for r, _ in reached[t]), _history_of(sub, store))
                     for t, store in ((spec.left, spec.left_store), (spec.right, spec.right_store))}
        per_key: dict[Any, list[Any]] = defaultdict(list)
        for k, v, _, _ in outputs:
            per_key[k].append(v)
        result.expected = len(per_key)
        bounded = (times is not None and ledger is not None and spec.left != spec.right
                   and all(len({o for _, o in rs}) == len(rs) for rs in reached.values()))  # (one record each)
        problems = _audit_table_table(spec, sub, {t: [r for r, _ in rs] for t, rs in reached.items()},
                                      {t: dict(zip(origins[t], rs, strict=True)) for t, rs in inputs.items()},
                                      outputs, result, batches, times or {}) if bounded else check_table_table(
            histories[spec.left], histories[spec.right], per_key, spec.joiner, spec.how)
        for problem, key, detail in problems:
            setattr(result, problem, getattr(result, problem) + 1)
            result.sample(problem, max_samples, key=key, detail=detail)
    return result


#: A table-table join's outcome of one update (`explain_table_table`) besides a result's canonical value
NOTHING, TOMBSTONE = "\x00no result", "\x00a tombstone"


def explain_table_table(left: list[Record], right: list[Record],
                        results: Mapping[tuple[str, int], Sequence[tuple[Any, Any]]],
                        joiner: Joiner, how: str, reads: Mapping[str, Mapping[int, tuple[int, int]]],
                        versioned: tuple[int | None, int | None] = (None, None)) -> list[tuple[str, Any, Any]]:
    """Check a table-table join of one partition update by update. `left`, `right`: what reached the join of
    each side's records, in offset order (one record per input); `results[(topic, offset)]`: (key, value)
    of the outputs named after the input record at `offset` of `topic`; `reads[topic][offset]`: the other
    side's offsets x such that the task had applied exactly its records before x when it processed the
    record (`table_reads`; absent: any). Each update that changed its side's current row (`_kept_updates`) makes
    the join of its value with the other side's row then, or a tombstone when the key left the join, or
    nothing when it was in neither; any other update makes nothing (`eos.operators.joins.TableTableJoin`).
    Returns (problem, key, detail) for what no read the task can have made explains."""
    def present(lv: Any, rv: Any) -> bool:
        return _in_join(how, lv, rv)

    sides = {0: left, 1: right}
    rows: dict[int, dict[Any, list[tuple[int, Any]]]] = {}  # side -> key -> (offset, value) of its current rows
    changed: dict[int, set[int]] = {}  # side -> offsets of the updates that changed a current row
    for side, records in sides.items():
        rows[side], changed[side] = defaultdict(list), set()
        for r, current, _ in _kept_updates(records, versioned[side]):
            if current:
                rows[side][r.key].append((r.offset, r.value))
                changed[side].add(r.offset)
    problems: list[tuple[str, Any, Any]] = []
    for side, records in sides.items():
        other = 1 - side
        for r in records:
            if r.key is None:
                continue
            own = rows[side].get(r.key, [])
            before = _row_at(own, r.offset)
            read = reads.get(r.topic, {}).get(r.offset)
            theirs = rows[other].get(r.key, [])
            partners = ([_row_at(theirs, read[0]), *(v for o, v in theirs if read[0] <= o < read[1])]
                        if read is not None else [None, *(v for _, v in theirs)])
            possible = {NOTHING}
            if r.offset in changed[side]:
                possible = set()
                for partner in partners:
                    new = (r.value, partner) if side == 0 else (partner, r.value)
                    old = (before, partner) if side == 0 else (partner, before)
                    possible.add(_join(joiner, *new) if present(*new) else TOMBSTONE if present(*old) else NOTHING)
            made = [v for _, v in results.get((r.topic, r.offset), ())]
            got = NOTHING if not made else TOMBSTONE if made[0] is None else _canon(made[0])
            if any(k != r.key for k, _ in results.get((r.topic, r.offset), ())):
                got = "\x00a result under another key"
            for extra in made[1:]:
                problems.append(("unexpected", r.key, {"record": (r.topic, r.partition, r.offset), "output": extra}))
            if got not in possible:
                kind = ("missing" if got == NOTHING else "unexpected" if possible == {NOTHING}
                        else "wrong_values")
                problems.append((kind, r.key, {"record": (r.topic, r.partition, r.offset), "value": r.value,
                                               "output": None if not made else made[0],
                                               "possible": sorted(p for p in possible if p != RAISED)}))
    seen = {(r.topic, r.offset) for records in sides.values() for r in records if r.key is not None}
    problems += [("unexpected", key, {"record": place, "output": value}) for place, made in results.items()
                 if place not in seen for key, value in made]  # (made of an input that reached the join with nothing)
    return problems


def _row_at(rows: list[tuple[int, Any]], offset: int) -> Any:
    """A side's row for a key once the updates before `offset` were applied (`rows`: (offset, value) of the
    updates that changed it, in order)."""
    at = bisect_left(rows, offset, key=lambda row: row[0])
    return rows[at - 1][1] if at else None


def _audit_table_table(spec: JoinSpec, sub: SubTopology, reached: Mapping[str, list[Record]],
                       places: Mapping[str, Mapping[Place, Record]],
                       outputs: list[tuple[Any, Any, int, Origin | None]], result: JoinAuditResult,
                       batches: list[LedgerEntry],
                       times: Mapping[tuple[str, int], Sequence[tuple[int, int]]]) -> list[tuple[str, Any, Any]]:
    """A table-table join checked update by update (`explain_table_table`), each side's updates bounded by
    what the task had read of the other side (`table_reads` both ways)."""
    made_of = {place: (r.topic, r.partition, r.offset) for by_place in places.values()
               for place, r in by_place.items()}
    results: dict[int, dict[tuple[str, int], list[tuple[Any, Any]]]] = defaultdict(lambda: defaultdict(list))
    problems: list[tuple[str, Any, Any]] = []
    for key, value, _, origin in outputs:
        found = None if origin is None else _made_of(origin, made_of)
        if found is None:
            problems.append(("unexpected", key, {"origin": origin, "output": value}))
            continue
        topic, partition, offset = found
        results[partition][(topic, offset)].append((key, value))
    versioned = (_history_of(sub, spec.left_store), _history_of(sub, spec.right_store))
    left_reads = _batch_reads(batches, sub, spec.left, spec.right, times)
    right_reads = _batch_reads(batches, sub, spec.right, spec.left, times)
    for p in sorted({r.partition for rs in reached.values() for r in rs} | set(results)):
        reads = {spec.left: left_reads.get(p, {}), spec.right: right_reads.get(p, {})}
        result.bounded += sum(len(r) for r in reads.values())
        problems += explain_table_table([r for r in reached[spec.left] if r.partition == p],
                                        [r for r in reached[spec.right] if r.partition == p], results[p],
                                        spec.joiner, spec.how, reads, versioned)
    return problems


def _reaching(records: list[Record], places: list[Place], prefix: tuple[Any, ...], *,
              stand_in: bool) -> list[tuple[Record, Place]]:
    """What reached the join of each record of a side (`eos.audit.windows.replay_prefix`), with the place its
    outputs name."""
    replay = replay_prefix(prefix, stand_in=stand_in)
    return [(r, place) for record, place in zip(records, places, strict=True) for r in replay(record)]


def _audit_stream_table(spec: JoinSpec, sub: SubTopology, stream: list[Record], carried: list[Place],
                        reached: dict[str, list[Record]], outputs: list[tuple[Any, Any, int, Origin | None]],
                        result: JoinAuditResult, limit: int, bootstrap_servers: str, admin: KafkaAdmin,
                        after: After, before: Mapping[int, Mapping[int, tuple[int, int]]] | None = None,
                        pins: Mapping[int, Mapping[int, Mapping[int, int]]] | None = None) -> None:
    """`stream`: the stream side's committed records, `carried`: the places their outputs name, `reached`:
    what reached the join of each side's records, `after`: the steps between the join and its topic,
    `before`: per partition, what the task had read of the table at each stream record (`TableReads.before`;
    None: the ledger does not say), `pins`: the same of a global table (`GlobalReads.before`)."""
    table_key: Callable[[Record], Any] = spec.key or _record_key
    global_updates: Mapping[Any, tuple[int, Sequence[int]] | None] = {}
    if spec.kind == "stream-global":
        table = next(g for g in sub.global_tables if g.topic == spec.right)
        read = [_table_record(m, table) for batch in scan_topic(bootstrap_servers, table.topic, admin=admin)
                for m in batch]
        rows = [r for r in read if r is not None]
        history = table.history_retention_ms
        versions = _histories(rows) if history is None else _global_versioned_states(rows, history)
        global_updates = _update_places(rows, history)
    else:
        versions = {}
    made_of = {o: (r.partition, r.offset) for r, o in zip(stream, carried, strict=True)}
    carried_index = {(r.partition, r.offset): o[3] for r, o in zip(stream, carried, strict=True)}
    results: dict[tuple[int, int], dict[int, Any]] = defaultdict(dict)  # per stream record: by output index
    for _, value, _, origin in outputs:
        left = None if origin is None else _made_of(origin, made_of)
        if left is None or origin is None:
            result.unexpected += 1
            result.sample("unexpected", limit, origin=origin, value=value)
            continue
        if origin.index in results[left]:
            result.unexpected += 1
            result.sample("unexpected", limit, duplicate_of=origin, value=value)
        results[left][origin.index] = value
    for p in sorted({r.partition for r in reached[spec.left]}):
        joined = [r for r in reached[spec.left] if r.partition == p]
        reads: Reads | None = None
        if spec.kind == "stream-table":
            rows = [r for r in reached[spec.right] if r.partition == p]
            history = _history_of(sub, spec.right_store)
            part_versions = _histories(rows) if history is None else _versioned_states(rows, history)
            if before is not None:
                reads = TableReads(before.get(p, {}), _update_offsets(rows, history))
        else:
            part_versions = versions
            if pins is not None:
                reads = GlobalReads(pins.get(p, {}), global_updates)
            joined = [Record(table_key(r) if r.value is not None else None, r.value, r.topic, r.partition, r.offset,
                             r.timestamp, r.headers) for r in joined]
        mine = {o: [v for _, v in sorted(by_index.items())] for (pp, o), by_index in results.items() if pp == p}
        if spec.grace_ms is not None:  # each record let go on its own, in the order it was (`released_order`)
            joined, mine, reads = _as_released(joined, results, p, carried_index, spec, result, limit, reads)
        result.expected += sum(r.value is not None for r in joined)
        if reads is not None:
            result.bounded += sum(r.value is not None and r.offset in reads.before for r in joined)
        problems = explain_stream_table(joined, mine, part_versions, spec.joiner, spec.how, after, reads)
        unread = set()  # the records whose outputs only a table value the task had not read yet (or had
        if problems and reads is not None:  # overwritten already) explains
            unread = {id(r) for _, r, _ in problems} - {id(r) for _, r, _ in explain_stream_table(
                joined, mine, part_versions, spec.joiner, spec.how, after)}
        for problem, rec, value in problems:
            setattr(result, problem, getattr(result, problem) + 1)
            result.sample(problem, limit, record=(rec.topic, rec.partition, rec.offset), key=rec.key,
                          value=rec.value, output=value,
                          **({"reason": _UNREAD[spec.kind]} if id(rec) in unread else {}))


_UNREAD = {"stream-table": "joined a table value its task had not read, or no longer held, when it processed the "
                           "record (a store restored past its committed offset, or from a stale changelog?)",
           "stream-global": "joined a value other than the one the global table held where its batch had read it "
                            "to (the batch's pins, in the ledger): a worker's copy ahead of or behind them?"}


def _as_released(joined: list[Record], results: Mapping[tuple[int, int], Mapping[int, Any]], partition: int,
                 carried_index: Mapping[tuple[int, int], int | None], spec: JoinSpec, result: JoinAuditResult,
                 limit: int, reads: Reads | None = None
                 ) -> tuple[list[Record], dict[int, list[Any]], Reads | None]:
    """A grace period's join of one partition as `explain_stream_table` replays it: each record let go, in
    the order it was, as an input of its own (its offset its place in that order) with the outputs named after
    it, and what the task had read of the table when it let it go (`reads` by those places); outputs of a
    record not let go (late, or still held) are unexpected."""
    assert spec.grace_ms is not None
    released, late = released_order(joined, spec.grace_ms, spec.how)
    result.late_records += late
    slot, slots = spec.hold_slot  # (its own held records' places: k * slots + slot, `TaskContext.hold`)
    by_slot: dict[tuple[int, int], dict[int, Any]] = defaultdict(dict)
    for (pp, offset), by_index in results.items():
        if pp != partition:
            continue
        base = carried_index.get((pp, offset))
        for index, value in by_index.items():
            reserved = _reserved(index) if index >> INDEX_LEVEL_BITS else -1
            if base is not None and reserved >= 0:  # (reserved among the outputs of a record of a repartition topic)
                first, shift = output_indices(base)
                reserved = (reserved - first) >> shift if reserved >= first else -1
            place = held_place(reserved) - slot if reserved >= 0 else -1
            by_slot[(offset, place // slots if place >= 0 and place % slots == 0 else -1)][index] = value
    order: list[Record] = []
    mine: dict[int, list[Any]] = {}
    before: dict[int, Any] = {}
    for n, (rec, place, by) in enumerate(released):
        order.append(Record(rec.key, rec.value, rec.topic, rec.partition, n, rec.timestamp, rec.headers))
        mine[n] = [v for _, v in sorted(by_slot.pop((rec.offset, place), {}).items())]
        if reads is not None and by in reads.before:
            before[n] = reads.before[by]
    for (offset, _), by_index in by_slot.items():
        for value in by_index.values():
            result.unexpected += 1
            result.sample("unexpected", limit, record=(spec.left, partition, offset), output=value,
                          reason="made of a record the join did not let go of (late, or still held)")
    if isinstance(reads, TableReads):
        return order, mine, TableReads(before, reads.updates)
    return order, mine, None if reads is None else GlobalReads(before, reads.updates)


def _stream_times(admin: KafkaAdmin, sub: SubTopology, group: str,
                  groups: Mapping[str, str] | None) -> dict[int, int]:
    """Each task's stream time as its last commit recorded it (in the committed offsets' metadata)."""
    out: dict[int, int] = {}
    for topic in sub.inputs:
        tps = admin.topic_partitions(topic)
        for (_, p), committed in admin.group_commits((groups or {}).get(topic, group), tps, stable=True).items():
            if committed is not None:
                out[p] = max(out.get(p, -1), CommitMetadata.decode(committed.metadata).stream_time)
    return out


#: (topic, partition, offset, index) of an origin; index None: any index
Place = tuple[str, int, int, int | None]
_T = TypeVar("_T")


def _carried(record: Record, transitive: frozenset[str]) -> Place:
    """The origin the outputs made of `record` name: its own place (with any index), or, for a record of a
    repartition topic, the origin it carries (`eos.origin`)."""
    found = origin_of(record.headers) if record.topic in transitive else None
    if found is None:
        return record.topic, record.partition, record.offset, None
    return found.topic, found.partition, found.offset, found.index


def _made_of(output: Origin, inputs: Mapping[Place, _T]) -> _T | None:
    """The (partition, offset) of the input record (`inputs`: by `_carried` place) an output carrying the
    origin `output` was made of: by place, or by the index the record carried, which the output's extends by
    one level (`output_indices`): its bits below the output's top level, since a record makes fewer than
    2**INDEX_LEVEL_BITS outputs."""
    topic, partition, offset, index = output
    found = inputs.get((topic, partition, offset, None))
    while found is None and index >> INDEX_LEVEL_BITS:  # (a record held back adds a level: `_reserved`)
        index = _reserved(index)
        found = inputs.get((topic, partition, offset, index))
    return found


def _reserved(index: int) -> int:
    """The index an output's index extends by one level (`output_indices`): its bits below its top level."""
    return index & ((1 << top_level(index)) - 1)


def released_order(records: list[Record], grace: int, how: str) -> tuple[list[tuple[Record, int, int]], int]:
    """What a stream-table join with a grace period let go of, of one partition's stream records (in offset
    order, as they reached the join): (record, n, by) in the order it let them go, `n` its place among the
    records of its input the join held (k, of the place `k * slots + slot` it reserved: `TaskContext.hold`,
    `JoinSpec.hold_slot`), `by` the offset of the
    record whose processing let it go (the table is read then); and how many were dropped as late. Records
    still held at the end are in neither."""
    observed: int | None = None
    held: list[tuple[int, int, Record, int]] = []
    places: dict[int, int] = defaultdict(int)
    out, late = [], 0
    for seq, r in enumerate(records):
        if r.value is None or (r.key is None and how == "inner"):
            continue  # (dropped before the buffer)
        observed = r.timestamp if observed is None else max(observed, r.timestamp)
        deadline = observed - grace
        if r.timestamp < deadline:
            late += 1
            continue
        heapq.heappush(held, (r.timestamp, seq, r, places[r.offset]))
        places[r.offset] += 1
        while held and held[0][0] <= deadline:
            _, _, rec, n = heapq.heappop(held)
            out.append((rec, n, r.offset))
    return out, late


def _record_key(record: Record) -> Any:
    return record.key


def _histories(records: Iterable[Record], versioned: int | None = None, *,
               absent_tombstones: bool = True) -> dict[Any, list[Any]]:
    """key -> [None, value, ...]: a table's history per key (None for a tombstone), in offset order. Of a
    versioned table (`versioned`: its history retention), only the updates that changed the key's current
    row (`_kept_updates`)."""
    out: dict[Any, list[Any]] = defaultdict(lambda: [None])
    for r, current, _ in _kept_updates(records, versioned, absent_tombstones):
        if current:
            out[r.key].append(r.value)
    return dict(out)


def _history_of(sub: SubTopology | None, store: str | None) -> int | None:
    """The history retention of the store `store` of `sub` that keeps a join's side, None unless versioned."""
    found = [s for s in (sub.stores if sub is not None else ()) if s.name == store and s.kind == "versioned"]
    return found[0].retention_ms if found else None


def _update_offsets(rows: list[Record], versioned: int | None) -> dict[Any, list[int]]:
    """`TableReads.updates`: per key, the offsets of the updates its history in the join audit is made of
    (`_histories`, `_versioned_states`)."""
    out: dict[Any, list[int]] = defaultdict(list)
    for r, current, _ in _kept_updates(rows, versioned):
        if current or versioned is not None:
            out[r.key].append(r.offset)
    return dict(out)


def _update_places(rows: list[Record], versioned: int | None) -> dict[Any, tuple[int, list[int]] | None]:
    """`GlobalReads.updates`: per key, the partition of a global table's topic its updates are in and their
    offsets (`_update_offsets`); None for a key updated in several partitions."""
    out: dict[Any, tuple[int, list[int]] | None] = {}
    for r, current, _ in _kept_updates(rows, versioned):
        if current or versioned is not None:
            found = out.setdefault(r.key, (r.partition, []))
            if found is not None and found[0] == r.partition:
                found[1].append(r.offset)
            else:
                out[r.key] = None
    return out


def _global_reads(batches: Iterable[LedgerEntry], sub: SubTopology, stream: str,
                  table: str) -> dict[int, dict[int, Mapping[int, int]]]:
    """Per partition of `stream`, the ends each partition of the global table's topic `table` had been read
    to when the task joined each of its records (`GlobalReads.before`): its committed batch's pins. Batches
    without pins (a ledger written before they were recorded) bound nothing."""
    out: dict[int, dict[int, Mapping[int, int]]] = defaultdict(dict)
    for entry in batches:
        task, _, partition = entry.task.rpartition("-")
        ends = entry.pins.get(table)
        if task != sub.name or ends is None:
            continue
        for i in entry.inputs:
            if i.topic == stream and i.partition == int(partition):
                out[i.partition].update(dict.fromkeys(range(i.start, i.end), ends))
    return dict(out)


def _batch_reads(batches: Iterable[LedgerEntry], sub: SubTopology, stream: str, table: str,
                 times: Mapping[tuple[str, int], Sequence[tuple[int, int]]]) -> dict[int, dict[int, tuple[int, int]]]:
    """Per partition, what the task had read of `table` at each record of `stream` (`table_reads`), from its
    committed batches."""
    per_task: dict[int, list[BatchReads]] = defaultdict(list)
    for entry in batches:
        task, _, partition = entry.task.rpartition("-")
        if task != sub.name:
            continue
        p = int(partition)
        ranges = {i.topic: (i.start, i.end) for i in entry.inputs if i.partition == p}
        per_task[p].append((ranges.get(stream), ranges.get(table)))
    return {p: table_reads(reads, times.get((stream, p), ()), times.get((table, p), ()))
            for p, reads in per_task.items()}


def _kept_updates(records: Iterable[Record], versioned: int | None,
                  absent_tombstones: bool = True) -> Iterator[tuple[Record, bool, int]]:
    """The updates of a table a join's store kept, in offset order, each with whether it changed its key's
    current row and the store's observed stream time after it (its partition's largest timestamp kept): every
    one with a key, or of a versioned table (`versioned`: its history retention) those not older than the
    store's history bound then (`recovery.versioned`), current when not older than the key's newest version
    (`eos.operators.joins.keep_update`). `absent_tombstones=False`: a tombstone of a key without a row is not
    put at all (as a foreign-key join's left side does)."""
    observed: dict[int, int] = {}  # per partition (a task's store): its observed stream time
    newest: dict[Any, int] = {}
    holds: dict[Any, bool] = {}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        if r.key is None:
            continue
        if not absent_tombstones and r.value is None and not holds.get(r.key):
            continue
        seen = observed.get(r.partition)
        if versioned is not None and seen is not None and r.timestamp < seen - versioned:
            continue
        observed[r.partition] = r.timestamp if seen is None else max(seen, r.timestamp)
        current = versioned is None or r.key not in newest or r.timestamp >= newest[r.key]
        if current:
            newest[r.key] = r.timestamp
            holds[r.key] = r.value is not None
        yield r, current, observed[r.partition]


def _versioned_states(records: list[Record], versioned: int) -> dict[Any, list[Any]]:
    """key -> the states (`VersionedState`) a versioned table's key went through in a join's store, one per
    update the store kept, for the stream records of one partition: the store's history bound while each
    held runs from just after the update that made it to just before the key's next one."""
    kept = list(_kept_updates(records, versioned))
    bounds = [observed - versioned for _, _, observed in kept]  # the store's history bound after each
    last = bounds[-1] if bounds else -(1 << 63)
    updates: dict[Any, list[tuple[int, Any]]] = defaultdict(list)
    starts: dict[Any, list[int]] = defaultdict(list)  # per key: the index in `kept` of each of its updates
    for n, (r, _, _) in enumerate(kept):
        updates[r.key].append((r.timestamp, r.value))
        starts[r.key].append(n)
    out: dict[Any, list[Any]] = {}
    for key, at in starts.items():
        first = VersionedState(updates[key], 0, -(1 << 63), bounds[at[0] - 1] if at[0] else -(1 << 63))
        out[key] = [first, *(VersionedState(updates[key], i + 1, bounds[n],
                                            bounds[at[i + 1] - 1] if i + 1 < len(at) else last)
                             for i, n in enumerate(at))]
    return out


def _global_versioned_states(records: list[Record], versioned: int) -> dict[Any, list[Any]]:
    """A versioned global table's states (`_versioned_states`) for the join audit. A worker's copy reads the
    topic's partitions one after another up to each batch's pins, so the store's history bound at a lookup is
    not known here beyond its key's own partition: each state's bound is taken at its lowest from that
    partition's updates, and at its highest from every update of the topic. A lookup is thus explained by any
    bound some read order could have given, and never by none. For the same reason an update its partition
    kept may have been too old for the copy, once another partition was read first: each one older than the
    highest bound is optional (`VersionedState.optional`)."""
    parts: dict[int, list[Record]] = defaultdict(list)
    for r in records:
        parts[r.partition].append(r)
    if len(parts) <= 1:
        return _versioned_states(records, versioned)
    highest = max(r.timestamp for r in records) - versioned
    out = {}
    for part in parts.values():
        for key, states in _versioned_states(part, versioned).items():
            optional = frozenset(i for i, (ts, _) in enumerate(states[0].updates) if ts < highest)
            out[key] = [state._replace(bound_hi=max(state.bound_hi, highest), optional=optional) for state in states]
    return out


def _reading(sub: SubTopology, topic: str) -> tuple[Serde, Serde, Callable[[Record], int]]:
    ks, vs, ts = sub.per_topic.get(topic, (sub.key_serde, sub.value_serde, sub.timestamp))
    return ks, vs, ts or RECORD_TIME


def _committed_records(bootstrap_servers: str, sub: SubTopology, topic: str, group: str, admin: KafkaAdmin,
                       skipped: set[tuple[str, int, int]],
                       times: dict[tuple[str, int], list[tuple[int, int]]] | None = None,
                       since: Mapping[tuple[str, int], int] | None = None) -> list[Record]:
    """The records of `topic` up to the group's committed offsets (from `since`, where given) that the task
    processed (not dead-lettered, not a stream-time marker), read as it read them. `times` gets (offset,
    timestamp) of every record, each timestamp as the task merged its inputs by (`entries`: -1 for one it could
    not read)."""
    tps = admin.topic_partitions(topic)
    committed = admin.group_offsets(group, tps, stable=True)
    reading = input_readings(sub).get(topic) or _reading(sub, topic)
    records = []
    for batch in scan_topic(bootstrap_servers, topic, admin=admin, until={tp: committed.get(tp) or 0 for tp in tps},
                            since=since):
        for msg, rec, ts in entries(batch, *reading):
            if times is not None:
                times.setdefault((msg.topic(), msg.partition()), []).append((msg.offset(), ts))
            if (msg.topic(), msg.partition(), msg.offset()) in skipped or is_marker(msg.headers()):
                continue
            if type(rec) is Record:  # (else the task could not read it: it went to the dead-letter topic)
                records.append(rec)
    return records


def _table_record(msg: Message, table: Any) -> Record | None:
    if is_marker(msg.headers()):
        return None
    try:
        return Record(table.key_serde.deserialize(msg.key()), table.value_serde.deserialize(msg.value()),
                      msg.topic(), msg.partition(), msg.offset(), msg.timestamp()[1], msg.headers())
    except Exception:
        return None


def _outputs(bootstrap_servers: str, sub: SubTopology, spec: JoinSpec,
             admin: KafkaAdmin) -> Iterable[tuple[Any, Any, int, Origin | None, str]]:
    """(key, value, timestamp, origin, topic) of every committed result of the join, in each of its topics."""
    for topic in join_outputs(sub, spec):
        ks, vs = sub.output_serdes.get(topic, (sub.output_key_serde, sub.output_value_serde))
        for batch in scan_topic(bootstrap_servers, topic, admin=admin):
            for msg in batch:
                value = None if msg.value() is None else vs.deserialize(msg.value())
                yield ks.deserialize(msg.key()), value, msg.timestamp()[1], origin_of(msg.headers()), topic


def join_outputs(sub: SubTopology, spec: JoinSpec) -> list[str]:
    """The topics a join's results go to: its own, those it is routed among, or its step's."""
    return list(spec.outputs) or [sub.output or ""]


def _check_routes(spec: JoinSpec, outputs: list[tuple[Any, Any, int, Origin | None, str]], result: JoinAuditResult,
                  limit: int) -> None:
    """Each result of a routed join (`JoinSpec.route`) in the topic its route chooses for it, as the task chose
    (the rest of the audit takes the topics' results together: one in another topic is a violation here)."""
    if spec.route is None:
        return
    for key, value, timestamp, _, topic in outputs:
        try:
            chosen = spec.route.topic_of(key, value)
        except Exception as exc:  # (the task chose with the value before serialization: it did not raise)
            chosen = f"none: the route raised {type(exc).__name__}: {exc}"
        if chosen != topic:
            result.unexpected += 1
            result.sample("unexpected", limit, output=(key, _canon(value), timestamp), topic=topic,
                          route_chooses=chosen)
