"""Reads of committed offsets answered as "nothing committed" during a group coordinator's move: librdkafka 2.16
gives that answer, with no error, to a read that falls in the move (README, "Known limits").

* A task's own read that says so where its plan found the offsets committed is asked again rather than believed
  (`eos.worker.attempt.BatchAttempt.read_progress`). Believed, the batch would lose what the commit carries besides
  the offsets: the task's stream time (a window closed by it would take a late record again), its punctuation
  schedule, the clocks of its sources.
* With auto_offset_reset="latest", the driver pins a group that answers so to the inputs' ends, overwriting what
  it had committed: for an application that has run before it reads again first (`Planner.initialize_offsets`)."""

from __future__ import annotations

from collections import Counter

import pytest
from confluent_kafka import TopicPartition
from structlog.testing import capture_logs

import eos.driver.planner as planner_module
from eos import Application
from eos.config import EosConfig
from eos.driver.planner import Planner
from eos.serde import BytesSerde
from eos.testing import TopologyTestDriver
from eos.topology import SubTopology
from eos.windows import TumblingWindows
from eos.worker.plans import TaskStatus
from eos.worker.progress import CommitMetadata
from transactions.memory import MemoryConsumer


def app(name: str) -> Application:
    app = Application(name, bootstrap_servers="unused:9092", auto_offset_reset="earliest")
    app.stream("in").map_values(lambda v: v * 10).to("out")
    return app


@pytest.fixture
def moving_coordinator(monkeypatch: pytest.MonkeyPatch):
    """After `skip` more offset reads of workers' consumers, the next `wrong` answer "nothing committed" for every
    partition, as librdkafka does during a coordinator move."""
    state = {"skip": 0, "wrong": 0}
    real = MemoryConsumer.committed

    def committed(self: MemoryConsumer, partitions, timeout: float = -1) -> list[TopicPartition]:
        if state["skip"] > 0:
            state["skip"] -= 1
        elif state["wrong"] > 0:
            state["wrong"] -= 1
            return [TopicPartition(tp.topic, tp.partition, -1001) for tp in partitions]
        return real(self, partitions, timeout)

    monkeypatch.setattr(MemoryConsumer, "committed", committed)
    return state


def test_a_read_answered_as_nothing_committed_is_asked_again_and_each_record_is_done_once(moving_coordinator):
    driver = TopologyTestDriver(app("first-reads"))
    driver.pipe_many("in", [(f"k{i}", i) for i in range(5)])
    moving_coordinator["wrong"] = 1  # the next batch's read of its committed offsets falls in a move
    with capture_logs() as logs:
        driver.pipe_many("in", [(f"k{i}", i) for i in range(5, 8)])
    outputs = Counter(r.value for r in driver.read("out"))
    assert outputs == Counter(i * 10 for i in range(8))  # each once
    assert moving_coordinator["wrong"] == 0  # (the wrong answer was given)
    retried = [e for e in logs if e["event"] == "batch attempt failed; recreating the clients"]
    assert len(retried) == 1 and "answered as never committed" in retried[0]["error"]
    entries = [(i.start, i.end) for e in driver.ledger() for i in e.inputs]
    assert entries == [(0, 5), (5, 8)]  # the ledger's ranges tile the partition once


def test_a_restarted_worker_keeps_the_task_s_stream_time_and_a_closed_window_stays_closed(moving_coordinator):
    """A worker killed mid-batch: the new one's first read of the task's offsets falls in a move. Believed, its
    stream time would start again from the batch's records, and the late record would count in a window already
    given as final."""
    counts = Application("first-reads-windows", bootstrap_servers="unused:9092", timestamp="record")
    (counts.stream("in").group_by_key().window(TumblingWindows(1_000, grace=0), emit="final").count(name="n")
     .to_stream().to("out"))
    driver = TopologyTestDriver(counts)
    driver.pipe_many("in", [("a", 1, 100), ("a", 1, 500), ("a", 1, 5_000)])  # closes [0, 1000) with 2
    driver.crash_at("after_read", batch=1)  # the next batch: killed after its read, run again by a new worker
    moving_coordinator["skip"], moving_coordinator["wrong"] = 1, 1  # the new worker's first read is wrong
    driver.pipe_many("in", [("a", 1, 600)])  # late: the task's stream time is 5,000
    assert len(driver.crashes) == 1 and moving_coordinator["wrong"] == 0
    assert [(r.key.start, r.value) for r in driver.read("out")] == [(0, 2)]  # [0, 1000) once, as it was
    assert driver.dropped == {"n": {"late": 1}}


