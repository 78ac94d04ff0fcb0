"""A task's stores are not read back from their changelogs when only the marker of the task's own last commit
lies past them (`TaskStores.open`), through the test driver, whose in-memory cluster gives markers offsets
as a broker does."""

from __future__ import annotations

import struct

import pytest

import eos.worker.stores as stores_module
from eos import Application
from eos.testing import TopologyTestDriver
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
