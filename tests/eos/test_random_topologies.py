"""Random DSL topologies through the test driver, against a reference computed by plain Python.

Each seed builds a chain of stateless steps (filters, maps, flat maps, key changes, branches merged again, `through`
and `repartition` hops), fans it out into one to three branches with steps of their own, and ends each branch in a
sink, a keyed aggregation (most of them suppressed) or a cogroup, a count in tumbling, hopping, sliding or
session windows, a table re-grouped, a join with a table or a global table (its results through stateless steps
of their own for half of them), a windowed join of the stream with itself, the stream as a table joined with a
table by key or by foreign key, or a processor of the Processor API numbering each key's records in a
store of its own. The planner decides where the sub-topologies and repartition topics go; the reference knows
nothing of them: it applies the same functions to the input records and says what every sink, store and table must
hold. Results are compared in the terms that do not depend on how the tasks' batches interleave (the multiset of a
sink's records, a store's content, each key's updates in order where one task saw that key's records in input
order), with one and three partitions, with and without a record cache, and, for every fourth seed, with batches
killed at random steps. `pytest --soak` runs thousands more seeds."""

from __future__ import annotations

import functools
import json
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from eos import Application, Processor, store
from eos.audit.windows import reference_windows
from eos.records import Record
from eos.tables import JoinWindows
from eos.testing import TopologyTestDriver
from eos.topology import table_changelogs
from eos.windows import HoppingWindows, SessionWindows, SlidingWindows, TumblingWindows, Windowing, ms

BASE = 1_800_000_000_000
RECORDS = 160
SIDE = {**{f"k{i}": {"tier": i % 3} for i in range(6)}, **{f"s{i}": {"tier": i} for i in range(4)}}
#: a versioned `side` (half the seeds): how far behind its newest row it keeps older ones
HISTORY_MS = 3_600_000
#: a grace period of a stream-table join with the versioned `side` (records come a second apart)
GRACE_MS = 5_000

Rec = tuple[Any, Any, int]  # key, value, timestamp
#: what a check reads: a test driver, or a cluster's committed records and stores seen the same way
#: (`records(topic)`, `store(name)`), and whether the application has a record cache
Check = Callable[[Any, bool], None]
Names = Callable[[str], str]  # the name of a topic (or the application id) on the cluster it runs on


# ---------------------------------------------------------------- stateless steps: reference and DSL
@dataclass(frozen=True)
class Step:
    kind: str
    a: int
    b: int

    @property
    def rekeys(self) -> bool:
        return self.kind in ("map", "select_key", "branch_rekey_merge")

    def ref(self, recs: list[Rec]) -> list[Rec]:
        a, b = self.a, self.b
        out: list[Rec] = []
        for k, v, ts in recs:
            n = v["n"]
            if self.kind == "filter":
                out += [(k, v, ts)] if n % a != b else []
            elif self.kind == "filter_not":
                out += [] if n % a == b else [(k, v, ts)]
            elif self.kind == "map_values":
                out.append((k, {**v, "n": (n * a + b) % 1000}, ts))
            elif self.kind == "flat_map_values":
                out += [] if n % a == b else [(k, v, ts), (k, {**v, "n": n + 1, "copy": True}, ts)]
            elif self.kind == "map":
                out.append((f"k{(n + b) % a}", v, ts))
            elif self.kind == "select_key":
                out.append((f"s{(len(k) + n) % a}", v, ts))
            elif self.kind == "branch_merge":
                out.append((k, {**v, "n": n + a} if n % 2 == 0 else {**v, "n": n * 2 % 1000}, ts))
            elif self.kind == "branch_rekey_merge":
                out.append((f"s{n % a}", v, ts) if n % 2 == 0 else (k, v, ts))
            else:  # peek, through, repartition
                out.append((k, v, ts))
        return out

    def dsl(self, stream: Any, place: str, names: Names) -> Any:
        a, b = self.a, self.b
        if self.kind == "filter":
            return stream.filter(lambda k, v: v["n"] % a != b)
        if self.kind == "filter_not":
            return stream.filter_not(lambda k, v: v["n"] % a == b)
        if self.kind == "map_values":
            return stream.map_values(lambda v: {**v, "n": (v["n"] * a + b) % 1000})
        if self.kind == "flat_map_values":
            return stream.flat_map_values(lambda v: [] if v["n"] % a == b else [v, {**v, "n": v["n"] + 1,
                                                                                      "copy": True}])
        if self.kind == "map":
            return stream.map(lambda k, v: (f"k{(v['n'] + b) % a}", v))
        if self.kind == "select_key":
            return stream.select_key(lambda k, v: f"s{(len(k) + v['n']) % a}")
        if self.kind in ("branch_merge", "branch_rekey_merge"):
            parts = (stream.split(name=f"split-{place}-")
                     .branch(lambda k, v: v["n"] % 2 == 0, name="even")
                     .default_branch(name="odd"))
            parts = {label.rpartition("-")[2]: part for label, part in parts.items()}  # (keys: prefix and name)
            if self.kind == "branch_rekey_merge":  # one branch keyed anew: the merged stream is
                return parts["odd"].merge(parts["even"].select_key(lambda k, v: f"s{v['n'] % a}"))
            even = parts["even"].map_values(lambda v: {**v, "n": v["n"] + a})
            odd = parts["odd"].map_values(lambda v: {**v, "n": v["n"] * 2 % 1000})
            return even.merge(odd)
        if self.kind == "peek":
            return stream.peek(lambda k, v: None)
        if self.kind == "through":
            return stream.through(names(f"mid-{place}"))
        return stream.repartition(name=f"rep-{place}")


