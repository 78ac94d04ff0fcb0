"""A session store's changelog holds its sessions only: the index of sessions by end time is derived from their keys
(`recovery.windows.changelogged`), not logged, and made again wherever a changelog is replayed (a restore, a
standby, an interactive query: `with_derived`). A changelog written while the index was logged restores alike."""

from __future__ import annotations

import random
from typing import Any

from eos import Application
from eos.serde import LongSerde, StringSerde
from eos.testing import TopologyTestDriver
from eos.windows import SessionWindows
from recovery import MemoryBackend, SessionStore, StoreSpec, WriteBuffer, changelogged, restore_store, with_derived
from tests.eos.test_folded_sessions import surviving
from transactions import OffsetRange
from transactions.memory import MemoryMessage

SPEC = StoreSpec("s", StringSerde(), LongSerde(), kind="session", retention_ms=1_000, timestamped=True)


def sessions_of(backend: MemoryBackend) -> SessionStore:
    store = SessionStore(SPEC)
    store.attach(WriteBuffer(backend))
    return store


def restored(log: list[tuple[bytes, bytes | None]], chunk: int = 3, kind: str = "session") -> MemoryBackend:
    """`log` (a changelog's records, in offset order) replayed into a fresh store of `kind`, `chunk` records a
    read."""
    messages = [MemoryMessage("changelog", 0, i, k, v, None, 0) for i, (k, v) in enumerate(log)]

    def read(ranges: list[OffsetRange], timeout: float) -> Any:
        (r,) = ranges
        wanted = messages[r.start:r.end]
        return [wanted[i:i + chunk] for i in range(0, len(wanted), chunk)]

    backend = MemoryBackend()
    restore_store(backend, read, "changelog", 0, start_offset=0, end_offset=len(log), kind=kind)
    return backend


def written(writes: list[tuple[str, int, int, int | None]], *, logged_index: bool) -> tuple[
        list[tuple[bytes, bytes | None]], MemoryBackend]:
    """Sessions written (None removes) in batches of two, as a task's store would: the changelog's records (with
    the index entries as they were logged before, or without them) and the store the task was left with."""
    backend = MemoryBackend()
    log: list[tuple[bytes, bytes | None]] = []
    for i in range(0, len(writes), 2):
        buffer = WriteBuffer(backend)
        store = SessionStore(SPEC)
        store.attach(buffer)
        for key, start, end, value in writes[i:i + 2]:
            store.put(key, start, end, value, timestamp=end)
        changes = buffer.changes()
        log.extend(changes.items() if logged_index else changelogged("session", changes))
        backend.write(changes, None)
    return log, backend


def contents(backend: MemoryBackend) -> list[tuple[bytes, bytes]]:
    return list(backend.iterate())


def test_the_changelog_holds_one_record_per_session_written_and_its_replay_is_the_store():
    rng = random.Random(4)
    writes: list[tuple[str, int, int, int | None]] = []
    for i in range(200):
        key, start = f"k{rng.randrange(9)}", rng.randrange(0, 900)
        writes.append((key, start, start + rng.randrange(0, 50), None if rng.random() < 0.3 else i))
    log, kept = written(writes, logged_index=False)
    assert len(log) == len(writes) - sum(writes[i][:3] == writes[i + 1][:3] for i in range(0, len(writes), 2))
    assert all(key[:1] == b"\x00" for key, _ in log)  # sessions only: no index entry
    index = [k for k, _ in contents(kept) if k[:1] == b"\x01"]
    assert index and contents(restored(log)) == contents(kept)  # the index made again, entry for entry
    for chunk in (1, 7, 1_000):
        assert contents(restored(log, chunk)) == contents(kept)
    # and the store restored finds what the task's finds: sessions by key, and by end for expiry
    ours, theirs = sessions_of(restored(log)), sessions_of(kept)
    assert list(ours.ending_before(600)) == list(theirs.ending_before(600)) != []
    assert ours.expire_before(600) == theirs.expire_before(600) > 0


def test_a_changelog_that_logged_the_index_restores_alike_and_its_session_decides_where_they_disagree():
    before, _ = written([("a", 0, 10, 1), ("b", 5, 20, 2), ("a", 30, 40, 3), ("c", 1, 2, 4)], logged_index=True)
    assert any(k[:1] == b"\x01" for k, _ in before)  # (as a changelog written before the index was derived)
    # after the upgrade: sessions only, one of them removing a session whose index entry was logged
    after, _ = written([("a", 0, 10, None), ("b", 5, 25, 5), ("b", 5, 20, None), ("d", 3, 3, 6)],
                                logged_index=False)
    for chunk in (1, 2, 100):  # (an old index entry and the session's new record in one read, or apart)
        backend = restored(before + after, chunk)
        store = sessions_of(backend)
        assert [(s.key, s.start, s.end, s.value) for s in store.fetch_all()] == [
            ("c", 1, 2, 4), ("d", 3, 3, 6), ("b", 5, 25, 5), ("a", 30, 40, 3)]  # (by end)
        index = {k for k, _ in contents(backend) if k[:1] == b"\x01"}
        assert len(index) == 4  # none left of the sessions removed after the upgrade


def test_expiry_drops_an_index_entry_whose_session_is_gone():
    backend = MemoryBackend()
    backend.write(with_derived("session", dict(written([("a", 0, 10, 1)], logged_index=False)[0])), None)
    stale = with_derived("session", {k: None for k, _ in contents(backend)})  # the session's removal ...
    backend.write({k: v for k, v in stale.items() if k[:1] == b"\x00"}, None)  # ... applied without its index
    assert [k[:1] for k, _ in contents(backend)] == [b"\x01"]
    store = sessions_of(backend)
    assert store.expire_before(100) == 0 and not list(store.fetch_all())
    backend.write(store._buf().changes(), None)
    assert contents(backend) == []


def test_a_session_job_s_changelog_holds_sessions_only_and_queries_find_them_by_end():
    def make() -> Application:
        app = Application("sess", max_records_per_batch=50)
        (app.stream("in", value_serde="bytes").group_by_key().window(SessionWindows(100, grace=50))
            .count(name="counts").to_stream().to("out"))
        return app

    rng = random.Random(3)
    inputs = [(f"k{rng.randrange(6)}".encode(), b"x", 1_000 + i * 20 + rng.randrange(0, 60)) for i in range(400)]
    driver = TopologyTestDriver(make())
    driver.pipe_many("in", inputs, serialized=True)
    log = driver.cluster.records("sess-counts-store-changelog")
    assert log and all((m.key() or b"")[:1] == b"\x00" for m in log)
    alive = surviving((r.key.key, r.key.start, r.key.end, r.value) for r in driver.read("out"))
    view = driver.store("counts-store").view
    held = {(s.key, s.start, s.end): s.value for s in view.fetch_all()}  # (by end time: through the index)
    assert held and held == {w: n for w, n in alive.items() if w in held}
    # every session within its retention (gap and grace, 151 ms) of stream time is held; older ones expired in steps
    recent = {w for w in alive if w[2] >= max(ts for *_, ts in inputs) - 151}
    assert recent and recent <= set(held) and len(held) < len(alive)
