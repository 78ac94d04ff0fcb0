"""Folded batches into session windows (eos.worker.folding, `SessionWindowAggregate.fold_view`): a batch whose
records meet a session-windowed aggregation of numbers first and alone, every update forwarded at once (no record
cache, emit="update"), is folded into it in one loop: a key's open sessions read once, held through the batch,
written to the store when the fold settles. Everything committed must be what the record-at-a-time loop commits:
outputs (each merged-away session's tombstone, then the merged session's update, keyed `Windowed`), dead letters
with their errors and stages (late records too), changelogs (every session written in the batch, in the order it
was first written, the expiry's tombstones), the lineage ledger and the offsets."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from eos import Application
from eos.testing import TopologyTestDriver
from eos.windows import SessionWindows
from recovery import SessionStore
from tests.eos.loops import event_time, raw_inputs
from tests.eos.test_folded_batches import Folds, copies, run_both, run_stamped
from tests.eos.test_folded_windows import check_crashes


def session_count_app(cache: int = 0, **settings: Any) -> Callable[[], Application]:
    """The peers' session job's shape: a count per key and session, straight to its topic."""
    def make() -> Application:
        app = Application("folds", cache_max_bytes=cache, **settings)
        (app.stream("in", value_serde="bytes").group_by_key().window(SessionWindows(120, grace=60))
            .count(name="counts").to_stream().to("out"))
        return app
    return make


def session_sum_app(cache: int = 0, **settings: Any) -> Callable[[], Application]:
    """A sum per key and session, late records dead-lettered, a step after it (tombstones pass through it)."""
    def make() -> Application:
        app = Application("folds", cache_max_bytes=cache, **settings)
        (app.stream("in", value_serde="json").group_by_key()
            .window(SessionWindows(200, grace=40), late_records="dead_letter")
            .sum(lambda v: v["n"], name="total").to_stream()
            .map_values(lambda t: None if t is None else t * 10, name="tens").to("out"))
        return app
    return make


def exploded_session_app(cache: int = 0, **settings: Any) -> Callable[[], Application]:
    """Records become one or two under other keys, some raise after their first (none of a failed record's
    updates, tombstones or sessions may stay), then a count in sessions whose keys are written binary."""
    def make() -> Application:
        app = Application("folds", cache_max_bytes=cache, **settings)
        (app.stream("in", value_serde="json").filter(lambda key, v: v["n"] != 3, name="not-three")
            .flat_map_values(copies, name="copies").group_by_key()
            .window(SessionWindows(80), windowed_key="binary").count(name="counts").to_stream().to("out"))
        return app
    return make


def app_api_session_app(cache: int = 0, **settings: Any) -> Callable[[], Application]:
    """`Application.count` with session windows, as the peers' session job is written."""
    def make() -> Application:
        app = Application("folds", cache_max_bytes=cache, **settings)
        app.count("in", "out", name="counts", windows=SessionWindows(100, grace=100), windowed_key="binary")
        return app
    return make


APPS = pytest.mark.parametrize("make", [session_count_app, session_sum_app, exploded_session_app, app_api_session_app],
                               ids=["session-count", "session-sum", "exploded-session", "app-count"])


def tombstones(out: list[tuple[Any, ...]]) -> int:
    return sum(value == b"" or value is None for _, _, _, value, *_ in out)


CACHES = pytest.mark.parametrize("cache", [0, 1 << 20], ids=["uncached", "cached"])
#: apps with records that fail in the aggregation (a sum of "x") or after it (a flat_map raising midway)
FAILING = (session_sum_app, exploded_session_app)


