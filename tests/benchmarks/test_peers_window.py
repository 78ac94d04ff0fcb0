"""The peers benchmark's window job: the framework's outputs, read back as the benchmark reads every peer's,
are each key's and window's counts computed from the input as the benchmark loads it."""

from __future__ import annotations

import random
from collections import Counter

from benchmarks.peers.__main__ import EVENT_SPAN_MS, _aggregated, event_time, order
from benchmarks.peers.jobs import WINDOW_MS, define
from eos import Application
from eos.testing import TopologyTestDriver


def test_the_window_job_counts_each_key_per_window_as_the_benchmark_expects():
    n, first = 3_000, 1_700_000_000_123
    rng = random.Random(1)
    records, expected = [], Counter()
    for i in range(n):
        key, value = order(rng, i, 40)
        timestamp = event_time(first, i, n)
        records.append((key.encode(), value, timestamp))
        expected[key, timestamp - timestamp % WINDOW_MS] += 1
    assert event_time(first, n - 1, n) - first == EVENT_SPAN_MS
    app = Application("peers-window", max_records_per_batch=500)
    define(app, "window", "in", "out")
    driver = TopologyTestDriver(app, partitions=4)
    driver.pipe_many("in", records, serialized=True)
    outputs = driver.create_output_topic("out", "bytes", "bytes").read_records_to_list()
    assert len(outputs) == n  # one output per input
    last: dict = {}
    for record in outputs:
        window, count = _aggregated("eos", "window", record.key, record.value)
        assert count == last.get(window, 0) + 1  # every update, in order
        last[window] = count
    assert last == dict(expected)
    assert len({start for _key, start in expected}) == EVENT_SPAN_MS // WINDOW_MS + 1  # ten windows and a bit


def test_each_peer_s_windowed_output_reads_back_alike():
    start = 1_700_000_040_000
    framework = b"k7" + (start + WINDOW_MS).to_bytes(8, "big") + start.to_bytes(8, "big")
    kstreams = b"k7" + start.to_bytes(8, "big")
    count = (5).to_bytes(8, "big")
    assert _aggregated("eos", "window", framework, count) == (("k7", start), 5)
    assert _aggregated("eos-cache", "window", framework, count) == (("k7", start), 5)
    assert _aggregated("kstreams", "window", kstreams, count) == (("k7", start), 5)
    quix = b'{"start": %d, "end": %d, "value": 5}' % (start, start + WINDOW_MS)
    assert _aggregated("quix", "window", b"k7", quix) == (("k7", start), 5)
    assert _aggregated("kstreams", "count", b"k7", count) == ("k7", 5)


def test_the_window_field_job_counts_by_the_event_time_in_each_value():
    """The window job with event time read from each value (the order's "id" as milliseconds), whatever the
    records' own timestamps: its counts are the benchmark's `windows_by_id`, which `preload` computes alike."""
    n = 3_000
    rng = random.Random(2)
    records, expected = [], Counter()
    for i in range(0, n * 50, 50):  # ids 50 apart: 150 s of event time, three windows
        key, value = order(rng, i, 40)
        records.append((key.encode(), value, 1_700_000_000_000 - i))  # (its own timestamps run backwards)
        expected[key, i - i % WINDOW_MS] += 1
    app = Application("peers-window-field", max_records_per_batch=500)
    define(app, "window-field", "in", "out")
    driver = TopologyTestDriver(app, partitions=4)
    driver.pipe_many("in", records, serialized=True)
    last: dict = {}
    for record in driver.create_output_topic("out", "bytes", "bytes").read_records_to_list():
        window, count = _aggregated("eos", "window-field", record.key, record.value)
        assert count == last.get(window, 0) + 1 and record.timestamp < n * 50  # (stamped with the value's "id")
        last[window] = count
    assert last == dict(expected) and not driver.dead_letters()
    assert len({start for _key, start in expected}) == 3
    assert sum(r.records_folded for r in driver.results) == n  # the fold took them all
