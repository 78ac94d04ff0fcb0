from __future__ import annotations

import pytest

from eos.serde import JsonSerde, LongSerde, StringSerde
from recovery import KeyValueStore, MemoryBackend, RocksDBBackend, StoreError, StoreSpec, WriteBuffer


@pytest.fixture(params=["memory", "rocksdb"])
def backend(request, tmp_path):
    b = MemoryBackend() if request.param == "memory" else RocksDBBackend(tmp_path / "store")
    yield b
    b.close()


def test_record_scope_rollback_and_commit(backend):
    buf = WriteBuffer(backend)
    buf.begin_record()
    buf.put(b"a", b"1")
    assert buf.get(b"a") == b"1"  # visible to the record itself
    buf.rollback_record()
    assert buf.get(b"a") is None
    buf.begin_record()
    buf.put(b"a", b"2")
    buf.commit_record()
    assert buf.changes() == {b"a": b"2"}
    assert backend.get(b"a") is None  # nothing on disk before the batch commits (I3)


def test_atomic_write_with_offset_and_tombstones(backend):
    backend.write({b"a": b"1", b"b": b"2"}, changelog_offset=10)
    backend.write({b"a": None}, changelog_offset=12)
    assert backend.get(b"a") is None and backend.get(b"b") == b"2"
    assert backend.changelog_offset() == 12
    backend.write({b"c": b"3"}, changelog_offset=None)  # offset unchanged
    assert backend.changelog_offset() == 12


def test_deletes_of_keys_the_backend_does_not_hold_are_dropped_at_the_batch_end(backend):
    """A key written and deleted within a batch, or deleted where it never was, leaves nothing to write: no
    tombstone for the changelog, no delete for the backend. A delete of what the backend holds stays."""
    backend.write({b"old": b"1", b"other": b"2"}, None)
    buf = WriteBuffer(backend)
    assert list(buf.iterate()) == [(b"old", b"1"), (b"other", b"2")]  # (a scan before: its index is rebuilt after)
    buf.put(b"new", b"n")
    buf.put(b"new", None)
    buf.put(b"old", None)
    buf.put(b"never", None)
    buf.put(b"kept", b"k")
    assert buf.drop_idle_deletes() == 2
    assert buf.changes() == {b"old": None, b"kept": b"k"}
    assert list(buf.iterate()) == [(b"kept", b"k"), (b"other", b"2")]
    buf.put(b"later", b"l")  # (written after: scans still see it)
    assert list(buf.iterate(b"l")) == [(b"later", b"l"), (b"other", b"2")]
    backend.write(buf.changes(), None)
    assert list(backend.iterate()) == [(b"kept", b"k"), (b"later", b"l"), (b"other", b"2")]


def test_merged_scans_see_overlay_and_hide_deletes(backend):
    backend.write({b"a": b"1", b"b": b"2", b"d": b"4"}, None)
    buf = WriteBuffer(backend)
    buf.put(b"b", None)
    buf.put(b"c", b"3")
    buf.begin_record()
    buf.put(b"a", b"10")
    assert list(buf.iterate()) == [(b"a", b"10"), (b"c", b"3"), (b"d", b"4")]
    assert list(buf.iterate(b"b", b"d")) == [(b"c", b"3")]


def test_a_scan_ends_before_its_bound_among_deleted_keys_and_the_metadata(backend):
    """The backend's own range scans (RocksDB's with an upper bound: it stops there instead of stepping over
    deleted keys beyond): [start, end), none deleted, none of the store's metadata, the bound excluded."""
    keys = [b"k%03d" % i for i in range(200)]
    backend.write(dict.fromkeys(keys, b"v"), changelog_offset=5)
    backend.write({k: None for k in keys if int(k[1:]) % 3}, changelog_offset=6)
    live = [k for k in keys if int(k[1:]) % 3 == 0]
    assert [k for k, _ in backend.iterate()] == live
    assert [k for k, _ in backend.iterate(b"k010", b"k100")] == [k for k in live if b"k010" <= k < b"k100"]
    assert [k for k, _ in backend.iterate(None, b"k009")] == [b"k000", b"k003", b"k006"]
    assert [k for k, _ in backend.iterate(b"k197")] == [b"k198"] and list(backend.iterate(b"k050", b"k050")) == []
    assert [k for k, _ in backend.iterate(b"k", b"k\xff")] == live


