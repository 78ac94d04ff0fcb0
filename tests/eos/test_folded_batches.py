"""Folded batches (eos.worker.folding): a batch whose records meet a keyed aggregation holding numbers in the
record cache first and alone is folded into it in one loop. Everything committed must be what the
record-at-a-time loop commits: outputs with their keys, values, timestamps and headers, dead letters with
their errors and stages, changelogs, the lineage ledger and the committed offsets; whatever the input's bad
records, the cache's size (the fold stops where the cache would evict), the batch's slicing, and crashes."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import pytest

import eos.worker.processing as processing
from eos import Application, store
from eos.operators.aggregate import AggregateProcessor
from eos.testing import TopologyTestDriver
from tests.eos import loops
from tests.eos.loops import (
    PARENT,
    TRACEPARENT,
    MadeAtOnce,
    drains,
    event_time,
    raw_inputs,
    refused_by_the_extractor,
)


class Folds(MadeAtOnce):
    """Counts what the fold took (installed around `fold_batch`), and the updates it made into outputs at once
    (`made`: a record without headers, its update to one plain sink)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__(monkeypatch)
        self.calls = self.folded = self.stopped = 0
        real = processing.fold_batch

        def spy(*args: Any, **kwargs: Any) -> Any:
            folded = real(*args, **kwargs)
            rest = list(folded.rest)  # (a streamed batch's rest is read on: the records it holds are read anyway)
            self.calls += 1
            self.folded += folded.records
            self.stopped += bool(rest)
            return folded._replace(rest=rest)

        monkeypatch.setattr(processing, "fold_batch", spy)


def run_both(monkeypatch: pytest.MonkeyPatch, make_app: Callable[[], Application], feeds: list[list[tuple[Any, ...]]],
             **driver_options: Any) -> tuple[dict[str, list[tuple[Any, ...]]], Folds]:
    """`feeds` through the app with the fold and without (`tests.eos.loops.run_both`)."""
    return loops.run_both(monkeypatch, make_app, feeds, "fold_target", Folds, **driver_options)


def count_app(cache: int, **settings: Any) -> Callable[[], Application]:
    def make() -> Application:
        app = Application("folds", cache_max_bytes=cache, **settings)
        app.stream("in", value_serde="bytes").group_by_key().count(name="counts").to_stream().to("out")
        return app
    return make


def sum_app(cache: int, **settings: Any) -> Callable[[], Application]:
    def make() -> Application:
        app = Application("folds", cache_max_bytes=cache, **settings)
        (app.stream("in", value_serde="json").group_by_key().sum(lambda v: v["n"], name="total")
            .to_stream().map_values(lambda t: t * 10, name="tens").to("out"))
        return app
    return make


def classic_count_app(cache: int, **settings: Any) -> Callable[[], Application]:
    def make() -> Application:
        app = Application("folds", cache_max_bytes=cache, **settings)
        app.count("in", "out", name="counts")
        return app
    return make


def even_counts_app(cache: int, **settings: Any) -> Callable[[], Application]:
    """A count whose odd values a filter drops (their records produce nothing: "filtered" in the ledger)."""
    def make() -> Application:
        app = Application("folds", cache_max_bytes=cache, **settings)
        (app.stream("in", value_serde="bytes").group_by_key().count(name="counts").to_stream()
            .filter(lambda key, n: n % 2 == 0, name="even").to("out"))
        return app
    return make


def pipeline_app(cache: int, **settings: Any) -> Callable[[], Application]:
    """The peers' pipeline: filter, map_values, group_by_key, sum: the aggregation reached through operators."""
    def make() -> Application:
        app = Application("folds", cache_max_bytes=cache, **settings)
        (app.stream("in", value_serde="json").filter(lambda key, v: v["n"] != 3, name="not-three")
            .map_values(lambda v: {**v, "twice": v["n"] * 2}, name="twice").group_by_key()
            .sum(lambda v: v["twice"], name="total").to_stream().to("out"))
        return app
    return make


def copies(v: dict) -> Any:
    """One or two values of a record, and for one record in thirteen an error after them (after one or two
    updates of the record's key)."""
    yield v["i"] % 3
    if v["n"] % 2:
        yield v["i"] % 5
    if v["i"] % 13 == 5:
        raise ValueError("no third copy")


def exploded_app(cache: int, **settings: Any) -> Callable[[], Application]:
    """A record becomes n records before the count (several updates per record), and one of every so many
    raises after its first updates: none of them may stay."""
    def make() -> Application:
        app = Application("folds", cache_max_bytes=cache, **settings)
        (app.stream("in", value_serde="json").flat_map_values(copies, name="copies").group_by_key()
            .count(name="counts").to_stream().to("out"))
        return app
    return make


