"""Sources that read every topic a pattern matches (Kafka Streams' `StreamsBuilder.stream(Pattern)` and
`Topology.addSource(name, Pattern)`): those there at the start, those created while the job runs, each read
once and audited; the job's own topics never; what a pattern stream cannot do says how to do it."""

from __future__ import annotations

import re

import pytest

from eos import Application
from eos.driver.checks import match_topic_patterns
from eos.errors import ConfigError
from eos.queries import store_view
from eos.testing import TopologyTestDriver
from transactions import TopicSpec
from transactions.memory import MemoryAdmin, MemoryCluster

EVENTS = re.compile(r"events-[a-z]+")


def _counts(name: str = "pat") -> Application:
    """Even values of every events-* topic, counted per who, through a repartition topic."""
    app = Application(name, bootstrap_servers="memory:1")
    (app.stream(EVENTS, name="events")
        .filter(lambda k, v: v["n"] % 2 == 0, name="evens")
        .group_by(lambda k, v: v["who"])
        .count(name="counts")
        .to_stream().to("counts-out", value_serde="long"))
    return app


def test_a_pattern_reads_the_topics_it_matches_at_the_start_and_those_created_later():
    app = _counts()
    driver = TopologyTestDriver(app, partitions={"events-eu": 2, "events-us": 2, "other": 1})
    driver.pipe_many("events-eu", [("k1", {"n": 2, "who": "ann"}), ("k2", {"n": 3, "who": "ann"})])
    driver.pipe_many("events-us", [("k3", {"n": 4, "who": "bob"})])
    assert {(r.key, r.value) for r in driver.read("counts-out")} == {("ann", 1), ("bob", 1)}
    assert set(app.subtopologies["evens"].inputs) == {"events-eu", "events-us"}  # ("other" does not match)
    # a topic created while the job runs: read from its first record, with the others' partition count
    driver.pipe_many("events-asia", [("k4", {"n": 6, "who": "ann"}), ("k5", {"n": 8, "who": "cy"})])
    assert [(r.key, r.value) for r in driver.read("counts-out")] == [("ann", 2), ("cy", 1)]
    assert driver.cluster.partitions("events-asia") == 2
    assert app.subtopologies["evens"].inputs == ("events-asia", "events-eu", "events-us")
    # the repartition topic is sized like the pattern's topics
    assert driver.cluster.partitions("pat-counts-repartition") == 2
    reports = driver.audit()
    assert {r.verdict for r in reports} == {"PASS"}
    assert set(reports[0].inputs) == {"events-asia", "events-eu", "events-us"}


def test_a_pattern_stream_is_exactly_once_across_crashes_and_a_topic_created_midway():
    inputs = [(f"events-{region}", f"k{i}", {"n": i, "who": f"w{i % 5}"})
              for i in range(120) for region in (("eu",) if i < 40 else ("eu", "us"))]
    driver = TopologyTestDriver(_counts(), partitions={"events-eu": 2})
    report = driver.check_exactly_once(inputs, crashes=8, seed=3)
    assert report.crashes, "no batch was killed"


def test_a_pattern_never_reads_the_jobs_own_topics_nor_kafkas():
    app = Application("ev", bootstrap_servers="memory:1", dead_letter_topic="ev-dead")
    app.stream(re.compile("ev.*")).map_values(lambda v: {**v, "seen": True}, name="seen").to("ev-enriched")
    app.stream("evidence").group_by_key().count(name="tally").to_stream().to("tallies", value_serde="long")
    driver = TopologyTestDriver(app, partitions={"evidence": 1, "events": 1})
    assert driver.cluster.partitions("ev-tally-store-changelog") == 1
    # its own output, the dead letters, the ledger, a changelog, Kafka's own: none is read by the pattern
    assert app.subtopologies["seen"].inputs == ("events", "evidence")
    driver.pipe("events", "a", {"x": 1})
    assert [r.value for r in driver.read("ev-enriched")] == [{"x": 1, "seen": True}]


