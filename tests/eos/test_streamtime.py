"""Stream time across repartition topics (eos.streamtime): the sources' clocks, and a re-keyed windowed count
over a backlog that drops only what was late at its source, whatever the batch boundaries."""

from __future__ import annotations

import json
import time
import zlib
from collections import Counter

import pytest

from eos import Application
from eos.audit.windows import reference_windows
from eos.records import Record
from eos.serde import StringSerde
from eos.streamtime import MARKER_HEADER, STAMP_HEADER, EventClock, Stamp, decode_stamp, encode_stamp, stamp_of
from eos.time import InvalidTimestampError, check_timestamp, field
from eos.windows import TumblingWindows
from eos.worker.context import TaskContext
from eos.worker.dead_letters import DeadLetterPolicy
from eos.worker.processing import run_processor
from eos.worker.stores import view_of
from recovery import MemoryBackend, WriteBuffer
from tests.fakes import FakeMessage

REPARTITION = "clicks-per_page-repartition"


def test_stamps_round_trip_and_malformed_ones_are_ignored():
    assert decode_stamp(encode_stamp(1, 4, 1234)) == Stamp(1, 4, 1234)
    assert decode_stamp(encode_stamp(0, 2, -1, idle=True)) == Stamp(0, 2, -1, True)
    assert decode_stamp(b"garbage") is None and decode_stamp(b"5/4:10") is None and decode_stamp(None) is None
    assert stamp_of([("a", b"x"), (MARKER_HEADER, b"0/1:5:i")]) == (Stamp(0, 1, 5, True), True)
    assert stamp_of([(STAMP_HEADER, b"0/1:5")]) == (Stamp(0, 1, 5), False)


def test_the_clock_waits_for_every_source_takes_the_slowest_and_never_moves_back():
    clock = EventClock(frozenset({"r"}), direct=False)
    assert clock.observe_stamp("r", Stamp(0, 2, 500)) == 500  # judged by its source's clock
    assert clock.stream_time == -1  # source 1 not heard from: it may still send anything
    clock.observe_stamp("r", Stamp(1, 2, 100))
    assert clock.stream_time == 100  # the slowest source
    clock.observe_stamp("r", Stamp(1, 2, 900))
    assert clock.stream_time == 500
    clock.observe_stamp("r", Stamp(0, 2, 700, idle=True), marker=True)
    assert clock.stream_time == 900  # every source idle: the furthest
    clock.observe_stamp("r", Stamp(0, 2, 800))  # source 0 has input again: the slowest once more
    assert clock.stream_time == 900  # but stream time never moves back
    copy = EventClock(frozenset({"r"}), direct=False, stream_time=clock.stream_time)
    copy.adopt(clock.encode())
    assert copy.encode() == clock.encode() and copy.stream_time == 900


def test_an_idle_source_does_not_hold_stream_time_back():
    clock = EventClock(frozenset({"r"}), direct=False)
    clock.observe_stamp("r", Stamp(0, 3, -1, idle=True), marker=True)  # an empty input partition
    clock.observe_stamp("r", Stamp(1, 3, 300))
    clock.observe_stamp("r", Stamp(2, 3, 200))
    assert clock.stream_time == 200


def test_a_task_with_no_repartition_input_keeps_kafka_streams_stream_time():
    clock = EventClock()
    assert [clock.observe(t) for t in (5, 3, 9)] == [5, 5, 9]


# ---------------------------------------------------------------- a re-keyed windowed count, two stages


def _app(**settings):
    app = Application("clicks", "b:1", **settings)
    app.count("clicks", "views-per-page", name="per_page", value_serde="json", group_by=lambda r: r.value["page"],
              windows=TumblingWindows(60_000, grace=5_000), emit="final")
    return app