STEP_KINDS = ["filter", "filter_not", "map_values", "flat_map_values", "map", "select_key", "branch_merge",
              "branch_rekey_merge", "peek", "through", "repartition"]


def random_step(rng: random.Random) -> Step:
    kind = rng.choice(STEP_KINDS)
    a = rng.randrange(2, 6) if kind != "map_values" else rng.randrange(1, 4)
    return Step(kind, a, rng.randrange(a))


@dataclass
class Chain:
    """Steps and what they leave: `ordered` while every key's records are still in one partition in input
    order (no key change yet, so no two tasks' records meet under one key, whatever the partitions)."""

    steps: list[Step] = field(default_factory=list)

    @property
    def ordered(self) -> bool:
        return not any(s.rekeys for s in self.steps)

    def ref(self, recs: list[Rec]) -> list[Rec]:
        for step in self.steps:
            recs = step.ref(recs)
        return recs

    def dsl(self, stream: Any, place: str, names: Names) -> Any:
        for i, step in enumerate(self.steps):
            stream = step.dsl(stream, f"{place}{i}", names)
        return stream

    @property
    def shown(self) -> str:
        return str([(s.kind, s.a, s.b) for s in self.steps])


# ---------------------------------------------------------------- terminals
def sink(out: str, stream: Any, recs: list[Rec], ordered: bool) -> Check:
    stream.to(out)
    want = Counter((k, json.dumps(v, sort_keys=True), ts) for k, v, ts in recs)

    def check(view: Any, cached: bool) -> None:
        got = Counter((r.key, json.dumps(r.value, sort_keys=True), r.timestamp) for r in view.records(out))
        assert got == want, f"sink {out}"
        if ordered:  # each key's records in input order
            assert per_key(view.records(out), value=lambda r: r.value) == per_key_ref(recs), out
    return check


def keyed(i: int, out: str, stream: Any, recs: list[Rec], ordered: bool, single: bool,
          rng: random.Random, suppressed: tuple[int, int | None] | None = None) -> Check:
    """A count, sum or max per key (group_by_key, or group_by a field), its updates and its store; each key's
    updates in the order of the input where its records come from one task in that order (`single`: every
    topic has one partition). `suppressed`: (time limit, max_records) of a `suppress` before the sink: some
    of the updates go on, and each key's last one either went on or waits in the buffer."""
    kind = rng.choice(["count", "sum", "max"])
    by_field = rng.random() < 0.5
    grouped = stream.group_by(lambda k, v: f"g{v['n'] % 4}") if by_field else stream.group_by_key()
    name = f"agg{i}"
    if kind == "count":
        table = grouped.count(name=name)
    elif kind == "sum":
        table = grouped.sum(lambda v: v["n"], name=name)
    else:
        table = grouped.reduce(lambda agg, v: agg if (agg["n"], agg["t"]) >= (v["n"], v["t"]) else v, name=name)
    if suppressed is not None:
        table = table.suppress(suppressed[0], max_records=suppressed[1], name=f"{name}-limited")
    table.to_stream().to(out)
    updates: dict[Any, list[Any]] = {}
    for k, v, _ in recs:
        key = f"g{v['n'] % 4}" if by_field else k
        last = updates.get(key, [None])[-1]
        value = ((last or 0) + 1 if kind == "count" else (last or 0) + v["n"] if kind == "sum" else
                 v if last is None or (v["n"], v["t"]) > (last["n"], last["t"]) else last)
        updates.setdefault(key, []).append(value)
    final = {k: u[-1] for k, u in updates.items()}
    in_order = ordered and (single or not by_field)

    def check(view: Any, cached: bool) -> None:
        assert dict(view.store(f"{name}-store").all()) == final, f"{kind} {name}"
        got = per_key(view.records(out), value=lambda r: r.value)
        waiting = ({s.key: s.value for s in view.store(f"{name}-limited-buffer").all()} if suppressed is not None
                   else {})
        assert {**{k: u[-1] for k, u in got.items()}, **waiting} == final, f"{kind} {name}: the last update of each key"
        for key, seen in got.items():
            if not cached and suppressed is None:
                assert len(seen) == len(updates[key]), f"{kind} {name}: one update per record of {key}"
            if in_order:  # the updates, or with a cache some of them, in the order they were made
                assert is_subsequence(seen, updates[key]), f"{kind} {name}: {key}'s updates"
            elif kind != "max":  # counts and sums of values >= 0 only grow
                assert seen == sorted(seen), f"{kind} {name}: {key}'s updates"
    return check


