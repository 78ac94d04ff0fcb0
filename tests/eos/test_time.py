"""Event time: extractors, the order of co-partitioned inputs, stream time, punctuation, output timestamps
(jobs run by the test driver)."""

from __future__ import annotations

import pickle
import re
from typing import ClassVar

import pytest

from eos import Application, Output, Processor
from eos.origin import DERIVED_HEADER, ORIGIN_HEADER
from eos.records import Record
from eos.testing import TopologyTestDriver
from eos.time import InvalidTimestampError, field, header, timestamp_extractor


def record(value=None, ts=1000, headers=None) -> Record:
    return Record("k", value, "in", 0, 0, ts, headers)


def test_extractors_by_name_and_by_object():
    assert timestamp_extractor(None)(record(ts=5)) == 5
    assert timestamp_extractor("field:meta.at")(record({"meta": {"at": 7}})) == 7
    assert field("at", unit="s")(record({"at": 1.5})) == 1500
    assert field("at", unit="iso")(record({"at": "2026-01-01T00:00:01+00:00"})) == 1_767_225_601_000
    assert timestamp_extractor("header:ts")(record(headers=[("ts", b"42")])) == 42
    assert header("ts", unit="s")(record(headers=[("ts", b"2")])) == 2000
    assert abs(timestamp_extractor("wall_clock")(record()) - __import__("time").time() * 1000) < 5000
    for bad in (record({"at": None}), record({"at": "soon"}), record("not a dict")):
        with pytest.raises(InvalidTimestampError):
            field("at")(bad)
    assert field("at")(record(None, ts=9)) == 9  # a tombstone (a table's deletion) keeps its own time
    # milliseconds as they are, a negative time for the task to refuse, none out of range; whole seconds converted
    times = (0, 5, 253_402_300_799_999, -4)
    assert [field("at")(record({"at": at})) for at in times] == list(times)
    for bad in (record({"at": 253_402_300_800_000}), record({"at": True}), record({"at": 2**64})):
        with pytest.raises(InvalidTimestampError):
            field("at")(bad)
    assert field("at", unit="s")(record({"at": 2})) == 2000
    shipped = pickle.loads(pickle.dumps(field("meta.at")))  # (as a task gets it)
    assert shipped == field("meta.at") and shipped(record({"meta": {"at": 7}})) == 7
    with pytest.raises(ValueError, match="unknown timestamp"):
        timestamp_extractor("event")


class Echo(Processor):
    def process(self, rec):
        self.context.forward(rec.key, {"v": rec.value["v"], "ts": self.context.timestamp})


def driver_of(processor, inputs=("in",), **settings) -> TopologyTestDriver:
    """A one-step job of `processor` on `inputs` (co-partitioned), run by the test driver."""
    app = Application("t", **settings)
    app.stream(list(inputs)).process(processor, name="t").to("out")
    return TopologyTestDriver(app, wall_clock_ms=1_000_000_000)


def test_outputs_carry_the_extracted_timestamp_and_bad_timestamps_are_dead_lettered():
    driver = driver_of(Echo, timestamp="field:at")
    driver.pipe_many("in", [("k", {"v": 1, "at": 50}), ("k", {"v": 2}), ("k", {"v": 3, "at": -4}),
                            ("k", {"v": 4, "at": True})])
    assert [(r.value["v"], r.timestamp) for r in driver.read("out")] == [(1, 50)]
    assert [d.stage for d in driver.dead_letters()] == ["timestamp", "timestamp", "timestamp"]


def test_a_count_whose_event_time_is_a_field_reads_its_values_as_json():
    for app in (Application("c", timestamp="field:at"), Application("c")):
        app.count("in", "out", name="c", **({} if app.default_timestamp else {"timestamp": "field:at"}))
        driver = TopologyTestDriver(app)
        driver.pipe_many("in", [("k", {"at": 5}), ("k", {"at": 9})])
        driver.pipe_many("in", [(b"k", b"not json")], serialized=True)
        assert [(r.value, r.timestamp) for r in driver.read("out")] == [(1, 5), (2, 9)]
        assert [d.stage for d in driver.dead_letters()] == ["deserialize"]


@pytest.mark.parametrize("serde, named", [("bytes", "bytes"), ("string", "string"), ("long", "long")])
def test_a_field_timestamp_of_values_without_fields_fails_when_the_job_is_built(serde, named):
    app = Application("f", timestamp="field:at")
    app.stream("in", value_serde=serde).to("out")
    with pytest.raises(ValueError, match=f"topic 'in': its event time is the field 'at' of each value, but its "
                                         f"values are read as {named} .*value_serde='json'"):
        TopologyTestDriver(app)


def test_co_partitioned_inputs_go_by_head_timestamp_and_never_reorder_a_partition():
    driver = driver_of(Echo, inputs=("a", "b"))
    driver.pipe_records([("a", "k", {"v": "a0"}, 10), ("a", "k", {"v": "a1"}, 5), ("a", "k", {"v": "a2"}, 30),
                         ("b", "k", {"v": "b0"}, 7), ("b", "k", {"v": "b1"}, 20)])
    # heads: a0(10) b0(7) -> b0; a0(10) b1(20) -> a0; a1(5) b1(20) -> a1; a2(30) b1(20) -> b1; a2
    assert [r.value["v"] for r in driver.read("out")] == ["b0", "a0", "a1", "b1", "a2"]


