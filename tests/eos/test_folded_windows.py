"""Folded batches into tumbling and hopping windows (eos.worker.folding, `TimeWindowAggregate.fold_view`): a batch
whose records meet a windowed aggregation of numbers first and alone, every update forwarded (no record cache,
emit="update"), is folded into it in one loop, its windows' expiry run where the record-at-a-time loop runs it.
Everything committed must be what that loop commits: outputs (keyed `Windowed`), dead letters with their errors
and stages (late records too), changelogs with the expiry's tombstones, the lineage ledger and the offsets."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from eos import Application
from eos.testing import TopologyTestDriver
from eos.windows import HoppingWindows, SlidingWindows, TumblingWindows
from tests.eos.loops import event_time, raw_inputs
from tests.eos.test_folded_batches import Folds, copies, run_both, run_stamped


def tumbling_count_app(cache: int = 0, **settings: Any) -> Callable[[], Application]:
    """The peers' window job's shape: a count per key and tumbling window, straight to its topic."""
    def make() -> Application:
        app = Application("folds", cache_max_bytes=cache, **settings)
        (app.stream("in", value_serde="bytes").group_by_key().window(TumblingWindows(500, grace=100))
            .count(name="counts").to_stream().to("out"))
        return app
    return make


def hopping_sum_app(cache: int = 0, **settings: Any) -> Callable[[], Application]:
    """A sum per key in hopping windows (three per record), late records dead-lettered, a step after it."""
    def make() -> Application:
        app = Application("folds", cache_max_bytes=cache, **settings)
        (app.stream("in", value_serde="json").group_by_key()
            .window(HoppingWindows(600, 200, grace=50), late_records="dead_letter")
            .sum(lambda v: v["n"], name="total").to_stream().map_values(lambda t: t * 10, name="tens").to("out"))
        return app
    return make


def exploded_hopping_app(cache: int = 0, **settings: Any) -> Callable[[], Application]:
    """Records become one or two under other keys, some raise after their first (none of a failed record's
    updates may stay), then a count in hopping windows whose keys are written binary, late ones dropped."""
    def make() -> Application:
        app = Application("folds", cache_max_bytes=cache, **settings)
        (app.stream("in", value_serde="json").filter(lambda key, v: v["n"] != 3, name="not-three")
            .flat_map_values(copies, name="copies").group_by_key()
            .window(HoppingWindows(400, 100), windowed_key="binary").count(name="counts").to_stream().to("out"))
        return app
    return make


def app_api_count_app(cache: int = 0, **settings: Any) -> Callable[[], Application]:
    """`Application.count` with windows, as the peers' window job is written."""
    def make() -> Application:
        app = Application("folds", cache_max_bytes=cache, **settings)
        app.count("in", "out", name="counts", windows=TumblingWindows(300), windowed_key="binary")
        return app
    return make


def crashed_inputs(*, encoded: bool) -> list[tuple[Any, ...]]:
    """(topic, key, value, timestamp) for `check_exactly_once`: keys without a key and tombstones among them, values
    a sum's aggregator refuses ({"n": "x"}), a tenth of the records far behind (late in some windows); values JSON
    bytes where the job reads bytes (`encoded`), else dicts."""
    rng = random.Random(8)
    inputs: list[tuple[Any, ...]] = []
    for i in range(500):
        key = None if rng.random() < 0.03 else f"k{int(rng.paretovariate(1.1)) % 30}"
        value = None if rng.random() < 0.03 else {"n": "x" if rng.random() < 0.03 else rng.randrange(5), "i": i}
        ts = 2_000 + i * 7 - (rng.randrange(100, 700) if rng.random() < 0.1 else 0)
        inputs.append(("in", key, json.dumps(value).encode() if encoded and value is not None else value, ts))
    return inputs


CACHES = pytest.mark.parametrize("cache", [1 << 20, 0], ids=["cached", "uncached"])
APPS = pytest.mark.parametrize("make", [tumbling_count_app, hopping_sum_app, exploded_hopping_app, app_api_count_app],
                               ids=["tumbling-count", "hopping-sum", "exploded-hopping", "app-count"])