def cogrouped(i: int, out: str, stream: Any, recs: list[Rec], rng: random.Random) -> Check:
    """The branch's even and odd records cogrouped per key into one aggregate, each stream by its own aggregator
    (even ones counted, odd ones counted and summed), over all time or per tumbling window; the odd ones grouped
    by a key function (the same key, but a key change to the planner: a repartition topic of their own) when
    `by_key_function`. (The same draws as `keyed`, which it stands in for.)"""
    windowed_ = rng.choice(["plain", "plain", "windowed"]) == "windowed"
    by_key_function = rng.random() < 0.5
    evens = stream.filter(lambda k, v: v["n"] % 2 == 0).group_by_key()
    odd = stream.filter(lambda k, v: v["n"] % 2 == 1)
    odds = odd.group_by(lambda k, v: k) if by_key_function else odd.group_by_key()
    cogroup = (evens.cogroup(lambda k, v, agg: {**agg, "e": agg["e"] + 1})
               .cogroup(odds, lambda k, v, agg: {**agg, "o": agg["o"] + 1, "s": agg["s"] + v["n"]}))
    size = 5_000
    if windowed_:
        cogroup = cogroup.window(TumblingWindows(size, grace=10**9))
    name = f"agg{i}"
    cogroup.aggregate(lambda: {"e": 0, "o": 0, "s": 0}, name=name).to_stream().to(out)
    want: dict[Any, dict[str, int]] = {}
    for k, v, ts in recs:
        row = want.setdefault((k, ts - ts % size) if windowed_ else k, {"e": 0, "o": 0, "s": 0})
        if v["n"] % 2 == 0:
            row["e"] += 1
        else:
            row["o"] += 1
            row["s"] += v["n"]

    def check(view: Any, cached: bool) -> None:
        store = view.store(f"{name}-store")
        got = ({(k, start): v for k, start, v, _ in store.fetch_all()} if windowed_ else dict(store.all()))
        assert got == want, f"cogroup {name}"
    return check


