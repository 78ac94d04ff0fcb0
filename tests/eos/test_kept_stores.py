"""A task's RocksDB stores stay open between its batches in the process that runs it (`TaskStores.release`,
`recovery.HOLDER`), and are taken as current without asking the changelogs while the task's committed offsets
name this runtime's own last commit (`TaskRuntime.ensure_restored`). Through the test driver with its stores
in RocksDB (`state_dir`), whose in-memory cluster commits offsets and changelogs as a broker does."""

from __future__ import annotations

import struct

import pytest

import eos.worker.stores as stores_module
from eos import Application
from eos.testing import TopologyTestDriver
from eos.testing.clients import MemoryClients
from eos.worker.progress import CommitMetadata
from recovery import HOLDER, StoreError, TaskDirectory
from transactions import TopicPartition
from transactions.memory import MemoryProducer

CHANGELOG = "kept-counts-store-changelog"


def counts_app(**settings) -> Application:
    app = Application("kept", **settings)
    app.stream("in").group_by_key().count(name="counts").to_stream().to("out")
    return app


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often a RocksDB store is opened, and a task asks its changelogs for their bounds."""
    seen = {"opened": 0, "bounds": 0}
    real_backend, real_changelogs = stores_module.RocksDBBackend, MemoryClients.changelogs

    def opened(path):
        seen["opened"] += 1
        return real_backend(path)

    def changelogs(self, config):
        source = real_changelogs(self, config)
        bounds = source.bounds

        def counted(tps):
            seen["bounds"] += 1
            return bounds(tps)

        source.bounds = counted
        return source

    monkeypatch.setattr(stores_module, "RocksDBBackend", opened)
    monkeypatch.setattr(MemoryClients, "changelogs", changelogs)
    return seen


def counts_of(driver: TopologyTestDriver) -> list[tuple[str, int]]:
    return [(r.key, r.value) for r in driver.read("out")]


def test_a_task_s_rocksdb_store_is_opened_once_and_its_changelog_not_asked_again(tmp_path, calls):
    with TopologyTestDriver(counts_app(), state_dir=tmp_path) as driver:
        for n in range(4):
            driver.pipe_many("in", [("a", {}), ("b", {})])
            assert counts_of(driver) == [("a", n + 1), ("b", n + 1)]
        assert calls == {"opened": 1, "bounds": 1}  # the first batch opened and checked the store; no other did
        assert str((tmp_path / "kept" / "counts-0").resolve()) in HOLDER.keys  # open, between batches
        assert driver.store("counts-store").get("a") == 4
    assert str((tmp_path / "kept" / "counts-0").resolve()) not in HOLDER.keys  # closed with the driver's worker
    TaskDirectory(tmp_path / "kept", "counts-0").lock(timeout=0)  # and its directory unlocked


def test_a_commit_of_another_worker_is_read_before_the_task_s_next_batch(tmp_path, calls):
    with TopologyTestDriver(counts_app(), state_dir=tmp_path) as driver:
        driver.pipe_many("in", [("a", {}), ("b", {})])
        assert counts_of(driver) == [("a", 1), ("b", 1)]
        # Another worker that took the task commits a count of 10 for "a" and the task's input offset, as every
        # commit of a task does (its own producer's token in the offset's metadata).
        first = next(e for e in driver.cluster.logs[CHANGELOG][0] if not e.marker)
        other = MemoryProducer(driver.cluster, "another-worker")
        other.init()
        other.begin()
        other.produce(CHANGELOG, first._value[:8] + struct.pack(">q", 10), b"a", partition=0)
        other.send_offsets([TopicPartition("in", 0, 2, CommitMetadata(producer=other.token).encode())], "kept")
        other.commit()
        driver.pipe_many("in", [("a", {})])
        assert counts_of(driver) == [("a", 11)]  # read before the batch
        # The newer producer's commit fenced this worker's: its runtime was dropped and its store let go, then
        # opened again and brought to the changelog's end.
        assert calls == {"opened": 2, "bounds": 2}


def test_kept_stores_are_not_current_once_another_producer_committed_the_task(tmp_path, calls):
    """The check of the committed progress on its own: a committer that does not fence this worker's producer
    (made before it) commits the task; the store stays open, and is brought to the changelog's end."""
    driver = TopologyTestDriver(counts_app(), state_dir=tmp_path)
    older = MemoryProducer(driver.cluster, "another-grouping")  # its token is older than the task's producer's
    older.init()
    with driver:
        driver.pipe_many("in", [("a", {}), ("b", {})])
        first = next(e for e in driver.cluster.logs[CHANGELOG][0] if not e.marker)
        older.begin()
        older.produce(CHANGELOG, first._value[:8] + struct.pack(">q", 10), b"a", partition=0)
        older.send_offsets([TopicPartition("in", 0, 2, CommitMetadata(producer=older.token).encode())], "kept")
        older.commit()
        driver.pipe_many("in", [("a", {})])
        assert counts_of(driver) == [("a", 1), ("b", 1), ("a", 11)]
        assert calls == {"opened": 1, "bounds": 2}  # kept open, but asked: the committed offsets name another


def test_a_crashed_batch_leaves_nothing_taken_as_current(tmp_path, calls):
    with TopologyTestDriver(counts_app(), state_dir=tmp_path) as driver:
        driver.pipe_many("in", [("a", {})])
        driver.crash_at("after_commit", batch=1)  # committed, then the worker died before its stores saw it
        driver.pipe_many("in", [("a", {})])
        driver.pipe_many("in", [("a", {})])
        assert counts_of(driver) == [("a", 1), ("a", 2), ("a", 3)]
        assert driver.store("counts-store").get("a") == 3
        assert calls["opened"] == 2  # the new worker opened the store again and read what the crash left behind


def test_counts_in_kept_rocksdb_stores_stay_exactly_once_under_crashes(tmp_path):
    driver = TopologyTestDriver(counts_app(), partitions=2, state_dir=tmp_path)
    inputs = [("in", f"k{i % 7}", {"i": i}) for i in range(300)]
    report = driver.check_exactly_once(inputs, crashes=12, seed=3)
    assert report.crashes


def test_a_process_that_needs_a_kept_directory_gets_it_at_once(tmp_path):
    with TopologyTestDriver(counts_app(), state_dir=tmp_path) as driver:
        driver.pipe_many("in", [("a", {})])
        key = str((tmp_path / "kept" / "counts-0").resolve())
        assert key in HOLDER.keys
        other = TaskDirectory(tmp_path / "kept", "counts-0")
        with pytest.raises(StoreError):
            other.lock(timeout=0)  # a standby's try: nobody is asked, the store stays with its task
        assert key in HOLDER.keys
        other.lock(timeout=10)  # asks the holder (this process here), which lets the store go
        assert key not in HOLDER.keys
        other.unlock()
        driver.pipe_many("in", [("a", {})])  # the task opens its store again
        assert counts_of(driver) == [("a", 1), ("a", 2)]