@CACHES
@APPS
@pytest.mark.parametrize("seed", [1, 2])
def test_a_folded_windowed_batch_commits_what_the_record_at_a_time_loop_commits(monkeypatch, make, seed, cache):
    inputs = raw_inputs(900, seed)
    out, folds = run_both(monkeypatch, make(cache, max_records_per_batch=200), [inputs[:450], inputs[450:]])
    if cache and make is exploded_hopping_app:
        # a record that fails after updating a window the cache got at one of the batch's punctuations is the
        # record-at-a-time loop's: its rollback moves that window's entry in the cache
        assert folds.stopped and folds.folded
    else:
        assert folds.folded == len(inputs) and not folds.stopped  # every record folded, none one at a time
    assert out["out"] and out["folds-dlq"]
    # uncached, each update made into its output at once, unless a step after the windows takes it
    assert bool(folds.made) == (not cache and make is not hopping_sum_app)
    if cache:  # the latest of each window per batch, once: fewer outputs than updates
        assert len(out["out"]) < len(inputs)
    changelog = out["folds-counts-store-changelog" if make is not hopping_sum_app else "folds-total-store-changelog"]
    assert any(value == b"" for *_, value, _, _ in changelog)  # expired windows' tombstones, written mid-batch
    results = out["(results)"]
    assert len(results) >= 6


@CACHES
@APPS
def test_records_stamped_by_an_extractor_fold_into_the_windows_the_record_at_a_time_loop_puts_them_in(
        monkeypatch, make, cache):
    out = run_stamped(monkeypatch, make(cache, max_records_per_batch=200, timestamp=event_time),
                      hands_over=bool(cache) and make is exploded_hopping_app)
    assert out["out"]


def test_late_records_are_dropped_or_dead_lettered_by_the_stream_time_the_loop_judges_them_at(monkeypatch):
    # out-of-order records, a third of them far behind: late in some batches, in time in others
    rng = random.Random(5)
    inputs = [("in", b"k%d" % rng.randrange(4), json.dumps({"n": 1, "i": i}).encode(),
               20_000 + i * 20 - (rng.randrange(200, 900) if rng.random() < 0.3 else 0), None, None)
              for i in range(600)]
    for make in (tumbling_count_app, hopping_sum_app):
        out, folds = run_both(monkeypatch, make(max_records_per_batch=70), [inputs])
        cached, _ = run_both(monkeypatch, make(1 << 20, max_records_per_batch=70), [inputs])
        assert cached["folds-dlq"] == out["folds-dlq"]  # the same late records, with or without a cache
        assert folds.folded == len(inputs)
        if make is hopping_sum_app:  # dead letters naming the stream time
            letters = [dict(h) for *_, h, _ in out["folds-dlq"]]
            assert letters and all(h["eos.dlq.stage"] == b"process" for h in letters)
            assert all(h["eos.dlq.error"].startswith(b"LateRecordError: late record at ") for h in letters)
        else:  # one output per record in an open window (500 ms, grace 100), by the stream time it moved
            stream_time, in_time = -1, 0
            for *_, ts, _, _ in inputs:
                stream_time = max(stream_time, ts)
                in_time += ts - ts % 500 + 500 + 100 > stream_time
            assert 0 < in_time < len(inputs) and len(out["out"]) == in_time


@pytest.mark.parametrize("make", [tumbling_count_app, hopping_sum_app], ids=["tumbling-count", "hopping-sum"])
def test_a_cache_too_small_for_the_batch_stops_the_fold_where_it_would_evict(monkeypatch, make):
    inputs = raw_inputs(600, 3, keys=200)
    out, folds = run_both(monkeypatch, make(3_000, max_records_per_batch=300), [inputs])  # room for ~30 windows
    assert folds.stopped and 0 < folds.folded < len(inputs)
    windows = {key for _, _, key, *_ in out["out"]}
    assert len(out["out"]) > len(windows)  # evictions forwarded some windows more than once


