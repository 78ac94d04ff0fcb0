"""The late cut-off of a streamed batch (`BatchAttempt.extend_to_stable_end`): records that arrive between the
planning of a batch and its task's read go in that batch, up to `max_records_per_batch` from its start; the
batch commits the end it read to, its ledger entry says so, and a batch killed after it read further is done
again exactly once. A streamed batch whose task has its transaction to itself asks once more when its read
reaches that end (the top-up), with the ledger's partition and its consumer group put in its transaction first.
Records "arrive" here when the task asks for the partition's last stable offset."""

from __future__ import annotations

import itertools
import sys
from collections import Counter

import pytest

from eos import Application
from eos.ledger import LedgerEntry, ledger_topic
from eos.testing import TopologyTestDriver
from eos.testing.clients import MemoryClients
from transactions import RetriableKafkaError
from transactions.memory import MemoryProducer


def doubling_app(**settings) -> Application:
    app = Application("late", **settings)

    @app.process(input="in", output="out", key_serde="string", value_serde="json")
    def double(record):
        return record.key, record.value * 2

    return app


def arriving(monkeypatch, driver: TopologyTestDriver, waves: list[list[int]]) -> None:
    """Each time a task looks up the last stable offset, the next wave of values is written first."""
    original = MemoryClients.stable_ends

    def stable_ends(self, config, partitions, timeout):
        if waves:
            wave = waves.pop(0)
            driver.pipe_records([("in", f"k{v}", v, None, p) for _, p in partitions for v in wave], process=False)
        return original(self, config, partitions, timeout)

    monkeypatch.setattr(MemoryClients, "stable_ends", stable_ends)


def assigned(driver: TopologyTestDriver) -> list:
    """What the worker's consumers are still assigned (nothing, between batches)."""
    return [tp for c in driver.worker.clients._consumers.values() for tp in c.assignment()]


def test_records_that_arrive_after_the_plan_go_in_its_batch(monkeypatch):
    driver = TopologyTestDriver(doubling_app(), partitions=1)
    arriving(monkeypatch, driver, [[3, 4, 5]])
    driver.pipe_many("in", [("k1", 1), ("k2", 2)])
    assert [r.value for r in driver.read("out")] == [2, 4, 6, 8, 10]
    (result,) = driver.results
    assert result.records_in == 5 and result.extended == 3 and result.committed_offsets == {("in", 0): 5}
    (entry,) = driver.ledger()
    assert [(i.start, i.end) for i in entry.inputs] == [(0, 5)]


def test_a_batch_reads_no_further_than_max_records_per_batch_from_its_start(monkeypatch):
    driver = TopologyTestDriver(doubling_app(max_records_per_batch=4), partitions=1)
    arriving(monkeypatch, driver, [[3, 4, 5, 6]])
    driver.pipe_many("in", [("k1", 1), ("k2", 2)])
    first, second = driver.results
    assert (first.records_in, first.extended, first.committed_offsets) == (4, 2, {("in", 0): 4})
    assert second.records_in == 2 and second.extended == 0  # planned capped at the rest: nothing to extend
    assert [r.value for r in driver.read("out")] == [2, 4, 6, 8, 10, 12]


def test_a_first_batch_capped_small_stays_small(monkeypatch):
    # A run's first batch is capped by first_batch_max_records, below max_records_per_batch: it is behind, and
    # reads no further than planned (its outputs come sooner for being small)
    driver = TopologyTestDriver(doubling_app(max_records_per_batch=100, first_batch_max_records=2), partitions=1)
    driver.planner._first_plan = True  # (the driver's start-up already planned once, with no input yet)
    arriving(monkeypatch, driver, [[4]])
    driver.pipe_records([("in", f"k{v}", v) for v in (1, 2, 3)], process=False)
    driver.run_batch()
    (result,) = driver.results
    assert result.records_in == 2 and result.extended == 0 and result.committed_offsets == {("in", 0): 2}