def _upstream(app, partition, sources, records, downstream_partitions, clocks=True):
    """One batch of the re-keying task `partition`: its outputs (with stamps) and, at the end, its markers."""
    sub = app.subtopologies["per_page.repartition"]
    ctx = TaskContext(application_id="clicks", subtopology=sub.name, partition=partition, output_topic=sub.output,
                      key_serde=sub.output_key_serde, value_serde=sub.output_value_serde, lineage=True,
                      stamped_topics=frozenset({REPARTITION}) if clocks else frozenset())
    ctx.stamp_sources = {REPARTITION: (partition, sources)}
    processor = sub.processor_factory()
    processor.init(ctx)
    msgs = [FakeMessage("clicks", partition, i, json.dumps(v).encode(), k.encode(), timestamp=ts)
            for i, (k, ts, v) in enumerate(records)]
    out = run_processor(processor, ctx, msgs, key_serde=sub.key_serde, value_serde=sub.value_serde,
                        dlq=DeadLetterPolicy("dlq", 0, f"{sub.name}-{partition}", fail=False))
    outputs = list(out.outputs)
    if clocks:
        outputs += ctx.markers({REPARTITION: downstream_partitions}, idle=True)
    return outputs, len(out.dead_letters)


def _route(outputs, partitions):
    """The broker's side: each record to its key's partition (markers name theirs), in produce order."""
    logs = {p: [] for p in range(partitions)}
    for o in outputs:
        p = o.partition if o.partition is not None else zlib.crc32(o.key) % partitions
        logs[p].append(FakeMessage(o.topic, p, len(logs[p]), o.value, o.key, timestamp=o.timestamp or 0,
                                   headers=o.headers))
    return logs


class Downstream:
    """One task of the windowed count, its stores in memory, fed a repartition partition batch by batch."""

    def __init__(self, app, partition, clocks=True):
        self.sub = app.subtopologies["per_page"]
        self.buffers = {s.name: WriteBuffer(MemoryBackend()) for s in self.sub.stores}
        views = {}
        for spec in self.sub.stores:
            views[spec.name] = view_of(spec)
            views[spec.name].attach(self.buffers[spec.name])
        self.ctx = TaskContext(application_id="clicks", subtopology="per_page", partition=partition,
                               output_topic=self.sub.output, key_serde=self.sub.output_key_serde,
                               value_serde=self.sub.output_value_serde, lineage=True, stores=views)
        self.processor = self.sub.processor_factory()
        self.processor.init(self.ctx)
        self.clocks = "" if clocks else None
        self.results: dict = {}
        self.late = 0

    def feed(self, msgs):
        clock = None
        if self.clocks is not None:  # as the task does: the committed clocks, adopted each batch
            clock = EventClock(frozenset({REPARTITION}), direct=False, stream_time=self.ctx.stream_time)
            clock.adopt(self.clocks)
        out = run_processor(self.processor, self.ctx, msgs, key_serde=self.sub.key_serde,
                            value_serde=self.sub.value_serde, dlq=DeadLetterPolicy("dlq", 0, "t", fail=False),
                            scoped=list(self.buffers.values()), event_clock=clock)
        if clock is not None:
            self.clocks = out.clocks
        self.late += out.dropped.get("late", 0)
        for o in out.outputs:
            key = self.sub.output_key_serde.deserialize(o.key)
            assert (key.key, key.start) not in self.results, "a window's final result twice"
            self.results[(key.key, key.start)] = self.sub.output_value_serde.deserialize(o.value)


def _backlog(partitions, per_partition, span_ms, now):
    """Clicks spread in order over the last `span_ms` on every input partition."""
    out = {}
    for p in range(partitions):
        step = span_ms // per_partition
        out[p] = [(f"u{i % 7}", now - span_ms + i * step + p, {"page": f"page-{i % 3}"}) for i in range(per_partition)]
    return out


