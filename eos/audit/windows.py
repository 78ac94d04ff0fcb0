"""Window audit: recompute a windowed aggregation from the committed input and check the committed output.

The reference is computed here, independently of the operators that ran the job (`eos.operators.windows`):
by brute force over the records, from the definitions in `eos.windows`. For each input partition (one task),
records are taken in offset order, as the task processed them; stream time is the largest timestamp seen
so far, so which records were late, and which windows have closed by the end, follow from the input alone.
The aggregation's own functions (initializer, aggregator, merger) are the job's; what is checked is the
windowing: which windows exist, what falls in each, lateness, closing, and the emission.

* emit="final": every window closed by the task's final stream time has exactly one result, with the
  right value; no result for a window still open, none twice, none unexpected.
* emit="update": each window's committed updates are exactly the sequence of its values, in order
  (a repeated batch repeats a step, a lost one skips one); session tombstones included. With the record
  cache on (`cache_max_bytes`), fewer: the committed updates must be values the window had, in order, none
  twice, ending with its last one (`eos.audit.aggregate.is_history`); a session merged away before any of
  it left the cache has none (it leaves without a tombstone, as nothing of it was forwarded).
* Results changed by stateless steps on their way to the topic (`Windowing.suffix`: a map of each window to
  its key, a filter): each expected result (final, or every update) is passed through those steps as the
  task passed it and serialized as it was written, and the topic's records are counted against them, every
  one once; which window a record is of is no longer known, so a window's updates out of order would not show
  (and with the record cache, which holds some back, such a job's window audit is not checked).

A windowed sub-topology behind a repartition topic (or any topic another step writes) is audited from that
topic, whose records carry their writers' clocks (`eos.streamtime`): the replay follows them as the task did.
It needs the topic whole, so audit such a job run with `repartition_purge_interval=0`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from eos.audit.aggregate import is_history
from eos.audit.scan import scan_topic
from eos.records import Record
from eos.streamtime import EventClock, stamp_of
from eos.time import RECORD_TIME
from eos.topology import SubTopology
from eos.windows import HoppingWindows, SessionWindows, SlidingWindows, Windowed, Windowing, ms
from transactions import KafkaAdmin, Message, admin_for

__all__ = ["WindowAuditResult", "audit_windows", "reference_windows"]

WindowKey = tuple[Any, int, int]  # (key, start, end)


@dataclass
class WindowAuditResult:
    input_records: int = 0
    late_records: int = 0
    #: of the late records, those late by their own source partition's stream time; the rest were late only
    #: by the task's (records of a source that had been idle)
    late_at_source: int = 0
    dead_letters: int = 0  # input records the sub-topology dead-lettered (left out of the reference)
    windows_expected: int = 0
    output_records: int = 0
    wrong_values: int = 0
    missing: int = 0
    duplicates: int = 0
    unexpected: int = 0
    premature: int = 0  # final results of windows that are not closed yet
    sequence_mismatches: int = 0
    #: the results were changed on their way to the topic (`Windowing.suffix`): counted as records, each
    #: expected one changed alike (missing and unexpected are records then, not windows)
    changed: bool = False
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def violations(self) -> int:
        return (self.wrong_values + self.missing + self.duplicates + self.unexpected + self.premature
                + self.sequence_mismatches)

    def sample(self, kind: str, limit: int, **detail: Any) -> None:
        bucket = self.samples.setdefault(kind, [])
        if len(bucket) < limit:
            bucket.append(detail)


@dataclass
class Reference:
    """What the aggregation should have produced."""

    #: per window, the values it took, in order (None: a session merged away)
    updates: dict[WindowKey, list[Any]] = field(default_factory=lambda: defaultdict(list))
    #: windows closed by the final stream time, with their final values
    closed: dict[WindowKey, Any] = field(default_factory=dict)
    late: int = 0
    late_at_source: int = 0  # late by their own source's clock alone
    records: int = 0


def reference_windows(records: Iterable[Record], w: Windowing,
                      dead_lettered: Container[tuple[str, int, int]] = (),
                      clocked: frozenset[str] = frozenset()) -> Reference:
    """Replay records (one task's, in processing order) through the windowing's definition. A record in
    `dead_lettered` (topic, partition, offset) failed while it was processed: as in the task, it did not
    move stream time, and its update did not happen. Records of `clocked` topics (topics between the job's steps) carry
    their sources' clocks, and clock markers come in their place among them (`eos.streamtime`): stream time
    and lateness follow those, as in the task."""
    ref = Reference()
    spec = w.windows
    clock = EventClock(clocked, direct=False) if clocked else EventClock()
    state: dict[WindowKey, Any] = {}  # open windows' aggregates
    contents: dict[Any, list[tuple[int, Any]]] = defaultdict(list)  # sliding: records seen per key
    for rec in records:
        stamp, marker = stamp_of(rec.headers) if rec.topic in clocked else (None, False)
        if marker:
            if stamp is not None:
                clock.observe_stamp(rec.topic, stamp, marker=True)
            continue
        if rec.timestamp < 0:
            continue  # a bad record
        if (rec.topic, rec.partition, rec.offset) in dead_lettered:
            if stamp is not None:
                clock.observe_stamp(rec.topic, stamp)  # its source's clock moved all the same
            continue
        stream_time = clock.observe(rec.timestamp) if stamp is None else clock.observe_stamp(rec.topic, stamp)
        if rec.value is None:
            continue  # a tombstone: stream time moves, nothing is aggregated
        ref.records += 1
        late = ref.late
        source_time = stamp.lateness_time if stamp is not None else stream_time
        if isinstance(spec, HoppingWindows):
            _time_windows(spec, w, rec, stream_time, state, ref)
        elif isinstance(spec, SessionWindows):
            _sessions(spec, w, rec, stream_time, state, ref)
        else:  # (which windows hold a record depends on its key's records too: it tells lateness at the source)
            _sliding(spec, w, rec, stream_time, state, contents, ref, source_time)
            continue
        if ref.late > late and _late_alone(spec, rec.timestamp, source_time):
            ref.late_at_source += 1
    ref.closed = {window: value for window, value in state.items() if _closed(spec, window[2], clock.stream_time)}
    return ref


def _late_alone(spec: Any, t: int, stream_time: int) -> bool:
    """Whether a record at `t` is late by `stream_time` whatever else a task holds (every window it falls
    in is closed; a session: its own)."""
    if isinstance(spec, HoppingWindows):
        return all(_closed(spec, w.end, stream_time) for w in spec.windows_for(t))
    assert isinstance(spec, SessionWindows)  # (sliding windows: `_sliding`)
    return _closed(spec, t, stream_time)


def _closed(spec: Any, end: int, stream_time: int) -> bool:
    if isinstance(spec, SessionWindows):
        return end + spec.gap_ms + spec.grace_ms < stream_time
    if isinstance(spec, SlidingWindows):  # (its end is in it)
        return end + spec.grace_ms < stream_time
    return end + spec.grace_ms <= stream_time


def _time_windows(spec: HoppingWindows, w: Windowing, rec: Record, stream_time: int,
                  state: dict[WindowKey, Any], ref: Reference) -> None:
    size, advance, t = spec.size_ms, ms(spec.advance), rec.timestamp
    first = max(0, (t - size) // advance * advance)  # every aligned start near t, tested one by one
    starts = [s for s in range(first, t + 1, advance) if s <= t < s + size]
    open_starts = [s for s in starts if not _closed(spec, s + size, stream_time)]
    if not open_starts:
        ref.late += 1
        return
    for s in open_starts:
        key = (rec.key, s, s + size)
        value = w.aggregator(rec.key, rec.value, state[key] if key in state else w.initializer())
        state[key] = value
        ref.updates[key].append(value)


def _sessions(spec: SessionWindows, w: Windowing, rec: Record, stream_time: int, state: dict[WindowKey, Any],
              ref: Reference) -> None:
    gap, t = spec.gap_ms, rec.timestamp
    joined = [k for k in state if k[0] == rec.key and k[2] >= t - gap and k[1] <= t + gap
              and not _closed(spec, k[2], stream_time)]
    start, end = min([t, *(k[1] for k in joined)]), max([t, *(k[2] for k in joined)])
    if _closed(spec, end, stream_time):
        ref.late += 1
        return
    value = w.initializer()
    for k in sorted(joined, key=lambda k: (k[2], k[1])):
        value = w.merger(rec.key, value, state.pop(k))
        if (k[1], k[2]) != (start, end):
            ref.updates[k].append(None)
    value = w.aggregator(rec.key, rec.value, value)
    state[(rec.key, start, end)] = value
    ref.updates[(rec.key, start, end)].append(value)


def _sliding(spec: SlidingWindows, w: Windowing, rec: Record, stream_time: int, state: dict[WindowKey, Any],
             contents: dict[Any, list[tuple[int, Any]]], ref: Reference, source_time: int) -> None:
    diff, t = spec.diff_ms, rec.timestamp
    if spec.late(t, stream_time):
        ref.late += 1
        ref.late_at_source += spec.late(t, source_time)
        return
    seen = contents[rec.key]
    seen.append((t, rec.value))
    candidates = set()
    for s, _ in seen:  # every window the records define that holds t, and t's right window
        left_start = max(0, s - diff)
        if left_start <= t <= left_start + diff:
            candidates.add((left_start, left_start + diff))
        if s < t <= s + 1 + diff:
            candidates.add((s + 1, s + 1 + diff))
    if not any(start <= t <= end and not _closed(spec, end, stream_time) for start, end in candidates):
        seen.pop()  # no open window holds it: late, though the window after it may be open
        ref.late += 1
        ref.late_at_source += not any(start <= t <= end and not _closed(spec, end, source_time)
                                      for start, end in candidates)
        return
    if any(t < s <= t + 1 + diff for s, _ in seen):
        candidates.add((t + 1, t + 1 + diff))
    for start, end in sorted(candidates):
        if _closed(spec, end, stream_time):
            continue
        key = (rec.key, start, end)
        if key in state:
            if not start <= t <= end:  # its right window, there already (a later record's left window)
                continue
            value = w.aggregator(rec.key, rec.value, state[key])
        else:
            value = w.initializer()
            for _, v in sorted((r for r in seen if start <= r[0] <= end), key=lambda r: r[0]):
                value = w.aggregator(rec.key, v, value)
        state[key] = value
        ref.updates[key].append(value)


def audit_windows(bootstrap_servers: str, sub: SubTopology, *, group: str, admin: KafkaAdmin | None = None,
                  dead_letters: str | None = None, max_samples: int = 10,
                  progress: Callable[[int], None] | None = None,
                  clocked: frozenset[str] = frozenset(), window: Windowing | None = None,
                  cached: bool = False, since: Mapping[tuple[str, int], int] | None = None) -> WindowAuditResult:
    """Audit the windowed sub-topology `sub` (built with `windows=`) of the application whose group is
    `group`: its committed output against the reference recomputed from its committed input. Input records
    the sub-topology sent to the dead-letter topic `dead_letters` (e.g. an output its topic refused) took
    no part in the aggregation, and none in the reference either. `clocked`: inputs written by
    another step of the application whose records carry their writers' clocks (`eos.streamtime`).
    `window`: which of the sub-topology's windowed aggregations (needed when it has several). `cached`: the
    job ran with a record cache (`cache_max_bytes` > 0), which holds back updates of its windows. `since`:
    where the task started reading a partition, the records before it not its input (auto_offset_reset "latest"
    or a duration: `eos.audit.auditor.started_at`)."""
    w = window or only(sub.windowings, f"sub-topology {sub.name!r}", "windowed aggregation")
    output = w.topic or sub.output
    if len(sub.inputs) != 1 or (output is None and w.route is None):
        raise ValueError(f"sub-topology {sub.name!r}: the window audit needs one input and an output topic")
    topics: list[str] = list(w.route.topics) if w.route is not None else [output or ""]
    serdes = {t: sub.output_serdes.get(t, (sub.output_key_serde, sub.output_value_serde)) for t in topics}
    out_key, out_value = serdes[topics[0]]
    cached = cached and w.emit != "final"  # (updates held back)
    if (w.suffix or w.route is not None) and cached:
        raise ValueError(f"the window audit of {w.store!r} needs each update of a window, and a record cache "
                         "holds some back; with the results changed on the way to their topic, which window a "
                         "record is of cannot be told to check its history: the lineage audit alone proves them")
    replay = replay_prefix(w.prefix)
    admin = admin or admin_for(bootstrap_servers, settle_once=True)
    result = WindowAuditResult()
    topic = sub.inputs[0]
    tps = admin.topic_partitions(topic)
    require_whole(admin, topic, f"the window audit of {sub.name!r}")
    committed = admin.group_offsets(group, tps, stable=True)
    extract = sub.timestamp or RECORD_TIME
    skipped = _dead_lettered(bootstrap_servers, dead_letters, sub.name, admin) if dead_letters else set()
    result.dead_letters = len(skipped)
    per_partition: dict[int, list[Record]] = defaultdict(list)
    for batch in scan_topic(bootstrap_servers, topic, admin=admin, until={tp: committed.get(tp) or 0 for tp in tps},
                            since=since,
                            progress=progress):
        for msg in batch:
            record: Record | None
            if msg.topic() in clocked and stamp_of(msg.headers())[1]:  # a clock marker: kept in its place
                record = Record(None, None, msg.topic(), msg.partition(), msg.offset(), -1, msg.headers())
                per_partition[msg.partition()].append(record)
            else:
                record = _record(msg, sub, extract)
                if record is not None:
                    per_partition[msg.partition()] += replay(record)
    expected_updates: dict[WindowKey, list[Any]] = {}
    expected_closed: dict[WindowKey, Any] = {}
    for records in per_partition.values():
        ref = reference_windows(records, w, skipped, clocked & {topic})
        result.input_records += ref.records
        result.late_records += ref.late
        result.late_at_source += ref.late_at_source
        expected_updates.update(ref.updates)
        expected_closed.update(ref.closed)
    if w.suffix or w.route is not None:  # results changed or routed on their way: each expected one alike, counted
        _check_changed(w, expected_closed if w.emit == "final" else expected_updates, serdes,
                       lambda t: scan_topic(bootstrap_servers, t, admin=admin, progress=progress), result,
                       max_samples)
        return result
    observed: dict[WindowKey, list[Any]] = defaultdict(list)
    for batch in scan_topic(bootstrap_servers, topics[0], admin=admin, progress=progress):
        for msg in batch:
            windowed = out_key.deserialize(msg.key())
            value = None if msg.value() is None else out_value.deserialize(msg.value())
            observed[(windowed.key, windowed.start, windowed.end)].append(value)
            result.output_records += 1
    if w.emit == "final":
        _check_final(expected_closed, expected_updates, observed, result, max_samples)
    else:
        _check_updates(expected_updates, observed, result, max_samples, cached=cached)
    return result


def only(items: tuple[Any, ...], where: str, what: str) -> Any:
    """The one item of a sub-topology the caller did not name."""
    if len(items) != 1:
        raise ValueError(f"{where} has {len(items) or 'no'} {what}s{'' if items else ' the audit can replay'}; "
                         "name the one to audit")
    return items[0]


def replay_prefix(prefix: tuple[Any, ...], *, stand_in: bool = True) -> Callable[[Record], list[Record]]:
    """What a step got of an input record: the record itself, or what the stateless operators before it in
    its task (filter, map_values, ...) made of it, each with the input's place. A record they filtered out
    gives, with `stand_in`, the record with value None (it moved stream time in the task all the same, as a
    tombstone does in the window replay), else nothing."""
    if not prefix:
        return lambda record: [record]
    out: list[tuple[Any, Any, int]] = []

    def collect(key: Any, value: Any, timestamp: int, headers: Any) -> None:
        out.append((key, value, timestamp))

    step = collect
    for operator in reversed(prefix):
        step = operator.bind([step])

    def replay(record: Record) -> list[Record]:
        out.clear()
        step(record.key, record.value, record.timestamp, None)
        if not out and stand_in:
            return [Record(record.key, None, record.topic, record.partition, record.offset, record.timestamp,
                           record.headers)]
        return [Record(k, v, record.topic, record.partition, record.offset, ts, record.headers) for k, v, ts in out]
    return replay


def require_whole(admin: KafkaAdmin, topic: str, audit: str) -> None:
    """A ValueError saying why `audit` cannot run when a partition of `topic` no longer starts at offset 0."""
    purged = {p: offset for (_, p), offset in admin.earliest_offsets(admin.topic_partitions(topic)).items()
              if offset > 0}
    if purged:
        raise ValueError(f"{audit} needs every record of {topic}, but partitions {sorted(purged)} start at offsets "
                         f"{sorted(purged.values())} (purged or deleted by retention); for a repartition topic, "
                         "run the job with repartition_purge_interval=0")


def _dead_lettered(bootstrap_servers: str, topic: str, subtopology: str,
                   admin: KafkaAdmin) -> set[tuple[str, int, int]]:
    """(topic, partition, offset) of the input records `subtopology` committed to dead-letter topic `topic`."""
    if topic not in admin.topic_names():
        return set()
    found = set()
    for batch in scan_topic(bootstrap_servers, topic, admin=admin):
        for msg in batch:
            h = dict(msg.headers() or ())
            if h.get("eos.dlq.subtopology", b"").decode() == subtopology:
                found.add((h["eos.dlq.topic"].decode(), int(h["eos.dlq.partition"]), int(h["eos.dlq.offset"])))
    return found


def _record(msg: Message, sub: SubTopology, extract: Callable[[Record], int]) -> Record | None:
    """The record as the task saw it; None for one it dead-lettered or skipped."""
    try:
        rec = Record(sub.key_serde.deserialize(msg.key()), sub.value_serde.deserialize(msg.value()), msg.topic(),
                     msg.partition(), msg.offset(), msg.timestamp()[1], msg.headers())
        rec.timestamp = int(extract(rec))
    except Exception:
        return None
    return rec if rec.timestamp >= 0 else None


def _check_changed(w: Windowing, expected: Mapping[WindowKey, Any], serdes: Mapping[str, tuple[Any, Any]],
                   read: Callable[[str], Iterable[list[Message]]], result: WindowAuditResult, limit: int) -> None:
    """The results of an aggregation whose results pass stateless operators on their way to the topic (`w.suffix`:
    a map of each window's key to its key, a filter), or are routed among topics (`w.route`: `to(fn, topics=...)`):
    each expected result (a final one, or every update) passed through them as the task passed it, sent to the
    topic the route chooses for it, serialized as the task wrote it, and the topics' records (`serdes`: each
    topic's, read with `read`) counted against those: every one once, in its topic. Which window a record is of
    cannot be told any more, so the check is of the records as a whole (a window's updates out of order would
    not show, a record missing, twice or in another topic does)."""
    changed = replay_prefix(w.suffix, stand_in=False)
    result.changed = True
    only = next(iter(serdes))
    want: Counter[tuple[str, bytes | None, bytes | None]] = Counter()
    for (key, start, end), values in expected.items():
        for value in (values if w.emit != "final" else [values]):
            for out in changed(Record(Windowed(key, start, end), value, "", 0, 0, 0, None)):
                topic: str = only if w.route is None else w.route.topic_of(out.key, out.value)
                if not isinstance(topic, str) or topic not in serdes:  # (the job sent it to the dead letters)
                    continue
                key_serde, value_serde = serdes[topic]
                want[(topic, key_serde.serialize(out.key), value_serde.serialize(out.value))] += 1
    got: Counter[tuple[str, bytes | None, bytes | None]] = Counter()
    for topic in serdes:
        for batch in read(topic):
            for msg in batch:
                got[(topic, msg.key(), msg.value())] += 1
                result.output_records += 1
    result.windows_expected = len(expected)
    for kind, diff in (("missing", want - got), ("unexpected", got - want)):
        for (topic, key, value), n in diff.items():
            setattr(result, kind, getattr(result, kind) + n)
            key_serde, value_serde = serdes[topic]
            result.sample(kind, limit, topic=topic, key=_shown(key_serde, key), value=_shown(value_serde, value),
                          times=n)


def _shown(serde: Any, data: bytes | None) -> Any:
    try:
        return None if data is None else serde.deserialize(data)
    except Exception:
        return data


def _check_final(closed: dict[WindowKey, Any], updates: dict[WindowKey, list[Any]],
                 observed: dict[WindowKey, list[Any]], result: WindowAuditResult, limit: int) -> None:
    result.windows_expected = len(closed)
    for window, value in closed.items():
        got = observed.get(window, [])
        if not got:
            result.missing += 1
            result.sample("missing", limit, window=window, expected=value)
            continue
        if len(got) > 1:
            result.duplicates += len(got) - 1
            result.sample("duplicates", limit, window=window, results=got)
        if got[0] != value:
            result.wrong_values += 1
            result.sample("wrong_values", limit, window=window, expected=value, observed=got[0])
    for window, got in observed.items():
        if window in closed:
            continue
        if window in updates:
            result.premature += len(got)
            result.sample("premature", limit, window=window, observed=got)
        else:
            result.unexpected += len(got)
            result.sample("unexpected", limit, window=window, observed=got)


def _check_updates(updates: dict[WindowKey, list[Any]], observed: dict[WindowKey, list[Any]],
                   result: WindowAuditResult, limit: int, cached: bool = False) -> None:
    result.windows_expected = len(updates)
    for window, values in updates.items():
        got = observed.get(window, [])
        # (with the cache, a session merged away before any of it left the cache was never forwarded)
        if got != values and not (cached and (is_history(got, values) if got else values[-1] is None)):
            if not got:
                result.missing += 1
            else:
                result.sequence_mismatches += 1
            result.sample("sequence_mismatches", limit, window=window, expected=values[:10], observed=got[:10])
    for window, got in observed.items():
        if window not in updates:
            result.unexpected += len(got)
            result.sample("unexpected", limit, window=window, observed=got)
