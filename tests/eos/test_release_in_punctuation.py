"""Records held back (`ProcessorContext.hold`) and let go (`release`) in a punctuation or a record-cache flush,
rather than while a record is processed: what they forward runs right after the punctuation, each in the
scope of the record held, named after it, and is committed with the batch that let go of it. Before, a
release outside a record's processing waited for the next record, and at a batch's end or in a wall-clock
punctuation's batch of its own it was dropped: the records were gone from the buffer and never forwarded."""

import pickle

import pytest

from eos import Application, Processor, store
from eos.testing import TopologyTestDriver


class Delay(Processor):
    """Holds every record in a store until its punctuation lets all of them go (Kafka Streams' buffer-and-emit
    pattern: `context.schedule` and a store of the records held). A value {"fail": true} fails when let go."""

    kind = "stream"

    def init(self, context):
        super().init(context)
        self.held = context.store("held")
        context.schedule(1_000, self.let_go, type=self.kind)

    def process(self, record):
        kept = self.context.hold()
        self.held.put(b"%020d" % kept[2], pickle.dumps((kept, record.key, record.value)))

    def let_go(self, timestamp):
        for raw_key, raw in list(self.held.all()):
            kept, key, value = pickle.loads(raw)
            self.held.delete(raw_key)
            self.context.release(kept, lambda key=key, value=value: self._forward(key, value))

    def _forward(self, key, value):
        if value.get("fail"):
            raise ValueError(f"cannot let {key} go")
        self.context.forward(key, {**value, "let_go": True})


class WallClockDelay(Delay):
    kind = "wall_clock"


def delayed(processor):
    app = Application("held-app")
    app.add_source("src", "in", key_serde="string", value_serde="json")
    app.add_processor("delay", processor, "src")
    app.add_state_store(store("held", value_serde="bytes"), "delay")
    app.add_sink("sink", "out", "delay", key_serde="string", value_serde="json")
    return app


def test_records_let_go_in_a_stream_time_punctuation_are_all_forwarded_named_after_themselves():
    driver = TopologyTestDriver(delayed(Delay))
    for i in range(10):
        driver.pipe("in", f"k{i}", {"n": i}, timestamp=i * 600)
    out = driver.read("out")
    # punctuations at 0, 1,200, 2,400, 3,000, 4,200 and 5,400 (the first record past each second): the last
    # one let k9 go, in the batch's last scope
    assert [r.key for r in out] == [f"k{i}" for i in range(10)]
    assert all(r.value["let_go"] for r in out)
    assert [r.headers["eos.origin"].split(b":")[2] for r in out] == [b"%d" % i for i in range(10)]
    assert [r.timestamp for r in out] == [i * 600 for i in range(10)]


def test_records_let_go_in_a_wall_clock_punctuation_are_forwarded_in_its_batch():
    driver = TopologyTestDriver(delayed(WallClockDelay), wall_clock_ms=0)
    for i in range(10):
        driver.pipe("in", f"k{i}", {"n": i})
    assert driver.read("out") == []
    driver.advance_wall_clock(1_000)  # an idle task's punctuation runs in a batch of its own
    assert sorted(r.key for r in driver.read("out")) == sorted(f"k{i}" for i in range(10))


def test_a_record_that_fails_when_let_go_in_a_punctuation_goes_to_the_dead_letter_topic():
    driver = TopologyTestDriver(delayed(WallClockDelay), wall_clock_ms=0)
    driver.pipe("in", "a", {"n": 1})
    driver.pipe("in", "bad", {"n": 2, "fail": True})
    driver.pipe("in", "c", {"n": 3})
    driver.advance_wall_clock(1_000)
    assert sorted(r.key for r in driver.read("out")) == ["a", "c"]
    dead = driver.dead_letters()
    assert [d.key for d in dead] == [b"bad"] and "cannot let bad go" in dead[0].error


@pytest.mark.parametrize("processor", [Delay, WallClockDelay])
def test_records_let_go_in_punctuations_are_committed_exactly_once_through_crashes(processor):
    inputs = [("in", f"k{i % 7}", {"n": i}, i * 300) for i in range(60)]
    TopologyTestDriver(delayed(processor), wall_clock_ms=0).check_exactly_once(inputs, crashes=8)