def cogroup_app(cache: int, **settings: Any) -> Callable[[], Application]:
    """A cogroup of one stream: its values are marked for the cogroup's aggregator on the way, a step of the
    line the fold builds again."""
    def make() -> Application:
        app = Application("folds", cache_max_bytes=cache, **settings)
        (app.stream("in", value_serde="json").group_by_key().cogroup(lambda key, v, total: total + v["n"])
            .aggregate(lambda: 0, name="total").to_stream().to("out"))
        return app
    return make


CACHES = pytest.mark.parametrize("cache", [1 << 20, 0], ids=["cached", "uncached"])


@CACHES
@pytest.mark.parametrize("make", [count_app, sum_app, classic_count_app, even_counts_app, pipeline_app, exploded_app,
                                  cogroup_app],
                         ids=["count", "sum", "classic-count", "even-counts", "pipeline", "exploded", "cogroup"])
@pytest.mark.parametrize("seed", [1, 2])
def test_a_folded_batch_commits_what_the_record_at_a_time_loop_commits(monkeypatch, make, seed, cache):
    inputs = raw_inputs(900, seed)
    out, folds = run_both(monkeypatch, make(cache, max_records_per_batch=200), [inputs[:450], inputs[450:]])
    assert folds.folded == len(inputs) and not folds.stopped  # every record folded, none one at a time
    assert out["out"] and out["folds-dlq"]
    letters = [dict(h)["eos.dlq.stage"] for *_, h, _ in out["folds-dlq"]]
    assert {b"deserialize", b"timestamp", b"process"} <= set(letters)
    traced = [dict(h or ()) for *_, h, _ in out["out"] if TRACEPARENT in dict(h or ())]
    assert traced and all(t[TRACEPARENT] != PARENT for t in traced)  # a child span of the input record's
    if not cache:  # one output per keyed input (unless dropped), in input order
        assert len(out["out"]) > len(inputs) / (4 if make is even_counts_app else 2)
    # without a cache, an aggregation that forwards to its sink makes its headerless records' updates at once,
    # whether it reads the source itself or through operators
    assert bool(folds.made) == (not cache and make in (count_app, classic_count_app, pipeline_app, exploded_app,
                                                       cogroup_app))


@CACHES
@pytest.mark.parametrize("make", [count_app, sum_app, pipeline_app, exploded_app], ids=["count", "sum", "pipeline",
                                                                                   "exploded"])
def test_records_stamped_by_an_extractor_fold_as_the_record_at_a_time_loop_takes_them(monkeypatch, make, cache):
    assert run_stamped(monkeypatch, make(cache, max_records_per_batch=200, timestamp=event_time))["out"]


def run_stamped(monkeypatch: pytest.MonkeyPatch, make_app: Callable[[], Application], *,
                hands_over: bool = False) -> dict[str, list[tuple[Any, ...]]]:
    """Event time from the record (`loops.event_time`: out of order, a float, refused, its extractor failing)
    through the app with the fold and without (`run_both`): the fold stamps each record as that loop does, so
    both commit the same outputs' timestamps, windows, late records, dead letters and stream time. Every record is
    folded, but where the fold `hands_over` to the other loop as it does without an extractor (a failing
    record's update that the cache got mid-batch); the extractor's refusals are among the dead letters."""
    inputs = raw_inputs(900, 4)
    out, folds = run_both(monkeypatch, make_app, [inputs[:450], inputs[450:]])
    if hands_over:
        assert folds.stopped and folds.folded
    else:
        assert folds.folded == len(inputs) and not folds.stopped
    assert refused_by_the_extractor(out["folds-dlq"])
    return out


@pytest.mark.parametrize("make", [count_app, sum_app], ids=["count", "sum"])
def test_a_cache_too_small_for_the_batch_stops_the_fold_where_it_would_evict(monkeypatch, make):
    inputs = raw_inputs(600, 3, keys=200)
    out, folds = run_both(monkeypatch, make(2_000), [inputs])  # room for ~17 keys
    assert folds.stopped and 0 < folds.folded < len(inputs)
    keys = {k for _, _, k, *_ in out["out"]}
    assert len(out["out"]) > len(keys)  # evictions forwarded some keys more than once


