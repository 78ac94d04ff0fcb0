"""Stream time across repartition topics (eos.streamtime): the sources' clocks, and a re-keyed windowed count
over a backlog that drops only what was late at its source, whatever the batch boundaries."""

from __future__ import annotations

from collections import Counter

import pytest

from eos import Application
from eos.audit.windows import reference_windows
from eos.records import Record
from eos.streamtime import MARKER_HEADER, STAMP_HEADER, EventClock, Stamp, decode_stamp, encode_stamp, stamp_of
from eos.testing import TopologyTestDriver
from eos.time import InvalidTimestampError, check_timestamp, field
from eos.windows import TumblingWindows

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
    app = Application("clicks", **settings)
    app.count("clicks", "views-per-page", name="per_page", value_serde="json", group_by=lambda r: r.value["page"],
              windows=TumblingWindows(60_000, grace=5_000), emit="final")
    return app


def _backlog(partitions, per_partition, span_ms, now):
    """Clicks spread in order over the last `span_ms` on every input partition, then one click per partition
    two minutes on (it moves every source past the backlog)."""
    out = {}
    for p in range(partitions):
        step = span_ms // per_partition
        out[p] = [(f"u{i % 7}", now - span_ms + i * step + p, {"page": f"page-{i % 3}"}) for i in range(per_partition)]
        out[p].append(("u", now + 120_000, {"page": "flush"}))
    return out


def _run(app, inputs):
    """Every upstream partition's records written at once, as a backlog: each upstream task's batch is a
    block of the repartition topic."""
    driver = TopologyTestDriver(app, partitions=len(inputs), wall_clock_ms=0)
    driver.pipe_records([("clicks", key, value, ts, p) for p, records in inputs.items() for key, ts, value in records])
    return driver


