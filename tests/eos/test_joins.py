"""Joins: each join kind run by the test driver, against the references the join audit uses, with
out-of-order input, tombstones and late records."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from eos import Application
from eos.audit.joins import _canon, check_table_table, explain_stream_table, reference_stream_stream
from eos.records import Record
from eos.tables import GlobalTable, JoinWindows
from eos.testing import TopologyTestDriver
from eos.worker.global_tables import GlobalCopy, GlobalTableView


def pair(left, right):
    return {"l": left, "r": right}


class JoinHarness:
    """A join sub-topology built by `app.join`, run by the test driver (one partition): `feed` pipes records
    of its inputs in one batch and returns what the batch committed to the output topic."""

    def __init__(self, left, right, **join):
        self.app = Application("j")
        self.sub = self.app.join(left, right, "out", name="j", joiner=pair, **join)
        self.driver = TopologyTestDriver(self.app, wall_clock_ms=0)
        self.offsets: Counter[str] = Counter()
        self.records: dict[str, list[Record]] = {t: [] for t in self.sub.inputs}

    def feed(self, *records):
        """records: (topic, key, value, timestamp); returns [(key, value, timestamp, derived)]."""
        for topic, key, value, ts in records:
            if topic in self.records:
                self.records[topic].append(Record(key, value, topic, 0, self.offsets[topic], ts))
            self.offsets[topic] += 1
        self.driver.pipe_records(records)
        return [(r.key, r.value, r.timestamp, "eos.derived" in r.headers) for r in self.driver.read("out")]

    def late(self) -> set[tuple[str, int]]:
        """(topic, offset) of the input records dropped as late so far (from the lineage ledger)."""
        return {(topic, offset) for entry in self.driver.ledger() for (topic, _), bm in entry.late.items()
                for offset in bm}

    def filtered(self) -> int:
        return sum(len(bm) for entry in self.driver.ledger() for bm in entry.filtered.values())


def test_stream_table_join_uses_the_value_the_table_holds_when_the_stream_record_comes():
    app = Application("j", "b:1")
    h = JoinHarness("orders", app.table("users"), how="left")
    out = h.feed(("users", "u1", {"name": "Ann"}, 10), ("orders", "u1", {"id": 1}, 20),
                 ("orders", "u2", {"id": 2}, 21), ("users", "u1", {"name": "Anna"}, 30),
                 ("orders", "u1", {"id": 3}, 40), ("users", "u1", None, 50), ("orders", "u1", {"id": 4}, 60))
    assert out == [("u1", pair({"id": 1}, {"name": "Ann"}), 20, False), ("u2", pair({"id": 2}, None), 21, False),
                   ("u1", pair({"id": 3}, {"name": "Anna"}), 40, False), ("u1", pair({"id": 4}, None), 60, False)]
    assert h.filtered() == 3  # table updates produce nothing: recorded in the ledger
    inner = JoinHarness("orders", app.table("users"))
    assert inner.feed(("orders", "u1", {"id": 1}, 5), ("users", "u1", {"n": 1}, 6),
                      ("orders", "u1", {"id": 2}, 7)) == [("u1", pair({"id": 2}, {"n": 1}), 7, False)]


def test_table_table_joins_emit_the_joined_tables_changes_and_tombstones():
    app = Application("j", "b:1")
    h = JoinHarness(app.table("a"), app.table("b"), how="inner")
    out = h.feed(("a", "k", 1, 10), ("b", "k", 2, 5), ("a", "k", 3, 20), ("b", "k", None, 30), ("a", "k", None, 40))
    assert out == [("k", pair(1, 2), 10, False), ("k", pair(3, 2), 20, False), ("k", None, 30, False)]
    outer = JoinHarness(app.table("a"), app.table("b"), how="outer")
    assert outer.feed(("b", "k", 2, 5), ("a", "k", 1, 10), ("b", "k", None, 11), ("a", "k", None, 12)) == [
        ("k", pair(None, 2), 5, False), ("k", pair(1, 2), 10, False), ("k", pair(1, None), 11, False),
        ("k", None, 12, False)]


def test_random_table_table_joins_match_the_reference():
    rng = random.Random(3)
    app = Application("j", "b:1")
    for how in ("inner", "left", "outer"):
        h = JoinHarness(app.table("a"), app.table("b"), how=how)
        records = [(rng.choice("ab"), f"k{rng.randrange(5)}", rng.choice([None, *range(6)]), i * 10)
                   for i in range(300)]
        outputs: dict = {}
        for i in range(0, 300, 37):
            for key, value, _, _ in h.feed(*records[i:i + 37]):
                outputs.setdefault(key, []).append(value)
        history = {"a": {}, "b": {}}
        for topic, key, value, _ in records:
            history[topic].setdefault(key, []).append(value)
        assert check_table_table(history["a"], history["b"], outputs, pair, how) == [], how
        outputs["k0"] = [*outputs.get("k0", []), {"l": 99, "r": 99}]  # the check sees a wrong result
        assert check_table_table(history["a"], history["b"], outputs, pair, how)


def test_global_table_join_reads_the_pinned_copy_with_a_key_selector():
    app = Application("j", "b:1")
    h = JoinHarness("orders", app.global_table("products"), key=lambda r: r.value["product"], how="left")
    assert h.feed(("products", "p1", {"price": 3}, 0)) == []  # the copy is read up to the pins of each batch
    out = h.feed(("orders", "o1", {"product": "p1"}, 1), ("orders", "o2", {"product": "p9"}, 2))
    assert out == [("o1", pair({"product": "p1"}, {"price": 3}), 1, False), ("o2", pair({"product": "p9"}, None), 2,
                                                                              False)]


def test_a_global_table_key_its_serde_refuses_dead_letters_the_record_saying_which_table_and_key():
    app = Application("j", "b:1")
    users = app.global_table("users", value_serde="json", name="users")
    (app.stream("orders", value_serde="json").join(users, lambda o, u: u, key=lambda k, v: v["user"], name="enrich")
        .to("enriched", value_serde="json"))
    with TopologyTestDriver(app) as driver:
        driver.pipe_many("users", [("u1", {"tier": "gold"})])
        driver.pipe_many("orders", [("o1", {"user": "u1"}), ("o2", {"user": 5})])
        assert [r.key for r in driver.records("enriched")] == ["o1"]
        (letter,) = driver.dead_letters()
    assert (letter.key, letter.stage) == (b"o2", "process") and letter.error == (
        "SerdeError: the key given for global table 'users', 5 (int), is not one of its keys: StringSerde expects "
        "str, got int; return a key its key serde takes")


def test_global_copy_is_rebuilt_when_it_is_ahead_of_the_pins():
    copy = GlobalCopy(GlobalTable("t", "t", None, None))  # serdes unused by the copy
    copy.positions, copy.data = {0: 10}, {b"k": b"v"}

    def nothing_to_read(ranges, timeout):
        assert all(r.empty for r in ranges), ranges
        return iter(())

    copy.advance(nothing_to_read, {0: (0, 0)}, 1.0)  # a retried batch pinned at an earlier offset: rebuilt
    assert copy.data == {} and copy.positions == {0: 0}


def test_a_versioned_global_copy_is_rebuilt_with_its_history_when_it_is_ahead_of_the_pins():
    from eos.serde import JsonSerde, StringSerde
    from transactions.memory import MemoryMessage

    copy = GlobalCopy(GlobalTable("t", "t", StringSerde(), JsonSerde(), history_retention_ms=10_000))
    log = [MemoryMessage("t", 0, n, b"k", b"%d" % n, None, 1_000 * (n + 1)) for n in range(3)]

    def read(ranges, timeout):
        return iter([[m for r in ranges for m in log[r.start:r.end]]])

    view = GlobalTableView(copy.table)
    view.copy = copy
    copy.advance(read, {0: (0, 3)}, 1.0)
    assert view.get("k") == 2 and view.get("k", as_of=1_500) == 0
    copy.advance(read, {0: (0, 2)}, 1.0)  # a retried batch pinned earlier: the later version is gone too
    assert view.get("k") == 1 and view.get("k", as_of=9_000) == 1 and copy.positions == {0: 2}
    assert [v.value for v in view.versions("k")] == [1, 0] and list(view.all()) == [("k", 1)]


@pytest.mark.parametrize("how", ["inner", "left", "outer"])
def test_stream_stream_joins_match_the_reference_on_out_of_order_input(how):
    rng = random.Random(hash(how) % 1000)
    windows = JoinWindows(50, 30, grace=20)
    h = JoinHarness("l", "r", windows=windows, how=how)
    t, records = 0, []
    for i in range(1500):
        t += rng.randrange(0, 12)
        lag = rng.choice([0, 0, 0, 10, 60, 200])  # 200 is beyond before + after + grace: often late
        records.append((rng.choice("lr"), f"k{rng.randrange(8)}", {"i": i}, max(0, t - lag)))
    observed: Counter = Counter()
    for i in range(0, len(records), 97):
        for key, value, ts, _ in h.feed(*records[i:i + 97]):
            observed[(key, _canon(value), ts)] += 1
    late_offsets = h.late()
    for key, value, ts, _ in h.feed(("l", "zz", {"end": 1}, t + 10_000), ("r", "zz", {"end": 2}, t + 10_000)):
        observed[(key, _canon(value), ts)] += 1  # stream time far ahead: every pending record is emitted
    assert late_offsets, "some records must have been late"
    kept = {topic: [r for r in recs if (topic, r.offset) not in late_offsets] for topic, recs in h.records.items()}
    expected = reference_stream_stream(kept["l"], kept["r"], windows, how, pair)
    assert observed == expected
    if how != "inner":
        assert any(v == _canon(pair({"i": 1}, None)) or "null" in v for _, v, _ in observed)


def test_stream_stream_left_join_emits_a_partnerless_record_once_when_its_window_closes():
    h = JoinHarness("l", "r", windows=JoinWindows(10, grace=5), how="left")
    assert h.feed(("l", "a", 1, 100)) == []
    # before + after + grace = 25: at stream time 135 a right record at 110 is still on time and joins it
    assert h.feed(("r", "b", 2, 124)) == []
    assert h.feed(("r", "b", 3, 135)) == []
    assert h.feed(("r", "b", 4, 136)) == [("a", pair(1, None), 100, True)]  # done: 100 + 10 < 136 - 25
    assert h.feed(("r", "b", 5, 500)) == []  # never again
    joined = JoinHarness("l", "r", windows=JoinWindows(10, grace=5), how="left")
    assert joined.feed(("l", "a", 1, 100), ("r", "a", 2, 95)) == [("a", pair(1, 2), 100, False)]
    assert joined.feed(("r", "b", 2, 1000)) == []  # it was joined: no (1, None) later


def test_explain_stream_table_accepts_forward_replays_and_rejects_the_impossible():
    stream = [Record("k", {"i": i}, "s", 0, i, i) for i in range(3)]
    versions = {"k": [None, "a", "b"]}
    ok = {0: [pair({"i": 0}, "a")], 1: [pair({"i": 1}, "b")], 2: [pair({"i": 2}, "b")]}
    assert explain_stream_table(stream, ok, versions, pair, "left") == []
    back_in_time = {0: [pair({"i": 0}, "b")], 1: [pair({"i": 1}, "a")], 2: [pair({"i": 2}, "b")]}
    assert [p for p, _, _ in explain_stream_table(stream, back_in_time, versions, pair, "left")] == ["wrong_values"]
    assert [p for p, _, _ in explain_stream_table(stream, {0: ok[0], 2: ok[2]}, versions, pair, "left")] == ["missing"]


def test_explain_stream_table_matches_each_input_s_outputs_to_what_a_flat_map_made_of_it():
    # what reached the join of input 0: two records (a flat map's), of input 1: nothing (a filter's stand-in)
    stream = [Record("k", 1, "s", 0, 0, 0), Record("k", 2, "s", 0, 0, 0), Record("k", None, "s", 0, 1, 1)]
    versions = {"k": [None, "a", "b"]}
    assert explain_stream_table(stream, {0: [pair(1, "a"), pair(2, "a")]}, versions, pair, "left") == []
    # one input's records all met the table at one moment, but each only needs a version no older than the last
    assert explain_stream_table(stream, {0: [pair(1, "a"), pair(2, "b")]}, versions, pair, "left") == []

    def problems(results, how="left", stream=stream, versions=versions):
        return [(p, r.value, out) for p, r, out in explain_stream_table(stream, results, versions, pair, how)]
    assert problems({0: [pair(2, "a"), pair(1, "a")]}) == [("wrong_values", 1, pair(2, "a")),
                                                            ("wrong_values", 2, pair(1, "a"))]  # out of order
    assert problems({0: [pair(1, "b"), pair(2, "a")]}) == [("wrong_values", 2, pair(2, "a"))]  # back in time
    assert problems({0: [pair(1, "a")]}) == [("missing", 2, None)]
    assert problems({0: [pair(1, "a"), pair(2, "a"), pair(2, "a")]}) == [("unexpected", 2, pair(2, "a"))]
    assert problems({0: [pair(1, "a"), pair(2, "a")], 1: [pair(None, "a")]}) == [  # from a record filtered out
        ("unexpected", None, pair(None, "a"))]
    # an inner join of a global table keyed by the value: keys "x" (no row yet) and "y"; only "y"'s record joins,
    # though "x"'s would make the same output under the version "x" takes later: the search finds the one reading
    both = [Record("x", 5, "s", 0, 0, 0), Record("y", 5, "s", 0, 0, 0)]
    rows = {"x": [None, "v"], "y": [None, "v"]}
    assert problems({0: [pair(5, "v")]}, "inner", both, rows) == []
    assert problems({0: [pair(5, "v"), pair(5, "v")]}, "inner", both, rows) == []
    assert problems({0: [pair(5, "w")]}, "inner", both, rows) == [("wrong_values", 5, pair(5, "w"))]
    assert problems({0: [pair(5, "v")] * 3}, "inner", both, rows) == [("unexpected", 5, pair(5, "v"))]
    # where the first explanation of a record leaves none for the next: "y" already read its row (input 0), so
    # input 1's one output is "y"'s, and "x" had no row, though "x"'s row would make the same output
    both = [Record("y", 1, "s", 0, 0, 0), Record("x", 5, "s", 0, 1, 1), Record("y", 5, "s", 0, 1, 1)]
    assert problems({0: [pair(1, "v")], 1: [pair(5, "v")]}, "inner", both, rows) == []
    # the same where "x" read its row before and has none since (the first explanation found, its row, is wrong)
    both = [Record("x", 1, "s", 0, 0, 0), Record("y", 1, "s", 0, 1, 1), Record("x", 5, "s", 0, 2, 2),
            Record("y", 5, "s", 0, 2, 2)]
    results = {0: [pair(1, "v")], 1: [pair(1, "v")], 2: [pair(5, "v")]}
    assert problems(results, "inner", both, {"x": [None, "v", None], "y": [None, "v"]}) == []
    # a left join makes an output of every record, whether its key has a row or not
    alone = [Record("z", 1, "s", 0, 0, 0)]
    assert problems({}, "left", alone, rows) == [("missing", 1, None)]
    assert problems({}, "inner", alone, rows) == []


def test_the_join_audit_applies_the_steps_between_a_join_and_its_topic_to_each_result():
    from eos.audit.windows import replay_prefix
    from eos.graph.operators import FlatMapValues, MapValues, SelectKey

    # after the join: a flat map making one output of a result whose left value is odd, two of an even one
    after = replay_prefix((FlatMapValues(lambda v: [v, v] if v["l"] % 2 == 0 else [v]),), stand_in=False)
    stream = [Record("k", 1, "s", 0, 0, 0), Record("k", 2, "s", 0, 1, 1), Record("z", 3, "s", 0, 2, 2)]
    versions = {"k": [None, "a"]}

    def problems(results, how="inner", after=after):
        return [(p, r.value, out) for p, r, out in explain_stream_table(stream, results, versions, pair, how, after)]
    ok = {0: [pair(1, "a")], 1: [pair(2, "a"), pair(2, "a")]}
    assert problems(ok) == []
    assert problems({**ok, 2: [pair(3, None)]}, "left") == []  # "z" has no row: a left join's result, once
    assert problems({0: [pair(1, "a")], 1: [pair(2, "a")]}) == [("wrong_values", 2, pair(2, "a"))]  # one of two
    assert problems({**ok, 0: [pair(1, "a"), pair(1, "a")]}) == [("unexpected", 1, pair(1, "a"))]
    assert problems(ok, after=None) == [("unexpected", 2, pair(2, "a"))]  # (without the step: one per record)
    # what is wrong is named after the explanation that makes the most outputs: row "a" makes two, "b" one
    twice = replay_prefix((FlatMapValues(lambda v: [v["l"]] * (2 if v["r"] == "a" else 1)),), stand_in=False)
    one = [Record("k", 2, "s", 0, 0, 0)]
    assert [(p, out) for p, _, out in explain_stream_table(one, {0: [2, 2, 99]}, {"k": [None, "a", "b"]}, pair,
                                                            "inner", twice)] == [("unexpected", 99)]
    assert explain_stream_table(one, {0: [2, 7]}, {"k": [None, "a", "b"]}, pair, "inner", twice)  # the second differs
    # each record takes the earliest version that explains it: record 0's result does not tell "a" from "b"
    # (the step after the join drops the row of an odd value), record 1's needs "a"
    hides = replay_prefix((MapValues(lambda v: v["l"] if v["l"] % 2 else v),), stand_in=False)
    two = [Record("k", 1, "s", 0, 0, 0), Record("k", 2, "s", 0, 1, 1)]
    assert explain_stream_table(two, {0: [1], 1: [pair(2, "a")]}, {"k": [None, "a", "b"]}, pair, "left", hides) == []
    # a stream-stream join's results re-keyed and mapped after it
    rekeyed = replay_prefix((SelectKey(lambda k, v: v["r"]), MapValues(lambda v: v["l"] + (v["r"] or 0))),
                            stand_in=False)
    left, right = [Record("k", 1, "l", 0, 0, 100)], [Record("k", 2, "r", 0, 0, 105), Record("k", 3, "r", 0, 1, 990)]
    expected = reference_stream_stream(left, right, JoinWindows(10), "left", pair, after=rekeyed)
    assert expected == Counter({(2, _canon(3), 105): 1})
    assert reference_stream_stream(right, left, JoinWindows(10), "left", pair, after=rekeyed) == Counter(
        {(1, _canon(3), 105): 1, (None, _canon(3), 990): 1})  # (the partnerless record: its right value None)


def test_join_definitions_that_cannot_work_are_refused_with_what_to_do():
    app = Application("j", "b:1")
    with pytest.raises(ValueError, match="JoinWindows"):
        app.join("a", "b", "o", name="x", joiner=pair)
    with pytest.raises(ValueError, match="inner, left"):
        app.join("a", app.table("t"), "o", name="y", joiner=pair, how="outer")
    with pytest.raises(TypeError, match="stream first"):
        app.join(app.table("t"), "a", "o", name="z", joiner=pair)
    with pytest.raises(ValueError, match="global table"):
        app.join("a", app.table("t"), "o", name="w", joiner=pair, key=lambda r: r.key)


def test_the_join_audit_finds_the_stream_record_of_each_output_behind_repartition_topics():
    """Outputs of a join behind two repartition topics carry the origin of the input the stream record came
    from, its index two levels deep: the audit maps each back to its stream record, whatever path it took."""
    from eos.audit.joins import _carried, _made_of
    from eos.origin import origin_of

    app = Application("j", repartition_purge_interval=0)
    table = app.table("customers")
    (app.stream("orders")
     .flat_map(lambda k, v: [(f"x{v['n'] % 3}", {**v, "copy": c}) for c in range(1 + v["n"] % 3)])  # keyed anew
     .repartition(name="first")
     .flat_map_values(lambda v: [v, {**v, "copy": v["copy"] + 10}])
     .select_key(lambda k, v: f"c{v['n'] % 4}")
     .join(table, lambda v, c: {**v, "tier": c}, name="tiers").to("out"))
    left = "j-tiers-left-repartition"
    assert app.repartition_topics == {"j-first-repartition", left}
    with TopologyTestDriver(app, partitions=2) as driver:
        driver.pipe_many("customers", [(f"c{i}", i) for i in range(3)])  # c3 has no row: an inner join drops it
        driver.pipe_many("orders", [(f"o{i}", {"n": i}) for i in range(60)])
        stream = driver.records(left)
        made = {_carried(Record(r.key, r.value, left, r.partition, r.offset, r.timestamp, list(r.headers.items())),
                         app.repartition_topics): r for r in stream}
        assert len(made) == len(stream)  # every stream record carries an origin of its own
        outputs = driver.records("out")
        assert len(outputs) == sum(r.key != "c3" for r in stream) > 60
        found = [made.get(_made_of(origin_of(list(o.headers.items())), {p: p for p in made})) for o in outputs]
        assert all(r is not None and {**r.value, "tier": o.value["tier"]} == o.value
                   for r, o in zip(found, outputs, strict=True))
        assert len({(r.partition, r.offset) for r in found}) == len(outputs)
        # an output of an input place no stream record carries is no stream record's
        stray = origin_of(list(outputs[0].headers.items()))._replace(offset=10_000)
        assert _made_of(stray, {p: p for p in made}) is None


def test_a_join_whose_sides_read_one_topic_is_refused_saying_what_to_write_instead():
    app = Application("same", bootstrap_servers="unused:9092")
    events = app.stream("events", value_serde="json")
    with pytest.raises(ValueError, match=r"join 'join-1': both sides read \['events'\]; a stream joined with itself "
                                         r"needs one side through a topic \(repartition\(\)\)"):
        events.join(events, lambda a, b: [a, b], windows=JoinWindows(60_000))
    with pytest.raises(ValueError, match=r"both sides read \['events'\]; a stream joined with the table of its own "
                                         r"topic: a record with its key's value before it is an aggregate"):
        events.join(app.table("events", value_serde="json"), lambda a, b: [a, b])
    events.repartition(name="again").join(events, lambda a, b: [a, b], windows=JoinWindows(60_000)).to("pairs")


def test_joins_take_kafka_streams_order_of_arguments_too():
    """`join(stream, joiner, JoinWindows(...))`, `join(global_table, key_selector, joiner)` and a table's
    `join(other, foreign_key_extractor, joiner)`, as a job ported from Kafka Streams writes them, make the same
    joins as the keywords; anything else after the joiner says what to write."""
    app = Application("order", bootstrap_servers="unused:9092")
    products = app.global_table("products", name="products")
    app.stream("views").join(products, lambda k, v: v["product"], pair, name="g").to("with-product")
    app.stream("left").left_join(app.stream("right"), pair, JoinWindows(1_000), name="s").to("pairs")
    orders, prices = app.table("orders"), app.table("prices")
    orders.join(prices, lambda order: order["product"], pair, name="fk").to_stream().to("priced")
    with TopologyTestDriver(app) as driver:
        driver.pipe("products", "p1", {"name": "pen"})
        driver.pipe("views", "u1", {"product": "p1"})
        driver.pipe("left", "k", 1, timestamp=0)
        driver.pipe("right", "k", 2, timestamp=500)
        driver.pipe("prices", "p1", 3)
        driver.pipe("orders", "o1", {"product": "p1"})
        assert [r.value for r in driver.read("with-product")] == [pair({"product": "p1"}, {"name": "pen"})]
        assert [r.value for r in driver.read("pairs")] == [pair(1, 2)]
        assert [(r.key, r.value) for r in driver.read("priced")] == [("o1", pair({"product": "p1"}, 3))]
    with pytest.raises(TypeError, match=r"Kafka Streams' order: join\(stream, joiner, JoinWindows\(...\)\), "
                                        r"join\(global_table, key_selector, joiner\)\); got 1 more argument: 5"):
        app.stream("views").join(app.stream("right"), pair, 5)
    with pytest.raises(TypeError, match=r"join\(other, foreign_key_extractor, joiner\)\); got 2 more"):
        orders.join(prices, pair, pair, pair)


def routed_joins() -> Application:
    """A stream-table join and a stream-stream join, each routed by `to(fn, topics=[...])` after a map."""
    app = Application("routed-joins", bootstrap_servers="unused:9092")
    prices = app.table("prices")
    (app.stream("orders").left_join(prices, lambda o, p: {**o, "price": p}, name="priced")
        .map_values(lambda v: {**v, "big": v["n"] > 5}, name="sized")
        .to(lambda k, v: "big-orders" if v["big"] else "small-orders", topics=["big-orders", "small-orders"],
            name="by_size"))
    (app.stream("clicks").join(app.stream("views"), lambda c, v: {"c": c["i"], "v": v["i"]},
                               JoinWindows(10_000), name="seen")
        .to(lambda k, v: "even" if v["c"] % 2 == 0 else "odd", topics=["even", "odd"], name="by_parity"))
    return app


@pytest.mark.no_audit  # (it forges a record at the end, which its own audit catches)
def test_the_join_audit_replays_results_routed_among_topics_and_catches_one_in_the_wrong_topic():
    """Joins whose results `to(fn, topics=...)` routes were "not checked" by the join audit (the lineage audit
    alone); now every topic's records are taken together and each must be in the topic its route chooses,
    across batches killed inside their transactions."""
    app = routed_joins()
    routes = {j.route.topics for sub in app.subtopologies.values() for j in sub.joins}
    assert routes == {("big-orders", "small-orders"), ("even", "odd")}
    with TopologyTestDriver(app, partitions=2) as driver:
        start = driver.now
        driver.pipe_records([("prices", f"p{i}", i * 10, start) for i in range(3)])
        driver.crash_at("before_commit")
        driver.pipe_records([("orders", f"p{i % 4}", {"n": i}, start + i) for i in range(10)])
        driver.crash_at("after_produce")
        driver.pipe_records([rec for i in range(8) for rec in (("clicks", f"u{i % 3}", {"i": i}, start + i),
                                                               ("views", f"u{i % 3}", {"i": 100 + i}, start + i))])
        assert len(driver.crashes) == 2
        joins = {tuple(r.outputs): r for r in driver.audit() if r.mode == "join"}
        assert set(joins) == {("big-orders", "small-orders"), ("even", "odd")}
        assert {(r.verdict, r.skipped) for r in joins.values()} == {("PASS", None)}
        assert joins[("big-orders", "small-orders")].join.output_records == 10
        assert joins[("even", "odd")].join.output_records > 8
        # a result copied into the other topic than its route chooses: caught, naming both topics
        big = next(r for r in driver.records("big-orders"))
        driver.cluster.append("small-orders", 0, big.key.encode(), json.dumps(big.value).encode())
        joins = {tuple(r.outputs): r for r in driver.audit() if r.mode == "join"}
        report = joins[("big-orders", "small-orders")]
        assert report.verdict == "FAIL" and report.join.unexpected >= 1
        assert {"topic": "small-orders", "route_chooses": "big-orders"}.items() <= report.join.samples[
            "unexpected"][0].items()
        assert joins[("even", "odd")].verdict == "PASS"


def _beside_a_stream_join(grace_join: bool) -> Application:
    """Orders joined with clicks (10 min either way, no grace: a record 20 min behind stream time is late) and,
    in the same task, with a versioned price table held back 10 s for late prices (`grace_join`: an order 10 s
    behind stream time is late there) or copied to a topic of their own."""
    app = Application("beside", bootstrap_servers="unused:9092")
    orders, clicks = app.stream("orders"), app.stream("clicks")
    orders.join(clicks, pair, windows=JoinWindows(600_000), name="clicked").to("out")
    if grace_join:
        prices = app.table("prices", versioned=3_600_000)
        orders.left_join(prices, pair, name="priced", grace=10_000).to("priced")
    else:
        orders.map_values(lambda v: {**v, "copy": True}, name="copied").to("copies")
    return app


@pytest.mark.parametrize("grace_join", [True, False])
def test_a_record_late_for_one_step_of_a_task_is_late_for_that_step_only(grace_join):
    """The lineage ledger names each record dropped as late by the step that dropped it (`late_by`), whatever
    else it made, and a stream-stream join's audit leaves out its own step's: an order late for the grace
    period of the join beside it, but on time for the stream join, which kept it and later joined a click with
    it (before, the ledger called it late for every step, and the audit took that result for unexpected); and an
    order late for the stream join that made a copy beside it (before, the ledger did not call it late at all,
    as it made something, and the audit expected its join with an earlier click: missing)."""
    app = _beside_a_stream_join(grace_join)
    driver = TopologyTestDriver(app)
    t = 1_800_000_000_000
    inputs = [("clicks", "k", {"c": 1}, t + 170_000),
              ("orders", "k", {"o": 1}, t + 100_000),     # joins click 1
              ("orders", "k", {"o": 2}, t + 3_000_000),   # stream time moves on
              ("orders", "k", {"o": 3}, t + 1_900_000),   # 18 min behind: on time for the stream join only
              ("clicks", "k", {"c": 2}, t + 1_950_000),   # joins order 3
              ("orders", "k", {"o": 4}, t + 1_750_000)]   # 20.8 min behind: late for both joins (else with click 2)
    if grace_join:
        inputs.insert(0, ("prices", "k", {"p": 1}, t))
    for record in inputs:
        driver.pipe_records([record])
    joined = sorted((r.value["l"]["o"], r.value["r"]["c"]) for r in driver.read("out"))
    assert joined == [(1, 1), (3, 2)]
    late_by: dict[str, set[int]] = {}
    for entry in driver.ledger():
        for step, sets in (entry.late_by or {}).items():
            late_by.setdefault(step, set()).update(o for (topic, _), bm in sets.items() if topic == "orders"
                                                   for o in bm)
    offset = {v["o"]: n for n, (_, _, v, _) in enumerate(r for r in inputs if r[0] == "orders")}
    assert late_by == ({"clicked": {offset[4]}, "priced": {offset[3], offset[4]}} if grace_join
                       else {"clicked": {offset[4]}})
    reports = driver.audit()
    assert [r.verdict for r in reports] == ["PASS"] * len(reports)
    [clicked] = [r.join for r in reports if r.join is not None and r.join.kind == "stream-stream"]
    assert (clicked.expected, clicked.late_records) == (2, 1)


def test_a_record_late_for_a_join_that_fails_in_the_step_beside_it_is_a_dead_letter_and_not_late():
    """A record's late mark is taken back with everything else it did when a later step fails on it: it goes to
    the dead-letter topic, and the ledger does not call it late for the join."""
    app = Application("beside", bootstrap_servers="unused:9092")
    orders, clicks = app.stream("orders"), app.stream("clicks")
    orders.join(clicks, pair, windows=JoinWindows(600_000), name="clicked").to("out")
    orders.map_values(lambda v: {**v, "copy": 1 // (0 if v.get("bad") else 1)}, name="copied").to("copies")
    driver = TopologyTestDriver(app)
    t = 1_800_000_000_000
    for record in [("orders", "k", {"o": 1}, t + 3_000_000), ("orders", "k", {"o": 2, "bad": True}, t),
                   ("orders", "k", {"o": 3}, t)]:
        driver.pipe_records([record])
    [letter] = driver.dead_letters()
    assert letter.error.startswith("ZeroDivisionError")
    late = {o for entry in driver.ledger() for sets in (entry.late_by or {}).values() for bm in sets.values()
            for o in bm}
    assert late == {2}  # (order 3, late and copied; order 2 dead-lettered)
    assert all(r.verdict == "PASS" for r in driver.audit())
