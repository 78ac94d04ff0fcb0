"""The test driver (eos.testing.TopologyTestDriver) and the in-memory Kafka under it: the framework's own
planner and batch protocol, in one process, with crashes; Kafka's semantics the protocol relies on."""

from __future__ import annotations

import random
import time
from datetime import timedelta

import pytest

from eos import Application, Processor, store
from eos.errors import SerdeError
from eos.testing import TopologyTestDriver
from eos.windows import SessionWindows, TumblingWindows, Windowed
from transactions import OffsetRange, ProducerFencedError, range_reader
from transactions.memory import MemoryCluster, MemoryConsumer, MemoryProducer, murmur2, partition_for

# ---------------------------------------------------------------- the in-memory Kafka


def test_murmur2_is_kafkas():
    """Kafka's own test vectors (UtilsTest.testMurmur2), as unsigned values."""
    for data, signed in [(b"21", -973932308), (b"foobar", -790332482), (b"a-little-bit-long-string", -985981536),
                         (b"a-little-bit-longer-string", -1486304829),
                         (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971), (b"abc", 479470107)]:
        assert murmur2(data) == signed & 0xFFFFFFFF
    assert partition_for(b"k", 1) == 0


def in_transaction(transactional_id: str) -> tuple[MemoryCluster, MemoryProducer]:
    """A cluster with one topic "t" and a producer that has begun a transaction."""
    cluster = MemoryCluster()
    cluster.create_topic("t", 1)
    producer = MemoryProducer(cluster, transactional_id)
    producer.init()
    producer.begin()
    return cluster, producer


def test_transactions_hide_their_records_until_commit_and_markers_take_offsets():
    cluster, old = in_transaction("app-s-0")
    old.produce("t", b"a", b"k", partition=0)
    new = MemoryProducer(cluster, "app-s-0")
    new.init()  # fences `old` and aborts its transaction
    with pytest.raises(ProducerFencedError):
        old.produce("t", b"b", b"k", partition=0)
    new.begin()
    new.produce("t", b"c", b"k", partition=0)
    assert cluster.last_stable("t", 0) == 2  # the open transaction's record
    new.commit()
    assert [m.value() for m in cluster.records("t")] == [b"c"]
    assert len(cluster.logs["t"][0]) == 4  # a (aborted), its marker, c, its marker
    chunks = list(range_reader(MemoryConsumer(cluster, "g"))([OffsetRange("t", 0, 0, 4)], 1.0))
    assert [[m.offset() for m in c] for c in chunks] == [[2]]  # ends on the position, never waits for offset 3


def test_offsets_commit_with_their_transaction():
    from transactions import TopicPartition

    cluster, producer = in_transaction("x")
    producer.send_offsets([TopicPartition("t", 0, 5, metadata="m")], "g")
    consumer = MemoryConsumer(cluster, "g")
    with pytest.raises(Exception, match="pending"):
        consumer.committed([TopicPartition("t", 0)])
    producer.abort()
    assert consumer.committed([TopicPartition("t", 0)])[0].offset < 0  # aborted: nothing committed


# ---------------------------------------------------------------- the driver


def shop() -> Application:
    app = Application("shop")

    @app.process(input="orders", output="orders-enriched", key_serde="string", value_serde="json")
    def enrich(record):
        order = record.value
        return record.key, {**order, "total": order["qty"] * order["price"]}

    app.aggregate("orders-enriched", "customer-totals", name="totals",
                  initializer=lambda: {"orders": 0, "revenue": 0},
                  aggregator=lambda key, order, t: {"orders": t["orders"] + 1,
                                                    "revenue": t["revenue"] + order["total"]})
    return app


def test_a_job_runs_in_the_driver_with_typed_outputs_dead_letters_and_stores():
    with TopologyTestDriver(shop(), wall_clock_ms=10_000) as driver:
        driver.pipe("orders", "alice", {"qty": 2, "price": 3})
        driver.pipe("orders", "bob", {"qty": 1})  # no price: a dead letter
        driver.pipe("orders", "alice", {"qty": 1, "price": 4}, timestamp=9_000)
        assert [(r.key, r.value["total"], r.timestamp) for r in driver.read("orders-enriched")] == [
            ("alice", 6, 10_000), ("alice", 4, 9_000)]
        assert [r.value for r in driver.read("customer-totals")] == [{"orders": 1, "revenue": 6},
                                                                      {"orders": 2, "revenue": 10}]
        assert driver.read("customer-totals") == []  # read consumes
        (letter,) = driver.dead_letters()
        assert (letter.key, letter.error, letter.stage, letter.subtopology) == (b"bob", "KeyError: 'price'",
                                                                                "process", "enrich")
        assert driver.store("totals-store").get("alice") == {"orders": 2, "revenue": 10}
        assert "eos.origin" in driver.records("customer-totals")[0].headers  # lineage, as on a cluster