@CACHES
def test_streamed_batches_drain_as_they_fold(monkeypatch, cache):
    rng = random.Random(4)
    inputs = [("in", None if rng.random() < 0.4 else b"k%d" % rng.randrange(9), b"v", 5_000 + i, None, None)
              for i in range(400)]
    out, folds = run_both(monkeypatch, count_app(cache, batch_slice_records=16), [inputs])
    assert folds.folded == len(inputs) and not folds.stopped
    assert len(out["folds-dlq"]) == sum(1 for r in inputs if r[1] is None)

    folded = drains(monkeypatch, count_app(cache, batch_slice_records=16)(), inputs)
    off = drains(monkeypatch, count_app(cache, batch_slice_records=16)(), inputs, "fold_target")
    assert folded == off and len(folded) > 5  # drained at the same records as the other loop


@CACHES
def test_an_aggregate_that_stops_being_a_number_is_taken_one_record_at_a_time(monkeypatch, cache):
    def make() -> Application:
        app = Application("folds", cache_max_bytes=cache, max_records_per_batch=50)
        (app.stream("in", value_serde="json").group_by_key().reduce(lambda a, b: a + b, name="joined")
            .to_stream().to("out"))
        return app

    rng = random.Random(6)
    inputs = []
    for i in range(300):
        if rng.random() < 0.1:  # keys whose aggregate is a string from their first record on
            key, value = b"s%d" % rng.randrange(3), rng.choice(["a", "b"])
        else:  # numbers, and now and then a string added to a number: the aggregator raises
            key, value = b"k%d" % rng.randrange(6), rng.choice([1, "a"]) if rng.random() < 0.05 else rng.randrange(9)
        inputs.append(("in", key, json.dumps(value).encode(), 1_000 + i, None, None))
    out, folds = run_both(monkeypatch, make, [inputs[:150], inputs[150:]])
    assert folds.stopped and folds.folded
    assert any(isinstance(json.loads(v), str) for *_, v, _, _ in out["out"])
    assert out["folds-dlq"]  # a number and a string added: the aggregator raised


def test_a_fold_stopped_by_a_records_second_update_drops_the_output_made_of_its_first(monkeypatch):
    # uncached, behind a flat_map_values: a record's first update is made into its output at once; its second
    # makes the aggregate a string, which stops the fold, and the record-at-a-time loop takes the record again,
    # so the output made of its first update must not stay beside the one that loop makes
    def make() -> Application:
        app = Application("folds", max_records_per_batch=50)
        (app.stream("in", value_serde="json").flat_map_values(lambda v: v, name="both").group_by_key()
            .reduce(lambda a, b: b, name="latest").to_stream().to("out"))
        return app

    rng = random.Random(11)
    values = [[rng.randrange(9), "late" if i % 37 == 20 else rng.randrange(9)] for i in range(300)]
    inputs = [("in", b"k%d" % rng.randrange(5), json.dumps(v).encode(), 1_000 + i, None, None)
              for i, v in enumerate(values)]
    out, folds = run_both(monkeypatch, make, [inputs[:150], inputs[150:]])
    assert folds.stopped and folds.made
    assert len(out["out"]) == 2 * len(inputs)  # each record's two updates, once each


def test_an_output_its_topic_refuses_is_a_dead_letter_and_its_update_is_not_applied(monkeypatch):
    rng = random.Random(9)
    inputs = [("in", b"k%d" % rng.randrange(12), b"v", rng.choice([1_000, 2_000, 20_000 + i]), None, None)
              for i in range(300)]
    configs = {"out": {"message.timestamp.before.max.ms": "990000"}}  # (the clock is at 1,000,000 ms)
    out, folds = run_both(monkeypatch, count_app(0), [inputs], topic_configs=configs)
    assert folds.folded == len(inputs) and folds.made
    refused = [dict(h) for *_, h, _ in out["folds-dlq"]]
    assert refused and all(h["eos.dlq.stage"] == b"serialize" for h in refused)
    assert all(m[5][1] >= 10_000 for m in out["out"])  # (partition, offset, key, value, headers, timestamp)


def test_only_an_aggregation_that_takes_every_record_first_and_alone_is_folded(monkeypatch):
    def shapes() -> list[Application]:
        branched = Application("a", cache_max_bytes=1 << 20)  # a branch before the count: not a line
        routes = branched.stream("in").split().branch(lambda k, v: v["n"] > 1, name="big").default_branch(
            name="small")
        routes["big"].group_by_key().count(name="c").to_stream().to("o")
        routes["small"].to("o")
        two = Application("b", cache_max_bytes=1 << 20)
        orders = two.stream("in")
        orders.group_by_key().count(name="c").to_stream().to("o")
        orders.group_by_key().sum(lambda v: 1, name="s").to_stream().to("o2")
        chained = Application("c")  # without a cache, a count whose outputs meet another aggregation
        chained.stream("in").group_by_key().count(name="c").to_stream().group_by_key().sum(
            lambda n: n, name="s").to_stream().to("o")
        return [branched, two, chained]

    for app in shapes():
        with monkeypatch.context() as m:
            folds = Folds(m)
            driver = TopologyTestDriver(app, wall_clock_ms=1_000_000)
            driver.pipe_many("in", [("a", {"n": 1}), ("b", {"n": 2}), ("a", {"n": 3})])
            assert folds.calls == 0, app.config.application_id
            assert driver.read("o")