def test_typed_view_range_prefix_and_outside_batch(backend):
    spec = StoreSpec("s", StringSerde(), JsonSerde())
    view = KeyValueStore(spec)
    with pytest.raises(StoreError, match="only available while a batch"):
        view.get("x")
    view.attach(WriteBuffer(backend))
    for k in ("user:1", "user:2", "user:10", "order:1"):
        view.put(k, {"k": k})
    assert [k for k, _ in view.prefix_scan("user:")] == ["user:1", "user:10", "user:2"]  # bytewise order
    assert [k for k, _ in view.range("order:", "user:1")] == ["order:1"]
    assert view.delete("order:1") == {"k": "order:1"} and view.get("order:1") is None
    assert view.put_if_absent("user:1", {"k": "new"}) == {"k": "user:1"}


def test_store_survives_reopen_with_its_offset(tmp_path):
    path = tmp_path / "db"
    b = RocksDBBackend(path)
    b.write({b"k": LongSerde().serialize(5)}, changelog_offset=42)
    b.close()
    b = RocksDBBackend(path)  # the LOCK was released by close
    assert b.changelog_offset() == 42 and LongSerde().deserialize(b.get(b"k")) == 5
    b.write({b"k": LongSerde().serialize(6)}, changelog_offset=None)  # (an offset not delivered: the old stays)
    assert b.changelog_offset() == 42
    b.write({}, changelog_offset=43)
    assert b.changelog_offset() == 43
    b.close()
    b = RocksDBBackend(path)
    assert b.changelog_offset() == 43 and LongSerde().deserialize(b.get(b"k")) == 6
    b.wipe()
    assert b.changelog_offset() is None and b.get(b"k") is None
    b.close()


def test_a_store_opened_many_times_keeps_few_info_logs(tmp_path):
    """A task's stores are opened again whenever another process held them; RocksDB starts an info log at each
    open."""
    path = tmp_path / "db"
    for batch in range(12):
        b = RocksDBBackend(path)
        b.write({b"k": LongSerde().serialize(batch)}, changelog_offset=batch)
        b.close()
    logs = sorted(p.name for p in path.iterdir() if p.name.startswith("LOG"))
    assert len(logs) <= 2, logs


def test_store_names_name_changelogs():
    assert StoreSpec("totals-store", StringSerde(), JsonSerde()).changelog_topic("app") == "app-totals-store-changelog"
    with pytest.raises(ValueError, match="store name"):
        StoreSpec("bad name", StringSerde(), JsonSerde())


@pytest.mark.parametrize("start, end", [(0, -1001), (-1001, 10), (5, 3)])
def test_restore_refuses_an_invalid_changelog_range_and_keeps_the_store(start, end):
    from recovery.restore import restore_store
    from transactions import RetriableKafkaError

    backend = MemoryBackend()
    backend.write({b"k": b"1"}, changelog_offset=382)
    with pytest.raises(RetriableKafkaError, match="invalid offset range"):
        restore_store(backend, read=None, topic="changelog", partition=2, start_offset=start, end_offset=end)
    assert backend.changelog_offset() == 382  # not wiped


def test_known_bounds_answer_each_partition_once_then_ask_the_source():
    from recovery import KnownBounds

    class Source:
        def __init__(self):
            self.asked: list[list[tuple[str, int]]] = []

        def bounds(self, partitions):
            self.asked.append(list(partitions))
            return dict.fromkeys(partitions, (0, 99))

    source = Source()
    known = {("c", 0): (0, 5), ("c", 1): (2, 7)}
    bounds = KnownBounds(source, known)  # type: ignore[arg-type]
    assert bounds.bounds([("c", 0)]) == {("c", 0): (0, 5)} and source.asked == []
    assert bounds.bounds([("c", 0)]) == {("c", 0): (0, 99)}  # answered once: now the source's
    assert bounds.bounds([("c", 1), ("c", 2)]) == {("c", 1): (0, 99), ("c", 2): (0, 99)}  # one not known: all asked
    assert source.asked == [[("c", 0)], [("c", 1), ("c", 2)]]
    assert known == {("c", 0): (0, 5), ("c", 1): (2, 7)}  # the caller's mapping is left as it was