def test_read_returns_each_partitions_new_records_once_whichever_partition_got_them():
    app = Application("reads", bootstrap_servers="unused:9092")
    app.stream("in").map_values(lambda v: v * 10).to("out")
    with TopologyTestDriver(app, partitions=2) as driver:
        driver.pipe_many("in", [(f"k{i}", i) for i in range(6)])
        first = driver.read("out")
        assert sorted(r.value for r in first) == [0, 10, 20, 30, 40, 50] and {r.partition for r in first} == {0, 1}
        low = min(first, key=lambda r: r.partition).key  # a key of partition 0: new records land before the 1's
        driver.pipe("in", low, 6)
        assert [(r.key, r.value) for r in driver.read("out")] == [(low, 60)]
        assert driver.read("out") == []


def test_a_crash_at_every_step_leaves_committed_results_exactly_once():
    for step in ("after_read", "after_produce", "before_commit", "after_commit"):
        with TopologyTestDriver(shop(), wall_clock_ms=0) as driver:
            driver.pipe("orders", "alice", {"qty": 1, "price": 1})
            driver.crash_at(step, task="totals-0")
            driver.pipe("orders", "alice", {"qty": 1, "price": 2})
            driver.pipe("orders", "alice", {"qty": 1, "price": 3})
            assert len(driver.crashes) == 1, step
            assert [r.value["revenue"] for r in driver.read("customer-totals")] == [1, 3, 6], step
            assert driver.store("totals-store").get("alice") == {"orders": 3, "revenue": 6}


def test_check_exactly_once_passes_a_deterministic_job_and_names_the_record_of_one_that_is_not():
    inputs = [("orders", f"c{i % 4}", {"qty": i % 3, "price": 2} if i % 7 else {"qty": 1}, 1_000 + i)
              for i in range(50)]
    report = TopologyTestDriver(shop(), wall_clock_ms=0).check_exactly_once(inputs, crashes=6, seed=3)
    assert len(report.crashes) >= 4 and report.records > 50 and "customer-totals" in report.topics

    app = Application("clocky")

    @app.process(input="in", output="out", key_serde="string", value_serde="json")
    def stamp(record):
        return record.key, {"n": record.value["n"], "at": time.time()}  # reads the wall clock: not a function

    with pytest.raises(AssertionError, match=r"out\[0\] record #0 \(from input in:0:0:0\)"):
        TopologyTestDriver(app, wall_clock_ms=0).check_exactly_once([("in", f"k{i}", {"n": i}) for i in range(20)])

    lucky = Application("lucky")

    @lucky.process(input="in", output="out", key_serde="string", value_serde="json")
    def draw(record):
        return record.key, random.random()

    with pytest.raises(AssertionError, match="differ between a straight run and one with crashes"):
        TopologyTestDriver(lucky, wall_clock_ms=0).check_exactly_once([("in", "k", {"n": i}) for i in range(20)])