def test_a_task_with_a_punctuation_of_its_own_is_not_folded_nor_are_final_results(monkeypatch):
    def punctuated() -> Application:
        app = Application("folds")
        app.stream("in", value_serde="bytes").group_by_key().window(TumblingWindows(500)).count(
            name="counts").suppress(100, name="limited").to_stream().to("out")
        return app

    def final() -> Application:
        app = Application("folds")
        app.stream("in", value_serde="bytes").group_by_key().window(TumblingWindows(500), emit="final").count(
            name="counts").to_stream().to("out")
        return app

    def sliding_final() -> Application:
        app = Application("folds")
        app.stream("in", value_serde="bytes").group_by_key().window(SlidingWindows(500), emit="final").count(
            name="counts").to_stream().to("out")
        return app

    inputs = raw_inputs(300, 3, bad=False)
    for make in (punctuated, final, sliding_final):
        out, folds = run_both(monkeypatch, make, [inputs])
        assert folds.calls == 0 and out["out"]


@pytest.mark.parametrize("make", [tumbling_count_app, hopping_sum_app, exploded_hopping_app],
                         ids=["tumbling-count", "hopping-sum", "exploded-hopping"])
@pytest.mark.parametrize("cache", [0, 1 << 20, 500], ids=["uncached", "cached", "small-cache"])
def test_folded_windows_stay_exactly_once_when_batches_crash(monkeypatch, make, cache):
    check_crashes(monkeypatch, make, cache, encoded=make is tumbling_count_app, at_once=make is not hopping_sum_app,
                  failing=make is exploded_hopping_app)


@pytest.mark.parametrize("make", [tumbling_count_app, exploded_hopping_app], ids=["tumbling-count", "exploded-hopping"])
@pytest.mark.parametrize("cache", [0, 1 << 20], ids=["uncached", "cached"])
def test_windows_folded_by_extracted_event_time_stay_exactly_once_when_batches_crash(monkeypatch, make, cache):
    check_crashes(monkeypatch, make, cache, encoded=make is tumbling_count_app, at_once=True,
                  failing=make is exploded_hopping_app, timestamp=event_time)


def check_crashes(monkeypatch: pytest.MonkeyPatch, make: Callable[..., Callable[[], Application]], cache: int, *,
                  encoded: bool, at_once: bool, failing: bool, **settings: Any) -> None:
    """A windowed job's folded batches crashed twelve times (`check_exactly_once` on `crashed_inputs`), everything
    committed each time what a run without crashes commits. Uncached, a job whose updates go straight to its sink
    (`at_once`) makes them into outputs at once; a 500-byte cache (room for about five windows or sessions) stops
    the fold where it would evict; else most records are folded, but in a `failing` job with a cache (a record
    failing after an update the cache got at one of the batch's punctuations goes to the other loop)."""
    folds = Folds(monkeypatch)
    inputs = crashed_inputs(encoded=encoded)
    driver = TopologyTestDriver(make(cache, max_records_per_batch=60, **settings)(), wall_clock_ms=1_000_000)
    report = driver.check_exactly_once(inputs, crashes=12, seed=3, chunk=40)
    assert report.ok and len(report.crashes) >= 8
    assert folds.folded and bool(folds.made) == (not cache and at_once)
    if cache == 500:
        assert folds.stopped
    elif not failing or not cache:
        assert folds.folded > 1_000


def test_each_windows_count_is_the_reference_s():
    """The peers' window job's shape through the fold, against counts computed from the input."""
    rng = random.Random(12)
    inputs = [(f"k{rng.randrange(50)}".encode(), b"x", 1_000 + i * 3) for i in range(3_000)]
    driver = TopologyTestDriver(app_api_count_app(max_records_per_batch=400)())
    driver.pipe_many("in", inputs, serialized=True)
    last = {(r.key.key, r.key.start): r.value for r in driver.read("out")}
    assert last == dict(Counter((key.decode(), ts - ts % 300) for key, _, ts in inputs))