def test_a_task_never_committed_believes_nothing_committed(moving_coordinator):
    # the plan found nothing committed either: the answer is the truth, and the first batch reads from the start
    driver = TopologyTestDriver(app("first-reads-new"))
    moving_coordinator["wrong"] = 1
    with capture_logs() as logs:
        driver.pipe_many("in", [(f"k{i}", i) for i in range(3)])
    assert moving_coordinator["wrong"] == 0  # (the answer was given, and believed: no attempt failed on it)
    assert not [e for e in logs if e["event"] == "batch attempt failed; recreating the clients"]
    assert sorted(r.value for r in driver.read("out")) == [0, 10, 20]
    assert all(r.status == TaskStatus.COMMITTED for r in driver.results)


class PinningAdmin:
    """The admin calls `Planner.initialize_offsets` makes: `answers` are the group's reads in turn (the last one
    repeated), the ledger's end is `ledger_end`, and what is pinned is kept."""

    def __init__(self, answers: list[dict[tuple[str, int], int | None]], ledger_end: int) -> None:
        self.answers, self.ledger_end, self.reads = answers, ledger_end, 0
        self.pinned: dict[tuple[str, int], int] = {}

    def group_offsets(self, group, tps, stable=True, timeout=30.0):
        answer = self.answers[min(self.reads, len(self.answers) - 1)]
        self.reads += 1
        return {tp: answer.get(tp) for tp in tps}

    def partition_counts(self, topics, timeout=30.0):
        return dict.fromkeys(topics, 1)

    def end_offsets(self, tps, committed=True, timeout=30.0):
        return {tp: self.ledger_end if tp[0].endswith("-ledger") else 50 for tp in tps}

    def earliest_offsets(self, tps, timeout=30.0):
        return dict.fromkeys(tps, 20)

    def set_group_offsets(self, group, offsets, timeout=30.0, metadata=None):
        self.pinned.update(offsets)
        self.metadata = dict(metadata or {})


def latest_planner(admin: PinningAdmin) -> Planner:
    b = BytesSerde()
    subs = {"s": SubTopology("s", ("in",), "out", b, b, b, b, processor_factory=object)}
    return Planner(admin, EosConfig("app", "b", auto_offset_reset="latest"), subs, {"in": 2})  # type: ignore[arg-type]


@pytest.fixture
def no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(planner_module, "PIN_CONFIRM_PAUSE_S", 0.0)


def test_latest_does_not_pin_over_offsets_answered_as_never_committed_in_a_move(no_pause):
    # the application ran before (its ledger holds records); the first read falls in a coordinator move
    admin = PinningAdmin([{}, {}, {("in", 0): 7, ("in", 1): 9}], ledger_end=12)
    assert latest_planner(admin).initialize_offsets() == {}
    assert admin.pinned == {} and admin.reads == 3


def test_latest_pins_a_new_application_at_once_and_one_whose_offsets_are_gone_after_reading_again(no_pause):
    new = PinningAdmin([{}], ledger_end=0)
    assert latest_planner(new).initialize_offsets() == {("in", 0): 50, ("in", 1): 50} and new.reads == 1
    # (each commit says where the records start that the job starts after: 20 to 50, for the ledger)
    assert {tp: CommitMetadata.decode(m).not_read_from for tp, m in new.metadata.items()} == {("in", 0): 20,
                                                                                            ("in", 1): 20}
    with capture_logs() as logs:
        gone = PinningAdmin([{}], ledger_end=12)  # ran before, its offsets expired: pinned after the reads again
        assert latest_planner(gone).initialize_offsets() == {("in", 0): 50, ("in", 1): 50}
    assert gone.reads == 1 + planner_module.PIN_CONFIRM_READS
    assert any("has run before" in e["event"] for e in logs)
    partly = PinningAdmin([{("in", 0): 7}], ledger_end=12)  # one partition committed: the other is pinned
    assert latest_planner(partly).initialize_offsets() == {("in", 1): 50} and partly.reads == 1