class Doubled(AggregateProcessor):
    """A subclass that processes records its own way: every record counts twice."""

    def process(self, record: Any) -> None:
        super().process(record)
        super().process(record)


@pytest.mark.parametrize("processor, folded", [(AggregateProcessor, True), (Doubled, False)],
                         ids=["aggregation", "subclass"])
def test_the_processor_apis_aggregation_is_folded_and_a_subclass_of_it_is_not(monkeypatch, processor, folded):
    app = Application("papi", cache_max_bytes=1 << 20)
    app.add_source("orders", "in", value_serde="bytes")
    app.add_processor("counting", lambda: processor("counts", lambda: 0, lambda k, v, n: n + 1), "orders")
    app.add_state_store(store("counts", key_serde="string", value_serde="long"), "counting")
    app.add_sink("out", "out", "counting", value_serde="long")
    folds = Folds(monkeypatch)
    driver = TopologyTestDriver(app, wall_clock_ms=1_000_000)
    driver.pipe_many("in", [("a", b"1"), ("b", b"2"), ("a", b"3")])
    assert (folds.calls > 0) is folded
    assert [(r.key, r.value) for r in driver.read("out")] == ([("b", 1), ("a", 2)] if folded else [("b", 2), ("a", 4)])


@pytest.mark.parametrize("make, typed", [(count_app, False), (sum_app, True), (pipeline_app, True)],
                         ids=["count", "sum", "pipeline"])
def test_folded_batches_stay_exactly_once_when_batches_crash(monkeypatch, make, typed):
    folds = Folds(monkeypatch)
    rng = random.Random(8)
    inputs: list[tuple[Any, ...]] = []
    for i in range(500):
        key = None if rng.random() < 0.03 else f"k{int(rng.paretovariate(1.1)) % 30}"
        value = None if rng.random() < 0.03 else {"n": "x" if rng.random() < 0.03 else rng.randrange(5)}
        inputs.append(("in", key, value if typed or value is None else json.dumps(value).encode(), 2_000 + i * 7))
    for cache in (1 << 20, 700, 0):  # 700 bytes: room for about seven keys; 0: no cache
        driver = TopologyTestDriver(make(cache, max_records_per_batch=60)(), wall_clock_ms=1_000_000)
        report = driver.check_exactly_once(inputs, crashes=12, seed=cache, chunk=40)
        assert report.ok and len(report.crashes) >= 8
    assert folds.folded > 1_000 and folds.stopped  # (the small cache stops folds)
    # (uncached, the count's and the pipeline's updates were made at once; the sum's go through a step after it)
    assert bool(folds.made) == (make is not sum_app)


def test_the_ledger_counts_every_input_but_the_dead_letters_as_filtered():
    inputs = raw_inputs(400, 5)
    driver = TopologyTestDriver(count_app(1 << 20, max_records_per_batch=150)(), wall_clock_ms=1_000_000)
    driver.pipe_records(inputs, serialized=True)
    dead = {letter.offset for letter in driver.dead_letters()}
    filtered: set[int] = set()
    for entry in driver.ledger():
        for (topic, partition), offsets in entry.filtered.items():
            assert (topic, partition) == ("in", 0)
            filtered |= set(offsets)
    assert dead and filtered == set(range(len(inputs))) - dead


def test_a_step_after_the_aggregation_that_raises_sends_its_record_to_the_dead_letters_unapplied(monkeypatch):
    def make() -> Application:
        app = Application("folds")
        (app.stream("in", value_serde="bytes").group_by_key().count(name="counts").to_stream()
            .map_values(lambda n: 100 // (n % 5), name="fifths").to("out"))  # every fifth count raises
        return app

    rng = random.Random(10)
    inputs = [("in", b"k%d" % rng.randrange(7), b"v", 1_000 + i, None, None) for i in range(200)]
    out, folds = run_both(monkeypatch, make, [inputs[:90], inputs[90:]])
    assert folds.folded == len(inputs)
    letters = [dict(h) for *_, h, _ in out["folds-dlq"]]
    assert letters and all(h["eos.dlq.stage"] == b"process" for h in letters)
    # the update of a record whose output failed is not applied: each key stays at 4, its later records fail
    assert len(out["folds-dlq"]) == len(inputs) - 4 * len({key for _, key, *_ in inputs})
