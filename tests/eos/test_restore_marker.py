"""A task's stores are not read back from their changelogs when only the marker of the task's own last commit
lies past them (`TaskStores.open`), through the test driver, whose in-memory cluster gives markers offsets
as a broker does."""

from __future__ import annotations

import struct

import pytest

import eos.worker.stores as stores_module
from eos import Application
from eos.hooks import HookPoint
from eos.testing import TopologyTestDriver
from recovery import settled_bounds
from tests.transactions.test_admin_settled_ends import Offsets
from transactions import RetriableKafkaError
from transactions.admin import settled_ends
from transactions.memory import MemoryProducer

CHANGELOG = "marker-counts-store-changelog"


def count_of(driver: TopologyTestDriver, count: int) -> bytes:
    """A count as the store's changelog holds it: the timestamp of its first record, then the long."""
    first = next(e for e in driver.cluster.logs[CHANGELOG][0] if not e.marker)
    return first._value[:8] + struct.pack(">q", count)


def counts_app(**settings) -> Application:
    app = Application("marker", **settings)
    app.stream("in").group_by_key().count(name="counts").to_stream().to("out")
    return app


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """The changelog ranges the restore step reads, [begin, end), one entry per read."""
    seen: list[tuple[int, int]] = []
    real = stores_module.restore_store

    def spy(backend, read, topic, partition, *, start_offset, end_offset, **kwargs):
        recorded = backend.changelog_offset()
        begin = recorded if recorded is not None else start_offset
        if begin < end_offset:
            seen.append((begin, end_offset))
        return real(backend, read, topic, partition, start_offset=start_offset, end_offset=end_offset, **kwargs)

    monkeypatch.setattr(stores_module, "restore_store", spy)
    return seen


def test_the_marker_of_the_task_s_own_last_commit_is_not_read(reads):
    driver = TopologyTestDriver(counts_app())
    for n in range(4):
        driver.pipe_many("in", [("a", {}), ("b", {})])
        assert [(r.key, r.value) for r in driver.read("out")] == [("a", n + 1), ("b", n + 1)]
    assert reads == []  # each batch's changelog ended with its own marker, one offset past the store
    assert driver.store("counts-store").get("a") == 4
    # the changelog really ends one offset past what the store reflects: 2 records and a marker per batch
    assert driver.cluster.last_stable(CHANGELOG, 0) == 12


def test_records_another_writer_appended_are_read(reads):
    driver = TopologyTestDriver(counts_app())
    driver.pipe_many("in", [("a", {}), ("b", {})])
    # another attempt of the task (a worker it moved to) commits a count of 10 for "a" to the changelog
    other = MemoryProducer(driver.cluster, "another-worker")
    other.init()
    other.begin()
    other.produce(CHANGELOG, count_of(driver, 10), b"a", partition=0)
    other.commit()
    driver.pipe_many("in", [("a", {})])
    assert reads == [(2, 5)]  # past the store: the task's own marker, the record, the other's marker
    assert [(r.key, r.value) for r in driver.read("out")] == [("a", 1), ("b", 1), ("a", 11)]


def test_at_least_once_changelogs_have_no_markers_and_are_read_as_before(reads):
    driver = TopologyTestDriver(counts_app(processing_guarantee="at_least_once"))
    driver.pipe_many("in", [("a", {})])
    other = MemoryProducer(driver.cluster, "another-worker", transactional=False)
    other.produce(CHANGELOG, count_of(driver, 10), b"a", partition=0)  # one record, one offset, no marker
    driver.pipe_many("in", [("a", {})])
    assert reads == [(1, 2)]
    assert [(r.key, r.value) for r in driver.read("out")] == [("a", 1), ("a", 11)]


def test_counts_stay_exactly_once_under_crashes():
    driver = TopologyTestDriver(counts_app())
    inputs = [("in", f"k{i % 7}", {"i": i}) for i in range(300)]
    driver.check_exactly_once(inputs, crashes=12, seed=5)


def test_a_store_ahead_of_its_changelog_s_last_stable_offset_waits_for_its_own_commit_s_markers(reads):
    """A broker answers a commit before it writes the transaction's markers: the next batch may find the
    changelog's last stable offset still at the start of the task's last transaction, behind the store that
    applied it. The store is not wiped (which restored the changelog up to there and lost that transaction's
    updates: a count went back); the batch waits for the markers."""
    driver = TopologyTestDriver(counts_app())
    driver.cluster.write_markers_late([CHANGELOG], lookups=3)
    for n in range(4):
        driver.pipe_many("in", [("a", {}), ("b", {})])
        assert [(r.key, r.value) for r in driver.read("out")] == [("a", n + 1), ("b", n + 1)]
    assert reads == []  # nothing read back: once the markers were written, only the task's own marker was past it


@pytest.mark.parametrize("step", [p.value for p in HookPoint])
def test_counts_with_late_markers_are_exactly_once_when_batches_are_killed(step):
    """Batches killed at every step while the changelog's markers come late: each count once, in order, against
    the counts computed here. A killed worker's stores are gone and the task restores from the changelog on a
    new producer, whose initialisation, as a broker's, completes the id's earlier transactions first."""
    driver = TopologyTestDriver(counts_app())
    driver.cluster.write_markers_late([CHANGELOG], lookups=2)
    for n in range(6):
        if n in (1, 3):
            driver.crash_at(step)
        driver.pipe_many("in", [("a", {}), ("b", {})])
    driver.cluster.write_held_markers()
    assert len(driver.crashes) == 2
    assert [(r.key, r.value) for r in driver.read("out")] == [(k, n + 1) for n in range(6) for k in ("a", "b")]


def test_a_store_ahead_of_every_record_of_its_changelog_is_wiped_and_restored_at_once(reads):
    """A changelog that holds fewer records than the store reflects (recreated, truncated) has lost what the
    store reflects: no markers are coming, so the store is wiped and restored from what the changelog holds."""
    driver = TopologyTestDriver(counts_app())
    driver.pipe_many("in", [("a", {}), ("b", {})])
    driver.cluster.logs[CHANGELOG][0].clear()  # the changelog recreated empty
    driver.pipe_many("in", [("a", {})])
    assert [(r.key, r.value) for r in driver.read("out")] == [("a", 1), ("b", 1), ("a", 1)]


class _Changelog(Offsets):
    """A changelog partition whose last stable offset moves as a broker writes markers (`Offsets`: one of
    `stable` a look-up), as a task's changelog source reads it."""

    def bounds(self, partitions):
        return {tp: (0, end) for tp, end in self.end_offsets(partitions).items()}

    def written_ends(self, partitions):
        return self.end_offsets(partitions, committed=False)

    def settled_ends(self, at_least, within):
        return settled_ends(self, list(at_least), at_least=at_least, within=within)

    def read(self, ranges, timeout):
        return iter(())


def test_settled_bounds_wait_for_the_markers_and_give_up_retriably():
    tp = ("c", 0)
    source = _Changelog(written=106, stable=[40, 40, 106])
    assert settled_bounds(source, tp, 105, (0, 40), timeout=5) == (0, 106)
    assert source.reads == 3
    assert settled_bounds(_Changelog(written=50, stable=[40]), tp, 105, (0, 40), timeout=5) == (0, 40)  # records gone
    assert settled_bounds(_Changelog(written=0, stable=[]), tp, 30, (0, 40), timeout=5) == (0, 40)  # not ahead
    with pytest.raises(RetriableKafkaError, match="markers of a committed transaction are not written yet"):
        settled_bounds(_Changelog(written=106, stable=[40]), tp, 105, (0, 40), timeout=0.05)
