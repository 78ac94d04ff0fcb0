"""The peers benchmark's sliding job: its reference (the windows and updates Kafka Streams' sliding windows make of
records in order) on the example of Kafka Streams' documentation, and the framework's outputs, read back as the
benchmark reads every peer's, verified against it."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from benchmarks.peers.__main__ import Expected, Run, event_time, order, verify_sliding
from benchmarks.peers.jobs import SLIDING_MS, define
from eos import Application
from eos.testing import TopologyTestDriver


def test_the_reference_makes_the_windows_of_kafka_streams_documented_example():
    # SlidingWindows' javadoc: a time difference of 5,000 ms, records of key A at 8000, 9200 and 12400
    assert SLIDING_MS == 5_000
    expected = Expected()
    for timestamp in (8_000, 9_200, 12_400):
        expected.add_to_sliding("A", timestamp)
    windows = {3_000: 1, 4_200: 2, 7_400: 3, 8_001: 2, 9_201: 1}
    assert {start: expected.sliding_count("A", start) for start in windows} == windows
    assert expected.sliding_windows() == 5
    # 8000 makes its own window; 9200 its own and the one after 8000; 12400 its own, and falls in 8000's and 9200's
    assert expected.sliding_updates == 1 + 2 + 3
    for not_a_window in (3_001, 8_000, 12_401, 13_000):
        assert expected.sliding_count("A", not_a_window) is None
    assert expected.sliding_count("B", 3_000) is None


def test_the_reference_counts_the_windows_kafka_streams_makes_twice():
    # a record a time difference + 1 ms after the previous one, whose window after it is the record's own: Kafka
    # Streams makes it twice where it finds the previous record through the window after an earlier one
    expected = Expected()
    for timestamp in (8_000, 13_001, 13_001, 20_000, 23_000, 28_001):
        expected.add_to_sliding("A", timestamp)
    assert expected.sliding_doubled == 1  # 28001 (23000 is in 20000's window after); not 13001 (8000 is in none)
    assert expected.sliding_count("A", 8_001) == 2 and expected.sliding_count("A", 23_001) == 1
    assert expected.sliding_windows() == 6  # 3000, 8001, 15000, 18000, 20001, 23001
    assert expected.sliding_updates == 1 + 1 + 1 + 1 + 2 + 1


def _messages(records):
    return [[SimpleNamespace(key=lambda r=r: r.key, value=lambda r=r: r.value) for r in records]]


def _run_job(**settings):
    n, first = 3_000, 1_700_000_000_123
    rng = random.Random(1)
    records, expected = [], Expected()
    for i in range(n):
        key, value = order(rng, i, 15)  # a key's records ~3 s apart: one to three in a window
        timestamp = event_time(first, i, n)
        records.append((key.encode(), value, timestamp))
        expected.add_to_sliding(key, timestamp)
    app = Application("peers-sliding", max_records_per_batch=500, **settings)
    define(app, "sliding", "in", "out")
    driver = TopologyTestDriver(app, partitions=4)
    driver.pipe_many("in", records, serialized=True)
    return driver.create_output_topic("out", "bytes", "bytes").read_records_to_list(), expected


@pytest.fixture(scope="module")
def job_output():
    return _run_job()


def test_the_framework_s_sliding_job_passes_the_benchmark_s_verification(job_output):
    outputs, expected = job_output
    run = Run("eos", "sliding", 1)
    verify_sliding(run, _messages(outputs), expected)
    assert run.outputs == expected.sliding_updates > len(expected.sliding_times) * 10
    assert expected.sliding_updates > 3_000 * 1.5  # most records update more than their own window
    assert run.verified.startswith(f"{expected.sliding_windows():,} windows' final counts exact")


def test_with_a_record_cache_the_job_passes_the_same_verification():
    outputs, expected = _run_job(cache_max_bytes=20_000)
    run = Run("eos-cache", "sliding", 1)
    verify_sliding(run, _messages(outputs), expected)
    assert expected.sliding_windows() <= run.outputs < expected.sliding_updates  # the latest per window per commit


@pytest.mark.parametrize("fault", ["repeated", "lost", "last lost"])
def test_the_verification_finds_an_update_applied_twice_or_lost(job_output, fault):
    outputs, expected = job_output
    changed = list(outputs)
    if fault == "repeated":
        changed.insert(100, changed[99])
    elif fault == "lost":  # an update a later one of its window follows
        changed.remove(next(r for i, r in enumerate(changed) if any(o.key == r.key for o in changed[i + 1:])))
    else:  # a window's only update: the window is missing
        counts: dict = {}
        for record in changed:
            counts[record.key] = counts.get(record.key, 0) + 1
        changed.remove(next(r for r in changed if counts[r.key] == 1))
    with pytest.raises(RuntimeError, match="sliding"):
        verify_sliding(Run("eos", "sliding", 1), _messages(changed), expected)
    cached = Run("eos-cache", "sliding", 1)  # a cache's fewer outputs are fine; a repeat or a lost window is not
    if fault == "lost":
        verify_sliding(cached, _messages(changed), expected)
    else:
        with pytest.raises(RuntimeError, match="sliding"):
            verify_sliding(cached, _messages(changed), expected)