def _run(app, inputs, down_partitions, batch_size, clocks=True):
    outputs = []
    for p, records in inputs.items():  # each upstream task writes its whole batch in one transaction
        outputs += _upstream(app, p, len(inputs), records, down_partitions, clocks)[0]
    results, late = {}, 0
    logs = _route(outputs, down_partitions)
    for p, log in logs.items():
        task = Downstream(app, p, clocks)
        for i in range(0, len(log), batch_size):
            task.feed(log[i:i + batch_size])
        results.update(task.results)
        late += task.late
    return results, late, logs


def _expected(inputs, grace, stream_time):
    """Counts per page and minute over every click (none is late at its source), for windows closed by
    `stream_time`."""
    counts = Counter()
    for records in inputs.values():
        for _, ts, v in records:
            counts[(v["page"], ts // 60_000 * 60_000)] += 1
    return {w: n for w, n in counts.items() if w[1] + 60_000 + grace <= stream_time}


@pytest.mark.parametrize("batch_size", [7, 50, 10_000])
def test_a_rekeyed_windowed_count_over_a_backlog_drops_nothing_whatever_the_batches(batch_size):
    now = 1_800_000_000_000
    inputs = _backlog(4, 100, 10 * 60_000, now)
    flush = {p: [("u", now + 120_000, {"page": "flush"})] for p in inputs}  # moves every source past the backlog
    inputs = {p: inputs[p] + flush[p] for p in inputs}
    app = _app()
    results, late, _ = _run(app, inputs, 2, batch_size)
    assert late == 0
    expected = _expected(inputs, 5_000, now + 120_000)
    assert results == expected and sum(expected.values()) == 400


def test_without_the_clocks_the_same_backlog_loses_most_of_the_second_block():
    """The failure the clocks fix: stream time as the largest timestamp seen jumps to the end of the first
    upstream task's block, and the others' records are late."""
    now = 1_800_000_000_000
    inputs = _backlog(2, 100, 10 * 60_000, now)
    _, late, _ = _run(_app(), inputs, 2, 10_000, clocks=False)
    assert late > 50


def test_a_record_late_at_its_source_is_still_dropped_exactly():
    now = 1_800_000_000_000
    inputs = _backlog(4, 100, 10 * 60_000, now)
    inputs[2].insert(60, ("u9", inputs[2][59][1] - 120_000, {"page": "page-0"}))  # 2 minutes behind its partition
    inputs = {p: [*rs, ("u", now + 120_000, {"page": "flush"})] for p, rs in inputs.items()}
    app = _app()
    results, late, logs = _run(app, inputs, 2, 13)
    assert late == 1
    expected = _expected({p: [r for r in rs if r[0] != "u9"] for p, rs in inputs.items()}, 5_000, now + 120_000)
    assert results == expected
    # the window audit's reference, replaying the repartition topic with its markers, agrees
    sub = app.subtopologies["per_page"]
    for log in logs.values():
        records = [Record(None if m.key() is None else m.key().decode(), m.value(), m.topic(), m.partition(),
                          m.offset(), m.timestamp()[1], m.headers()) for m in log]
        ref = reference_windows(records, sub.windowing, clocked=frozenset({REPARTITION}))
        assert ref.late in (0, 1) and ref.late_at_source == ref.late
        assert all(results[w[:2]] == v for w, v in ref.closed.items())


# ---------------------------------------------------------------- timestamps checked at extraction


@pytest.mark.parametrize("raw", [True, 1e20, float("nan"), "1e30", "tomorrow"])
def test_timestamps_that_cannot_be_event_time_are_refused(raw):
    with pytest.raises(InvalidTimestampError):
        field("at")(Record("k", {"at": raw}, "t", 0, 0, 0))


def test_timestamps_in_range_pass():
    assert field("at")(Record("k", {"at": 1_700_000_000_000.0}, "t", 0, 0, 0)) == 1_700_000_000_000
    assert check_timestamp(0) == 0
    with pytest.raises(InvalidTimestampError, match="year 9999"):
        check_timestamp(2**62)
    with pytest.raises(InvalidTimestampError, match="not a number"):
        check_timestamp(False)


# ---------------------------------------------------------------- a record dead-lettered does not move stream time


def test_a_record_dead_lettered_at_its_output_does_not_move_stream_time():
    """A typo two hours ahead: the topic refuses its output, it goes to the dead-letter topic, and the
    on-time records after it are counted, not dropped as late."""
    from eos.worker.topic_rules import TopicRule

    app = Application("w", "b:1")
    sub = app.count("in", "out", name="agg", key_serde="string", windows=TumblingWindows(60_000, grace=5_000))
    buffers = {s.name: WriteBuffer(MemoryBackend()) for s in sub.stores}
    views = {}
    for spec in sub.stores:
        views[spec.name] = view_of(spec)
        views[spec.name].attach(buffers[spec.name])
    now = int(time.time() * 1000)
    ctx = TaskContext(application_id="w", subtopology="agg", partition=0, output_topic="out",
                      key_serde=sub.output_key_serde, value_serde=sub.output_value_serde, lineage=True, stores=views,
                      topic_rules=lambda topic: TopicRule(topic, 1_000_000, after_ms=3_600_000))
    processor = sub.processor_factory()
    processor.init(ctx)
    stamps = [now - 60_000, now + 2 * 3_600_000, now - 50_000, now - 40_000]
    msgs = [FakeMessage("in", 0, i, b"1", b"k", timestamp=ts) for i, ts in enumerate(stamps)]
    out = run_processor(processor, ctx, msgs, key_serde=sub.key_serde, value_serde=sub.value_serde,
                        dlq=DeadLetterPolicy("dlq", 0, "agg-0", fail=False), scoped=list(buffers.values()))
    assert len(out.dead_letters) == 1 and out.dropped == {}
    assert len(out.outputs) == 3 and out.stream_time == now - 40_000


# ---------------------------------------------------------------- errors outside record processing, rough edges


def test_a_punctuation_that_raises_fails_the_task_at_once_naming_it():
    from eos.errors import TaskFailedError
    from eos.processor import Processor
    from eos.worker.processing import punctuate_idle

    class Ticking(Processor):
        def init(self, context):
            super().init(context)
            context.schedule(1, self.tick, type="wall_clock")

        def tick(self, now):
            raise RuntimeError("the punctuation's own bug")

    ctx = TaskContext(application_id="a", subtopology="tick", partition=3, output_topic="out",
                      key_serde=StringSerde(), value_serde=StringSerde(), lineage=True)
    processor = Ticking()
    processor.init(ctx)
    ctx.schedules[0].next_at = 0
    with pytest.raises(TaskFailedError, match=r"task tick-3: the punctuation Ticking.tick .*RuntimeError") as e:
        punctuate_idle(processor, ctx, ())
    assert e.value.task == "tick-3" and e.value.cause_type == "RuntimeError"


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"emit": "final"}, ValueError, "emit='final' needs windows="),
    ({"emit": "finall", "windows": TumblingWindows(1000)}, ValueError, "emit must be 'update' or 'final'"),
    ({"windows": "1m"}, TypeError, "windows must be TumblingWindows"),
])
def test_aggregation_settings_that_mean_nothing_are_refused(kwargs, error, match):
    with pytest.raises(error, match=match):
        Application("a", "b:1").count("in", "out", name="c", **kwargs)


