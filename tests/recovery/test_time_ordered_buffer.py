"""The time-ordered buffer (a stream-table join's grace period): records let go in (timestamp, arrival)
order, whole, with the observed stream time and the arrival counter kept in the store (so a restored or
retried task lets go of the same records in the same order)."""

from __future__ import annotations

import pytest

from eos.serde import JsonSerde, StringSerde
from recovery import Held, MemoryBackend, RocksDBBackend, StoreSpec, TimeOrderedBuffer, WriteBuffer


@pytest.fixture(params=["memory", "rocksdb"])
def backend(request, tmp_path):
    b = MemoryBackend() if request.param == "memory" else RocksDBBackend(tmp_path / "store")
    yield b
    b.close()


def _buffer(backend):
    view = TimeOrderedBuffer(StoreSpec("b", StringSerde(), JsonSerde(), kind="time_ordered_buffer"))
    view.attach(WriteBuffer(backend))
    return view


def _held(key, value, ts, offset, headers=()):
    return Held(key, value, ts, ("orders", 1, offset, key and key.encode(), b"raw", list(headers), ts, offset % 2))


def test_records_are_let_go_in_timestamp_then_arrival_order(backend):
    buffer = _buffer(backend)
    assert buffer.observed_stream_time() is None and buffer.take_until(10**12) == []
    assert buffer.observe(5) == (None, 5)
    for n, (key, ts) in enumerate([("b", 30), ("a", 10), ("z", 20), ("a", 20), (None, 20)]):
        buffer.put(_held(key, {"n": n}, ts, n))
    assert buffer.observed_stream_time() == 30
    assert buffer.observe(25) == (30, 30) and buffer.observe(40) == (30, 40) and buffer.observed_stream_time() == 40
    assert [h.value["n"] for h in buffer.all()] == [1, 2, 3, 4, 0]
    taken = buffer.take_until(20)
    assert [(h.key, h.timestamp, h.value["n"]) for h in taken] == [("a", 10, 1), ("z", 20, 2), ("a", 20, 3),
                                                                  (None, 20, 4)]
    assert taken[3].message == ("orders", 1, 4, None, b"raw", [], 20, 0)
    assert [h.key for h in buffer.all()] == ["b"] and buffer.take_until(29) == []
    buffer.put(_held("y", 9, 25, 8))
    assert buffer.take_until(29, since=26) == []  # (a scan from `since` on: nothing is left before it ...)
    assert [h.key for h in buffer.take_until(29, since=20)] == ["y"]
    buffer.put(_held("c", 5, 20, 9))  # (the next arrival number, after those let go)
    assert [(h.key, h.value) for h in buffer.take_until(-1)] == [] and [h.key for h in buffer.all()] == ["c", "b"]


def test_a_record_is_kept_whole_headers_and_all(backend):
    buffer = _buffer(backend)
    headers = [("traceparent", b"00-ab-cd-01"), ("empty", None), ("eos.origin", b"in:0:5:0")]
    buffer.put(_held("k", ["a", {"b": 1}], 7, 3, headers))
    [held] = buffer.take_until(7)
    assert held == Held("k", ["a", {"b": 1}], 7, ("orders", 1, 3, b"k", b"raw", headers, 7, 1))
    assert buffer.all() == []


def test_what_is_held_and_the_arrival_count_survive_a_reopened_store(tmp_path):
    backend = RocksDBBackend(tmp_path / "store")
    buffer = _buffer(backend)
    buffer.put(_held("a", 1, 50, 0))
    buffer.put(_held("b", 2, 50, 1))
    backend.write(buffer._buf().changes(), 7)
    backend.close()
    backend = RocksDBBackend(tmp_path / "store")
    again = _buffer(backend)
    again.put(_held("c", 3, 50, 2))  # after a and b, though all three are at 50
    assert again.observed_stream_time() == 50 and [h.key for h in again.take_until(50)] == ["a", "b", "c"]
    backend.close()