def test_the_start_refuses_a_pattern_that_matches_nothing_saying_what_to_do():
    with pytest.raises(ConfigError, match=r"matches no topic of the driver: name the topics .*partitions="):
        TopologyTestDriver(_counts())
    cluster = MemoryCluster()
    admin = MemoryAdmin(cluster)
    admin.create_topics([TopicSpec("counts-out", 1)])
    app = _counts()
    with pytest.raises(ConfigError, match=r"source 'events' \('events-\[a-z\]\+'\) matches no topic on .*create one "
                                          r"first .*topics created while the job runs are read as they appear"):
        match_topic_patterns(app, admin, at_start=True)  # type: ignore[arg-type]
    admin.create_topics([TopicSpec("events-x", 3)])
    assert match_topic_patterns(app, admin, at_start=True)  # type: ignore[arg-type]
    assert not match_topic_patterns(app, admin)  # type: ignore[arg-type]  (nothing new)


def test_a_matched_topic_of_another_partition_count_stops_a_step_keeping_state_naming_the_counts():
    app = Application("direct", bootstrap_servers="memory:1")
    app.stream(EVENTS).group_by_key().count(name="tally").to_stream().to("tallies", value_serde="long")
    driver = TopologyTestDriver(app, partitions={"events-eu": 2})
    driver.cluster.create_topic("events-us", 3)
    with pytest.raises(ConfigError, match=r"different partition counts \(events-eu=2, events-us=3\)"):
        driver.pipe("events-eu", "k", {"n": 2, "who": "a"})
    # (a stateless step before a repartition topic reads them all: tests/eos/test_merged_partitions.py)


@pytest.mark.no_audit
def test_what_a_pattern_stream_cannot_do_says_how():
    app = Application("p", bootstrap_servers="memory:1")
    events = app.stream(EVENTS)
    with pytest.raises(ValueError, match="read by a topic pattern, whose topics are known only when the job runs; "
                                         r"give it one topic first with repartition\(\)"):
        events.join(app.table("users"), lambda e, u: (e, u))
    with pytest.raises(TypeError, match="a text pattern"):
        app.stream(re.compile(b"events"))
    for reads in (lambda: app.table(EVENTS), lambda: app.global_table(EVENTS), lambda: app.stream([EVENTS]),
                  lambda: app.process(input=EVENTS, output="o", name="step")(lambda record: record)):
        with pytest.raises(TypeError, match=r"reads named topics, not a topic pattern: a pattern is read by a stream"):
            reads()
    # repartitioned, it joins like any stream
    events.repartition().join(app.table("users"), lambda e, u: {**e, "user": u}).to("joined")
    driver = TopologyTestDriver(app, partitions={"events-a": 1})
    driver.pipe("users", "u1", {"name": "ann"})
    driver.pipe("events-a", "u1", {"n": 1})
    assert [r.value for r in driver.read("joined")] == [{"n": 1, "user": {"name": "ann"}}]


@pytest.mark.no_audit
def test_describe_shows_the_pattern_and_the_processor_api_takes_one():
    app = Application("p", bootstrap_servers="memory:1")
    app.add_source("src", EVENTS, value_serde="string")
    app.add_sink("out", "upper", "src", value_serde="string")
    assert "Source: src (topics: [events-[a-z]+])" in str(app.describe())
    assert app.subtopologies == {}  # nothing matched yet
    app.require_steps()  # a job of patterns alone has steps
    app.match_patterns(["events-a", "upper", "__consumer_offsets"])
    assert app.subtopologies["src"].inputs == ("events-a",)


def test_kafka_streams_metadata_age_setting_names_the_refresh_interval():
    with pytest.raises(ConfigError, match=r"metadata\.max\.age\.ms is metadata_refresh_interval"):
        Application("p", metadata_max_age_ms=1000)
    with pytest.raises(ConfigError, match="metadata_refresh_interval must be > 0"):
        Application("p", metadata_refresh_interval=0)