def test_a_tumbling_window_of_no_size_says_so():
    with pytest.raises(ValueError, match="a tumbling window's size must be > 0"):
        TumblingWindows(0)


# ---------------------------------------------------------------- lateness is never silent


def _result(step, records_in, late):
    from eos.topology import TaskId
    from eos.worker.plans import TaskResult, TaskStatus

    return TaskResult(TaskId(step, 0), 0, TaskStatus.COMMITTED, records_in=records_in,
                      dropped={"late": late} if late else {})


def test_the_run_summary_counts_late_records_per_step_and_the_watch_warns_once_then_can_fail():
    from structlog.testing import capture_logs

    from eos.config import EosConfig
    from eos.driver.reports import BatchReport, LatenessWatch, RunSummary
    from eos.errors import LateRecordsError

    summary = RunSummary("a")
    watch = LatenessWatch(EosConfig("a", "b:1", late_warn_ratio=0.05))
    with capture_logs() as logs:
        for _ in range(3):
            results = [_result("counts", 100, 10), _result("enrich", 100, 0)]
            summary.add(BatchReport.of(0, 0.0, 0.1, results), results, False)
            watch.check(summary, results)
    assert summary.dropped_by_step == {"counts": {"late": 30}} and summary.late_share("counts") == (30, 0.1)
    assert [entry["step"] for entry in logs if "late" in entry["event"]] == ["counts"]  # once, loudly
    strict = LatenessWatch(EosConfig("a", "b:1", late_fail_ratio=0.05))
    with pytest.raises(LateRecordsError, match="step counts dropped 30 of 300 input records"):
        strict.check(summary, [_result("counts", 100, 10)])


