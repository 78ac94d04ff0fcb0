from __future__ import annotations

import random

import pytest

from eos.serde import JsonSerde, StringSerde
from recovery import (
    NOT_PUT,
    VALID_TO_UNDEFINED,
    MemoryBackend,
    RocksDBBackend,
    StoreError,
    StoreSpec,
    Version,
    VersionedKeyValueStore,
    WriteBuffer,
)
from recovery.store import _prefix_end
from recovery.versioned import _time_of


@pytest.fixture(params=["memory", "rocksdb"])
def backend(request, tmp_path):
    b = MemoryBackend() if request.param == "memory" else RocksDBBackend(tmp_path / "store")
    yield b
    b.close()


def _store(backend, retention=100):
    view = VersionedKeyValueStore(StoreSpec("v", StringSerde(), JsonSerde(), kind="versioned", retention_ms=retention))
    view.attach(WriteBuffer(backend))
    return view


def test_lookups_by_time_whatever_the_order_of_puts(backend):
    store = _store(backend)
    # (each put says until when its version is valid: the latest's is undefined)
    assert [store.put("k", "b", 20), store.put("k", "a", 10), store.put("k", "c", 30)] == [
        VALID_TO_UNDEFINED, 20, VALID_TO_UNDEFINED]
    assert store.get("k") == "c" and store.get_with_timestamp("k") == ("c", 30)
    assert [store.get("k", as_of=t) for t in (9, 10, 19, 20, 29, 30, 99)] == [None, "a", "a", "b", "b", "c", "c"]
    assert store.delete("k", 25) == 30  # a tombstone version: nothing from 25 to 30
    assert [store.get("k", as_of=t) for t in (24, 25, 29, 30)] == ["b", None, None, "c"]
    store.put("k", "b2", 20)  # the same timestamp: replaces that version
    assert store.get("k", as_of=22) == "b2"
    assert store.versions("k") == [Version("c", 30, None), Version("b2", 20, 25), Version("a", 10, 20)]
    assert store.versions("k", 21, 26) == [Version("b2", 20, 25)]
    assert store.versions("k", 11, 15) == [Version("a", 10, 20)]  # replaced after the range
    assert store.get("missing") is None and store.get("missing", as_of=15, default=0) == 0


def test_history_retention_refuses_old_puts_and_answers_old_lookups_with_none(backend):
    store = _store(backend, retention=100)
    store.put("k", "a", 1_000)
    store.put("other", "x", 1_500)  # observed stream time 1,500: the bound is 1,400
    assert store.observed_stream_time() == 1_500 and store.history_bound() == 1_400
    assert store.put("k", "too old", 1_399) == NOT_PUT
    assert store.get("k", as_of=1_399) is None  # before the bound: no answer
    assert store.get("k", as_of=1_400) == "a" and store.get("k") == "a"  # still valid at the bound
    assert store.put("k", "on time", 1_400) == VALID_TO_UNDEFINED and store.get("k", as_of=1_450) == "on time"


def test_versions_no_lookup_reaches_are_deleted_when_the_key_is_written(backend):
    store = _store(backend, retention=100)
    most = 0
    for t in range(0, 1_000, 10):
        store.put("k", t, t)
        most = max(most, len(list(store._buf().iterate())))
    # at most a retention and a half of versions (15), the latest and the observed stream time
    assert 12 < most <= 15 + 2
    assert [v.valid_from for v in store.versions("k")] == list(range(990, 880, -10))  # from the bound on
    store.delete("k", 995)
    store.put("k", "late", 2_000)  # the tombstone at 995, before the new bound, goes too, and 990 with it
    assert [v.valid_from for v in store.versions("k")] == [2_000]
    assert store.get("k", as_of=1_950) is None
    assert len(list(store._buf().iterate())) == 1 + 1


def test_latest_values_of_every_key(backend):
    store = _store(backend)
    store.put("b", 2, 5)
    store.put("a", 1, 7)
    store.put("a", 0, 3)
    store.put("c", 3, 8)
    store.delete("c", 9)
    assert list(store.latest()) == [("a", 1, 7), ("b", 2, 5)]
    assert dict(store.all()) == {"a": 1, "b": 2}