def test_a_failed_lookup_leaves_the_planned_end(monkeypatch):
    def failing(self, config, partitions, timeout):
        raise RetriableKafkaError("list_offsets timed out")

    monkeypatch.setattr(MemoryClients, "stable_ends", failing)
    driver = TopologyTestDriver(doubling_app(), partitions=1)
    driver.pipe_many("in", [("k1", 1), ("k2", 2)])
    (result,) = driver.results
    assert result.records_in == 2 and result.extended == 0 and result.committed_offsets == {("in", 0): 2}


@pytest.mark.parametrize("step", ["after_read", "after_produce", "before_commit"])
def test_a_batch_killed_after_it_read_past_its_plan_is_done_again_exactly_once(monkeypatch, step):
    driver = TopologyTestDriver(doubling_app(), partitions=1)
    arriving(monkeypatch, driver, [[3, 4], [5], [6, 7]])
    driver.crash_at(step, batch=0)
    driver.pipe_many("in", [("k1", 1), ("k2", 2)])
    driver.pipe_many("in", [("k8", 8)])
    values = [r.value for r in driver.read("out")]
    assert Counter(values) == Counter(v * 2 for v in range(1, 9))  # each once
    entries = driver.ledger()
    covered = [(i.start, i.end) for e in entries for i in e.inputs]
    assert covered == sorted(covered) and all(a[1] == b[0] for a, b in itertools.pairwise(covered))
    assert covered[0][0] == 0 and covered[-1][1] == 8


def test_a_vectorized_step_and_an_unstreamed_batch_read_to_the_stable_end_too(monkeypatch):
    vectorized = Application("late-vectorized")

    @vectorized.process_batch(input="in", output="out", key_serde="string", value_serde="json", name="twice")
    def twice(frame):
        return frame.assign(value=frame.value.map(lambda v: v * 2))

    for app in (vectorized, doubling_app(batch_slice_records=0)):
        driver = TopologyTestDriver(app, partitions=1)
        arriving(monkeypatch, driver, [[3]])
        driver.pipe_many("in", [("k1", 1), ("k2", 2)])
        (result,) = driver.results
        assert result.extended == 1 and result.committed_offsets == {("in", 0): 3}
        assert [r.value for r in driver.read("out")] == [2, 4, 6]


# ---------------------------------------------------------------------------------------------- the top-up
# A streamed batch whose read reached the end it was cut off at reads on to the stable end once more before it
# commits (`BatchAttempt._top_up`): the second look-up of a batch is its top-up's.

def test_records_that_arrive_while_the_batch_is_processed_go_in_it_too(monkeypatch):
    driver = TopologyTestDriver(doubling_app(), partitions=1)
    arriving(monkeypatch, driver, [[3], [4, 5]])  # at the cut-off, then at the top-up
    driver.pipe_many("in", [("k1", 1), ("k2", 2)])
    assert [r.value for r in driver.read("out")] == [2, 4, 6, 8, 10]
    (result,) = driver.results  # one batch
    assert (result.records_in, result.extended, result.topped_up) == (5, 3, 2)
    assert result.committed_offsets == {("in", 0): 5}
    (entry,) = driver.ledger()
    assert [(i.start, i.end) for i in entry.inputs] == [(0, 5)]
    assert assigned(driver) == []


def test_a_top_up_reads_once_and_no_further_than_max_records_per_batch(monkeypatch):
    driver = TopologyTestDriver(doubling_app(max_records_per_batch=5), partitions=1)
    arriving(monkeypatch, driver, [[3], [4, 5, 6], [7]])
    driver.pipe_many("in", [("k1", 1), ("k2", 2)])
    first, second = driver.results
    assert (first.records_in, first.extended, first.topped_up, first.committed_offsets) == (5, 3, 2, {("in", 0): 5})
    # the next batch reads the rest (6, planned, and 7, which arrived at its cut-off) and tops up with nothing
    assert (second.records_in, second.topped_up, second.committed_offsets) == (2, 0, {("in", 0): 7})
    assert [r.value for r in driver.read("out")] == [2, 4, 6, 8, 10, 12, 14]