def test_check_exactly_once_compares_what_a_step_behind_the_job_s_own_topic_stores_as_state():
    """A crash upstream moves where the batches of a step reading the job's own topic begin and end (an aborted
    batch's records are read when it runs again), and with them which windows a batch makes and closes itself,
    which never reach its changelog: such a changelog is compared by the state it restores, each key's last
    value (with a record cache, the step's outputs too). A step there whose stores or outputs end differently
    still fails the check, naming the key."""
    def rekeyed_count():
        app = Application("pages", max_records_per_batch=9, first_batch_max_records=9)
        app.process(input="clicks", output="pages", key_serde="string", value_serde="json", name="by_page")(
            lambda record: (record.value["page"], record.value))
        app.count("pages", "per-minute", name="per_minute", key_serde="string", value_serde="json",
                  windows=TumblingWindows(60_000, grace=5_000), emit="final")
        return app

    clicks = [("clicks", f"u{i % 7}", {"page": f"p{i % 3}"}, 1_000_000 + i * 20_000 + p, p)
              for p in range(2) for i in range(30)]
    report = TopologyTestDriver(rekeyed_count(), partitions=2, wall_clock_ms=0).check_exactly_once(clicks, seed=0)
    assert len(report.crashes) == 8 and "pages-per_minute-store-changelog" in report.topics

    class Draw(Processor):
        def init(self, context):
            super().init(context)
            self.drawn = context.store("drawn")

        def process(self, record):
            self.drawn.put(record.key, random.random())  # not a function of the input

    lucky = Application("lucky", max_records_per_batch=9, first_batch_max_records=9)
    lucky.process(input="clicks", output="pages", key_serde="string", value_serde="json", name="by_page")(
        lambda record: (record.value["page"], record.value))
    lucky.stream("pages", key_serde="string", value_serde="json").process(
        Draw, name="draw", stores=[store("drawn", key_serde="string", value_serde="json")])
    with pytest.raises(AssertionError, match=r"lucky-drawn-changelog\[\d\] key=b'p\d', each key's last value"):
        TopologyTestDriver(lucky, partitions=2, wall_clock_ms=0).check_exactly_once(clicks, seed=0)

    # with a record cache such a step forwards each key's latest value per commit: its outputs are compared as
    # each key's last value too, and one of them that differs still fails the check
    def cached(aggregator):
        app = Application("cached", max_records_per_batch=9, first_batch_max_records=9, cache_max_bytes=1_000_000)
        app.process(input="clicks", output="pages", key_serde="string", value_serde="json", name="by_page")(
            lambda record: (record.value["page"], record.value))
        app.aggregate("pages", "per-page", name="per_page", key_serde="string", value_serde="json",
                      initializer=lambda: 0, aggregator=aggregator)
        return TopologyTestDriver(app, partitions=2, wall_clock_ms=0)

    report = cached(lambda key, value, total: total + 1).check_exactly_once(clicks, seed=0)
    assert report.crashes and "per-page" in report.topics
    with pytest.raises(AssertionError, match=r"per-page\[\d\] key=b'p\d', each key's last value"):
        cached(lambda key, value, total: total + random.random()).check_exactly_once(clicks, seed=0)


def test_windows_stream_time_and_wall_clock_punctuation_in_the_driver():
    app = Application("w")
    app.count("views", "per-minute", name="per_minute", key_serde="string",
              windows=TumblingWindows(60_000, grace=5_000), emit="final")

    class Heartbeat(Processor):
        def init(self, context):
            super().init(context)
            self.seen = context.store("seen")
            context.schedule(10_000, self.beat, type="wall_clock")

        def process(self, record):
            self.seen.put(record.key, record.timestamp)

        def beat(self, now):
            for key, _ in list(self.seen.all()):
                self.context.forward(key, now)

    app.stream("pings", value_serde="long").process(
        Heartbeat, name="beats", stores=[store("seen", key_serde="string", value_serde="long")]).to("beats")
    with TopologyTestDriver(app, wall_clock_ms=1_000_000) as driver:
        driver.pipe_many("views", [("home", b"", 1_000), ("home", b"", 30_000), ("cart", b"", 59_000)])
        assert driver.read("per-minute") == []  # open: stream time 59 s < 60 s + 5 s
        driver.pipe("views", "home", b"", timestamp=65_000)
        assert sorted((r.key.key, r.value) for r in driver.read("per-minute")) == [("cart", 1), ("home", 2)]
        driver.pipe("views", "home", b"", timestamp=2_000)  # its window has closed: late
        assert driver.dropped == {"per_minute": {"late": 1}}
        driver.pipe("pings", "d1", 5)
        assert driver.read("beats") == []
        driver.advance_wall_clock(10_000)
        assert [(r.key, r.value) for r in driver.read("beats")] == [("d1", 1_010_000)]
        driver.advance_wall_clock(timedelta(seconds=10))  # Kafka Streams' Duration
        assert [(r.key, r.value) for r in driver.read("beats")] == [("d1", 1_020_000)]
        with pytest.raises(ValueError, match="the wall clock only moves on"):
            driver.advance_wall_clock(-1)


def test_a_rekeyed_session_count_on_four_partitions_with_crashes():
    app = Application("s")
    app.count("clicks", "sessions", name="sessions", value_serde="json", group_by=lambda r: r.value["user"],
              windows=SessionWindows(10_000))
    rng = random.Random(5)
    inputs = [("clicks", f"p{rng.randrange(9)}", {"user": f"u{rng.randrange(3)}"}, i * 3_000 + rng.randrange(2_000))
              for i in range(80)]
    driver = TopologyTestDriver(app, partitions=4, wall_clock_ms=0)
    driver.check_exactly_once(inputs, crashes=6, seed=1)
    driver.pipe_records(inputs)
    last = {}
    for r in driver.records("sessions"):
        assert isinstance(r.key, Windowed)
        last[(r.key.key, r.key.start, r.key.end)] = r.value
    assert sum(v for v in last.values() if v is not None) == 80  # every click in exactly one live session