class Ticker(Processor):
    fired: ClassVar[list[int]] = []  # reset in init (the driver builds the processor)

    def __init__(self, interval=10, type="stream"):
        self.interval, self.type = interval, type

    def init(self, context):
        super().init(context)
        Ticker.fired = []
        context.schedule(self.interval, self.tick, type=self.type)

    def tick(self, timestamp):
        Ticker.fired.append(timestamp)
        self.context.forward("tick", timestamp)

    def process(self, rec):
        self.context.forward(rec.key, rec.value["v"])


def test_stream_time_punctuation_fires_between_the_right_records_and_skips_missed_intervals():
    driver = driver_of(Ticker)
    driver.pipe_many("in", [("k", {"v": i}, t) for i, t in enumerate([0, 5, 12, 13, 31, 8])])
    assert Ticker.fired == [0, 12, 31]  # with the first record; at 12 (>= 10); at 31 (>= 20; 30 skipped)
    out = driver.read("out")
    assert [r.key for r in out] == ["k", "tick", "k", "k", "tick", "k", "k", "tick", "k"]
    tick = out[1]
    assert tick.timestamp == 0 and ORIGIN_HEADER not in tick.headers
    assert tick.headers[DERIVED_HEADER] == b"t-0|in:0:0|0|0|0"  # task | after in:0:0 | at 0 | schedule 0 | first


def test_wall_clock_punctuation_runs_with_records_and_for_an_idle_task():
    driver = driver_of(lambda: Ticker(interval=1000, type="wall_clock"))
    driver.advance_wall_clock(500)
    assert Ticker.fired == []  # due 1 s after the processor was created
    driver.advance_wall_clock(700)
    assert Ticker.fired == [1_000_001_200]  # an idle task's punctuation runs in a batch of its own
    driver.advance_wall_clock(900)
    assert Ticker.fired == [1_000_001_200, 1_000_002_100]  # due at ...2_000 (one interval after ...1_000)
    driver.pipe("in", "k", {"v": 1})  # next due at ...3_000: not with this record
    driver.advance_wall_clock(900)
    assert Ticker.fired == [1_000_001_200, 1_000_002_100, 1_000_003_000]
    assert [r.key for r in driver.read("out")] == ["tick", "tick", "k", "tick"]


def test_a_cancelled_schedule_stops_and_intervals_must_be_positive():
    class Cancels(Processor):
        def init(self, context):
            super().init(context)
            context.schedule(10, lambda ts: context.forward("never", ts)).cancel()
            with pytest.raises(ValueError, match="must be > 0"):
                context.schedule(0, lambda ts: None)
            with pytest.raises(TypeError, match="callback must be a function"):  # not at its first time
                context.schedule(10, "tick")
            with pytest.raises(TypeError, match=r"callback is called as callback\(timestamp\), which <lambda>\(\)"):
                context.schedule(10, lambda: None)
            with pytest.raises(ValueError, match=re.escape("got 'WALL_CLOCK_TIME' (Kafka Streams' "
                                                           "PunctuationType.WALL_CLOCK_TIME is 'wall_clock')")):
                context.schedule(10, lambda ts: None, type="WALL_CLOCK_TIME")

        def process(self, rec):
            self.context.forward(rec.key, 1)

    driver = driver_of(Cancels)
    driver.pipe_many("in", [("k", {}, 5), ("k", {}, 50)])
    assert [r.key for r in driver.read("out")] == ["k", "k"]


def test_aggregates_take_the_largest_timestamp_of_what_they_aggregate():
    app = Application("agg")
    app.count("in", "out", name="counts")
    driver = TopologyTestDriver(app, wall_clock_ms=0)
    driver.pipe_many("in", [("k", b"x", t) for t in (100, 300, 200)])
    assert [(r.value, r.timestamp) for r in driver.read("out")] == [(1, 100), (2, 300), (3, 300)]
    assert driver.store("counts-store").get_with_timestamp("k") == (3, 300)


def test_an_output_with_its_own_timestamp_keeps_it():
    class Stamp(Processor):
        def process(self, rec):
            self.context.forward(Output(rec.key, 1, timestamp=rec.timestamp + 1))

    driver = driver_of(Stamp)
    driver.pipe("in", "k", {"v": 1}, timestamp=10)
    assert driver.read("out")[0].timestamp == 11


def test_parse_time_takes_milliseconds_iso_and_times_relative_to_now():
    import pytest

    from eos.time import parse_time

    now = 1_800_000_000_000
    assert parse_time("now", now) == now
    assert parse_time("-90s", now) == now - 90_000 and parse_time("+2h", now) == now + 7_200_000
    assert parse_time("-1.5m", now) == now - 90_000 and parse_time("-250ms", now) == now - 250
    assert parse_time("1767225600000", now) == 1767225600000
    assert parse_time("2026-01-01T00:00:00Z", now) == 1767225600000
    with pytest.raises(ValueError, match="relative to now"):
        parse_time("yesterday", now)