def _expected(inputs, grace, stream_time, leave_out=()):
    counts = Counter()
    for records in inputs.values():
        for key, ts, v in records:
            if key not in leave_out:
                counts[(v["page"], ts // 60_000 * 60_000)] += 1
    return {w: n for w, n in counts.items() if w[1] + 60_000 + grace <= stream_time}


def _results(driver):
    return {(r.key.key, r.key.start): r.value for r in driver.records("views-per-page")}


@pytest.mark.parametrize("batch_size", [7, 50, 10_000])
def test_a_rekeyed_windowed_count_over_a_backlog_drops_nothing_whatever_the_batches(batch_size):
    now = 1_800_000_000_000
    inputs = _backlog(4, 100, 10 * 60_000, now)
    driver = _run(_app(max_records_per_batch=batch_size, first_batch_max_records=batch_size), inputs)
    assert driver.dropped == {}
    expected = _expected(inputs, 5_000, now + 120_000)
    assert _results(driver) == expected and sum(expected.values()) == 400


def test_without_the_clocks_the_same_backlog_loses_most_of_the_second_block():
    """The failure the clocks fix: stream time as the largest timestamp seen jumps to the end of the first
    upstream task's block, and the others' records are late."""
    now = 1_800_000_000_000
    driver = _run(_app(stream_time_across_topics="largest_seen"), _backlog(2, 100, 10 * 60_000, now))
    assert driver.dropped["per_page"]["late"] > 50


def test_a_record_late_at_its_source_is_still_dropped_exactly():
    now = 1_800_000_000_000
    inputs = _backlog(4, 100, 10 * 60_000, now)
    inputs[2].insert(60, ("u9", inputs[2][59][1] - 120_000, {"page": "page-0"}))  # 2 minutes behind its partition
    app = _app(max_records_per_batch=13, first_batch_max_records=13)
    driver = _run(app, inputs)
    assert driver.dropped == {"per_page": {"late": 1}}
    assert _results(driver) == _expected(inputs, 5_000, now + 120_000, leave_out={"u9"})
    # the window audit's reference, replaying the repartition topic with its markers, agrees
    sub, topic = app.subtopologies["per_page"], "clicks-per_page-repartition"
    late = 0
    for p in range(4):
        records = [Record(None if m.key() is None else m.key().decode(), m.value(), m.topic(), m.partition(),
                          m.offset(), m.timestamp()[1], m.headers()) for m in driver.cluster.records(topic, p)]
        ref = reference_windows(records, sub.windowings[0], clocked=frozenset({topic}))
        assert ref.late_at_source == ref.late
        late += ref.late
    assert late == 1


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
    app = Application("w")
    app.count("in", "out", name="agg", key_serde="string", windows=TumblingWindows(60_000, grace=5_000))
    now = 1_800_000_000_000
    driver = TopologyTestDriver(app, wall_clock_ms=now, topic_configs={"out": {"message.timestamp.after.max.ms":
                                                                               "3600000"}})
    driver.pipe_many("in", [("k", b"1", ts) for ts in (now - 60_000, now + 2 * 3_600_000, now - 50_000, now - 40_000)])
    assert len(driver.dead_letters()) == 1 and driver.dropped == {}
    assert [r.value for r in driver.read("out")] == [1, 2, 3]  # one window: the on-time records all counted


# ---------------------------------------------------------------- errors outside record processing, rough edges


def test_a_punctuation_that_raises_fails_the_task_at_once_naming_it():
    from eos.errors import TaskFailedError
    from eos.processor import Processor

    class Ticking(Processor):
        def init(self, context):
            super().init(context)
            context.schedule(1, self.tick, type="wall_clock")

        def tick(self, now):
            raise RuntimeError("the punctuation's own bug")

    app = Application("a")
    app.stream("in").process(Ticking, name="tick").to("out")
    driver = TopologyTestDriver(app, wall_clock_ms=0)
    with pytest.raises(TaskFailedError, match=r"task tick-0: the punctuation Ticking.tick .*RuntimeError") as e:
        driver.advance_wall_clock(5)
    assert e.value.task == "tick-0" and e.value.cause_type == "RuntimeError"


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
    app = Application("w")
    app.count("in", "out", name="agg", key_serde="string", windows=TumblingWindows(60_000), emit="final")
    driver = TopologyTestDriver(app, wall_clock_ms=0)
    driver.pipe_many("in", [("k", b"1", 2**62), ("k", b"1", 5), ("k", b"1", 70_000)])
    (letter,) = driver.dead_letters()
    assert "after the year 9999" in letter.error and letter.stage == "timestamp"
    assert [(r.key.start, r.value) for r in driver.read("out")] == [(0, 1)]  # the window closed by 70 s


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


# ---------------------------------------------------------------- a vectorized step's clock


def _paged(vectorized: bool, fmt: str = "pandas", **settings) -> Application:
    """Clicks re-keyed by page into "pages" by a vectorized step (or the same step record at a time), then
    counted per page and minute, final results: the count reads a topic the job writes itself."""
    app = Application("clicks", **settings)
    if vectorized:
        @app.process_batch(input="clicks", output="pages", key_serde="string", value_serde="json", format=fmt,
                           name="by_page")
        def by_page(table):
            pages = [v["page"] for v in (table["value"] if fmt == "pandas" else table.column("value").to_pylist())]
            return table.assign(key=pages) if fmt == "pandas" else table.append_column("key", [pages])
    else:
        @app.process(input="clicks", output="pages", key_serde="string", value_serde="json", name="by_page")
        def by_page(record):
            return record.value["page"], record.value

    app.count("pages", "views-per-page", name="per_page", key_serde="string", value_serde="json",
              windows=TumblingWindows(60_000, grace=5_000), emit="final")
    return app


def _run_paged(app, inputs, **options):
    driver = TopologyTestDriver(app, partitions=len(inputs), **{"wall_clock_ms": 0, **options})
    driver.pipe_records([("clicks", key, value, ts, p) for p, records in inputs.items() for key, ts, value in records])
    return driver


@pytest.mark.parametrize("fmt", ["pandas", "arrow"])
@pytest.mark.parametrize("batch_size", [7, 10_000])
def test_a_vectorized_step_s_outputs_carry_its_clock_so_a_backlog_behind_it_drops_nothing(fmt, batch_size):
    app = _paged(True, fmt, max_records_per_batch=batch_size, first_batch_max_records=batch_size)
    assert app.clocked_topics == {"pages"}
    now = 1_800_000_000_000
    inputs = _backlog(4, 100, 10 * 60_000, now)
    driver = _run_paged(app, inputs)
    assert driver.dropped == {}
    expected = _expected(inputs, 5_000, now + 120_000)
    assert _results(driver) == expected and sum(expected.values()) == 400
    # Kafka Streams' rule, as before vectorized steps kept a clock: most of the backlog called late
    largest = _run_paged(_paged(True, fmt, stream_time_across_topics="largest_seen"), inputs)
    assert largest.dropped["per_page"]["late"] > 200


def test_a_vectorized_step_stamps_and_marks_as_the_same_step_record_at_a_time():
    """The same records, stamps and markers in "pages" (a step's stamp is its task's clock after the record),
    with a record late at its source and a partition that gets nothing until its task says it is idle."""
    now = 1_800_000_000_000
    inputs = _backlog(3, 40, 10 * 60_000, now)
    inputs[1].insert(20, ("u9", inputs[1][19][1] - 120_000, {"page": "page-0"}))  # late at its source
    inputs[2] = []
    topics = {}
    for vectorized in (True, False):
        driver = _run_paged(_paged(vectorized, max_records_per_batch=11, first_batch_max_records=11), inputs)
        assert _results(driver) == {}  # partition 2's task may still send anything: the windows wait
        driver.advance_wall_clock(31_000)  # ... until it says it is idle
        assert driver.dropped == {"per_page": {"late": 1}}
        assert _results(driver) == _expected(inputs, 5_000, now + 120_000, leave_out={"u9"})
        topics[vectorized] = [(p, m.key(), m.value(), m.timestamp()[1],
                               [h for h in m.headers() or () if h[0] != "eos.origin"])
                              for p in range(3) for m in driver.cluster.records("pages", p)]
    assert topics[True] == topics[False]
    stamps = [h for *_, headers in topics[True] for h in headers]
    assert {n for n, _ in stamps} == {STAMP_HEADER, MARKER_HEADER}
    assert (MARKER_HEADER, b"2/3:-1:i") in stamps  # the empty partition's task, idle


def test_a_vectorized_step_s_record_dead_lettered_never_moves_its_clock():
    """Three typos two hours ahead, each dead-lettered: the function fails on one (bisected out), the key serde
    refuses another's row, the topic refuses the third's timestamp. The on-time click after them is counted
    downstream, not dropped as late; the topic's records and stamps are those of the step written record at a
    time."""
    now, typo = 1_800_000_000_000, 1_800_000_000_000 + 2 * 3_600_000
    clicks = [("u1", now - 60_000, {"page": "a"}), ("u2", typo, {"oops": 1}), ("u3", typo, {"page": 7}),
              ("u4", typo, {"page": "a"}), ("u5", now - 50_000, {"page": "a"}), ("u6", now + 120_000, {"page": "b"})]
    topics = {}
    for vectorized in (True, False):
        driver = _run_paged(_paged(vectorized), {0: clicks}, wall_clock_ms=now,
                            topic_configs={"pages": {"message.timestamp.after.max.ms": "3600000"}})
        assert sorted((d.key, d.stage) for d in driver.dead_letters()) == [
            (b"u2", "process"), (b"u3", "serialize"), (b"u4", "serialize")]
        assert driver.dropped == {} and _results(driver) == {("a", now - 60_000): 2}
        topics[vectorized] = [(m.key(), m.value(), m.timestamp()[1], [h for h in m.headers() or ()
                                                                      if h[0] != "eos.origin"])
                              for m in driver.cluster.records("pages", 0)]
    assert topics[True] == topics[False]


def test_a_vectorized_step_reading_the_job_s_own_topic_keeps_no_clock_and_says_so_by_kafka_streams_rule():
    app = Application("chain")
    app.process(input="raw", output="clicks", key_serde="string", value_serde="json", name="clean")(
        lambda record: (record.key, record.value))
    app.process_batch(input="clicks", output="pages", key_serde="string", value_serde="json", format="pandas",
                      name="by_page")(lambda table: table)
    app.count("pages", "views-per-page", name="per_page", key_serde="string", value_serde="json",
              windows=TumblingWindows(60_000, grace=5_000))
    assert app.clocked_topics == frozenset()  # "clicks" has no reader that keeps a clock


def test_a_vectorized_step_s_clock_holds_through_crashes():
    now = 1_800_000_000_000
    inputs = _backlog(2, 30, 10 * 60_000, now)
    records = [("clicks", key, value, ts, p) for p, rs in inputs.items() for key, ts, value in rs]
    app = _paged(True, max_records_per_batch=9, first_batch_max_records=9)
    report = TopologyTestDriver(app, partitions=2, wall_clock_ms=0).check_exactly_once(records, crashes=8)
    assert report.crashes
    driver = TopologyTestDriver(app, partitions=2, wall_clock_ms=0)
    driver.crash_at("before_commit", batch=3)
    driver.crash_at("after_produce", batch=5)
    driver.pipe_records(records)
    assert driver.crashes and driver.dropped == {}
    assert _results(driver) == _expected(inputs, 5_000, now + 120_000)
    assert all(r.verdict == "PASS" for r in driver.audit())
