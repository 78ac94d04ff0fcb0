"""The peers benchmark's session job: the framework's outputs, read back and verified as the benchmark verifies
every peer's, hold each key's sessions as computed from the input as the benchmark loads it; and that
verification fails outputs that apply a record twice, lose a tombstone or end a session short."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from benchmarks.peers.__main__ import Expected, Run, _session, event_time, order, verify_sessions
from benchmarks.peers.jobs import SESSION_GAP_MS, define
from eos import Application
from eos.testing import TopologyTestDriver


@dataclass
class Message:
    """A committed output as the benchmark's scan gives it."""
    k: bytes
    v: bytes | None

    def key(self) -> bytes:
        return self.k

    def value(self) -> bytes | None:
        return self.v


def framework_outputs(n: int, keys: int, cache_max_bytes: int = 0) -> tuple[list[Message], Expected]:
    """The session job run by the test driver over n orders on `keys` keys, stamped as the benchmark stamps
    them (their event time spread over ten minutes), and what the benchmark expects of them."""
    first = 1_700_000_000_123
    rng = random.Random(3)
    records, expected, started = [], Expected(), {}
    for i in range(n):
        key, value = order(rng, i, keys)
        timestamp = event_time(first, i, n)
        records.append((key.encode(), value, timestamp))
        expected.add_to_session(key, timestamp, started)
    app = Application("peers-session", max_records_per_batch=500, cache_max_bytes=cache_max_bytes)
    define(app, "session", "in", "out")
    driver = TopologyTestDriver(app, partitions=4)
    driver.pipe_many("in", records, serialized=True)
    outputs = driver.create_output_topic("out", "bytes", "bytes").read_records_to_list()
    return [Message(r.key, r.value) for r in outputs], expected


def test_the_session_job_counts_each_key_per_session_as_the_benchmark_expects():
    n = 4_000
    outputs, expected = framework_outputs(n, 40)  # ~6 s between a key's records, as in the benchmark
    assert 0.4 * n < expected.merges < 0.7 * n  # both: sessions extended and sessions started
    run = Run("eos", "session", 1)
    verify_sessions(run, [outputs], n, expected)
    assert run.outputs == n + expected.merges  # an output per input, a tombstone per extension
    assert run.verified.startswith(f"{len(expected.sessions):,} sessions' final counts exact")


def test_with_a_record_cache_the_job_passes_the_same_verification():
    n = 4_000
    outputs, expected = framework_outputs(n, 40, cache_max_bytes=64 * 1024)
    verify_sessions(Run("eos-cache", "session", 1), [outputs], n, expected)


def test_the_verification_fails_a_record_applied_twice_a_lost_tombstone_and_a_short_session():
    n = 1_000
    outputs, expected = framework_outputs(n, 100)
    extended = next(i for i, m in enumerate(outputs) if m.value() is None)  # a tombstone; its update follows
    cases = {  # (the outputs, what the verification says of them)
        "applied twice": ([*outputs[:extended + 2], outputs[extended + 1], *outputs[extended + 2:]],
                          r" 1 counts repeated or going back"),
        "tombstone lost": (outputs[:extended] + outputs[extended + 1:], r" 1 replaced sessions without a tombstone"),
        "last update lost": (outputs[:-1], r": 1 of [\d,]+ sessions without their exact last count"),
    }
    for broken, says in cases.values():
        with pytest.raises(RuntimeError, match=says):
            verify_sessions(Run("eos", "session", 1), [broken], n, expected)


def test_each_peer_s_session_output_reads_back_alike():
    start, end = 1_700_000_040_000, 1_700_000_047_000
    windowed = b"k7" + end.to_bytes(8, "big") + start.to_bytes(8, "big")  # the framework's and Kafka Streams'
    count = (5).to_bytes(8, "big")
    for peer in ("eos", "eos-cache", "kstreams", "kstreams-cache"):
        assert _session(peer, windowed, count) == ("k7", start, end, 5)
        assert _session(peer, windowed, None) == ("k7", start, end, None)
    quix = b'{"start": %d, "end": %d, "value": 5}' % (start, end + 1)  # its end is the last record's time + 1
    assert _session("quix", b"k7", quix) == ("k7", start, end, 5)


def test_a_record_exactly_one_gap_after_its_session_s_end_extends_it_and_one_at_its_end_only_counts():
    expected, started = Expected(), {}
    for timestamp in (0, SESSION_GAP_MS, SESSION_GAP_MS, 2 * SESSION_GAP_MS + 1):
        expected.add_to_session("k", timestamp, started)
    assert dict(expected.sessions) == {("k", 0): 3, ("k", 2 * SESSION_GAP_MS + 1): 1}
    assert expected.merges == 1  # (the second record at SESSION_GAP_MS leaves the session as it is: no tombstone)
    assert expected.restated == 1  # (Kafka Streams writes a tombstone and the same session again)
    instant, started = Expected(), {}
    for timestamp in (7, 7):  # a session of one instant: the same merged window, no tombstone anywhere
        instant.add_to_session("j", timestamp, started)
    assert (instant.merges, instant.restated, dict(instant.sessions)) == (0, 0, {("j", 7): 2})