def test_a_failed_top_up_look_up_ends_the_batch_at_its_cut_off(monkeypatch):
    driver = TopologyTestDriver(doubling_app(), partitions=1)
    original, calls = MemoryClients.stable_ends, []

    def second_fails(self, config, partitions, timeout):
        calls.append(partitions)
        if len(calls) == 2:
            driver.pipe_records([("in", "k9", 9)], process=False)  # (arrived, but the look-up fails)
            raise RetriableKafkaError("list_offsets timed out")
        return original(self, config, partitions, timeout)

    monkeypatch.setattr(MemoryClients, "stable_ends", second_fails)
    driver.pipe_many("in", [("k1", 1), ("k2", 2)])
    first, second = driver.results
    assert (first.records_in, first.topped_up, first.committed_offsets) == (2, 0, {("in", 0): 2})
    assert second.records_in == 1 and [r.value for r in driver.read("out")] == [2, 4, 18]
    assert assigned(driver) == []  # (the top-up's consumer started fetching before the look-up failed)


def test_tasks_sharing_a_transaction_do_not_top_up(monkeypatch):
    # (a unit's tasks would each wait for a look-up in turn, with the unit's transaction open)
    driver = TopologyTestDriver(doubling_app(tasks_per_transaction=2), partitions=2)
    lookups = []
    original = MemoryClients.stable_ends

    def counted(self, config, partitions, timeout):
        lookups.append(sorted(partitions))
        return original(self, config, partitions, timeout)

    monkeypatch.setattr(MemoryClients, "stable_ends", counted)
    driver.pipe_records([("in", f"k{v}", v, None, v % 2) for v in range(1, 7)])
    assert lookups == [[("in", 0), ("in", 1)]]  # the unit's one late cut-off, no top-up
    assert all(r.topped_up == 0 for r in driver.results)
    assert sorted(r.value for r in driver.read("out")) == [2, 4, 6, 8, 10, 12]


def watched(monkeypatch, driver: TopologyTestDriver, waves: list[list[int]]) -> list[tuple]:
    """As `arriving`; also notes each look-up (with the records then in the open transaction, not visible yet:
    outputs, ledger records), each flush and each set of offsets sent into a transaction."""
    events: list[tuple] = []
    lookup, flush, send_offsets = MemoryClients.stable_ends, MemoryProducer.flush, MemoryProducer.send_offsets

    def pending(topic: str) -> int:
        return sum(e.txn is not None and not e.marker and not driver.cluster.visible(e)
                   for log in driver.cluster.logs.get(topic, []) for e in log)

    def stable_ends(self, config, partitions, timeout):
        events.append(("look-up", pending("out"), pending(ledger_topic(driver.config.application_id))))
        if waves:
            driver.pipe_records([("in", f"k{v}", v, None, 0) for v in waves.pop(0)], process=False)
        return lookup(self, config, partitions, timeout)

    def flushed(self, timeout=30.0):
        events.append(("flush",))
        return flush(self, timeout)

    def sent(self, offsets, group_metadata, timeout=30.0):
        events.append(("offsets", {(tp.topic, tp.partition): tp.offset for tp in offsets}))
        return send_offsets(self, offsets, group_metadata, timeout)

    monkeypatch.setattr(MemoryClients, "stable_ends", stable_ends)
    monkeypatch.setattr(MemoryProducer, "flush", flushed)
    monkeypatch.setattr(MemoryProducer, "send_offsets", sent)
    return events