def test_the_live_table_shows_late_records_per_step():
    from rich.console import Console

    from eos.cli.live import LiveView
    from eos.driver.reports import BatchReport

    console = Console(record=True, width=160)
    view = LiveView("a", console=console)
    results = [_result("counts", 100, 7)]
    view.on_batch(BatchReport.of(0, 0.0, 0.1, results), results)
    console.print(view.render())
    text = console.export_text()
    assert "late (dropped)" in text and "7" in text.split("counts")[1].split("\n")[0]


def test_a_record_timestamp_past_the_year_9999_is_a_bad_record_and_window_arithmetic_never_sees_it():
    app = Application("w", "b:1")
    sub = app.count("in", "out", name="agg", key_serde="string", windows=TumblingWindows(60_000), emit="final")
    buffers = {s.name: WriteBuffer(MemoryBackend()) for s in sub.stores}
    views = {}
    for spec in sub.stores:
        views[spec.name] = view_of(spec)
        views[spec.name].attach(buffers[spec.name])
    ctx = TaskContext(application_id="w", subtopology="agg", partition=0, output_topic="out",
                      key_serde=sub.output_key_serde, value_serde=sub.output_value_serde, lineage=True, stores=views)
    processor = sub.processor_factory()
    processor.init(ctx)
    msgs = [FakeMessage("in", 0, 0, b"1", b"k", timestamp=2**62), FakeMessage("in", 0, 1, b"1", b"k", timestamp=5)]
    out = run_processor(processor, ctx, msgs, key_serde=sub.key_serde, value_serde=sub.value_serde,
                        dlq=DeadLetterPolicy("dlq", 0, "agg-0", fail=False), scoped=list(buffers.values()))
    assert len(out.dead_letters) == 1 and out.stream_time == 5
    assert b"after the year 9999" in dict(out.dead_letters[0].headers)["eos.dlq.error"]


def test_which_topics_carry_clocks_and_kafka_streams_rule_on_request():
    app = _app()

    @app.process(input="raw", output="clicks", key_serde="string", value_serde="json", name="clean")
    def clean(record):
        return record.key, record.value

    app.aggregate("clicks", "totals", name="totals", initializer=dict, aggregator=lambda k, v, a: a)
    # the count reads the repartition topic (windows); the re-keying step reads "clicks": both carry clocks,
    # though "clicks" also feeds an aggregation over all time
    assert app.clocked_topics == {REPARTITION, "clicks"}
    assert app.configure(stream_time_across_topics="largest_seen").clocked_topics == frozenset()
    plain = Application("p", "b:1")
    plain.process(input="a", output="b", name="one")(lambda r: r)
    plain.aggregate("b", "c", name="two", initializer=dict, aggregator=lambda k, v, a: a)
    assert plain.clocked_topics == frozenset()  # no step downstream uses event time: Kafka Streams' rule
