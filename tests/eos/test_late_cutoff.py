"""The late cut-off of a streamed batch (`BatchAttempt.extend_to_stable_end`): records that arrive between the
planning of a batch and its task's read go in that batch, up to `max_records_per_batch` from its start; the
batch commits the end it read to, its ledger entry says so, and a batch killed after it read further is done
again exactly once. Records "arrive" here when the task asks for the partition's last stable offset."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from eos import Application
from eos.testing import TopologyTestDriver
from eos.testing.clients import MemoryClients
from transactions import RetriableKafkaError


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