def test_a_batch_sends_what_it_gathered_and_joins_the_ledger_and_its_group_before_its_top_up_looks_up(
        monkeypatch):
    # so that its commit waits only for what the top-up read: librdkafka sends a produce request per partition,
    # and a partition's first in a transaction waits for the broker's check against the transaction; the
    # ledger's partition and the group would each cost the commit a round trip to the coordinator
    driver = TopologyTestDriver(doubling_app(), partitions=1)
    events = watched(monkeypatch, driver, [[3], [4, 5]])
    driver.pipe_many("in", [("k1", 1), ("k2", 2)])
    assert events == [("look-up", 0, 0),  # the cut-off's
                      ("offsets", {("in", 0): 0}),  # the group joins with the offset committed before
                      ("flush",),
                      ("look-up", 3, 1),  # the top-up's: the outputs so far and the ledger's opening are in
                      ("offsets", {("in", 0): 5})]  # the commit's
    assert [r.value for r in driver.read("out")] == [2, 4, 6, 8, 10]
    (result,) = driver.results
    assert (result.records_in, result.topped_up, result.committed_offsets) == (5, 2, {("in", 0): 5})
    assert driver.cluster.groups[driver.config.group_id][("in", 0)][0] == 5  # the commit's offsets won
    assert len(driver.cluster.records(ledger_topic("late"))) == 2  # the opening, then the entry
    (entry,) = driver.ledger()  # (the opening is no entry)
    assert [(i.start, i.end) for i in entry.inputs] == [(0, 5)]


@pytest.mark.parametrize("lineage", [True, False])
def test_a_batch_that_gathered_nothing_flushes_only_the_ledgers_opening_before_its_top_up(monkeypatch, lineage):
    app = Application("late", lineage=lineage)

    @app.process(input="in", output="out", key_serde="string", value_serde="json")
    def odd_only(record):
        return (record.key, record.value) if record.value % 2 else None

    driver = TopologyTestDriver(app, partitions=1)
    events = watched(monkeypatch, driver, [[4], [5, 6]])
    driver.pipe_many("in", [("k2", 2)])
    assert events == [("look-up", 0, 0), ("offsets", {("in", 0): 0}), *([("flush",)] if lineage else []),
                      ("look-up", 0, int(lineage)), ("offsets", {("in", 0): 4})]
    assert [r.value for r in driver.read("out")] == [5]
    assert driver.results[0].topped_up == 2


def test_a_top_up_that_finds_nothing_leaves_its_consumer_unassigned(monkeypatch):
    driver = TopologyTestDriver(doubling_app(), partitions=1)
    events = watched(monkeypatch, driver, [[3]])  # at the cut-off; nothing arrives by the top-up
    driver.pipe_many("in", [("k1", 1), ("k2", 2)])
    assert events == [("look-up", 0, 0), ("offsets", {("in", 0): 0}), ("flush",), ("look-up", 3, 1),
                      ("offsets", {("in", 0): 3})]
    (result,) = driver.results
    assert (result.records_in, result.extended, result.topped_up) == (3, 1, 0)
    assert assigned(driver) == []


def test_at_least_once_tops_up_with_no_early_offsets_and_no_opening(monkeypatch):
    # (no transaction to join: its offsets are committed after the outputs are delivered, once)
    driver = TopologyTestDriver(doubling_app(processing_guarantee="at_least_once"), partitions=1)
    events = watched(monkeypatch, driver, [[3], [4, 5]])
    driver.pipe_many("in", [("k1", 1), ("k2", 2)])
    assert [e for e in events if e[0] == "offsets"] == [("offsets", {("in", 0): 5})]
    assert driver.results[0].topped_up == 2 and len(driver.ledger()) == 1
    assert all(LedgerEntry.decode(r.value()) for r in driver.cluster.records(ledger_topic("late")))