def test_a_versioned_store_needs_a_history_retention():
    with pytest.raises(ValueError, match="history retention >= 0"):
        StoreSpec("v", StringSerde(), JsonSerde(), kind="versioned")
    spec = StoreSpec("v", StringSerde(), JsonSerde(), kind="versioned", retention_ms=0)
    assert spec.changelog_config() == {"cleanup.policy": "compact"}
    with pytest.raises(StoreError, match="only available while a batch"):
        VersionedKeyValueStore(spec).get("k")


class _Model:
    """What a versioned store answers, from every put it took."""

    def __init__(self, retention: int) -> None:
        self.retention, self.observed = retention, None
        self.by_key: dict[str, dict[int, object]] = {}

    def put(self, key, value, ts) -> int:
        """Until when the version is valid, as a versioned store's put says."""
        if self.observed is not None and ts < self.observed - self.retention:
            return NOT_PUT
        self.by_key.setdefault(key, {})[ts] = value
        self.observed = ts if self.observed is None else max(self.observed, ts)
        return min((t for t in self.by_key[key] if t > ts), default=VALID_TO_UNDEFINED)

    def versions(self, key):
        """(value, valid from, valid to) newest first, tombstones left out, from the history bound on."""
        out, valid_to = [], None
        for t in sorted(self.by_key.get(key, {}), reverse=True):
            if self.by_key[key][t] is not None:
                out.append((self.by_key[key][t], t, valid_to))
            if t <= self.observed - self.retention:
                break
            valid_to = t
        return out

    def get(self, key, as_of=None):
        if as_of is not None and as_of < self.observed - self.retention:
            return None
        times = [t for t in self.by_key.get(key, {}) if as_of is None or t <= as_of]
        return self.by_key[key][max(times)] if times else None


@pytest.mark.parametrize("seed", range(12))
def test_random_puts_answer_as_the_model_across_batches_and_restores(seed):
    """Random puts, out of order and tombstones, checked against a model after every put; batches commit
    to the backend, and every few batches the store is rebuilt from what its changelog held (a restore)."""
    rnd = random.Random(seed)
    retention = rnd.choice([0, 5, 30, 200])
    model, backend, changelog = _Model(retention), MemoryBackend(), {}
    store = _store(backend, retention)
    for batch in range(30):
        for _ in range(rnd.randint(1, 12)):
            key, ts = rnd.choice("abc"), rnd.randint(0, 60) + batch * 8
            value = None if rnd.random() < 0.2 else rnd.randint(0, 99)
            valid_to = store.put(key, value, ts)
            assert valid_to == model.put(key, value, ts)
            if valid_to != NOT_PUT:  # (a refused put touches nothing)
                _check_history_is_bounded(store, key)
            for k in "abc":
                assert store.get(k) == model.get(k)
                assert [tuple(v) for v in store.versions(k)] == model.versions(k)
                lo, hi = model.observed - retention - 3, model.observed + 5
                for as_of in {lo, lo + 2, lo + 3, lo + 4, hi, *rnd.sample(range(lo, hi), min(12, hi - lo))}:
                    assert store.get(k, as_of=as_of) == model.get(k, as_of), (k, as_of)
        changes = store._buf().changes()
        changelog.update(changes)
        backend.write(changes, None)
        if batch % 7 == 6:  # restored from the changelog (compacted: the last value per entry)
            backend = MemoryBackend()
            backend.write({k: v for k, v in changelog.items() if v is not None}, None)
        store.attach(WriteBuffer(backend))


def _check_history_is_bounded(store, key):
    """After a put: none of the key's older versions lies more than half the retention before the history
    bound, but the one valid at the bound (none if the latest is)."""
    bound, half = store.history_bound(), store.history_retention_ms // 2
    prefix = store._prefix(store._key(key))
    older = [_time_of(e) for e, _ in store._buf().iterate(prefix, _prefix_end(prefix))]
    latest = store.latest_timestamp(key)
    allowed = 1 if latest is not None and latest > bound else 0
    assert sum(t < bound - half for t in older) <= allowed, (older, bound)