@CACHES
@APPS
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_folded_session_batch_commits_what_the_record_at_a_time_loop_commits(monkeypatch, make, seed, cache):
    inputs = raw_inputs(900, seed)
    out, folds = run_both(monkeypatch, make(cache, max_records_per_batch=200), [inputs[:450], inputs[450:]])
    if cache and make in FAILING:
        # a record that fails after its update of a session the cache got at one of the batch's punctuations (a
        # merged session's removal comes before the aggregator runs) is the record-at-a-time loop's: its
        # rollback moves that session's entry in the cache
        assert folds.stopped and folds.folded
    else:
        assert folds.folded == len(inputs) and not folds.stopped  # every record folded, none one at a time
    assert out["out"] and out["folds-dlq"]
    assert tombstones(out["out"])  # sessions merged away (with a cache, those forwarded before)
    # uncached, each update made into its output at once, unless a step after the sessions takes it
    assert bool(folds.made) == (not cache and make is not session_sum_app)
    if cache:  # the latest of each session per batch, once: fewer outputs than records
        assert len(out["out"]) < len(inputs) // 2
    changelog = out["folds-total-store-changelog" if make is session_sum_app else "folds-counts-store-changelog"]
    assert any(value == b"" for *_, value, _, _ in changelog)  # merged and expired sessions' tombstones
    assert len(out["(results)"]) >= 6


@CACHES
@pytest.mark.parametrize("make", [session_count_app, session_sum_app, exploded_session_app],
                         ids=["session-count", "session-sum", "exploded-session"])
def test_a_fold_meeting_many_keys_of_a_small_store_reads_it_in_one_scan_and_commits_the_same(monkeypatch, make,
                                                                                              cache):
    scans, lookups = [], []
    real_scan, real_find = SessionStore.open_sessions, SessionStore.find_sessions

    def scan(store: SessionStore, earliest_end: int) -> Any:
        scans.append(earliest_end)
        return real_scan(store, earliest_end)

    def find(store: SessionStore, *args: Any) -> Any:
        lookups.append(args)
        return real_find(store, *args)

    monkeypatch.setattr(SessionStore, "open_sessions", scan)
    monkeypatch.setattr(SessionStore, "find_sessions", find)
    # 120 keys, nearly all met in every batch of 600 records (after 64 lookups a batch reads the rest in one
    # scan), each every ~120 ms: within the gap of its last session often
    rng = random.Random(6)
    inputs = [(topic, b"k%d" % rng.randrange(120) if key and key.startswith(b"k") else key, value,
               ts if ts < 0 else 10_000 + i - rng.randrange(0, 30), *rest)
              for i, (topic, key, value, ts, *rest) in enumerate(raw_inputs(3_000, 6))]
    feeds = [inputs[i:i + 600] for i in range(0, 3_000, 600)]
    out, folds = run_both(monkeypatch, make(cache, max_records_per_batch=600), feeds)
    assert (folds.folded == len(inputs) and not folds.stopped) or (cache and make in FAILING)
    assert len(scans) >= (1 if cache and make in FAILING else 4) and tombstones(out["out"])
    assert len(lookups) < 2 * len(inputs)  # (the loop without the fold looks up every record's key; the fold few)


@CACHES
@APPS
def test_records_stamped_by_an_extractor_fold_into_the_sessions_the_record_at_a_time_loop_puts_them_in(
        monkeypatch, make, cache):
    out = run_stamped(monkeypatch, make(cache, max_records_per_batch=200, timestamp=event_time),
                      hands_over=bool(cache) and make in FAILING)
    assert tombstones(out["out"])


def test_records_far_out_of_order_merge_sessions_and_late_ones_are_judged_as_the_loop_judges_them(monkeypatch):
    # a third of the records far behind: some bridge two sessions of their key, some are late, some in time
    rng = random.Random(5)
    inputs = [("in", b"k%d" % rng.randrange(4), json.dumps({"n": 1, "i": i}).encode(),
               20_000 + i * 60 - (rng.randrange(100, 900) if rng.random() < 0.3 else 0), None, None)
              for i in range(600)]
    for make in (session_count_app, session_sum_app):
        out, folds = run_both(monkeypatch, make(max_records_per_batch=70), [inputs])
        assert folds.folded == len(inputs) and not folds.stopped
        if make is session_sum_app:  # dead letters naming the session and the stream time
            letters = [dict(h) for *_, h, _ in out["folds-dlq"]]
            assert letters and all(h["eos.dlq.stage"] == b"process" for h in letters)
            assert all(h["eos.dlq.error"].startswith(b"LateRecordError: late record at ") and b"its session ["
                       in h["eos.dlq.error"] for h in letters)
        else:
            assert not out["folds-dlq"] and len(out["out"]) > 600  # tombstones besides an update per record kept