def test_the_driver_says_what_is_wrong_with_a_topic():
    with TopologyTestDriver(shop(), wall_clock_ms=0) as driver, pytest.raises(KeyError, match="no topic 'order'"):
        driver.pipe("order", "a", {})
    with TopologyTestDriver(shop(), wall_clock_ms=0) as driver, pytest.raises(KeyError, match="no step"):
        driver.pipe("customer-totals", "a", {})
    with TopologyTestDriver(shop(), wall_clock_ms=0) as driver:
        for _ in range(2):  # (every time: what a topic's records are written with is kept only for a topic read)
            with pytest.raises(KeyError, match="no step"):
                driver.pipe("customer-totals", b"a", b"{}", serialized=True)
    with TopologyTestDriver(shop(), wall_clock_ms=0) as driver, pytest.raises(
            SerdeError, match=r"the key piped to 'orders', 7 \(int\), is not what the step reading it takes: "
                              r"StringSerde expects str, got int; give a key its key serde takes, or bytes with "
                              r"serialized=True"):
        driver.pipe("orders", 7, {})
    with TopologyTestDriver(shop(), wall_clock_ms=0) as driver, pytest.raises(
            SerdeError, match=r"the value piped to 'orders', \{1\} \(set\), is not what the step reading it takes"):
        driver.pipe("orders", "k", {1})
    with TopologyTestDriver(shop(), wall_clock_ms=0) as driver:
        for read in (driver.records, driver.read):
            with pytest.raises(KeyError, match=r"'customer-total': the application's topics are \[.*'customer-totals"):
                read("customer-total")


def test_serialized_records_must_be_bytes_and_the_error_says_so():
    with TopologyTestDriver(shop(), wall_clock_ms=0) as driver:
        with pytest.raises(TypeError, match=r"the key of a record for 'orders' is a str \('alice'\): encode it"):
            driver.pipe_many("orders", [("alice", b"{}")], serialized=True)
        with pytest.raises(TypeError, match=r"the value of a record for 'orders' is a dict"):
            driver.pipe("orders", b"alice", {"total": 1}, serialized=True)
        assert driver.read("orders") == []  # nothing half-written
        driver.pipe_many("orders", [(bytearray(b"alice"), memoryview(b'{"total": 2}')), (None, None)],
                         serialized=True)
        assert [(r.key, r.value) for r in driver.read("orders")] == [("alice", {"total": 2}), (None, None)]


def rekeyed_count(**settings) -> Application:
    app = Application("clicks", **settings)
    app.count("clicks", "per-minute", name="pages", value_serde="json", group_by=lambda r: r.value["page"],
              windows=TumblingWindows(60_000, grace=5_000), emit="final")
    return app


