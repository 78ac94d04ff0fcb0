"""Event time: extractors, the order of co-partitioned inputs, stream time, punctuation, output timestamps."""

from __future__ import annotations

import json

import pytest

from eos import Output, Processor
from eos.origin import DERIVED_HEADER, ORIGIN_HEADER
from eos.records import Record
from eos.serde import BytesSerde, JsonSerde, StringSerde
from eos.time import InvalidTimestampError, field, header, timestamp_extractor
from eos.worker.context import TaskContext
from eos.worker.dead_letters import DeadLetterPolicy
from eos.worker.processing import punctuate_idle, run_processor
from tests.fakes import FakeMessage

DLQ = DeadLetterPolicy("dlq", 0, "t-0", fail=False)


def ctx() -> TaskContext:
    return TaskContext(application_id="app", subtopology="t", partition=0, output_topic="out",
                       key_serde=StringSerde(), value_serde=JsonSerde(), lineage=True)


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
    with pytest.raises(ValueError, match="unknown timestamp"):
        timestamp_extractor("event")


class Echo(Processor):
    def process(self, rec):
        self.context.forward(rec.key, {"v": rec.value["v"], "ts": self.context.timestamp})


def run(processor, messages, **kw):
    c = kw.pop("context", None) or ctx()
    processor.init(c)
    return run_processor(processor, c, messages, key_serde=StringSerde(), value_serde=JsonSerde(), dlq=DLQ, **kw), c


def msg(partition, offset, value, ts=1000, topic="in"):
    return FakeMessage(topic, partition, offset, json.dumps(value).encode(), b"k", timestamp=ts)


def test_outputs_carry_the_extracted_timestamp_and_bad_timestamps_are_dead_lettered():
    out, c = run(Echo(), [msg(0, 0, {"v": 1, "at": 50}), msg(0, 1, {"v": 2}), msg(0, 2, {"v": 3, "at": -4})],
                 timestamp=field("at"))
    assert [(json.loads(o.value)["v"], o.timestamp) for o in out.outputs] == [(1, 50)]
    assert [dict(d.headers)["eos.dlq.stage"] for d in out.dead_letters] == [b"timestamp", b"timestamp"]
    assert out.stream_time == 50 == c.stream_time


def test_co_partitioned_inputs_go_by_head_timestamp_and_never_reorder_a_partition():
    a = [msg(0, 0, {"v": "a0"}, ts=10, topic="a"), msg(0, 1, {"v": "a1"}, ts=5, topic="a"),
         msg(0, 2, {"v": "a2"}, ts=30, topic="a")]
    b = [msg(0, 0, {"v": "b0"}, ts=7, topic="b"), msg(0, 1, {"v": "b1"}, ts=20, topic="b")]
    out, _ = run(Echo(), a + b)
    # heads: a0(10) b0(7) -> b0; a0(10) b1(20) -> a0; a1(5) b1(20) -> a1; a2(30) b1(20) -> b1; a2
    assert [json.loads(o.value)["v"] for o in out.outputs] == ["b0", "a0", "a1", "b1", "a2"]


class Ticker(Processor):
    def __init__(self, interval=10, type="stream"):
        self.interval, self.type, self.fired = interval, type, []

    def init(self, context):
        super().init(context)
        context.schedule(self.interval, self.tick, type=self.type)

    def tick(self, timestamp):
        self.fired.append(timestamp)
        self.context.forward("tick", timestamp)

    def process(self, rec):
        self.context.forward(rec.key, rec.value["v"])


def test_stream_time_punctuation_fires_between_the_right_records_and_skips_missed_intervals():
    ticker = Ticker()
    stamps = [0, 5, 12, 13, 31, 8]
    out, c = run(ticker, [msg(0, i, {"v": i}, ts=t) for i, t in enumerate(stamps)])
    assert ticker.fired == [0, 12, 31]  # with the first record; at 12 (>= 10); at 31 (>= 20; 30 skipped)
    keys = [o.key for o in out.outputs]
    assert keys == [b"k", b"tick", b"k", b"k", b"tick", b"k", b"k", b"tick", b"k"]
    tick = out.outputs[1]
    headers = dict(tick.headers)
    assert tick.timestamp == 0 and ORIGIN_HEADER not in headers
    assert headers[DERIVED_HEADER] == b"t-0|in:0:0|0|0|0"  # task | after record in:0:0 | at 0 | schedule 0 | first
    assert c.punctuation_state() == {0: 41}


def test_wall_clock_punctuation_runs_between_records_and_for_an_idle_task():
    now = [1_000_000.0]
    ticker = Ticker(interval=1000, type="wall_clock")
    c = ctx()
    ticker.init(c)
    assert c.next_wall_clock() is not None
    c.adopt_punctuation_state({0: 1_000_000_500})  # as committed by an earlier batch
    messages = [msg(0, 0, {"v": 0}), msg(0, 1, {"v": 1})]

    def clock():
        now[0] += 0.4  # 400 ms per look at the clock
        return now[0]

    run_processor(ticker, c, messages, key_serde=StringSerde(), value_serde=JsonSerde(), dlq=DLQ, clock=clock)
    assert ticker.fired == [1_000_000_800]  # due at ...500, first seen at ...800
    assert c.punctuation_state() == {0: 1_000_001_500}
    now[0] = 1_000_002.0
    idle = punctuate_idle(ticker, c, (), clock=lambda: now[0])
    assert ticker.fired[-1] == 1_000_002_000 and idle.punctuations == 1 and len(idle.outputs) == 1


def test_a_cancelled_schedule_stops_and_intervals_must_be_positive():
    c = ctx()
    handle = c.schedule(10, lambda ts: None)
    handle.cancel()
    assert c.due("stream", 100) == [] and c.punctuation_state() == {}
    with pytest.raises(ValueError, match="must be > 0"):
        c.schedule(0, lambda ts: None)


def test_aggregates_take_the_largest_timestamp_of_what_they_aggregate():
    from eos import Application
    from eos.operators.aggregate import AggregateProcessor, counter
    from recovery import KeyValueStore, MemoryBackend, WriteBuffer

    sub = Application("agg", "b:1").count("in", "out", name="counts")
    store = KeyValueStore(sub.stores[0])
    store.attach(WriteBuffer(MemoryBackend()))
    c = TaskContext(application_id="agg", subtopology="counts", partition=0, output_topic="out",
                    key_serde=StringSerde(), value_serde=sub.output_value_serde, lineage=True,
                    stores={store.name: store})
    proc = AggregateProcessor(store.name, *counter()[:2])
    proc.init(c)
    messages = [FakeMessage("in", 0, i, b"x", b"k", timestamp=t) for i, t in enumerate([100, 300, 200])]
    out = run_processor(proc, c, messages, key_serde=StringSerde(), value_serde=BytesSerde(), dlq=DLQ)
    assert [o.timestamp for o in out.outputs] == [100, 300, 300]
    assert store.get_with_timestamp("k") == (3, 300)


def test_an_output_with_its_own_timestamp_keeps_it():
    class Stamp(Processor):
        def process(self, rec):
            self.context.forward(Output(rec.key, 1, timestamp=rec.timestamp + 1))

    out, _ = run(Stamp(), [msg(0, 0, {"v": 1}, ts=10)])
    assert out.outputs[0].timestamp == 11


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
