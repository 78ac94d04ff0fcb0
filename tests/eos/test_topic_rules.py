"""What a topic accepts: outputs the broker would refuse are bad records (record scope) or take the
producer's clock (a punctuation's out-of-range timestamp), and the rules come from the topic's config."""

from __future__ import annotations

import time

import pytest

from eos import Application
from eos.clock import clock_source
from eos.errors import TaskFailedError
from eos.processor import FunctionProcessor, Processor
from eos.testing import TopologyTestDriver
from eos.worker.topic_rules import TopicRule, TopicRules

HOUR = 3_600_000


def now() -> int:
    return int(time.time() * 1000)


def driver_of(processor, **out_config: str) -> TopologyTestDriver:
    """A one-step job of `processor` writing to "out", whose topic config is `out_config`, in the driver."""
    app = Application("app")
    app.stream("in").process(processor, name="t").to("out")
    config = {k.replace("_", "."): v for k, v in out_config.items()}
    return TopologyTestDriver(app, wall_clock_ms=now(), topic_configs={"out": config})


def test_a_record_timestamp_the_topic_refuses_sends_its_input_to_the_dead_letter_topic():
    driver = driver_of(lambda: FunctionProcessor(lambda r: (r.key, r.value)), message_timestamp_after_max_ms=str(HOUR),
                       message_timestamp_before_max_ms=str(24 * HOUR))
    t = driver.now
    driver.pipe_many("in", [("k", {}, ts) for ts in (t, t + 3 * HOUR, t - 48 * HOUR, t + HOUR // 2)])
    assert [r.timestamp for r in driver.read("out")] == [t, t + HOUR // 2]
    letters = driver.dead_letters()
    assert "ahead of now" in letters[0].error and "message.timestamp.after.max.ms" in letters[0].error
    assert "behind now" in letters[1].error and "message.timestamp.before.max.ms" in letters[1].error
    assert [d.stage for d in letters] == ["serialize", "serialize"]


def test_a_compacted_topic_refuses_outputs_without_a_key():
    driver = driver_of(lambda: FunctionProcessor(lambda r: (None if r.value["keyless"] else r.key, 1)),
                       cleanup_policy="compact")
    driver.pipe_many("in", [("k", {"keyless": i == 1}) for i in range(3)])
    assert len(driver.read("out")) == 2
    (letter,) = driver.dead_letters()
    assert "compacted" in letter.error


class Emitter(Processor):
    """Forwards one record per wall-clock punctuation, with the timestamp it is given."""

    def __init__(self, timestamp: int | None, key: str | None = "k") -> None:
        self.timestamp, self.key = timestamp, key

    def init(self, context) -> None:
        super().init(context)
        context.schedule(1, lambda t: context.forward(self.key, "v", timestamp=self.timestamp), type="wall_clock")

    def process(self, record) -> None:
        pass


def test_a_punctuation_output_with_a_refused_timestamp_takes_the_producers_clock():
    ahead = driver_of(lambda: Emitter(now() + 2 * HOUR), message_timestamp_after_max_ms=str(HOUR))
    ahead.advance_wall_clock(1)
    assert {r.timestamp for r in ahead.read("out")} == {ahead.now}  # the producer's (the broker's) clock
    behind = driver_of(lambda: Emitter(now() - 2 * HOUR), message_timestamp_after_max_ms=str(HOUR))
    behind.advance_wall_clock(1)
    assert all(r.timestamp < behind.now - HOUR for r in behind.read("out"))  # in range: kept


def test_a_punctuation_output_that_cannot_be_fixed_fails_the_task_with_the_reason():
    """Not retried: the same punctuation at the same time would fail the same way (the job stops)."""
    driver = driver_of(lambda: Emitter(None, key=None), cleanup_policy="compact")
    with pytest.raises(TaskFailedError, match="punctuation to topic out has no key, and topic out is compacted") as e:
        driver.advance_wall_clock(1)
    assert e.value.task == "t-0" and e.value.cause_type == "OutputRejectedError"


class FakeAdmin:
    def __init__(self, configs: dict[str, dict[str, str]]) -> None:
        self.configs = configs
        self.reads = 0

    def topic_config(self, topic: str) -> dict[str, str]:
        self.reads += 1
        if topic not in self.configs:
            raise KeyError(topic)
        return self.configs[topic]


def test_rules_are_read_from_the_topic_config_once_and_again_after_forget():
    admin = FakeAdmin({
        "plain": {"max.message.bytes": "2000000", "cleanup.policy": "delete",
                  "message.timestamp.before.max.ms": str(2**63 - 1), "message.timestamp.after.max.ms": "3600000"},
        "table": {"max.message.bytes": "500", "cleanup.policy": "compact,delete"},
        "appended": {"message.timestamp.type": "LogAppendTime", "message.timestamp.after.max.ms": "1"},
        "old": {"message.timestamp.difference.max.ms": "60000"},
    })
    rules = TopicRules(lambda: admin, None)  # type: ignore[arg-type, return-value]
    assert rules("plain") == TopicRule("plain", 1_000_000, False, None, HOUR)  # the producer's limit is smaller
    assert rules("table") == TopicRule("table", 500, True)
    assert rules("appended") == TopicRule("appended", 1_000_000)  # the broker stamps: any timestamp is fine
    assert rules("old") == TopicRule("old", 1_000_000, False, 60_000, 60_000)  # a broker before 3.6
    assert rules("missing") == TopicRule("missing", 1_000_000)
    reads = admin.reads
    rules("plain")
    assert admin.reads == reads
    rules.forget()
    rules("plain")
    assert admin.reads == reads + 1


def test_an_upper_bound_alone_reads_the_clock_only_for_a_timestamp_past_what_it_has_seen():
    rule = TopicRule("out", 1_000_000, False, None, HOUR)
    clock = {"now": 10 * HOUR, "reads": 0}

    def source() -> float:
        clock["reads"] += 1
        return clock["now"] / 1000

    t = clock["now"]
    with clock_source(source):
        assert rule.violation(b"k", b"v", None, t) is None  # the first check reads the clock
        assert [rule.violation(b"k", b"v", None, ts) for ts in (t - HOUR, t, t + HOUR)] == [None] * 3
        assert clock["reads"] == 1  # within an hour of a time the clock has reached: no reading
        assert "ahead of now" in (rule.violation(b"k", b"v", None, t + HOUR + 1) or "")
        clock["now"] += 5
        assert rule.violation(b"k", b"v", None, t + HOUR + 1) is None  # read again: the clock moved on
        assert clock["reads"] == 3
    with clock_source(lambda: (t - HOUR) / 1000):  # another clock (another test driver's) is read afresh
        assert "ahead of now" in (rule.violation(b"k", b"v", None, t + HOUR) or "")
    both = TopicRule("out", 1_000_000, False, HOUR, HOUR)  # a lower bound needs the clock at every check
    with clock_source(source):
        reads = clock["reads"]
        both.violation(b"k", b"v", None, t)
        both.violation(b"k", b"v", None, t)
        assert clock["reads"] == reads + 2
