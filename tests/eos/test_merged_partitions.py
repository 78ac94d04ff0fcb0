"""A stateless step may read topics of different partition counts, as in Kafka Streams: it has as many tasks as
its widest input, task p reading partition p of each input that has one. A step that keeps state by key, stream
time or its sources' clocks still needs co-partitioned inputs, and says how to get them. Partitions added to an
input while the job runs are read from the next batch by a stateless step; a step keeping state stops, saying
why and what to do."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from eos import Application
from eos.errors import ConfigError
from eos.testing import TopologyTestDriver
from eos.topology import task_count, task_inputs
from transactions import TopicSpec


def _merged(name: str = "merged") -> Application:
    app = Application(name, bootstrap_servers="memory:1")
    (app.stream(["clicks", "views"], name="events")
        .filter(lambda k, v: v["n"] % 3 != 0, name="keep")
        .map_values(lambda v: {**v, "seen": True}, name="mark")
        .to("marked"))
    return app


def _inputs(records: int = 90) -> list[tuple[str, str, dict[str, int]]]:
    return [("clicks" if i % 2 else "views", f"k{i}", {"n": i}) for i in range(records)]


def test_a_stateless_merge_has_a_task_per_partition_of_its_widest_input():
    app = _merged()
    driver = TopologyTestDriver(app, partitions={"clicks": 2, "views": 5, "marked": 3})
    sub = app.subtopologies["keep"]
    counts = {"clicks": 2, "views": 5}
    assert task_count(sub, counts) == 5
    assert task_inputs(sub, 1, counts) == ("clicks", "views")
    assert task_inputs(sub, 4, counts) == ("views",)
    driver.pipe_many("clicks", [(k, v) for t, k, v in _inputs() if t == "clicks"])
    driver.pipe_many("views", [(k, v) for t, k, v in _inputs() if t == "views"])
    out = Counter(r.key for r in driver.read("marked"))
    assert out == Counter(k for _, k, v in _inputs() if v["n"] % 3 != 0)  # each kept record once
    # tasks 2-4 read views only: each committed its own offsets, under its own transactional id
    tasks = {e.task for e in driver.ledger()}
    assert {"keep-2", "keep-3", "keep-4"} <= tasks
    assert {i.topic for e in driver.ledger() if e.task == "keep-4" for i in e.inputs} == {"views"}
    assert driver.cluster.partitions(app.config.dlq_topic) == 5
    assert {r.verdict for r in driver.audit()} == {"PASS"}


def test_a_stateless_merge_is_exactly_once_across_crashes():
    driver = TopologyTestDriver(_merged(), partitions={"clicks": 1, "views": 3})
    report = driver.check_exactly_once(_inputs(120), crashes=8, seed=5)
    assert report.crashes, "no batch was killed"


def test_a_repartition_after_a_merge_is_as_wide_as_the_widest_input_and_the_count_behind_it_exact():
    app = Application("wide", bootstrap_servers="memory:1")
    (app.stream(["clicks", "views"])
        .group_by(lambda k, v: f"u{v['n'] % 7}", name="by-user")
        .count(name="per-user")
        .to_stream().to("per-user-out", value_serde="long"))
    driver = TopologyTestDriver(app, partitions={"clicks": 2, "views": 3})
    assert driver.cluster.partitions("wide-per-user-repartition") == 3
    driver.pipe_records(_inputs(70))
    latest = {r.key: r.value for r in driver.read("per-user-out")}
    assert latest == Counter(f"u{v['n'] % 7}" for _, _, v in _inputs(70))
    driver.check_exactly_once(_inputs(70), crashes=6, seed=2)


def test_a_step_keeping_state_refuses_inputs_of_different_counts_saying_how_to_fix_it():
    app = Application("stateful", bootstrap_servers="memory:1")
    app.stream(["clicks", "views"]).group_by_key().count(name="tally").to_stream().to("tallies", value_serde="long")
    with pytest.raises(ConfigError, match=r"reads co-partitioned topics with different partition counts "
                                          r"\(clicks=2, views=3\)\. It keeps state by key \('tally-store'\).*"
                                          r"repartition the inputs"):
        TopologyTestDriver(app, partitions={"clicks": 2, "views": 3})
    windowed = Application("windowed", bootstrap_servers="memory:1")
    (windowed.stream(["clicks", "views"]).process(_Punctuator, name="punctuate").to("ticks"))
    with pytest.raises(ConfigError, match=r"keeps stream time \(windows or punctuation\)"):
        TopologyTestDriver(windowed, partitions={"clicks": 2, "views": 3})


def test_a_pattern_topic_of_more_partitions_gets_tasks_of_its_own_while_the_job_runs():
    app = Application("pat", bootstrap_servers="memory:1")
    app.stream(re.compile(r"events-[a-z]+"), name="events").map_values(lambda v: v["n"], name="n").to("ns")
    driver = TopologyTestDriver(app, partitions={"events-eu": 2})
    driver.pipe_many("events-eu", [(f"e{i}", {"n": i}) for i in range(10)])
    driver.admin.create_topics([TopicSpec("events-us", 4)])
    driver.pipe_many("events-us", [(f"u{i}", {"n": 100 + i}) for i in range(20)])
    assert sorted(r.value for r in driver.read("ns")) == [*range(10), *range(100, 120)]
    assert task_count(app.subtopologies["n"], {"events-eu": 2, "events-us": 4}) == 4
    assert {e.task for e in driver.ledger()} >= {"n-2", "n-3"}
    assert {r.verdict for r in driver.audit()} == {"PASS"}


@pytest.mark.parametrize("tasks_per_transaction", [1, 2])
def test_partitions_added_to_an_input_are_read_from_the_next_batch_across_a_crash_in_a_new_task(
        tasks_per_transaction):
    app = _merged("grown")
    app.configure(tasks_per_transaction=tasks_per_transaction)  # (units of two: the new tasks make a unit of their own)
    driver = TopologyTestDriver(app, partitions={"clicks": 2, "views": 2})
    first = [(t, k, v) for t, k, v in _inputs(40)]
    driver.pipe_records(first)
    driver.admin.add_partitions("views", 4)
    driver.crash_at("before_commit", task="keep-3")  # (the new partition's task, killed inside its transaction)
    second = [(t, f"x{k}", {"n": v["n"] + 1000}) for t, k, v in _inputs(60)]
    driver.pipe_records(second)
    assert driver.crashes, "the new task's batch was not killed"
    out = Counter(r.key for r in driver.read("marked"))
    assert out == Counter(k for _, k, v in [*first, *second] if v["n"] % 3 != 0)  # each once
    assert {i.partition for e in driver.ledger() if e.task == "keep-3" for i in e.inputs} == {3}
    assert {r.verdict for r in driver.audit()} == {"PASS"}


def test_a_step_keeping_state_stops_when_its_input_gets_partitions_saying_what_to_do():
    app = Application("counted", bootstrap_servers="memory:1")
    app.stream("clicks").group_by_key().count(name="tally").to_stream().to("tallies", value_serde="long")
    driver = TopologyTestDriver(app, partitions={"clicks": 2})
    driver.pipe("clicks", "a", {"n": 1})
    driver.admin.add_partitions("clicks", 3)
    with pytest.raises(ConfigError, match=r"changelog counted-tally-store-changelog has 2 partitions but its "
                                          r"sub-topology has 3 tasks: its input has more partitions .*`eos reset`"):
        driver.pipe("clicks", "b", {"n": 2})
    assert [(r.key, r.value) for r in driver.read("tallies")] == [("a", 1)]  # (nothing of the refused batch)


class _Punctuator:
    """A Processor API step with stream-time punctuation and no store."""

    def init(self, context):  # type: ignore[no-untyped-def]
        context.schedule(1000, "stream_time", lambda ts: context.forward("tick", ts))

    def process(self, record):  # type: ignore[no-untyped-def]
        pass

    def close(self) -> None:
        pass