def test_a_transaction_open_too_long_commits_without_a_top_up(monkeypatch):
    # (the batch may keep its transaction open no longer than the transaction timeout allows)
    from eos.worker.attempt import BatchAttempt
    monkeypatch.setattr(BatchAttempt, "_open_budget", lambda self: 0.0)
    driver = TopologyTestDriver(doubling_app(), partitions=1)
    events = watched(monkeypatch, driver, [[3], [4, 5]])
    driver.pipe_many("in", [("k1", 1), ("k2", 2)])
    assert events == [("look-up", 0, 0), ("offsets", {("in", 0): 3})]  # the cut-off's, then the commit's
    (result,) = driver.results
    assert (result.records_in, result.topped_up, result.committed_offsets) == (3, 0, {("in", 0): 3})
    assert [r.value for r in driver.read("out")] == [2, 4, 6]


@pytest.mark.parametrize("step", ["after_slice", "before_top_up", "after_read", "after_produce", "before_commit"])
def test_a_batch_killed_after_its_top_up_is_done_again_exactly_once(monkeypatch, step):
    driver = TopologyTestDriver(doubling_app(), partitions=1)
    arriving(monkeypatch, driver, [[3], [4, 5], [6], [7, 8], [9]])
    driver.crash_at(step, batch=0)
    driver.pipe_many("in", [("k1", 1), ("k2", 2)])
    driver.pipe_many("in", [("k10", 10)])
    values = [r.value for r in driver.read("out")]
    assert [c.step for c, _ in driver.crashes] == [step]
    assert Counter(values) == Counter(v * 2 for v in range(1, 11))  # each once
    assert any(r.topped_up for r in driver.results)  # (the batches that committed read on)
    entries = driver.ledger()
    covered = [(i.start, i.end) for e in entries for i in e.inputs]
    assert covered == sorted(covered) and all(a[1] == b[0] for a, b in itertools.pairwise(covered))
    assert covered[0][0] == 0 and covered[-1][1] == 10


@pytest.mark.parametrize("step", ["after_slice", "before_top_up", "after_read", "after_produce", "before_commit"])
def test_a_count_that_topped_up_is_exact_after_a_kill(monkeypatch, step):
    # a stateful task: what the top-up read is folded into its store and changelog with the rest, and a batch
    # killed after it starts again from the committed store
    app = Application("late-count")
    app.count("in", "out", name="counts", key_serde="string", value_serde="json")
    driver = TopologyTestDriver(app, partitions=1)
    written: list[str] = []

    def write(values: list[int]) -> None:
        keys = [f"k{v % 3}" for v in values]
        written.extend(keys)
        driver.pipe_records([("in", key, v, None, 0) for key, v in zip(keys, values, strict=True)], process=False)

    waves = [[3], [4, 5], [6], [7, 8], [9], [10, 11]]
    original = MemoryClients.stable_ends

    def stable_ends(self, config, partitions, timeout):
        if waves:
            write(waves.pop(0))
        return original(self, config, partitions, timeout)

    monkeypatch.setattr(MemoryClients, "stable_ends", stable_ends)
    driver.crash_at(step, batch=0)
    write([1, 2])
    driver.pipe_records([], process=True)
    write([12])
    driver.pipe_records([], process=True)
    updates = driver.read("out")
    assert [c.step for c, _ in driver.crashes] == [step]
    assert len(updates) == len(written) > 8  # one update per record, each once
    assert {r.key: r.value for r in updates} == Counter(written)
    assert any(r.topped_up for r in driver.results)
    assert dict(driver.store("counts-store").all()) == Counter(written)


def cadenced(monkeypatch, driver: TopologyTestDriver, events: list[tuple]) -> None:
    """The driver's planner keeps its tasks' cadence as a job's does (a test driver's plans leave it out), and
    each wait for it is noted in `events`, in place of sleeping. (`time.sleep` is the process's: any other sleep,
    a retry's on a loaded machine, sleeps as it would, unnoted.)"""
    import eos.worker.attempt as attempt

    monkeypatch.setattr(driver.planner, "_timed", True)
    sleep = attempt.time.sleep

    def noted(seconds: float) -> None:
        if sys._getframe(1).f_code is attempt.BatchAttempt._keep_cadence.__code__:
            events.append(("wait", round(seconds, 2)))
        else:
            sleep(seconds)
    monkeypatch.setattr(attempt.time, "sleep", noted)


