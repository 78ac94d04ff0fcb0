"""A record buffer's changelog (sliding windows' records) holds its records only: the index of records by timestamp is
derived from their keys (`recovery.windows.changelogged`), not logged, and made again wherever a changelog is
replayed (`with_derived`), as a session store's is. A changelog written while the index was logged restores alike."""

from __future__ import annotations

import random

from eos import Application
from eos.serde import BytesSerde, StringSerde
from eos.testing import TopologyTestDriver
from eos.windows import SlidingWindows
from recovery import MemoryBackend, RecordBuffer, StoreSpec, WriteBuffer, changelogged
from tests.eos.test_windows import tombstones_after_records
from tests.recovery.test_session_changelog import contents
from tests.recovery.test_session_changelog import restored as restored_as

SPEC = StoreSpec("r", StringSerde(), BytesSerde(), kind="record_buffer", retention_ms=1_000, timestamped=True)


def buffer_of(backend: MemoryBackend) -> RecordBuffer:
    store = RecordBuffer(SPEC)
    store.attach(WriteBuffer(backend))
    return store


def restored(log: list[tuple[bytes, bytes | None]], chunk: int = 3) -> MemoryBackend:
    return restored_as(log, chunk, kind="record_buffer")


def written(batches: list[list[tuple[str, int, bytes | None]]], *, logged_index: bool | set[int],
            expire: dict[int, int] | None = None) -> tuple[list[tuple[bytes, bytes | None]], MemoryBackend]:
    """Records put (None removes one) in batches, each batch's expiry (`expire`: batch -> time) after them, as a task's
    buffer would: the changelog's records (with the index entries, as logged before, in every batch or in those of
    `logged_index`, or without) and the store."""
    backend = MemoryBackend()
    log: list[tuple[bytes, bytes | None]] = []
    for i, batch in enumerate(batches):
        buffer = WriteBuffer(backend)
        store = RecordBuffer(SPEC)
        store.attach(buffer)
        for key, ts, value in batch:
            if value is None:
                store.remove(key, ts, 0)
            else:
                store.put(key, ts, store.next_seq(key, ts), value)
        if expire and i in expire:
            store.expire_before(expire[i])
        changes = buffer.changes()
        logged = logged_index if isinstance(logged_index, bool) else i in logged_index
        log.extend(changes.items() if logged else changelogged("record_buffer", changes))
        backend.write(changes, None)
    return log, backend


def test_the_changelog_holds_the_records_only_and_its_replay_is_the_store():
    rng = random.Random(6)
    batches = [[(f"k{rng.randrange(7)}", rng.randrange(i * 100, i * 100 + 300), b"v%d" % j) for j in range(20)]
               for i in range(12)]
    batches[5].append(("k1", 520, None))
    log, kept = written(batches, logged_index=False, expire={4: 350, 9: 800})
    assert all(key[:1] == b"\x00" for key, _ in log)  # records only: no index entry
    assert any(value is None for _, value in log)  # the expiry's tombstones (the records' own)
    assert [k for k, _ in contents(kept) if k[:1] == b"\x01"]
    for chunk in (1, 3, 1_000):
        assert contents(restored(log, chunk)) == contents(kept)  # the index made again, entry for entry
    ours, theirs = buffer_of(restored(log)), buffer_of(kept)
    assert ours.range("k3", 0, 2_000) == theirs.range("k3", 0, 2_000) != []
    assert ours.expire_before(1_100) == theirs.expire_before(1_100) > 0


def test_a_changelog_that_logged_the_index_restores_alike():
    # two batches logged with their index entries (before the index was derived), then one without, whose expiry
    # removes the records an old index entry names
    log, kept = written([[("a", 10, b"1"), ("b", 20, b"2")], [("a", 10, b"3"), ("c", 30, b"4")], [("a", 40, b"5")]],
                        logged_index={0, 1}, expire={2: 15})
    assert any(k[:1] == b"\x01" for k, _ in log) and not any(k[:1] == b"\x01" for k, _ in log[-3:])
    for chunk in (1, 2, 100):
        backend = restored(log, chunk)
        assert contents(backend) == contents(kept)
        store = buffer_of(backend)
        assert [r[:2] for r in store.range("a", 0, 100)] == [(40, 0)]  # (both records at 10 expired)
        assert [r[:2] for r in store.range("b", 0, 100)] == [(20, 0)]


def test_a_sliding_job_s_buffer_changelog_holds_records_only_and_survives_restores():
    def make() -> Application:
        app = Application("slide", max_records_per_batch=50)
        app.count("in", "out", name="counts", windows=SlidingWindows(100, grace=50), windowed_key="binary")
        return app

    rng = random.Random(3)
    inputs = [("in", f"k{rng.randrange(6)}", b"x", 1_000 + i * 20 + rng.randrange(0, 60)) for i in range(400)]
    driver = TopologyTestDriver(make())
    driver.pipe_records(inputs)
    log = driver.cluster.records("slide-counts-records-changelog")
    assert log and all((m.key() or b"")[:1] == b"\x00" for m in log)  # records only, no index
    # a record kept past its batch (each batch spans ~1 s, the buffer's retention 251 ms) has one changelog record,
    # and its tombstone when it goes; one dropped in the batch that brought it has neither
    puts = [m.key() for m in log if m.value() is not None]
    assert 0 < len(puts) < len(inputs) and len(set(puts)) == len(puts)
    assert tombstones_after_records(log)  # (each follows its record)
    report = driver.check_exactly_once(inputs, crashes=8, seed=2, chunk=30)  # (each crash restores both stores)
    assert report.ok and report.crashes