def backlog(partitions: int, n: int, start: int) -> list[tuple]:
    """n clicks on each partition, in time order on each, spread over ten minutes from `start`."""
    return [("clicks", f"u{p}-{i}", {"page": f"p{i % 3}"}, start + i * (600_000 // n) + p, p)
            for p in range(partitions) for i in range(n)]


def test_a_backlog_after_the_sources_went_idle_is_not_called_late():
    """Sources idle for longer than source_idle_timeout stop holding stream time back; when a backlog arrives
    on all of them, each first tells the readers it is awake, so no block of it is judged by another's clock."""
    driver = TopologyTestDriver(rekeyed_count(), partitions=3, wall_clock_ms=10_000_000)
    driver.advance_wall_clock(31_000)  # every upstream task says it is idle
    assert any(r.task.subtopology == "pages.repartition" and r.records_in == 0 for r in driver.results)
    driver.pipe_records(backlog(3, 40, 1_000_000))
    assert driver.dropped == {}
    last = 1_000_000 + 39 * 15_000  # each partition's stream time: windows up to it, less the grace, closed
    expected = sum(1 for *_, ts, _ in backlog(3, 40, 1_000_000) if ts // 60_000 * 60_000 + 65_000 <= last)
    assert sum(r.value for r in driver.records("per-minute")) == expected > 100


def test_an_empty_input_partition_holds_windows_back_until_it_is_idle():
    driver = TopologyTestDriver(rekeyed_count(), partitions=2, wall_clock_ms=10_000_000)
    driver.pipe_records(backlog(1, 30, 1_000_000))  # partition 1 gets nothing
    assert driver.read("per-minute") == []  # its task may still send anything: the windows wait
    driver.advance_wall_clock(31_000)  # ... until it says it is idle
    assert sum(r.value for r in driver.read("per-minute")) > 20 and driver.dropped == {}


def test_kafka_streams_rule_on_request_loses_the_second_block():
    records = backlog(2, 40, 1_000_000)
    clocks = TopologyTestDriver(rekeyed_count(), partitions=2, wall_clock_ms=10_000_000)
    clocks.pipe_records(records)
    largest = TopologyTestDriver(rekeyed_count(stream_time_across_topics="largest_seen"), partitions=2,
                                 wall_clock_ms=10_000_000)
    largest.pipe_records(records)
    assert clocks.dropped == {} and largest.dropped["pages"]["late"] > 20


def test_headers_are_pairs_or_a_mapping_and_anything_else_is_refused():
    app = Application("h", "unused:9092")
    app.stream("in").map_values(lambda v: v).to("out")
    driver = TopologyTestDriver(app)
    driver.pipe("in", "k", 1, headers={"trace": b"a"})
    driver.pipe("in", "k", 2, headers=[("trace", b"b"), ("empty", None)])
    assert [{k: v for k, v in r.headers.items() if k != "eos.origin"} for r in driver.read("out")] == [
        {"trace": b"a"}, {"trace": b"b", "empty": None}]
    with pytest.raises(TypeError, match=r"a header is a \(name, value bytes\) pair, got 'trace'"):
        driver.pipe("in", "k", 3, headers=["trace"])
    with pytest.raises(TypeError, match="a header is a"):
        driver.pipe("in", "k", 3, headers={"trace": "not bytes"})


def test_an_application_without_steps_is_refused_saying_what_to_add():
    from eos.errors import ConfigError

    app = Application("empty", "unused:9092")
    app.global_table("rates")
    with pytest.raises(ConfigError, match=r"has no sub-topology: add one with app.stream\(...\).to\(...\)"):
        TopologyTestDriver(app)


def test_a_cycle_that_never_ends_fails_fast_naming_its_topic_and_one_that_ends_settles():
    """A step that writes what it reads (Kafka Streams allows the cycle) keeps a record going round for ever:
    the driver stops it after 1,000 rounds with the topic named, rather than running without end. A cycle
    with a way out runs to its end, and its audit takes what others wrote to the topic as input, not as
    output without an origin; a job that needs more rounds than `max_rounds` says so."""
    forever = Application("loops", bootstrap_servers="unused:9092")
    forever.stream("jobs", value_serde="json").map_values(lambda job: {**job, "tries": job["tries"] + 1}).to("jobs")
    started = time.perf_counter()
    with TopologyTestDriver(forever) as driver, pytest.raises(RuntimeError) as raised:
        driver.pipe("jobs", "j1", {"tries": 0})
    assert time.perf_counter() - started < 30
    assert str(raised.value).startswith("the application did not settle: after 1,000 rounds of batches its steps "
                                        "still read 'jobs', which they write themselves")

    retries = Application("retries", bootstrap_servers="unused:9092")
    attempts = retries.stream("tasks", value_serde="json").split()
    branches = attempts.branch(lambda key, task: task["tries"] < 5, name="again").default_branch(name="done")
    branches["again"].map_values(lambda task: {**task, "tries": task["tries"] + 1}).to("tasks")
    branches["done"].to("finished")
    with TopologyTestDriver(retries) as driver:
        driver.pipe_many("tasks", [("a", {"tries": 0}), ("b", {"tries": 3})])
        assert [(r.key, r.value) for r in driver.read("finished")] == [("b", {"tries": 5}), ("a", {"tries": 5})]
        assert [r.value["tries"] for r in driver.records("tasks")] == [0, 3, 1, 4, 2, 5, 3, 4, 5]
        # the lineage audit takes the two records piped to the topic the step writes too as its input
        (lineage,) = [r.lineage for r in driver.audit() if r.mode == "lineage"]
        assert (lineage.written_by_others, lineage.expected, lineage.unexpected) == (2, 9, 0)

    slow = Application("slow", bootstrap_servers="unused:9092", max_records_per_batch=1)
    slow.stream("in").to("out")
    with TopologyTestDriver(slow, max_rounds=3) as driver, pytest.raises(RuntimeError, match=(
            "did not settle within 3 rounds of batches; a job that needs more in one call takes max_rounds=")):
        driver.pipe_many("in", [(f"k{i}", {"i": i}) for i in range(5)])