def test_a_top_up_waits_for_its_tasks_cadence_then_looks_up(monkeypatch):
    # A record waits for its commit from its arrival to its task's next top-up: a top-up that came early
    # (its Spark task dispatched sooner than the last) would shorten one interval and lengthen the next.
    from eos.driver.planner import CADENCE_SLACK
    from eos.worker.attempt import CADENCE_WAIT_SHARE

    driver = TopologyTestDriver(doubling_app(trigger_interval=0.2), partitions=1)
    events = watched(monkeypatch, driver, [[3], [4], [6], [7]])
    cadenced(monkeypatch, driver, events)
    driver.pipe_many("in", [("k1", 1), ("k2", 2)])  # batch 0: tops up, with no earlier top-up to keep up with
    first = driver.results[0]
    assert first.topped_up_at and first.cadence_wait_ms == 0
    assert events == [("look-up", 0, 0), ("offsets", {("in", 0): 0}), ("flush",), ("look-up", 3, 1),
                      ("offsets", {("in", 0): 4})]
    events.clear()
    driver.pipe_many("in", [("k5", 5)])  # batch 1: comes at once in a test, so its top-up waits out its share
    second = driver.results[-1]
    [(_, waited)] = [e for e in events if e[0] == "wait"]
    due = first.topped_up_at + 0.2 * (1 - CADENCE_SLACK) - second.topped_up_at
    assert waited == round(CADENCE_WAIT_SHARE * 0.2, 2) < due  # (at most its share of the interval)
    # sent what it had, joined the ledger and the group, waited, looked up, committed
    assert [e[0] for e in events] == ["look-up", "offsets", "flush", "wait", "look-up", "offsets"]
    assert second.cadence_wait_ms == pytest.approx(waited * 1000, abs=10)
    assert sorted(r.value for r in driver.read("out")) == [2, 4, 6, 8, 10, 12, 14]


def test_a_top_up_after_its_due_time_or_after_a_batch_without_one_does_not_wait(monkeypatch):
    driver = TopologyTestDriver(doubling_app(trigger_interval=0.2, max_records_per_batch=3), partitions=1)
    events = watched(monkeypatch, driver, [])
    cadenced(monkeypatch, driver, events)
    for first in (1, 5):  # each time a capped batch (no top-up), then one that tops up
        driver.pipe_many("in", [(f"k{v}", v) for v in range(first, first + 4)])
    assert [r.topped_up_at > 0 for r in driver.results] == [False, True, False, True]
    assert not [e for e in events if e[0] == "wait"]  # the batch before each did not top up: nothing to keep up
    task = driver.results[-1].task
    driver.planner._top_ups[task] -= 10.0  # its last top-up long ago: this one is late already
    driver.pipe_many("in", [("k9", 9)])
    assert driver.results[-1].topped_up_at and driver.results[-1].cadence_wait_ms == 0
    assert not [e for e in events if e[0] == "wait"]
    assert sorted(r.value for r in driver.read("out")) == [2 * v for v in range(1, 10)]


def test_a_test_drivers_plans_keep_no_cadence(monkeypatch):
    # (it runs no clock: a test's batches come one after the other, and none waits)
    driver = TopologyTestDriver(doubling_app(trigger_interval=0.2), partitions=1)
    watched(monkeypatch, driver, [[3], [4], [6], [7]])
    driver.pipe_many("in", [("k1", 1), ("k2", 2)])
    driver.pipe_many("in", [("k5", 5)])
    assert all(r.topped_up_at for r in driver.results) and not any(r.cadence_wait_ms for r in driver.results)
