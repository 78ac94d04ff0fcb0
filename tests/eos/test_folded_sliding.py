"""Folded batches into sliding windows (eos.worker.folding, `SlidingWindowAggregate.fold_view`): a batch whose records
meet a sliding-windowed aggregation of numbers first and alone, every update emitted (emit="update": into the
record cache, or without one forwarded at once), is folded into it in one loop: each key's records read from the
record buffer once, then held, a window a record makes folded from them, its windows' expiry run where the
record-at-a-time loop runs it. Everything committed must be what that loop commits: outputs (keyed `Windowed`),
dead letters with their errors and stages (late records too), both stores' changelogs (the record buffer's and the
windows', with the expiry's tombstones), the lineage ledger and the offsets."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Callable
from typing import Any

import pytest

from eos import Application
from eos.testing import TopologyTestDriver
from eos.windows import SlidingWindows
from recovery import RecordBuffer, WindowStore
from tests.eos.loops import committed, event_time, raw_inputs
from tests.eos.test_folded_batches import copies, run_both, run_stamped
from tests.eos.test_folded_windows import check_crashes


def sliding_count_app(cache: int = 0, **settings: Any) -> Callable[[], Application]:
    """The peers' sliding job's shape: a count per key and sliding window, straight to its topic."""
    def make() -> Application:
        app = Application("folds", cache_max_bytes=cache, **settings)
        (app.stream("in", value_serde="bytes").group_by_key().window(SlidingWindows(200, grace=100))
            .count(name="counts").to_stream().to("out"))
        return app
    return make


def sliding_sum_app(cache: int = 0, **settings: Any) -> Callable[[], Application]:
    """A sum per key in sliding windows (a window a record makes is summed from the buffer's values), late records
    dead-lettered, a step after it."""
    def make() -> Application:
        app = Application("folds", cache_max_bytes=cache, **settings)
        (app.stream("in", value_serde="json").group_by_key()
            .window(SlidingWindows(300, grace=50), late_records="dead_letter")
            .sum(lambda v: v["n"], name="total").to_stream().map_values(lambda t: t * 10, name="tens").to("out"))
        return app
    return make


def exploded_sliding_app(cache: int = 0, **settings: Any) -> Callable[[], Application]:
    """Records become one or two of one key and time (told apart in the buffer by their order), some raise after
    their first (none of a failed record's updates, nor its records in the buffer, may stay), then a count in
    sliding windows whose keys are written binary, late ones dropped."""
    def make() -> Application:
        app = Application("folds", cache_max_bytes=cache, **settings)
        (app.stream("in", value_serde="json").filter(lambda key, v: v["n"] != 3, name="not-three")
            .flat_map_values(copies, name="copies").group_by_key()
            .window(SlidingWindows(150), windowed_key="binary").count(name="counts").to_stream().to("out"))
        return app
    return make


def app_api_count_app(cache: int = 0, **settings: Any) -> Callable[[], Application]:
    """`Application.count` with sliding windows, as the peers' sliding job is written."""
    def make() -> Application:
        app = Application("folds", cache_max_bytes=cache, **settings)
        app.count("in", "out", name="counts", windows=SlidingWindows(250, grace=200), windowed_key="binary")
        return app
    return make


APPS = pytest.mark.parametrize("make", [sliding_count_app, sliding_sum_app, exploded_sliding_app, app_api_count_app],
                               ids=["count", "sum", "exploded", "app-count"])
CACHES = pytest.mark.parametrize("cache", [0, 1 << 20], ids=["uncached", "cached"])


@CACHES
@APPS
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_folded_sliding_batch_commits_what_the_record_at_a_time_loop_commits(monkeypatch, make, seed, cache):
    inputs = raw_inputs(900, seed)  # out of order by up to 300 ms: late records, and windows made after later ones
    out, folds = run_both(monkeypatch, make(cache, max_records_per_batch=200), [inputs[:450], inputs[450:]])
    if cache and make is exploded_sliding_app:
        # a record that fails after updating a window the cache got at one of the batch's punctuations is the
        # record-at-a-time loop's: its rollback moves that window's entry in the cache
        assert folds.stopped and folds.folded
    else:
        assert folds.folded == len(inputs) and not folds.stopped  # every record folded, none one at a time
    assert out["out"] and out["folds-dlq"]
    # uncached, each update made into its output at once, unless a step after the windows takes it
    assert bool(folds.made) == (not cache and make is not sliding_sum_app)
    if cache:  # the latest of each window per batch, once: fewer outputs than updates
        uncached, _ = run_both(monkeypatch, make(0, max_records_per_batch=200), [inputs[:450], inputs[450:]])
        assert len(out["out"]) < len(uncached["out"])
    store = "total" if make is sliding_sum_app else "counts"
    assert any(value == b"" for *_, value, _, _ in out[f"folds-{store}-store-changelog"])  # expiry's tombstones
    assert out[f"folds-{store}-records-changelog"]  # the records the windows are folded from, logged


@CACHES
@APPS
def test_records_stamped_by_an_extractor_fold_into_the_windows_the_record_at_a_time_loop_puts_them_in(
        monkeypatch, make, cache):
    out = run_stamped(monkeypatch, make(cache, max_records_per_batch=200, timestamp=event_time),
                      hands_over=bool(cache) and make is exploded_sliding_app)
    assert out["out"]


def test_late_records_are_dropped_or_dead_lettered_by_the_stream_time_the_loop_judges_them_at(monkeypatch):
    rng = random.Random(5)  # a third of the records far behind: late in some batches, in time in others
    inputs = [("in", b"k%d" % rng.randrange(4), json.dumps({"n": 1, "i": i}).encode(),
               20_000 + i * 20 - (rng.randrange(200, 900) if rng.random() < 0.3 else 0), None, None)
              for i in range(600)]
    for make in (sliding_count_app, sliding_sum_app):
        out, folds = run_both(monkeypatch, make(max_records_per_batch=70), [inputs])
        cached, _ = run_both(monkeypatch, make(1 << 20, max_records_per_batch=70), [inputs])
        assert cached["folds-dlq"] == out["folds-dlq"]  # the same late records, with or without a cache
        assert folds.folded == len(inputs)
        if make is sliding_sum_app:
            letters = [dict(h) for *_, h, _ in out["folds-dlq"]]
            assert letters and all(h["eos.dlq.error"].startswith(b"LateRecordError: late record at ") for h in letters)
        else:  # dropped: late by the stream time the record moved (its windows' end + grace before it)
            stream_time, late = -1, 0
            for *_, ts, _, _ in inputs:
                stream_time = max(stream_time, ts)
                late += ts + 1 + 200 + 100 <= stream_time
            assert late and not out["folds-dlq"]


@pytest.mark.parametrize("make", [sliding_count_app, sliding_sum_app], ids=["count", "sum"])
def test_a_cache_too_small_for_the_batch_stops_the_fold_where_it_would_evict(monkeypatch, make):
    inputs = raw_inputs(600, 3, keys=200)
    out, folds = run_both(monkeypatch, make(3_000, max_records_per_batch=300), [inputs])  # room for ~30 windows
    assert folds.stopped and 0 < folds.folded < len(inputs)
    windows = {key for _, _, key, *_ in out["out"]}
    assert len(out["out"]) > len(windows)  # evictions forwarded some windows more than once


def test_records_of_one_key_and_time_keep_their_order_in_the_buffer(monkeypatch):
    # many records of few keys at the same times, within and across batches: the buffer's sequence numbers
    inputs = [("in", b"k%d" % (i % 3), json.dumps({"n": i % 5, "i": i}).encode(), 5_000 + (i // 9) * 40, None, None)
              for i in range(400)]
    out, folds = run_both(monkeypatch, sliding_sum_app(max_records_per_batch=50), [inputs[:200], inputs[200:]])
    assert folds.folded == len(inputs)
    keys = [key for _, key, *_ in out["folds-total-records-changelog"]]
    assert len(keys) > len(set(keys)) / 2 and len(set(keys)) >= 300  # every record (and its index entry) logged


def test_a_batch_meeting_many_keys_reads_the_buffer_in_one_scan(monkeypatch):
    # 300 keys, a short time difference: the buffer holds few records for the keys a batch meets, so after 64
    # lookups the fold reads every key's records in one scan (and the keys met after take theirs from it)
    scans: list[int] = []
    real = RecordBuffer.records_from

    def counted(self: RecordBuffer, time_from: int) -> Any:
        scans.append(time_from)
        return real(self, time_from)

    monkeypatch.setattr(RecordBuffer, "records_from", counted)
    rng = random.Random(9)
    inputs = [("in", b"k%d" % rng.randrange(300), json.dumps({"n": 1 + i % 4, "i": i}).encode(),
               10_000 + i * 2 - rng.randrange(0, 40), None, None) for i in range(3_000)]
    out, folds = run_both(monkeypatch, sliding_sum_app(max_records_per_batch=1_000), [inputs[:1_500], inputs[1_500:]])
    assert scans and folds.folded == len(inputs) and out["out"]


@pytest.mark.no_audit  # (the audit's reference gives every window the values themselves: it says so, a FAIL)
def test_a_window_a_record_makes_folds_the_record_as_the_buffer_reads_it_back(monkeypatch):
    # a tuple, which the buffer's JSON reads back as a list: a window the record makes is folded from the buffer
    # (a list), one it falls in is given the record itself (a tuple), in both loops
    def make() -> Application:
        app = Application("folds", max_records_per_batch=100)
        (app.stream("in", value_serde="json").map_values(lambda v: (v["n"], v["i"]), name="pair").group_by_key()
            .window(SlidingWindows(100, grace=300))
            .aggregate(lambda: 0, lambda key, v, total: total + (1 if type(v) is list else 1_000), name="kinds")
            .to_stream().to("out"))
        return app
    out, folds = run_both(monkeypatch, make, [raw_inputs(400, 4, bad=False)])
    assert folds.folded == 400
    totals = {int(value) for *_, value, _, _ in out["out"]}
    assert any(t % 1_000 for t in totals) and any(t >= 1_000 for t in totals)


@pytest.mark.parametrize("make", [sliding_count_app, sliding_sum_app, exploded_sliding_app],
                         ids=["count", "sum", "exploded"])
@pytest.mark.parametrize("cache", [0, 1 << 20, 500], ids=["uncached", "cached", "small-cache"])
def test_folded_sliding_windows_stay_exactly_once_when_batches_crash(monkeypatch, make, cache):
    check_crashes(monkeypatch, make, cache, encoded=make is sliding_count_app, at_once=make is not sliding_sum_app,
                  failing=make is exploded_sliding_app)


def test_each_window_s_count_is_the_reference_s():
    """Sliding windows through the fold against counts computed from the input (records in order, as Kafka
    Streams' documentation has them: a record's own window, and the window after each record a later one falls
    in)."""
    rng = random.Random(12)
    diff = 250
    times: dict[bytes, list[int]] = {}
    inputs = []
    for i in range(3_000):
        key = f"k{rng.randrange(50)}".encode()
        ts = 1_000 + i * 3
        inputs.append((key, b"x", ts))
        times.setdefault(key, []).append(ts)
    driver = TopologyTestDriver(app_api_count_app(max_records_per_batch=400)())
    driver.pipe_many("in", inputs, serialized=True)
    last = {(r.key.key.encode(), r.key.start): r.value for r in driver.read("out")}
    expected = {}
    for key, ts_list in times.items():
        for t in ts_list:
            expected[key, t - diff] = sum(1 for s in ts_list if t - diff <= s <= t)
            if any(t < s <= t + 1 + diff for s in ts_list):
                expected[key, t + 1] = sum(1 for s in ts_list if t + 1 <= s <= t + 1 + diff)
    assert last == expected


@CACHES
def test_windows_keep_the_order_their_updates_came_in(monkeypatch, cache):
    """A float sum whose result depends on the order of its terms (1e16 + 1.0 - 1e16), over out-of-order records: a
    window made before is updated in arrival order from what the store holds, a new one folded from the buffer in
    time order, so a window the fold took for new where it was there (or the reverse) would commit another sum
    than the record-at-a-time loop's."""
    def make() -> Application:
        app = Application("folds", cache_max_bytes=cache, max_records_per_batch=70)
        (app.stream("in", value_serde="json").group_by_key().window(SlidingWindows(150, grace=200))
            .sum(lambda v: v["x"], name="total").to_stream().to("out"))
        return app

    rng = random.Random(21)
    terms = (1e16, 1.0, -1e16, 3.0, 1e-3)
    inputs = [("in", b"k%d" % rng.randrange(5), json.dumps({"x": terms[i % 5]}).encode(),
               10_000 + i * 15 - rng.randrange(0, 250), None, None) for i in range(1_200)]
    out, folds = run_both(monkeypatch, make, [inputs[:600], inputs[600:]])
    assert folds.folded == len(inputs) and len({value for *_, value, _, _ in out["out"]}) > 20


@pytest.mark.parametrize("retention", [None, 2_000], ids=["own", "longer"])
def test_each_expiry_of_the_windows_scans_from_where_the_last_ended_and_drops_what_a_full_scan_drops(monkeypatch,
                                                                                                   retention):
    """A sliding step's windows expire in steps, each scanning the store from where the one before ended (no record
    that is not late makes or falls in a window before it), not from its start (over every tombstone the store has
    not compacted away yet); with a retention longer than the windows', shifted alike. Everything committed is what
    scans from the start commit."""
    def make() -> Application:
        app = Application("folds", max_records_per_batch=150)
        (app.stream("in", value_serde="bytes").group_by_key()
            .window(SlidingWindows(200, grace=100), retention=retention).count(name="counts").to_stream().to("out"))
        return app

    inputs = raw_inputs(1_500, 6, bad=False)
    real = WindowStore.expire_before
    scans: dict[int, list[tuple[int, int | None]]] = {}  # each store's (of a task), in the run that scans from where
    runs = []
    for from_start in (False, True):
        def expire(self: WindowStore, start: int, since: int | None = None, from_start: bool = from_start) -> int:
            if not from_start:
                scans.setdefault(id(self), []).append((start, since))
            return real(self, start, None if from_start else since)
        with monkeypatch.context() as m:
            m.setattr(WindowStore, "expire_before", expire)
            driver = TopologyTestDriver(make(), wall_clock_ms=1_000_000)
            driver.pipe_records(inputs, serialized=True)
            runs.append(committed(driver))
            driver.close()
    assert runs[0] == runs[1]
    assert any(value == b"" for *_, value, _, _ in runs[0]["folds-counts-store-changelog"])
    assert scans and all(len(steps) >= 5 for steps in scans.values())
    for steps in scans.values():
        assert steps[0][1] is None  # (a runtime's first expiry scans from the start)
        assert all(since == before for (before, _), (_, since) in itertools.pairwise(steps))
    # (in steps of half the windows' own retention, 2 x 200 + 100 + 1; a longer one keeps them 1,499 ms longer)
    kept = 0 if retention is None else 2_000 - 501
    assert all((start + kept) % 250 == 0 for steps in scans.values() for start, _ in steps)