def test_final_sessions_are_not_folded(monkeypatch):
    def final() -> Application:
        app = Application("folds")
        app.stream("in", value_serde="bytes").group_by_key().window(SessionWindows(100), emit="final").count(
            name="counts").to_stream().to("out")
        return app

    out, folds = run_both(monkeypatch, final, [raw_inputs(300, 3, bad=False)])
    assert folds.calls == 0 and out["out"]


@pytest.mark.parametrize("make", [session_count_app, session_sum_app], ids=["session-count", "session-sum"])
def test_a_cache_too_small_for_the_batch_stops_the_session_fold_where_it_would_evict(monkeypatch, make):
    inputs = raw_inputs(600, 3, keys=200)
    out, folds = run_both(monkeypatch, make(3_000, max_records_per_batch=300), [inputs])  # room for ~30 sessions
    assert folds.stopped and 0 < folds.folded < len(inputs)
    assert tombstones(out["out"])


@pytest.mark.parametrize("make", [session_count_app, session_sum_app, exploded_session_app],
                         ids=["session-count", "session-sum", "exploded-session"])
@pytest.mark.parametrize("cache", [0, 1 << 20, 500], ids=["uncached", "cached", "small-cache"])
def test_folded_sessions_stay_exactly_once_when_batches_crash(monkeypatch, make, cache):
    check_crashes(monkeypatch, make, cache, encoded=make is session_count_app, at_once=make is not session_sum_app,
                  failing=make in FAILING)


def reference_sessions(records: Iterable[tuple[Any, int]], gap: int) -> dict[tuple[Any, int, int], int]:
    """Each key's sessions (key, start, end) and their counts, from all its records (key, timestamp) at once:
    what a session aggregation leaves when none of them is late nor within the gap of a closed session."""
    by_key: dict[Any, list[int]] = {}
    for key, ts in records:
        by_key.setdefault(key, []).append(ts)
    sessions = {}
    for key, times in by_key.items():
        times.sort()
        start = end = times[0]
        n = 0
        for t in times:
            if t - end > gap:
                sessions[(key, start, end)] = n
                start, n = t, 0
            end, n = t, n + 1
        sessions[(key, start, end)] = n
    return sessions


def test_each_sessions_last_count_is_the_reference_s_and_every_replaced_session_is_removed(monkeypatch):
    """The peers' session job's shape through the fold, against sessions computed from the input: what is left
    after each key's tombstones is exactly the reference's sessions with their counts."""
    folds = Folds(monkeypatch)
    rng = random.Random(12)
    # out of order by less than the gap (100) and grace (100): none late, none within the gap of a closed session
    inputs = [(f"k{rng.randrange(50)}".encode(), b"x", 1_000 + i * 3 + rng.randrange(0, 90)) for i in range(3_000)]
    driver = TopologyTestDriver(app_api_session_app(max_records_per_batch=400)())
    driver.pipe_many("in", inputs, serialized=True)
    alive = surviving((r.key.key, r.key.start, r.key.end, r.value) for r in driver.read("out"))
    assert folds.folded == len(inputs) and not folds.stopped
    assert alive == reference_sessions([(key.decode(), ts) for key, _, ts in inputs], gap=100)


def surviving(updates: Iterable[tuple[Any, int, int, Any]]) -> dict[tuple[Any, int, int], Any]:
    """The sessions (key, start, end) with their last values that committed updates (key, start, end, value; None:
    a tombstone) leave once each tombstone removed its session; a tombstone for a session not there fails."""
    alive: dict[tuple[Any, int, int], Any] = {}
    for key, start, end, value in updates:
        if value is None:
            assert alive.pop((key, start, end), None) is not None, f"a tombstone for {(key, start, end)}, not there"
        else:
            alive[key, start, end] = value
    return alive
