"""The record cache (`cache_max_bytes`, eos.cache), through the test driver: the latest value per key per
batch, evictions of the least recently updated when full, record scopes, windows, table aggregations,
headers, and exactly-once under crashes."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from eos import Application
from eos.cache import ENTRY_OVERHEAD, RecordCache
from eos.errors import ConfigError
from eos.testing import TopologyTestDriver
from eos.windows import SessionWindows, SlidingWindows, TumblingWindows


def counts_app(cache: int, **settings) -> Application:
    app = Application("cached", cache_max_bytes=cache, **settings)
    app.stream("in").group_by_key().count(name="counts").to_stream().to("out")
    return app


def stream_of(keys: int, n: int, seed: int = 3) -> list[tuple[str, dict]]:
    rng = random.Random(seed)
    return [(f"k{rng.randrange(keys)}", {"i": i}) for i in range(n)]


def is_subsequence(values: list, of: list) -> bool:
    it = iter(of)
    return all(any(v == w for w in it) for v in values)


def test_a_batch_forwards_the_latest_count_of_each_key_once_in_the_order_of_their_last_update():
    driver = TopologyTestDriver(counts_app(10 * 1024 * 1024))
    driver.pipe_many("in", [("a", {}), ("b", {}), ("a", {}), ("c", {}), ("b", {}), ("a", {})])
    assert [(r.key, r.value) for r in driver.read("out")] == [("c", 1), ("b", 2), ("a", 3)]
    driver.pipe_many("in", [("c", {}), ("c", {})])  # the next batch: only what it changed
    assert [(r.key, r.value) for r in driver.read("out")] == [("c", 3)]
    assert driver.store("counts-store").get("a") == 3


def test_without_a_cache_every_update_is_forwarded():
    driver = TopologyTestDriver(counts_app(0))
    driver.pipe_many("in", [("a", {}), ("b", {}), ("a", {})])
    assert [(r.key, r.value) for r in driver.read("out")] == [("a", 1), ("b", 1), ("a", 2)]


def test_a_full_cache_evicts_the_least_recently_updated_and_the_output_stays_a_true_history():
    inputs = stream_of(keys=40, n=600)
    entry = len(b"k10") + 8 + 8 + ENTRY_OVERHEAD  # a key, a timestamped long
    driver = TopologyTestDriver(counts_app(10 * entry))  # room for about ten keys of forty
    driver.pipe_many("in", inputs)
    out = driver.read("out")
    assert 40 < len(out) < 600  # evictions forwarded some updates early, the cache absorbed the rest
    running: dict[str, list[int]] = {}
    for key, _ in inputs:
        running.setdefault(key, []).append(len(running.get(key, [])) + 1)
    got: dict[str, list[int]] = {}
    for r in out:
        got.setdefault(r.key, []).append(r.value)
    for key, history in running.items():
        assert got[key][-1] == history[-1]  # the batch's last value of every key is there
        assert got[key] == sorted(set(got[key])) and is_subsequence(got[key], history)


def test_a_record_that_fails_after_updating_the_cache_takes_its_update_out_again():
    app = Application("cached", cache_max_bytes=1 << 20)
    orders = app.stream("in")
    orders.group_by_key().count(name="counts").to_stream().to("counts")
    orders.map_values(lambda v: 10 // v["qty"], name="per_unit").to("per-unit")  # qty 0 raises
    driver = TopologyTestDriver(app)
    driver.pipe_many("in", [("a", {"qty": 1}), ("a", {"qty": 0}), ("b", {"qty": 2}), ("a", {"qty": 5})])
    assert [(r.key, r.value) for r in driver.read("counts")] == [("b", 1), ("a", 2)]  # the failed one not counted
    assert [r.value for r in driver.read("per-unit")] == [10, 5, 2]
    (letter,) = driver.dead_letters()
    assert letter.error.startswith("ZeroDivisionError")


def test_windowed_updates_are_cached_per_window():
    app = Application("cached", cache_max_bytes=1 << 20)
    (app.stream("in").group_by_key().window(TumblingWindows(1000)).count(name="per_second")
        .to_stream().to("out"))
    driver = TopologyTestDriver(app)
    driver.pipe_records([("in", "a", {}, 100), ("in", "a", {}, 200), ("in", "a", {}, 1100), ("in", "b", {}, 1200),
                         ("in", "a", {}, 1300)])
    assert [(r.key.key, r.key.start, r.value, r.timestamp) for r in driver.read("out")] == [
        ("a", 0, 2, 200), ("b", 1000, 1, 1200), ("a", 1000, 2, 1300)]


def sessions_app(cache: int, **settings) -> Application:
    app = Application("cached-sessions", cache_max_bytes=cache, **settings)
    (app.stream("in").group_by_key().window(SessionWindows(100, grace=1_000)).count(name="sessions")
        .to_stream().to("out"))
    return app


def test_a_session_merged_away_inside_the_cache_leaves_without_a_tombstone():
    driver = TopologyTestDriver(sessions_app(1 << 20))
    # one batch: a's session grows from [0, 0] to [0, 150] (three sessions, two merged away), b's stays
    driver.pipe_records([("in", "a", {}, 0), ("in", "a", {}, 80), ("in", "b", {}, 90), ("in", "a", {}, 150)])
    assert [(r.key.key, r.key.start, r.key.end, r.value) for r in driver.read("out")] == [
        ("b", 90, 90, 1), ("a", 0, 150, 3)]
    # the next batch: the session a consumer saw is replaced, so its tombstone goes first
    driver.pipe_records([("in", "a", {}, 200)])
    assert [(r.key.key, r.key.start, r.key.end, r.value) for r in driver.read("out")] == [
        ("a", 0, 150, None), ("a", 0, 200, 4)]
    assert [(s.start, s.end, s.value) for s in driver.store("sessions-store").fetch("a")] == [(0, 200, 4)]


def test_a_session_seen_before_it_grew_in_a_batch_gets_its_tombstone_though_its_update_was_held():
    driver = TopologyTestDriver(sessions_app(1 << 20))
    driver.pipe_records([("in", "a", {}, 0)])
    driver.read("out")
    # [0, 0] was forwarded; within the next batch it grows to [0, 50] and [0, 90]: [0, 50] is never seen
    driver.pipe_records([("in", "a", {}, 50), ("in", "a", {}, 90)])
    assert [(r.key.start, r.key.end, r.value) for r in driver.read("out")] == [(0, 0, None), (0, 90, 3)]


@pytest.mark.parametrize("cache", [1 << 20, 6 * (40 + ENTRY_OVERHEAD)], ids=["large", "evicting"])
def test_cached_sessions_keep_exactly_once_and_end_as_the_uncached_job_when_batches_crash(cache):
    rng = random.Random(12)
    inputs, t = [], 0
    for _ in range(300):
        t += rng.randrange(0, 60)
        inputs.append(("in", f"k{rng.randrange(5)}", {}, t - rng.choice([0, 0, 0, 150])))  # some out of order
    report = TopologyTestDriver(sessions_app(cache, max_records_per_batch=40)).check_exactly_once(inputs, crashes=8)
    assert report.crashes

    def last_of_each_session(app: Application) -> dict:
        driver = TopologyTestDriver(app)
        driver.pipe_records(inputs)
        last: dict = {}
        for r in driver.read("out"):
            last[r.key] = r.value
        return {window: value for window, value in last.items() if value is not None}
    uncached = last_of_each_session(sessions_app(0, max_records_per_batch=40))
    assert last_of_each_session(sessions_app(cache, max_records_per_batch=40)) == uncached
    assert len(uncached) > 20


def test_sliding_windows_forward_the_latest_count_of_each_window_per_batch():
    app = Application("cached-sliding", cache_max_bytes=1 << 20)
    (app.stream("in").group_by_key().window(SlidingWindows(100, grace=1_000)).count(name="sliding")
        .to_stream().to("out"))
    driver = TopologyTestDriver(app)
    driver.pipe_records([("in", "a", {}, 1_000), ("in", "a", {}, 1_050), ("in", "a", {}, 1_080)])
    # uncached: [900, 1000] 1; [950, 1050] 2, [1001, 1101] 1; [980, 1080] 3, [1001, 1101] 2, [1051, 1151] 1
    assert sorted((r.key.start, r.key.end, r.value) for r in driver.read("out")) == [
        (900, 1000, 1), (950, 1050, 2), (980, 1080, 3), (1001, 1101, 2), (1051, 1151, 1)]


def test_table_aggregations_forward_the_latest_total_per_group():
    app = Application("cached", cache_max_bytes=1 << 20)
    customers = app.table("customers")
    customers.group_by(lambda key, c: (c["tier"], c)).count(name="tiers").to_stream().to("tiers")
    driver = TopologyTestDriver(app)
    driver.pipe_many("customers", [("ann", {"tier": "gold"}), ("bob", {"tier": "gold"}), ("ann", {"tier": "basic"})])
    assert {r.key: r.value for r in driver.records("tiers")} == {"gold": 1, "basic": 1}
    assert driver.store("tiers-store").get("gold") == 1


def test_a_flushed_update_carries_the_headers_of_the_last_record_that_made_it():
    driver = TopologyTestDriver(counts_app(1 << 20))
    driver.pipe("in", "a", {}, headers=[("who", b"first")], timestamp=5)
    driver.pipe_records([("in", "a", {}, 7)])
    records = driver.records("out")
    assert [dict(r.headers).get("who") for r in records] == [b"first", None]
    assert all("eos.derived" in r.headers for r in records)  # not one input's output


def test_the_cache_keeps_exactly_once_when_batches_crash():
    inputs = [("in", key, value) for key, value in stream_of(keys=7, n=120, seed=9)]
    report = TopologyTestDriver(counts_app(12 * (3 + 16 + ENTRY_OVERHEAD))).check_exactly_once(inputs, crashes=10)
    assert report.crashes
    final = Counter(key for _, key, _ in inputs)
    driver = TopologyTestDriver(counts_app(1 << 20))
    driver.pipe_records(inputs)
    last = {r.key: r.value for r in driver.records("out")}
    assert last == dict(final)


def test_a_negative_cache_size_is_refused_with_what_to_set():
    with pytest.raises(ConfigError, match=r"cache_max_bytes must be >= 0 .*10485760"):
        Application("cached", cache_max_bytes=-1)


def test_the_cache_takes_a_failed_records_updates_out_and_evicts_to_its_bound():
    cache, sent = RecordCache(2 * (10 + ENTRY_OVERHEAD)), []

    def forward(key, value, timestamp, headers):
        sent.append((key, value))

    for i, key in enumerate("abca"):
        cache.begin_record()
        cache.put("s", key.encode(), 10, forward, key, i, i, [])
        (cache.rollback_record if key == "c" else cache.commit_record)()
    assert len(cache) == 2 and not cache.over
    cache.put("s", b"d", 10, forward, "d", 9, 9, [])
    assert cache.over
    cache.evict(0)
    assert sent == [("b", 1)] and len(cache) == 2
    cache.flush(0)
    assert sent == [("b", 1), ("a", 3), ("d", 9)] and len(cache) == 0 and cache.size == 0


def test_a_store_serializes_a_repeated_immutable_key_once_and_a_changed_dict_key_again():
    from eos.serde import JsonSerde
    from recovery import KeyValueStore, MemoryBackend, StoreSpec, WriteBuffer

    view = KeyValueStore(StoreSpec("s", JsonSerde(), JsonSerde(), persistent=False))
    view.attach(WriteBuffer(MemoryBackend()))
    key = {"user": 1}
    view.put(key, "one")
    key["user"] = 2  # the same object, another key
    view.put(key, "two")
    assert view.get({"user": 1}) == "one" and view.get({"user": 2}) == "two"
    view.put("k", 1)
    assert view.last_written[0] == b'"k"' and view.get("k") == 1


def test_the_readme_record_cache_example_counts_once_per_batch_as_it_says():
    from tests.eos.test_readme_testing import readme_app

    driver = TopologyTestDriver(readme_app("The record cache"))
    driver.pipe_many("orders", [("ann", {"qty": 1})] * 10 + [("bob", {"qty": 2})])
    assert [(r.key, r.value) for r in driver.read("orders-per-customer")] == [("ann", 10), ("bob", 1)]


def test_a_cached_history_is_some_running_values_in_order_once_each_ending_with_the_last():
    from eos.audit.aggregate import is_history

    running = [1, 2, 3, 3, 5]  # a sum that added 0 once holds 3 twice
    assert is_history([2, 5], running) and is_history([3, 3, 5], running) and is_history([5], running)
    assert not is_history([2, 2, 5], running)  # a step committed twice
    assert not is_history([3, 2, 5], running)  # out of order
    assert not is_history([2, 3], running)  # the last value missing
    assert not is_history([], running) and not is_history([4, 5], running)  # nothing; a value it never had


# ---------------------------------------------------------------------- aggregates held in the cache unserialized
def mixed_app(cache: int) -> Application:
    """Keys of several types (JSON: str and int are held; float and list are not), a sum that fails on a
    record without `n`, an aggregate that turns into a string (not held) and back, and a sibling branch
    that fails a record after the aggregations updated it."""
    app = Application("held", cache_max_bytes=cache)
    orders = app.stream("in", key_serde="json", value_serde="json")
    orders.group_by_key().sum(lambda v: v["n"], name="totals").to_stream().to("totals")
    orders.group_by_key().count(name="counts").to_stream().to("counts")

    def mood(key, v, agg):
        if v.get("s"):
            return f"said {v['s']}"
        return (agg if isinstance(agg, int | float) else 0) + v.get("n", 0)

    orders.group_by_key().aggregate(lambda: 0, mood, name="moods").to_stream().to("moods")
    orders.map_values(lambda v: 100 // v.get("d", 1), name="ratio").to("ratios")  # d == 0 raises
    return app


def mixed_inputs(n: int, seed: int) -> list[tuple]:
    rng = random.Random(seed)
    keys = ["a", "b", "c", 1, 2, 1.0, 2.5, [1]]
    out = []
    for i in range(n):
        value: dict | None = {"n": rng.choice([1, 2, 0.5, -3, 10**20])}
        roll = rng.random()
        if roll < 0.05:
            value = None  # a tombstone: ignored by the aggregations
        elif roll < 0.1:
            del value["n"]  # the sum fails: a dead letter
        elif roll < 0.15:
            value["d"] = 0  # the sibling branch fails: the record's updates are taken out again
        elif roll < 0.22:
            value["s"] = rng.choice("xyz")
        out.append(("in", rng.choice(keys), value, 1_000 + i))
    return out


def committed(driver: TopologyTestDriver) -> dict:
    """Everything the driver committed, as bytes: outputs (with their timestamps and headers), dead letters,
    and each changelog's records per key (a batch writes one per key it changed: held aggregates reach the
    write buffer in the order they leave the cache, so the keys of one batch may come in another order)."""
    outputs = {t: [(m.key(), m.value(), m.timestamp()[1], m.headers()) for m in driver.cluster.records(t)]
               for t in ("totals", "counts", "moods", "ratios")}
    changelogs: dict[str, dict[bytes, list[bytes]]] = {}
    for store in ("totals", "counts", "moods"):
        for m in driver.cluster.records(f"held-{store}-store-changelog"):
            changelogs.setdefault(store, {}).setdefault(m.key(), []).append(m.value())
    return {"outputs": outputs, "changelogs": changelogs,
            "dead": [(d.key, d.value, d.error) for d in driver.dead_letters()]}


@pytest.mark.parametrize("seed", range(4))
def test_held_aggregates_commit_what_written_updates_commit(monkeypatch, seed):
    inputs = mixed_inputs(400, seed)
    runs = []
    for hold in (True, False):
        if not hold:
            monkeypatch.setattr("eos.operators.aggregate._holds", lambda serde: None)
        driver = TopologyTestDriver(mixed_app(1 << 20))
        for start in range(0, len(inputs), 37):  # several batches
            driver.pipe_records(inputs[start:start + 37])
        runs.append(committed(driver))
    held, written = runs
    assert held == written
    moods = [v for vs in held["changelogs"]["moods"].values() for v in vs]
    assert held["dead"] and any(v.endswith(b'"') for v in moods)  # bad records ran, and string aggregates


def test_held_numbers_are_evicted_when_the_cache_is_full_and_their_store_is_exact():
    inputs = stream_of(keys=40, n=600)
    driver = TopologyTestDriver(counts_app(10 * (3 + 32 + ENTRY_OVERHEAD)))  # room for ten held counts of forty
    driver.pipe_many("in", inputs)
    out = driver.read("out")
    assert 40 < len(out) < 600  # evictions forwarded some counts early
    final = Counter(key for key, _ in inputs)
    assert {r.key: r.value for r in out} == dict(final)
    snapshot = driver.store("counts-store")
    assert all(snapshot.get(key) == n for key, n in final.items())


def test_an_aggregation_whose_store_another_processor_reads_writes_every_update():
    from eos.operators.aggregate import AggregateProcessor
    from eos.records import Record
    from eos.serde import LongSerde
    from recovery import KeyValueStore, MemoryBackend, StoreSpec, WriteBuffer

    class Context:  # what an aggregation sees of its task
        def __init__(self, sole: bool) -> None:
            self.record_cache, self.sole, self.sent = RecordCache(1 << 20), sole, []
            self.view = KeyValueStore(StoreSpec("s", LongSerde(), LongSerde(), persistent=False, timestamped=True))
            self.view.attach(WriteBuffer(MemoryBackend()))

        def store(self, name):
            return self.view

        def sole_user_of(self, name):
            return self.sole

        def cached_headers(self):
            return []

        def forward(self, key, value, *, timestamp, headers):
            self.sent.append((key, value, timestamp))

    for sole in (True, False):
        ctx = Context(sole)
        processor = AggregateProcessor("s", lambda: 0, lambda k, v, n: n + 1)
        processor.init(ctx)
        processor.process(Record(7, b"x", "in", 0, 0, 5, None))
        processor.process(Record(7, b"y", "in", 0, 1, 4, None))
        # held: in the cache only until it leaves it; shared: in the store at once, for the other reader
        assert ctx.view.get_with_timestamp(7) == (None if sole else (2, 5))
        ctx.record_cache.flush(0)
        assert ctx.sent == [(7, 2, 5)] and ctx.view.get_with_timestamp(7) == (2, 5)


def test_a_processor_that_reads_the_aggregations_store_sees_every_update_as_it_is_made():
    from eos import Processor

    class Peek(Processor):  # forwards the count its record made, read from the count's store
        def init(self, context):
            super().init(context)
            self.counts = context.store("counts-store")

        def process(self, record):
            self.context.forward(record.key, self.counts.get(record.key))

    app = Application("held", cache_max_bytes=1 << 20)
    orders = app.stream("in")
    orders.group_by_key().count(name="counts").to_stream().to("counts")
    orders.process(Peek, connect=["counts-store"]).to("peeked")
    driver = TopologyTestDriver(app)
    driver.pipe_many("in", [("a", {}), ("a", {}), ("b", {}), ("a", {})])
    assert [(r.key, r.value) for r in driver.read("peeked")] == [("a", 1), ("a", 2), ("b", 1), ("a", 3)]
    assert [(r.key, r.value) for r in driver.read("counts")] == [("b", 1), ("a", 3)]


def test_a_count_or_sum_of_the_dsl_holds_its_numbers_in_the_cache(monkeypatch):
    from eos.operators.aggregate import AggregateProcessor

    left: list = []
    original = AggregateProcessor._write_and_forward

    def counted(self, key, value, timestamp, headers):
        left.append((self.store_name, key, value))
        original(self, key, value, timestamp, headers)

    monkeypatch.setattr(AggregateProcessor, "_write_and_forward", counted)
    app = Application("held", cache_max_bytes=1 << 20)
    orders = app.stream("in", value_serde="json")
    orders.group_by_key().count(name="counts").to_stream().to("counts")
    orders.filter(lambda k, v: v["n"] > 0).group_by_key().sum(lambda v: v["n"], name="totals").to_stream().to("totals")
    driver = TopologyTestDriver(app)
    driver.pipe_many("in", [("a", {"n": 1}), ("a", {"n": 2.5}), ("b", {"n": 0})])
    assert sorted(left) == [("counts-store", "a", 2), ("counts-store", "b", 1), ("totals-store", "a", 3.5)]
    assert [(r.key, r.value) for r in driver.read("totals")] == [("a", 3.5)]


@pytest.mark.parametrize("cache", [1 << 20, 6 * (4 + 32 + 64)])  # room for all; for about six held numbers
def test_held_aggregates_stay_exactly_once_when_batches_crash(cache):
    inputs = mixed_inputs(300, seed=11)
    report = TopologyTestDriver(mixed_app(cache)).check_exactly_once(inputs, crashes=10, seed=3)
    assert report.crashes
