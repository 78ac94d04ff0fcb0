"""Windows: assignment, closing and lateness, session merging with out-of-order records, sliding windows by
Kafka Streams' definition, final results once (run by the test driver), stores' layouts."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from typing import Any

import pytest

from eos import Application
from eos.errors import SerdeError
from eos.serde import JsonSerde, LongSerde, StringSerde
from eos.testing import TopologyTestDriver
from eos.windows import HoppingWindows, SessionWindows, SlidingWindows, TumblingWindows, Windowed, WindowedSerde
from recovery import MemoryBackend, RecordBuffer, SessionStore, StoreSpec, WindowStore, WriteBuffer


def test_tumbling_and_hopping_window_assignment():
    assert TumblingWindows(10).windows_for(25) == [(20, 30)]
    assert HoppingWindows(10, 5).windows_for(12) == [(5, 15), (10, 20)]
    assert HoppingWindows(10, 5).windows_for(3) == [(0, 10)]  # no window starts before 0
    assert [w.start for w in HoppingWindows(60, 20).windows_for(100)] == [60, 80, 100]
    w = TumblingWindows(10, grace=5)
    assert not w.closed(30, 34) and w.closed(30, 35)  # end + grace <= stream time
    with pytest.raises(ValueError, match="advance"):
        HoppingWindows(10, 20)


def test_sliding_and_session_closing_rules():
    s = SlidingWindows(5000)
    assert s.left_window(8000) == (3000, 8000) and s.right_window(8000) == (8001, 13001)
    assert s.left_window(2000) == (0, 5000)  # early records share [0, difference]
    assert not s.late(8000, 13000) and s.late(8000, 13001)  # until its right window closes
    assert not s.closed(8000, 8000) and s.closed(8000, 8001)  # its end is in it: open while stream time is there
    session = SessionWindows(100, grace=10)
    assert not session.closed(1000, 1110) and session.closed(1000, 1111)


def test_windowed_keys_round_trip_as_json_and_binary():
    json_serde, binary = WindowedSerde(StringSerde()), WindowedSerde(StringSerde(), "binary")
    key = Windowed("user-1", 60_000, 120_000)
    assert json.loads(json_serde.serialize(key)) == {"key": "user-1", "start": 60_000, "end": 120_000}
    assert json_serde.deserialize(json_serde.serialize(key)) == key
    assert binary.serialize(key) == b"user-1" + (120_000).to_bytes(8, "big") + (60_000).to_bytes(8, "big")
    assert binary.deserialize(binary.serialize(key)) == key


@pytest.mark.parametrize("inner", [StringSerde(), LongSerde(), JsonSerde()])
def test_a_binary_windowed_key_is_serialized_in_one_layout_and_refused_with_the_serde_s_errors(inner):
    binary = WindowedSerde(inner, "binary")
    key = {"StringSerde": "k", "LongSerde": 7, "JsonSerde": {"k": 1}}[type(inner).__name__]
    for window in (Windowed(key, 0, 10), Windowed(key, 5, 2**64 - 1)):
        assert binary.serialize(window) == binary._dumps(window)  # (the shorter path `serialize` takes: the same)
        assert binary.deserialize(binary.serialize(window)) == window
    no_key = Windowed(None, 1, 2)  # (no inner bytes: the end, then the start)
    assert binary.serialize(no_key) == binary._dumps(no_key) == bytes(7) + b"\x02" + bytes(7) + b"\x01"
    for bad, why in ((Windowed(key, -1, 5), "negative"), (Windowed(key, 1.5, 2), "float"),
                     (Windowed(key, 0, 2**64), "too big"), ((key, 0, 10), "expected a Windowed key")):
        with pytest.raises(SerdeError, match=why):
            binary.serialize(bad)


# ---------------------------------------------------------------- running a windowed sub-topology


class Harness:
    """A windowed sub-topology built by the DSL, run by the test driver (one partition): `feed` pipes records
    in one batch and returns what the batch committed to the output topic."""

    def __init__(self, **aggregate):
        app = Application("w")
        kind = aggregate.pop("kind", "count")
        builder = {"count": app.count, "sum": app.sum}[kind]
        self.sub = builder("in", "out", name="agg", key_serde="string", **aggregate)
        self.raw = kind == "count"  # a count reads no values: they are bytes
        self.driver = TopologyTestDriver(app, wall_clock_ms=0)

    def feed(self, *records):
        """records: (key, timestamp[, value]); returns [(key, start, end, value, timestamp, derived)]."""
        self.driver.pipe_many("in", [(key, json.dumps(value).encode() if self.raw else value, ts)
                                     for key, ts, value in (r if len(r) == 3 else (*r, 1) for r in records)])
        return [(r.key.key, r.key.start, r.key.end, r.value, r.timestamp, "eos.derived" in r.headers)
                for r in self.driver.read("out")]

    @property
    def dropped(self) -> dict[str, int]:
        return self.driver.dropped.get("agg", {})

    def store(self, name: str):
        return self.driver.store(name)


def test_tumbling_counts_updates_late_records_and_output_timestamps():
    h = Harness(windows=TumblingWindows(10, grace=5))
    out = h.feed(("a", 1), ("a", 7), ("b", 12), ("a", 3), ("a", 26), ("a", 8), ("a", 21))
    assert out == [("a", 0, 10, 1, 1, False), ("a", 0, 10, 2, 7, False), ("b", 10, 20, 1, 12, False),
                   ("a", 0, 10, 3, 7, False),  # out of order but in grace: counted; timestamp stays the max
                   ("a", 20, 30, 1, 26, False),
                   ("a", 20, 30, 2, 26, False)]  # 8 came after stream time 26 >= 10 + 5: late, dropped
    assert h.dropped == {"late": 1}


def test_hopping_windows_update_every_window_a_record_falls_in():
    h = Harness(windows=HoppingWindows(10, 5))
    assert [(s, e, v) for _, s, e, v, _, _ in h.feed(("a", 7), ("a", 12))] == [
        (0, 10, 1), (5, 15, 1), (5, 15, 2), (10, 20, 1)]


def test_final_results_are_emitted_once_when_a_window_closes_and_carry_derived():
    h = Harness(windows=TumblingWindows(10, grace=5), emit="final")
    assert h.feed(("a", 1), ("a", 4), ("b", 9), ("a", 12)) == []
    out = h.feed(("a", 14), ("a", 15))  # stream time 15 >= 10 + 5: [0, 10) closes
    assert sorted(out) == [("a", 0, 10, 2, 4, True), ("b", 0, 10, 1, 9, True)]
    assert h.feed(("a", 16)) == []  # never again
    assert h.feed(("a", 40)) == [("a", 10, 20, 4, 16, True)]
    late = h.feed(("a", 2))  # a record for a window already emitted: late, not a second result
    assert late == [] and h.dropped["late"] == 1


def test_session_windows_merge_out_of_order_records_and_retract_merged_sessions():
    h = Harness(kind="sum", value=lambda v: v, windows=SessionWindows(10, grace=100))
    out = h.feed(("a", 0, 1), ("a", 30, 2), ("a", 15, 4))  # 15 comes late, within grace: a session of its own
    assert out == [("a", 0, 0, 1, 0, False), ("a", 30, 30, 2, 30, False), ("a", 15, 15, 4, 15, False)]
    out = h.feed(("a", 22, 8))  # within 10 of 15 and of 30: one session [15, 30]
    assert out == [("a", 15, 15, None, 22, False), ("a", 30, 30, None, 30, False), ("a", 15, 30, 14, 30, False)]
    assert [(s.start, s.end, s.value) for s in h.store("agg-store").fetch("a")] == [(0, 0, 1), (15, 30, 14)]


def test_session_final_results_and_lateness():
    h = Harness(kind="sum", value=lambda v: v, windows=SessionWindows(10, grace=0), emit="final")
    assert h.feed(("a", 0, 1), ("a", 5, 1), ("b", 6, 7)) == []
    assert sorted(h.feed(("c", 17, 1))) == [("a", 0, 5, 2, 5, True), ("b", 6, 6, 7, 6, True)]  # 17 > 6 + 10
    assert h.feed(("a", 2, 5)) == [] and h.dropped == {"late": 1}


def test_sliding_windows_are_kafka_streams_windows():
    """The SlidingWindows javadoc example: difference 5000, records at 8000, 9200, 12400."""
    h = Harness(kind="sum", value=lambda v: v, windows=SlidingWindows(5000, grace=100_000))
    out = h.feed(("A", 8000, 1), ("A", 9200, 2), ("A", 12400, 3))
    final = {(s, e): v for _, s, e, v, _, _ in out}
    assert final == {(3000, 8000): 1, (4200, 9200): 3, (7400, 12400): 6, (8001, 13001): 5, (9201, 14201): 3}


@pytest.mark.parametrize("emit", ["update", "final"])
def test_sliding_windows_without_grace_keep_the_window_a_record_ends_at_stream_time(emit):
    """Kafka Streams updates a sliding window while its end (which it includes) is at or after stream time minus
    grace: with no grace, each record in order still opens its own window (the javadoc's example again),
    and emit="final" gives each window once stream time has passed its end."""
    h = Harness(kind="sum", value=lambda v: v, windows=SlidingWindows(5000), emit=emit)
    out = h.feed(("A", 8000, 1), ("A", 9200, 2), ("A", 12400, 3)) + h.feed(("B", 30_000, 0))
    windows = {(s, e): v for k, s, e, v, _, _ in out if k == "A"}
    assert windows == {(3000, 8000): 1, (4200, 9200): 3, (7400, 12400): 6, (8001, 13001): 5, (9201, 14201): 3}
    assert h.dropped == {}
    if emit == "final":
        assert len(out) == 5 and [e for _, _, e, *_ in out] == sorted(e for _, _, e, *_ in out)


@pytest.mark.parametrize("late_records", ["drop", "dead_letter"])
@pytest.mark.parametrize("emit", ["update", "final"])
def test_a_sliding_record_that_no_open_window_holds_is_late_though_its_right_window_would_be_open(emit, late_records):
    """A record more than grace behind stream time finds its own window closed. With no record of its key near
    it, no open window holds it: it is late (dropped and counted, or dead-lettered), never lost unseen, though
    the window after it would still be open (Kafka Streams drops it too: "Skipping record for expired window").
    One that an earlier record's open window (the window after that record) holds counts there, and is not late.
    A late record takes no part: a later record of its key makes no window after it (Kafka Streams makes one)."""
    h = Harness(kind="sum", value=lambda v: v, windows=SlidingWindows(5000, grace=1000), emit=emit,
                late_records=late_records)
    out = h.feed(("C", 8_500, 3), ("A", 12_000, 1), ("B", 9_000, 2), ("C", 9_000, 4), ("D", 9_000, 5),
                 ("D", 12_500, 6))
    if emit == "final":
        out += h.feed(("Z", 40_000, 0))
    windows = {(k, s, e): v for k, s, e, v, _, _ in out if k != "Z"}
    assert windows == {("C", 3500, 8500): 3, ("C", 8501, 13501): 4, ("A", 7000, 12000): 1, ("D", 7500, 12500): 6}
    letters = h.driver.dead_letters()
    from eos.audit.windows import reference_windows
    from eos.records import Record

    records = [("C", 8_500, 3), ("A", 12_000, 1), ("B", 9_000, 2), ("C", 9_000, 4), ("D", 9_000, 5), ("D", 12_500, 6)]
    ref = reference_windows([Record(k, v, "in", 0, i, ts) for i, (k, ts, v) in enumerate(records)],
                            h.sub.windowings[0], set())
    assert ref.late == ref.late_at_source == 2  # (one source: late by its own stream time)
    if late_records == "drop":
        assert h.dropped == {"late": 2} and not letters
    else:  # (B and D at 9,000, by stream time 12,000: their own windows ended at 9,000, + 1,000 of grace)
        assert [(d.key, d.error_type) for d in letters] == [(b"B", "LateRecordError"), (b"D", "LateRecordError")]
        assert not h.dropped


def test_sliding_windows_out_of_order_match_in_order_results():
    records = [("A", t, v) for t, v in [(8000, 1), (9200, 2), (12400, 3), (10_000, 4), (3000, 5), (15_000, 6)]]
    in_order = Harness(kind="sum", value=lambda v: v, windows=SlidingWindows(5000, grace=100_000))
    shuffled = Harness(kind="sum", value=lambda v: v, windows=SlidingWindows(5000, grace=100_000))
    a = {(s, e): v for _, s, e, v, _, _ in in_order.feed(*sorted(records, key=lambda r: r[1]))}
    b = {(s, e): v for _, s, e, v, _, _ in shuffled.feed(*records)}
    assert a == b
    for (start, end), value in a.items():  # each window's value is the sum of the records in it
        assert value == sum(v for _, t, v in records if start <= t <= end)


@pytest.mark.parametrize("order", [(31_001, 11_000), (31_001, 12_000, 11_000), (11_000, 31_001),
                                   (31_001, 31_001, 11_000)])
def test_a_record_arriving_after_the_window_its_right_window_is_does_not_count_in_it(order):
    """A record at t's right window [t + 1, t + 1 + diff] may already be there, as the left window of a record
    at t + 1 + diff that came first: the record at t is not in it, and it keeps its value."""
    h = Harness(kind="sum", value=lambda v: v, windows=SlidingWindows(20_000, grace=100_000))
    records = [("A", t, t // 1000) for t in order]
    got = {(s, e): v for _, s, e, v, _, _ in h.feed(*records)}
    assert got and all(value == sum(v for _, t, v in records if start <= t <= end)
                       for (start, end), value in got.items()), got


def test_window_and_session_stores_scan_by_key_and_time():
    ws = WindowStore(StoreSpec("w", StringSerde(), LongSerde(), kind="window", retention_ms=100, timestamped=True))
    ws.attach(WriteBuffer(MemoryBackend()))
    for key, start in (("b", 10), ("a", 10), ("a", 30), ("a", 0)):
        ws.put(key, start, start, timestamp=start + 1)
    assert list(ws.fetch_range("a", 5, 30)) == [(10, 10), (30, 30)]
    assert list(ws.fetch("a", 5, 30)) == [(10, 10), (30, 30)] and ws.fetch("a", 30) == 30  # (Kafka Streams' fetch)
    assert [(k, s) for k, s, _, _ in ws.fetch_all()] == [("a", 0), ("a", 10), ("b", 10), ("a", 30)]
    assert ws.fetch_with_timestamp("a", 30) == (30, 31) and ws.expire_before(30) == 3
    ss = SessionStore(StoreSpec("s", StringSerde(), JsonSerde(), kind="session", retention_ms=100))
    ss.attach(WriteBuffer(MemoryBackend()))
    ss.put("a", 0, 5, 1)
    ss.put("ab", 3, 4, 2)  # a key that extends another must not show up in its scans
    ss.put("a", 20, 25, 3)
    assert [(s.start, s.end) for s in ss.find_sessions("a", 4, 30)] == [(0, 5), (20, 25)]
    assert [(s.start, s.end) for s in ss.find_sessions("a", 6, 30)] == [(20, 25)]
    assert [(s.key, s.end) for s in ss.ending_before(6)] == [("ab", 4), ("a", 5)]
    ss.remove("a", 20, 25)
    ss.put("a", 18, 25, 4)
    assert ss.expire_before(5) == 1 and ss.expire_before(20, since=5) == 1  # ("ab", 4), then ("a", 5)
    assert [(s.key, s.start, s.end, s.value) for s in ss.fetch_all()] == [("a", 18, 25, 4)]
    assert ss.expire_before(26) == 1 and not list(ss.fetch_all()) and not list(ss._buf().iterate())
    rb = RecordBuffer(StoreSpec("r", StringSerde(), JsonSerde(), kind="record_buffer", retention_ms=100))
    rb.attach(WriteBuffer(MemoryBackend()))
    for ts, seq in ((5, 1), (3, 2), (9, 3)):
        rb.put("k", ts, seq, {"t": ts})
    rb.put("kk", 4, 4, {})
    assert [(ts, seq) for ts, seq, _ in rb.range("k", 3, 6)] == [(3, 2), (5, 1)]
    assert rb.expire_before(5) == 2 and [ts for ts, _, _ in rb.range("k", 0, 100)] == [5, 9]


def test_window_store_changelogs_are_compacted_and_deleted_after_their_retention():
    spec = StoreSpec("w", StringSerde(), LongSerde(), kind="window", retention_ms=60_000)
    assert spec.changelog_config() == {"cleanup.policy": "compact,delete", "retention.ms": str(60_000 + 86_400_000)}
    with pytest.raises(ValueError, match="needs a retention"):
        StoreSpec("w", StringSerde(), LongSerde(), kind="session")
    with pytest.raises(ValueError, match="merger"):
        Application("x", "b:1").aggregate("in", "out", name="s", initializer=list, aggregator=lambda k, v, a: a,
                                          windows=SessionWindows(10))


@pytest.mark.parametrize("windows", [TumblingWindows(50, grace=20), HoppingWindows(60, 20, grace=15),
                                     SessionWindows(25, grace=30), SlidingWindows(40, grace=25), SlidingWindows(40)],
                         ids=["tumbling", "hopping", "session", "sliding", "sliding-without-grace"])
@pytest.mark.parametrize("emit", ["update", "final"])
def test_the_operators_agree_with_the_auditors_reference_on_random_out_of_order_input(windows, emit):
    """Two independent implementations of the same definitions: the incremental operators and the audit's
    brute-force reference. Random keys, timestamps with disorder and late records, several batches."""
    import random

    from eos.audit.windows import reference_windows
    from eos.records import Record

    rng = random.Random(f"{type(windows).__name__}-{emit}")
    h = Harness(kind="sum", value=lambda v: v if v != 7 else 1 // 0, windows=windows, emit=emit)  # 7: a bad record
    records, t = [], 0
    for _ in range(600):
        t += rng.randrange(0, 12)
        ts = max(0, t - rng.choice([0, 0, 0, 5, 30, 80]))  # mostly in order, some out of order, some late
        records.append((rng.choice("abc"), ts, rng.randrange(1, 9)))
    observed: dict = {}
    for chunk in range(0, len(records), 97):  # batches of odd sizes
        for key, start, end, value, _, _ in h.feed(*records[chunk:chunk + 97]):
            observed.setdefault((key, start, end), []).append(value)
    dead = {(d.topic, d.partition, d.offset) for d in h.driver.dead_letters()}
    assert 0 < len(dead) <= sum(1 for *_, v in records if v == 7)  # late records are dropped before
    ref = reference_windows([Record(k, v, "in", 0, i, ts) for i, (k, ts, v) in enumerate(records)],
                            h.sub.windowings[0], dead)
    assert ref.late == h.dropped.get("late", 0) and ref.late > 0
    if emit == "update":
        assert observed == dict(ref.updates)
    else:
        assert {w: vals[0] for w, vals in observed.items()} == ref.closed
        assert all(len(vals) == 1 for vals in observed.values())


@pytest.mark.parametrize("emit", ["update", "final"])
def test_sliding_windows_keep_every_record_of_one_key_time_and_offset(emit):
    """Records of one key and timestamp made of one input (a flat_map before the aggregation), or read at the
    same offset of two topics merged, are all kept for the windows they open later: the results equal those
    of one topic holding each record as an input of its own."""
    import random

    rng = random.Random(5)
    records = [(f"k{rng.randrange(3)}", 1_000 + 7 * i + rng.choice([0, 0, 3]), rng.randrange(1, 9)) for i in range(300)]
    windows = SlidingWindows(40, grace=100)  # (records are at most 3 ms out of order: none late)
    results = []
    for shape in ("flat_map", "merged", "plain"):
        app = Application("s")
        if shape == "flat_map":
            stream = app.stream("in", key_serde="string", value_serde="long").flat_map_values(lambda v: [v, v * 10])
        elif shape == "merged":
            stream = app.stream("in", key_serde="string", value_serde="long").merge(
                app.stream("in-tens", key_serde="string", value_serde="long"))
        else:
            stream = app.stream("in", key_serde="string", value_serde="long")
        (stream.group_by_key().window(windows, emit=emit).sum(name="sums")
         .to_stream().to("out", value_serde="long"))
        with TopologyTestDriver(app, wall_clock_ms=0) as driver:
            for chunk in range(0, len(records), 37):
                batch = records[chunk:chunk + 37]
                if shape == "plain":
                    driver.pipe_many("in", [(k, v, ts) for k, ts, v0 in batch for v in (v0, v0 * 10)])
                elif shape == "merged":  # (each record at the same offset of both topics)
                    driver.pipe_records([("in", k, v, ts) for k, ts, v in batch]
                                        + [("in-tens", k, v * 10, ts) for k, ts, v in batch])
                else:
                    driver.pipe_many("in", [(k, v, ts) for k, ts, v in batch])
            results.append(sorted((k, s, v) for k, s, v, _ in driver.store("sums-store").fetch_all())
                           if emit == "update" else sorted((r.key, r.value) for r in driver.records("out")))
    assert results[0] == results[2] and results[0], "a flat_map's records of one key and time"
    assert results[1] == results[2], "two topics' records at one offset"


def test_a_windowed_store_is_queried_as_in_kafka_streams_and_a_method_it_has_not_says_what_it_has():
    app = Application("q")
    app.stream("in").group_by_key().window(TumblingWindows(60_000, grace=60_000)).count(name="per_minute")
    with TopologyTestDriver(app) as driver:
        driver.pipe_many("in", [("a", {}, 0), ("a", {}, 1_000), ("a", {}, 70_000)])
        view = driver.store("per_minute-store")
        assert view.fetch("a", 0) == 2 and list(view.fetch("a", 0, 120_000)) == [(0, 2), (60_000, 1)]
        with pytest.raises(AttributeError, match="store 'per_minute-store' is a window store, which has no 'get'; "
                                                 "it is read with approximate_num_entries, fetch, fetch_all, "
                                                 "fetch_range, fetch_with_timestamp"):
            view.get("a")


def routed_counts(**settings: object) -> Application:
    """Per-minute counts routed by size (`to(fn, topics=[...])`), through a map that flattens the window."""
    app = Application("routed", bootstrap_servers="unused:9092", **settings)  # type: ignore[arg-type]
    (app.stream("views").group_by_key().window(TumblingWindows(60_000)).count(name="per_minute").to_stream()
        .map(lambda w, n: (w.key, {"start": w.start, "n": n}), name="flat")
        .to(lambda k, v: "busy" if v["n"] > 2 else "quiet", topics=["busy", "quiet"], name="by_size"))
    return app


@pytest.mark.no_audit  # (it forges a record at the end, which its own audit catches)
def test_the_window_audit_replays_results_routed_among_topics_and_catches_one_in_the_wrong_topic():
    """Results routed by `to(fn, topics=...)` were "not checked" by the window audit (the lineage audit alone);
    each expected result now goes through the same map and the same routing, every topic's records counted
    against them, across a batch killed inside its transaction."""
    app = routed_counts()
    (windowing,) = next(iter(app.subtopologies.values())).windowings
    assert windowing.route is not None and windowing.route.topics == ("busy", "quiet")
    with TopologyTestDriver(app, partitions=2) as driver:
        start = driver.now // 60_000 * 60_000
        driver.pipe_records([("views", f"u{i % 2}", {"i": i}, start + i) for i in range(7)])
        driver.crash_at("before_commit")
        driver.pipe_records([("views", f"u{i % 2}", {"i": i}, start + 61_000 + i) for i in range(5)])
        assert driver.crashes
        (window,) = [r for r in driver.audit() if r.mode == "window"]
        assert (window.verdict, window.skipped, window.outputs) == ("PASS", None, ["busy", "quiet"])
        assert (window.window.output_records, window.window.changed) == (12, True)
        # a result written to the other topic than its route chooses: missing there, unexpected here
        (busy,) = [r for r in driver.records("busy") if r.value["n"] == 3 and r.key == "u0"][:1]
        driver.cluster.append("quiet", 0, b"u0", json.dumps(busy.value).encode())
        (window,) = [r for r in driver.audit() if r.mode == "window"]
        assert (window.verdict, window.window.unexpected, window.window.missing) == ("FAIL", 1, 0)
        assert window.window.samples["unexpected"][0]["topic"] == "quiet"


@pytest.mark.no_audit
def test_routed_results_of_a_cached_hopping_window_are_left_to_the_lineage_audit_saying_why():
    app = Application("routed", bootstrap_servers="unused:9092", cache_max_bytes=1_000_000)
    (app.stream("views").group_by_key().window(HoppingWindows(60_000, 30_000)).count(name="per_minute").to_stream()
        .to(lambda w, n: "busy" if n > 2 else "quiet", topics=["busy", "quiet"]))
    with TopologyTestDriver(app) as driver:
        driver.pipe("views", "u", {"i": 0})
        (window,) = [r for r in driver.audit() if r.mode == "window"]
        assert window.skipped and "the lineage audit alone proves them" in window.skipped


@pytest.mark.parametrize("windows", [TumblingWindows(400, grace=30), HoppingWindows(400, 100, grace=30),
                                     SlidingWindows(300, grace=50), SessionWindows(100, grace=50)],
                         ids=["tumbling", "hopping", "sliding", "session"])
@pytest.mark.parametrize("emit", ["update", "final"])
def test_windows_expire_alike_whether_or_not_batches_crash(windows, emit):
    """Expired windows' tombstones are written at the same punctuations by a runtime that replaces a crashed one:
    its steps are of stream time alone. (They followed what the runtime had dropped before: a sliding window's
    changelog differed between a straight run and one with crashes.)"""
    import random

    rng = random.Random(8)
    inputs = [("in", f"k{int(rng.paretovariate(1.1)) % 30}", {"n": 1},
               2_000 + i * 7 - (rng.randrange(100, 700) if rng.random() < 0.1 else 0)) for i in range(500)]

    def driver() -> TopologyTestDriver:
        app = Application("expiry", max_records_per_batch=60)
        app.stream("in").group_by_key().window(windows, emit=emit).count(name="c").to_stream().to("out")
        return TopologyTestDriver(app, wall_clock_ms=1_000_000)

    report = driver().check_exactly_once(inputs, crashes=12, seed=1, chunk=40)
    assert report.ok and len(report.crashes) >= 8
    straight = driver()
    straight.pipe_records(inputs)
    tombstones = [m for m in straight.cluster.records("expiry-c-store-changelog") if m.value() is None]
    assert tombstones  # windows expired (or were emitted and deleted) while the batches ran


def tombstones_after_records(log: Iterable[Any]) -> int:
    """How many tombstones a changelog partition's records (`MemoryMessage`s, in order) hold, each checked to
    follow a record of its key: a tombstone of a key the changelog never held deletes nothing."""
    held, tombstones = set(), 0
    for m in log:
        if m.value() is None:
            assert m.key() in held, f"a tombstone of {m.key()!r}, which {m.topic()} never held"
            tombstones += 1
        held.add(m.key())
    return tombstones


@pytest.mark.parametrize("windows", [TumblingWindows(400, grace=30), SlidingWindows(300, grace=50),
                                     SessionWindows(100, grace=50)], ids=["tumbling", "sliding", "session"])
def test_entries_made_and_dropped_within_a_batch_never_reach_the_changelog(windows):
    """Batches longer than the windows' retention: windows (and a sliding step's buffered records, a session
    merged into a longer one) made and expired within a batch leave no tombstone, which would delete what neither
    the changelog nor the store ever held. Every tombstone follows a record of its key; restored from the
    changelog after crashes, the job's results are those of a straight run (`check_exactly_once`)."""
    import random

    rng = random.Random(3)
    inputs = [("in", f"k{rng.randrange(8)}", {"n": 1}, 2_000 + i * 7 - (rng.randrange(100) if rng.random() < 0.1
                                                                       else 0)) for i in range(1_500)]

    def driver() -> TopologyTestDriver:
        app = Application("idle", max_records_per_batch=500)
        app.stream("in").group_by_key().window(windows).count(name="c").to_stream().to("out")
        return TopologyTestDriver(app, wall_clock_ms=1_000_000)

    straight = driver()
    straight.pipe_records(inputs)
    changelogs = [t for t in straight.cluster.logs if t.endswith("-changelog")]
    assert changelogs
    # (entries made in one batch and expired in a later one: theirs stay)
    assert sum(tombstones_after_records(straight.cluster.records(topic)) for topic in changelogs)
    report = driver().check_exactly_once(inputs, crashes=6, seed=2, chunk=300)
    assert report.ok and report.crashes