def test_a_store_of_a_pattern_step_is_queried_from_a_process_that_never_matched_the_pattern():
    def tally() -> Application:
        app = Application("tally", bootstrap_servers="memory:1")
        app.stream(EVENTS).group_by_key().count(name="tally").to_stream().to("tallies", value_serde="long")
        return app

    driver = TopologyTestDriver(tally(), partitions={"events-eu": 1})
    driver.pipe_many("events-eu", [("ann", {"n": 2}), ("ann", {"n": 4})])
    fresh = tally()  # (as `eos store get job.py tally ann` loads the job anew)
    assert fresh.subtopologies == {}
    assert store_view(fresh, "tally-store", admin=driver.admin, scan=driver._scan).get("ann") == 2
    with pytest.raises(KeyError, match="has no store 'nothing'; its stores: tally-store"):
        store_view(fresh, "nothing", admin=driver.admin, scan=driver._scan)


def test_the_serdes_of_a_topic_a_pattern_reads_are_the_sources_matched_or_not():
    app = Application("p", bootstrap_servers="memory:1")
    app.stream(EVENTS, value_serde="long").to("out", value_serde="long")
    key_serde, value_serde = app.input_serdes("events-new")  # (as the chaos harness encodes its load)
    assert (key_serde.serialize("k"), value_serde.serialize(7)) == (b"k", (7).to_bytes(8, "big"))
    with pytest.raises(KeyError, match=r"topic 'other': write to one of its inputs \(a topic matching 'events-"):
        app.input_serdes("other")


def test_eos_reset_plans_every_topic_the_pattern_matches_now():
    from eos.driver.reset import plan_reset

    driver = TopologyTestDriver(_counts(), partitions={"events-eu": 1})
    driver.pipe("events-us", "k", {"n": 2, "who": "ann"})
    plan = plan_reset(_counts(), driver.admin)  # type: ignore[arg-type]  (a job loaded anew, as `eos reset` does)
    assert set(plan.starts) == {"events-eu", "events-us"}
    assert "pat-counts-repartition" in plan.topics


def test_the_topics_a_pattern_job_names_are_its_outputs_whether_matched_or_not():
    specs = {s.name: s.partitions for s in _counts().topic_specs(4)}
    assert specs == {"counts-out": 4}  # (no pattern text, no repartition topic; the matched topics are the writers')


@pytest.mark.no_audit  # (it forges records at the end, which its own audit catches)
def test_a_matched_topic_deleted_while_the_job_runs_leaves_outputs_the_audit_accounts_for():
    """Kafka Streams stops reading a pattern's topic when it is deleted; so does a running job, and the outputs
    the topic's records made stay: the lineage audit proves each from the ledger (a committed batch read its
    record), rather than call them unexpected, and still catches a copy, or an output of a record never read."""
    app = Application("gone", bootstrap_servers="memory:1")
    app.stream(EVENTS, name="events").map_values(lambda v: v["n"], name="n").to("ns", value_serde="long")
    driver = TopologyTestDriver(app, partitions={"events-eu": 2, "events-us": 2, "ns": 1})
    driver.pipe_many("events-eu", [(f"e{i}", {"n": i}) for i in range(10)])
    driver.pipe_many("events-us", [(f"u{i}", {"n": 100 + i}) for i in range(10)])
    driver.admin.delete_topics(["events-us"])
    driver.pipe_many("events-eu", [(f"e{i}", {"n": 200 + i}) for i in range(10)])
    assert app.subtopologies["n"].inputs == ("events-eu",)
    assert sorted(r.value for r in driver.read("ns")) == [*range(10), *range(100, 110), *range(200, 210)]
    (report,) = driver.audit()
    assert (report.verdict, report.lineage.no_longer_read, report.lineage.expected) == ("PASS", 10, 20)
    us = next(r for r in driver.records("ns") if r.value >= 100)
    driver.cluster.append("ns", 0, us.key.encode(), (7).to_bytes(8, "big"), headers=list(us.headers.items()))
    driver.cluster.append("ns", 0, b"u99", (7).to_bytes(8, "big"), headers=[("eos.origin", b"events-us:0:999:0")])
    (report,) = driver.audit()
    assert (report.verdict, report.lineage.duplicates, report.lineage.unexpected) == ("FAIL", 1, 1)