def windowed(i: int, out: str, stream: Any, recs: list[Rec], rng: random.Random) -> Check:
    """A count per key and window (tumbling, hopping, sliding or session), every record inside its grace; its
    store. Sliding and session windows against the window audit's brute-force reference, fed the records in
    input order (with no record late, the counts do not depend on the order)."""
    size = rng.choice([2_500, 5_000, 20_000])
    pick = rng.random()
    windows: Any = (TumblingWindows(size, grace=10**9) if pick < 0.25 else
                    SlidingWindows(size, grace=10**9) if pick < 0.5 else
                    HoppingWindows(size, size // 2, grace=10**9) if pick < 0.75 else
                    SessionWindows(size // 2, grace=10**9))
    name = f"agg{i}"
    (stream.group_by_key().window(windows, emit=rng.choice(["update", "final"])).count(name=name)
     .to_stream().to(out))
    want: dict[tuple[Any, int, int], int] = {}
    if isinstance(windows, HoppingWindows):
        for k, _, ts in recs:
            advance = ms(windows.advance)
            for start in range(ts - ts % advance, -1, -advance):
                if start + windows.size_ms <= ts:
                    break
                window = (k, start, start + windows.size_ms)
                want[window] = want.get(window, 0) + 1
    else:
        counting = Windowing(windows, "update", "drop", lambda: 0, lambda k, v, n: n + 1, lambda k, a, b: a + b, name)
        ref = reference_windows([Record(k, v, "in", 0, n, ts) for n, (k, v, ts) in enumerate(recs)], counting)
        want = {tuple(w): values[-1] for w, values in ref.updates.items() if values[-1] is not None}

    def check(view: Any, cached: bool) -> None:
        store = view.store(f"{name}-store")
        if isinstance(windows, SessionWindows):
            got = {(s.key, s.start, s.end): s.value for s in store.ending_before(2**62)}
        else:
            end = windows.diff_ms if isinstance(windows, SlidingWindows) else windows.size_ms
            got = {(k, start, start + end): v for k, start, v, _ in store.fetch_all()}
        assert got == want, f"windowed {name} ({windows})"
    return check


def table(i: int, out: str, stream: Any, recs: list[Rec], ordered: bool) -> Check:
    """The stream as a table, re-grouped by a field of the row and counted: exact as rows change group or go.
    In input order a value of n % 11 == 0 deletes its key's row; otherwise (a key's records from several
    tasks, its last row unknown) nothing is deleted, and every key has one row in some group."""
    name = f"agg{i}"
    gone = (lambda v: v["n"] % 11 == 0) if ordered else (lambda v: False)
    (stream.map_values(lambda v: None if gone(v) else v).to_table()
     .group_by(lambda k, v: (f"g{v['n'] % 3}", v)).count(name=name).to_stream().to(out))
    rows: dict[Any, Any] = {}
    groups: dict[Any, set[str]] = {}
    for k, v, _ in recs:
        groups.setdefault(k, set()).add(f"g{v['n'] % 3}")
        if gone(v):
            rows.pop(k, None)
        else:
            rows[k] = v
    want = Counter(f"g{v['n'] % 3}" for v in rows.values())

    def check(view: Any, cached: bool) -> None:
        got = {k: v for k, v in view.store(f"{name}-store").all() if v}
        if ordered:
            assert got == dict(want), f"table {name}"
        else:
            assert sum(got.values()) == len(rows), f"table {name}: one row per key"
            for group, count in got.items():
                assert count <= sum(group in g for g in groups.values()), f"table {name}: {group}"
    return check


def joined(out: str, stream: Any, recs: list[Rec], rng: random.Random, side: Any, after: Chain,
           grace: int | None = None, exact: bool = True) -> Check:
    """Each record with its key's row of the table `side`, piped and processed before the stream; the results
    through the stateless steps `after` on their way to the sink. With a grace period (a versioned `side`),
    the records still held at the end (in the join's buffer) make no result yet: the results and what the
    held records will make are the reference's; `exact` (one partition, records in time order) all of it,
    otherwise at most (records out of order by more than the grace period are dropped as late)."""
    left = rng.random() < 0.5
    join = stream.left_join if left else stream.join
    name = f"grace-{out.rsplit('-', 1)[-1]}"  # (short: its stores' names hold the side's)
    named = {} if grace is None else {"name": name, "grace": grace}
    after.dsl(join(side, lambda v, row: {**v, "tier": None if row is None else row["tier"]}, **named),
              f"after-{out}", str).to(out)

    def made(records: list[Rec]) -> Counter:
        return Counter((k, json.dumps(v, sort_keys=True)) for k, v, _ in after.ref(
            [(k, {**v, "tier": SIDE[k]["tier"] if k in SIDE else None}, ts) for k, v, ts in records
             if left or k in SIDE]))
    want = made(recs)

    def check(view: Any, cached: bool) -> None:
        got = Counter((r.key, json.dumps(r.value, sort_keys=True)) for r in view.records(out))
        if grace is None:
            assert got == want, f"{'left ' if left else ''}join {out}"
            return
        held = made([(h.key, h.value, h.timestamp) for h in view.store(f"{name}-buffer").view.all()])
        done = got + held
        assert all(done[item] <= n for item, n in want.items()) and not done - want, f"grace join {out}"
        assert done == want or not exact, f"grace join {out}: {sum((want - done).values())} results missing"
    return check


def stream_joined(out: str, stream: Any, recs: list[Rec], rng: random.Random, place: str) -> Check:
    """The stream's even records joined with its odd ones of the same key within a window (an inner join:
    with every record inside its grace, which pairs meet does not depend on the order they come in); the
    odd side through a repartition topic of its own, as a stream joined with itself needs."""
    before, after = rng.choice([0, 1_000, 3_000]), rng.choice([0, 1_000, 3_000])
    evens = stream.filter(lambda k, v: v["n"] % 2 == 0)
    odds = stream.filter(lambda k, v: v["n"] % 2 == 1).repartition(name=f"odd-{place}")
    evens.join(odds, lambda even, odd: {"l": even, "r": odd}, windows=JoinWindows(before, after, grace=10**9)).to(out)
    want = Counter((k, json.dumps({"l": lv, "r": rv}, sort_keys=True), max(lt, rt))
                   for k, lv, lt in recs if lv["n"] % 2 == 0
                   for k2, rv, rt in recs if rv["n"] % 2 == 1 and k2 == k and lt - before <= rt <= lt + after)

    def check(view: Any, cached: bool) -> None:
        got = Counter((r.key, json.dumps(r.value, sort_keys=True), r.timestamp) for r in view.records(out))
        assert got == want, f"stream join {out}"
    return check


def global_joined(out: str, stream: Any, recs: list[Rec], left: bool, gside: Any, after: Chain) -> Check:
    """Each record with the row of the global table `gside` that a field of its value names (or its own key):
    inner or `left`, never through a repartition topic whatever the stream's key; the results through the
    stateless steps `after` on their way to the sink."""
    row_key = _row_key
    join = stream.left_join if left else stream.join
    after.dsl(join(gside, lambda v, row: {**v, "g": None if row is None else row["tier"]}, key=row_key),
              f"after-{out}", str).to(out)
    want = Counter((k, json.dumps(v, sort_keys=True)) for k, v, _ in after.ref(
        [(k, {**v, "g": SIDE[row_key(k, v)]["tier"] if row_key(k, v) in SIDE else None}, ts)
         for k, v, ts in recs if left or row_key(k, v) in SIDE]))

    def check(view: Any, cached: bool) -> None:
        got = Counter((r.key, json.dumps(r.value, sort_keys=True)) for r in view.records(out))
        assert got == want, f"global {'left ' if left else ''}join {out}"
    return check


def _row_key(k: Any, v: Any) -> str:
    return f"s{v['n'] % 6}" if v["n"] % 3 else k


def _tier(v: Any, row: Any) -> dict[str, Any]:
    return {"v": v, "tier": None if row is None else row["tier"]}


def table_joined(i: int, out: str, stream: Any, recs: list[Rec], foreign: bool, how: str, side: Any,
                 ordered: bool) -> Check:
    """The stream as a table (in input order a value of n % 11 == 0 deletes its key's row) joined with the table
    `side`: by key (`how`: inner, left or outer; a repartition topic first where the key changed) or, `foreign`,
    by the foreign key a row names (inner or left; through two internal topics). Where one task saw each key's
    records in input order, each key's last result is the join of its last row (none, or a tombstone, where
    there is no result); otherwise every result is the join of one of its key's records, and the keys with a
    result are those that must have one whichever record came last. A versioned `side`'s older rows
    (`side_history`) come before every record: an outer join joins the first with None too, the out-of-order
    one joins nothing."""
    gone = (lambda v: v["n"] % 11 == 0) if ordered else (lambda v: False)
    row_key = (lambda k, v: f"s{v['n'] % 6}") if foreign else (lambda k, v: k)
    rows = stream.map_values(lambda v: None if gone(v) else v).to_table()
    kwargs = {"foreign_key": lambda v: f"s{v['n'] % 6}"} if foreign else {}
    rows.join(side, _tier, how=how, name=f"tjoin{i}", **kwargs).to_stream().to(out)

    def result(k: Any, v: Any, side_rows: dict[str, Any] = SIDE) -> str | None:
        row = side_rows.get(row_key(k, v)) if v is not None else side_rows.get(k)
        keep = (v is not None and (how != "inner" or row is not None)) or (how == "outer" and row is not None)
        return json.dumps(_tier(v, row), sort_keys=True) if keep else None

    last: dict[Any, Any] = {}
    first = {k: v for k, v, _ in side_history()[:len(SIDE)]} if side.history_retention_ms is not None else SIDE
    candidates: dict[Any, set[str | None]] = {k: {result(k, None), result(k, None, first)} for k in SIDE}
    for k, v, _ in recs:
        last[k] = None if gone(v) else v
        candidates.setdefault(k, set()).add(result(k, last[k]))
    want = {k: r for k in {*last, *SIDE} if (r := result(k, last.get(k))) is not None}
    # whichever row of a key came last: a key joined by key has a result or not alike
    must = {k for k, c in candidates.items() if None not in c} if not foreign or how == "left" else set()

    def check(view: Any, cached: bool) -> None:
        got: dict[Any, Any] = {}
        for r in view.records(out):
            got[r.key] = None if r.value is None else json.dumps(r.value, sort_keys=True)
            assert got[r.key] in candidates.get(r.key, ()), f"{how} table join {out}: {r.key} {r.value}"
        got = {k: v for k, v in got.items() if v is not None}
        if ordered:
            assert got == want, f"{'foreign-key ' if foreign else ''}{how} table join {out}"
        else:
            assert must <= set(got), f"{'foreign-key ' if foreign else ''}{how} table join {out}: keys"
    return check


class Numbering(Processor):
    """Numbers each key's records in the store `store` and forwards each value with its number (`seen`)."""

    def __init__(self, store: str) -> None:
        self.store_name = store

    def init(self, context: Any) -> None:
        super().init(context)
        self.seen = context.store(self.store_name)

    def process(self, record: Any) -> None:
        n = (self.seen.get(record.key) or 0) + 1
        self.seen.put(record.key, n)
        self.context.forward(record.key, {**record.value, "seen": n})


def processed(i: int, out: str, stream: Any, recs: list[Rec], rekeyed: bool, ordered: bool) -> Check:
    """A processor of the Processor API (`process_values`, a state store of its own) numbering each key's
    records, through a repartition topic first where the key changed, then summed per key with no repartition
    topic between; what it forwards (each key's numbers 1..n; in input order the records themselves too), its
    store and the sums."""
    name = f"seen{i}"
    if rekeyed:  # a key's records to one task, as a user of a key-keeping processor must
        stream = stream.repartition(name=f"proc-{i}")
    numbered = stream.process_values(functools.partial(Numbering, name), name=f"number{i}",
                                     stores=[store(name, key_serde="string", value_serde="long")])
    numbered.to(out)
    numbered.group_by_key().sum(lambda v: v["seen"], name=f"agg{i}")
    made: dict[Any, list[Any]] = {}
    for k, v, _ in recs:
        made.setdefault(k, []).append({**v, "seen": len(made.get(k, ())) + 1})
    counts = {k: len(vs) for k, vs in made.items()}

    def check(view: Any, cached: bool) -> None:
        records = view.records(out)
        got = per_key(records, value=lambda r: r.value)
        assert Counter((k, v["seen"]) for k, vs in got.items() for v in vs) == Counter(
            (k, v["seen"]) for k, vs in made.items() for v in vs), f"processed {out}: each key's numbers"
        assert {k: _unnumbered(vs) for k, vs in got.items()} == {k: _unnumbered(vs) for k, vs in made.items()}, out
        if ordered:
            assert got == made, f"processed {out}: each key's records in input order"
        assert dict(view.store(name).all()) == counts, f"processed {out}: the store"
        assert dict(view.store(f"agg{i}-store").all()) == {k: n * (n + 1) // 2 for k, n in counts.items()}
    return check


def _unnumbered(values: list[Any]) -> Counter[str]:
    return Counter(json.dumps({**v, "seen": 0}, sort_keys=True) for v in values)


# ---------------------------------------------------------------- helpers
def per_key(records: list[Any], value: Callable[[Any], Any]) -> dict[Any, list[Any]]:
    out: dict[Any, list[Any]] = {}
    for r in records:
        out.setdefault(r.key, []).append(value(r))
    return out


def per_key_ref(recs: list[Rec]) -> dict[Any, list[Any]]:
    out: dict[Any, list[Any]] = {}
    for k, v, _ in recs:
        out.setdefault(k, []).append(v)
    return out


def is_subsequence(seen: list[Any], made: list[Any]) -> bool:
    it = iter(made)
    return all(any(x == y for y in it) for x in seen)


def inputs(seed: int, records: int = RECORDS, base: int = BASE) -> list[tuple[str, str, dict, int]]:
    """(topic, key, value, timestamp): rising timestamps from `base` (a multiple of every window's advance),
    some a window's first or last millisecond."""
    rng = random.Random(1000 + seed)
    return [("in", f"k{rng.randrange(8)}", {"n": rng.randrange(100), "t": i},
             base + i * 1_000 + rng.choice([0, 0, 1, 499, 999])) for i in range(records)]


def build(seed: int, cache: int, partitions: int, *, records: list[tuple[str, str, dict, int]] | None = None,
          names: Names = str, **settings: Any) -> tuple[Application, list[Check], str]:
    """An application of random steps and terminals, the checks of its reference, and its description. With
    one partition every task reads its records in input order, whatever keys they were given on the way.
    `records`: the input (by default `inputs(seed)`); `names`: of its topics and application id; `settings`:
    the Application's."""
    rng = random.Random(seed)
    # drawn apart: half the seeds keep a table only stream-table joins read in stores restored from its topic
    optimization = "all" if random.Random(f"reuse-{seed}").random() < 0.5 else "none"
    app = Application(names(f"r{seed}"), **{"bootstrap_servers": "unused:9092",
                                            "topology_optimization": optimization, **settings},
                      cache_max_bytes=cache)
    recs: list[Rec] = [(k, v, ts) for _, k, v, ts in (records or inputs(seed))]
    prefix = Chain([random_step(rng) for _ in range(rng.randrange(0, 4))])
    stream = prefix.dsl(app.stream(names("in")), "p", names)
    recs = prefix.ref(recs)
    joins = rng.random() < 0.4
    side: Any = None
    gside: Any = None
    checks: list[Check] = []
    shown: list[str] = [f"prefix {[(s.kind, s.a, s.b) for s in prefix.steps]}"]
    # drawn apart: the other draws stay as they were when versioned tables came
    history = HISTORY_MS if random.Random(f"versioned-{seed}").random() < 0.5 else None
    for i in range(rng.randrange(1, 4)):
        suffix = Chain([random_step(rng) for _ in range(rng.randrange(0, 3))])
        branch, branch_recs, out = suffix.dsl(stream, f"b{i}-", names), suffix.ref(recs), names(f"out{i}")
        ordered = partitions == 1 or (prefix.ordered and suffix.ordered)
        kinds = ["sink", "keyed", "windowed", "table", "stream_join"] + (["join"] if joins else [])
        kind = rng.choice(kinds)
        # drawn apart, as the cogroup: the other branches' draws stay as they were when these came
        more = random.Random(f"more-{seed}-{i}")
        if more.random() < 0.3:
            kind = more.choice(["global_join", "table_join", "processed"])
        shown.append(f"branch {i}: {[(s.kind, s.a, s.b) for s in suffix.steps]} -> {kind}")
        if kind == "sink":
            checks.append(sink(out, branch, branch_recs, ordered))
        elif kind == "keyed" and random.Random(f"cogroup-{seed}-{i}").random() < 0.35:
            checks.append(cogrouped(i, out, branch, branch_recs, rng))
            shown[-1] = shown[-1].replace("-> keyed", "-> cogroup")
        elif kind == "keyed":
            # (drawn apart: most of the aggregations suppressed, a time limit of none, a few records or many,
            # some with a bound on the keys waiting)
            held = random.Random(f"suppress-{seed}-{i}")
            suppressed = ((held.choice([0, 3_000, 30_000]), held.choice([None, None, 2])) if held.random() < 0.7
                          else None)
            checks.append(keyed(i, out, branch, branch_recs, ordered, partitions == 1, rng, suppressed))
            if suppressed is not None:
                shown[-1] += f" suppressed ({suppressed[0]} ms, max_records {suppressed[1]})"
        elif kind == "windowed":
            checks.append(windowed(i, out, branch, branch_recs, rng))
        elif kind == "table":
            checks.append(table(i, out, branch, branch_recs, ordered))
        elif kind == "stream_join":
            checks.append(stream_joined(out, branch, branch_recs, rng, f"b{i}"))
        elif kind == "global_join":
            # (drawn apart: half the seeds' global side table is versioned)
            ghistory = HISTORY_MS if random.Random(f"gversioned-{seed}").random() < 0.5 else None
            gside = gside or app.global_table(names("gside"), versioned=ghistory)
            left = more.random() < 0.5
            checks.append(global_joined(out, branch, branch_recs, left, gside, after := after_join(seed, i)))
            shown[-1] += (" (left)" if left else " (inner)") + (f" then {after.shown}" if after.steps else "")
        elif kind == "table_join":
            side = side or app.table(names("side"), versioned=history)
            foreign = more.random() < 0.5
            how = more.choice(["inner", "left"] if foreign else ["inner", "left", "outer"])
            checks.append(table_joined(i, out, branch, branch_recs, foreign, how, side, ordered))
            shown[-1] += f" ({'foreign-key ' if foreign else ''}{how})"
        elif kind == "processed":
            checks.append(processed(i, out, branch, branch_recs, not (prefix.ordered and suffix.ordered), ordered))
        else:
            side = side or app.table(names("side"), versioned=history)
            # (drawn apart: a grace period for half the joins of a versioned side)
            grace = GRACE_MS if history is not None and random.Random(f"grace-{seed}-{i}").random() < 0.5 else None
            checks.append(joined(out, branch, branch_recs, rng, side, after := after_join(seed, i), grace,
                                 exact=partitions == 1))
            shown[-1] += f" then {after.shown}" if after.steps else ""
            shown[-1] += " with a grace period" if grace is not None else ""
    if side is not None and history is not None:
        shown.append("the side table versioned")
    if gside is not None and gside.history_retention_ms is not None:
        shown.append("the global side table versioned")
    if table_changelogs(app.subtopologies):
        shown.append("the side table's topic as its changelog")
    return app, checks, "; ".join(shown)


#: the stateless steps a join's results may pass on their way to its sink (none repartitions or adds a topic)
AFTER_JOIN = ["filter", "filter_not", "map_values", "flat_map_values", "map", "select_key", "branch_merge", "peek"]


def after_join(seed: int, i: int) -> Chain:
    """What branch `i`'s join results pass before the sink: for half the joins, one or two stateless steps,
    drawn apart (the other draws stay as they were when these came)."""
    rng = random.Random(f"after-{seed}-{i}")
    if rng.random() < 0.5:
        return Chain()
    return Chain([Step(kind, a, rng.randrange(a)) for kind in rng.sample(AFTER_JOIN, rng.randrange(1, 3))
                  for a in [rng.randrange(2, 6) if kind != "map_values" else rng.randrange(1, 4)]])


def side_history(base: int = BASE) -> list[tuple[str, dict, int]]:
    """A versioned `side`'s rows, (key, value, timestamp) in the order they are written, all older than every
    record of the stream (which starts at `base`): each key's row with another tier, then its row (`SIDE`),
    then a third tier between the two in time, out of order (into the history: it changes no row)."""
    return ([(k, {"tier": v["tier"] + 10}, base - 3_000) for k, v in SIDE.items()]
            + [(k, v, base - 1_000) for k, v in SIDE.items()]
            + [(k, {"tier": v["tier"] + 20}, base - 2_000) for k, v in SIDE.items()])


def versioned_side(app: Application) -> bool:
    return any(s.kind == "versioned" for sub in app.subtopologies.values() for s in sub.stores)


def versioned_global(app: Application) -> bool:
    return any(g.history_retention_ms is not None for sub in app.subtopologies.values() for g in sub.global_tables)


def side_rows(app: Application) -> list[tuple[Any, ...]]:
    """The tables' rows, if a join reads them (their timestamps, the driver's clock, before the input's; a
    versioned `side`'s, `side_history`)."""
    reads = {t for sub in app.subtopologies.values() for t in (*sub.inputs, *(g.topic for g in sub.global_tables))}
    # (a versioned global side's rows as a versioned side's: an older version, the row, an out-of-order one)
    gside = ([("gside", k, v, ts) for k, v, ts in side_history()] if versioned_global(app)
             else [("gside", k, v) for k, v in SIDE.items()]) if "gside" in reads else []
    if "side" in reads and versioned_side(app):
        return [("side", k, v, ts) for k, v, ts in side_history()] + gside
    return [("side", k, v) for k, v in SIDE.items() if "side" in reads] + gside


def run(app: Application, seed: int, partitions: int) -> TopologyTestDriver:
    driver = TopologyTestDriver(app, partitions=partitions)
    driver.pipe_records(side_rows(app))  # processed before the stream's records are piped
    driver.pipe_records(inputs(seed))
    return driver


def check_seed(seed: int, partitions: int, cache: int) -> None:
    app, checks, shown = build(seed, cache, partitions)
    with run(app, seed, partitions) as driver:
        assert driver.dead_letters() == [], shown
        for check in [*checks, check_audits]:
            try:
                check(driver, cache > 0)
            except AssertionError as e:
                raise AssertionError(f"seed {seed}, {partitions} partitions, cache {cache}: {e}\n"
                                     f"  topology: {shown}\n{app.describe()}") from None


def check_audits(driver: TopologyTestDriver, cached: bool) -> None:
    """`eos audit app` of what the driver committed passes: every lineage audit, each record's runs of output
    indices checked (with the ledger's paths, also where a step writes both a repartition topic and an
    output), and every window and join audit the topology can replay."""
    for report in driver.audit():
        assert report.verdict == "PASS", (report.mode, report.outputs, report.lineage or report.window or report.join)
        if report.lineage is not None:
            assert report.lineage.runs_checked and report.lineage.ledger, report.lineage


SEEDS = range(64)
MODES = [(1, 0), (3, 0), (3, 1 << 20)]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("partitions,cache", MODES)
def test_a_random_topology_commits_what_its_reference_computes(seed, partitions, cache):
    check_seed(seed, partitions, cache)


@pytest.mark.soak
def test_thousands_more_random_topologies():
    for seed in range(len(SEEDS), 3000):
        for partitions, cache in MODES:
            check_seed(seed, partitions, cache)


@pytest.mark.parametrize("seed", [s for s in SEEDS if s % 4 == 0])
def test_a_random_topology_commits_the_same_when_batches_crash(seed):
    app, _, shown = build(seed, 0, 2)
    with TopologyTestDriver(app, partitions=2) as driver:
        report = driver.check_exactly_once(side_rows(app) + inputs(seed)[:80], crashes=6, seed=seed)
        assert report.crashes, shown


@pytest.mark.parametrize("seed", [s for s in SEEDS if s % 4 == 1])
def test_a_random_topology_whose_batches_crash_passes_its_own_audits(seed):
    """Batches killed at random steps (the same steps `check_exactly_once` picks from), then every audit of the
    job over what was committed: each input once, each record's runs whole, every window and join replayed."""
    app, _, shown = build(seed, 0, 2)
    rnd = random.Random(seed)
    steps = ["after_read", "after_produce", "before_commit", "after_commit"]
    with TopologyTestDriver(app, partitions=2) as driver:
        for batch in sorted(rnd.sample(range(1, 12), 4)):
            driver.crash_at(rnd.choice(steps), batch=batch)
        driver.pipe_records(side_rows(app))
        for start in range(0, RECORDS, 20):
            driver.pipe_records(inputs(seed)[start:start + 20])
        assert driver.crashes, shown
        for report in driver.audit():
            assert report.verdict == "PASS", (shown, report.mode, report.lineage or report.window or report.join)
