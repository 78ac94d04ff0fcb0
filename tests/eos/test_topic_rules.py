"""What a topic accepts: outputs the broker would refuse are bad records (record scope) or take the
producer's clock (a punctuation's out-of-range timestamp), and the rules come from the topic's config."""

from __future__ import annotations

import json
import time

import pytest

from eos.errors import TaskFailedError
from eos.processor import FunctionProcessor, Processor
from eos.serde import JsonSerde, StringSerde
from eos.worker.context import TaskContext
from eos.worker.dead_letters import DeadLetterPolicy
from eos.worker.processing import punctuate_idle, run_processor
from eos.worker.topic_rules import TopicRule, TopicRules
from tests.fakes import FakeMessage

DLQ = DeadLetterPolicy("app-dlq", 0, "t-0", fail=False)
HOUR = 3_600_000


def now() -> int:
    return int(time.time() * 1000)


def context(rule: TopicRule, key_serde=StringSerde()) -> TaskContext:
    return TaskContext(application_id="app", subtopology="t", partition=0, output_topic="out", key_serde=key_serde,
                       value_serde=JsonSerde(), lineage=True, topic_rules=lambda topic: rule)


def test_a_record_timestamp_the_topic_refuses_sends_its_input_to_the_dead_letter_topic():
    rule = TopicRule("out", 1_000_000, after_ms=HOUR, before_ms=24 * HOUR)
    c = context(rule)
    proc = FunctionProcessor(lambda r: (r.key, r.value))
    proc.init(c)
    t = now()
    stamps = [t, t + 3 * HOUR, t - 48 * HOUR, t + HOUR // 2]
    messages = [FakeMessage("in", 0, 10 + i, b"{}", b"k", timestamp=ts) for i, ts in enumerate(stamps)]
    out = run_processor(proc, c, messages, key_serde=StringSerde(), value_serde=JsonSerde(), dlq=DLQ)
    assert [r.timestamp for r in out.outputs] == [t, t + HOUR // 2]
    errors = [dict(d.headers)["eos.dlq.error"].decode() for d in out.dead_letters]
    assert "ahead of now" in errors[0] and "message.timestamp.after.max.ms" in errors[0]
    assert "behind now" in errors[1] and "message.timestamp.before.max.ms" in errors[1]
    assert [dict(d.headers)["eos.dlq.stage"] for d in out.dead_letters] == [b"serialize", b"serialize"]


def test_a_compacted_topic_refuses_outputs_without_a_key():
    c = context(TopicRule("out", 1_000_000, needs_key=True))
    proc = FunctionProcessor(lambda r: (None if r.value["keyless"] else r.key, 1))
    proc.init(c)
    messages = [FakeMessage("in", 0, 10 + i, json.dumps({"keyless": i == 1}).encode(), b"k") for i in range(3)]
    out = run_processor(proc, c, messages, key_serde=StringSerde(), value_serde=JsonSerde(), dlq=DLQ)
    assert len(out.outputs) == 2 and len(out.dead_letters) == 1
    assert b"compacted" in dict(out.dead_letters[0].headers)["eos.dlq.error"]


class Emitter(Processor):
    """Forwards one record per wall-clock punctuation, with the timestamp it is given."""

    def __init__(self, timestamp: int | None, key: str | None = "k") -> None:
        self.timestamp, self.key = timestamp, key

    def init(self, context) -> None:
        super().init(context)
        context.schedule(1, lambda t: context.forward(self.key, "v", timestamp=self.timestamp), type="wall_clock")

    def process(self, record) -> None:
        pass


def punctuate(proc: Processor, c: TaskContext):
    proc.init(c)
    c.schedules[0].next_at = 0  # due now
    return punctuate_idle(proc, c, ())


def test_a_punctuation_output_with_a_refused_timestamp_takes_the_producers_clock():
    rule = TopicRule("out", 1_000_000, after_ms=HOUR)
    (record,) = punctuate(Emitter(now() + 2 * HOUR), context(rule)).outputs
    assert record.timestamp is None
    (record,) = punctuate(Emitter(now() - 2 * HOUR), context(rule)).outputs
    assert record.timestamp is not None  # in range: kept


def test_a_punctuation_output_that_cannot_be_fixed_fails_the_task_with_the_reason():
    """Not retried: the same punctuation at the same time would fail the same way (the job stops)."""
    with pytest.raises(TaskFailedError, match="punctuation to topic out has no key, and topic out is compacted") as e:
        punctuate(Emitter(None, key=None), context(TopicRule("out", 1_000_000, needs_key=True)))
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