def test_the_sliding_windows_a_record_touches_are_kafka_streams_():
    # SlidingWindows' javadoc example (time difference 5,000 ms; records at 8000, 9200, 12400), in order and not
    w = SlidingWindows(5_000)
    assert [(x.start, x.end) for x in w.touched(12_400, [8_000, 9_200])] == [
        (7_400, 12_400), (8_001, 13_001), (9_201, 14_201)]  # its own window, and the windows after the two before
    assert [(x.start, x.end) for x in w.touched(9_200, [8_000, 12_400])] == [
        (4_200, 9_200), (7_400, 12_400), (8_001, 13_001), (9_201, 14_201)]  # and 12400's own, and its own after
    assert [(x.start, x.end) for x in w.touched(8_000, [])] == [(3_000, 8_000)]
    assert [(x.start, x.end) for x in w.touched(20_000, [8_000])] == [(15_000, 20_000)]  # too far: its own alone


def test_the_windows_a_record_touches_are_those_its_and_its_neighbours_own_and_after_windows_define():
    """`touched` computes the windows inline for speed: they must stay what `left_window` and `right_window` define
    (the record's own window; the window after it where a neighbour falls in it; each neighbour's own window and the
    window after it that hold the record), also near 0, where own windows start at 0."""
    rng = random.Random(4)
    for _ in range(20_000):
        w = SlidingWindows(rng.choice([1, 2, 5, 40]))
        t, diff = rng.randrange(0, 120), w.diff_ms
        neighbours = sorted(rng.randrange(max(0, t - diff - 1), t + diff + 2) for _ in range(rng.randrange(0, 6)))
        expected = {w.left_window(t)}
        for s in neighbours:
            if t < s <= w.right_window(t).end:
                expected.add(w.right_window(t))
            left, right = w.left_window(s), w.right_window(s)
            if left.start <= t <= left.end:
                expected.add(left)
            if s < t <= right.end:
                expected.add(right)
        assert w.touched(t, neighbours) == sorted(expected), (w, t, neighbours)
