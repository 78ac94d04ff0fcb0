"""The peers benchmark's latency table sets each peer against Kafka Streams round by round: the difference of
the two runs of a round, which the round's conditions move alike. A malformed --broker-feature is refused
before anything starts."""

from __future__ import annotations

import pytest

from benchmarks.peers.__main__ import Latency, _differences_cell, measure, paired_differences, report
from benchmarks.peers.__main__ import main as peers_main


def runs() -> list[Latency]:
    rows = [("eos", 3, 517, 1008), ("kstreams", 3, 514, 1007), ("eos", 1, 522, 1013), ("kstreams", 1, 517, 1009),
            ("kstreams", 2, 519, 1012), ("eos", 2, 519, 1011), ("eos", 4, 530, 1030)]  # round 4: no Kafka Streams
    return [Latency(peer, rnd, 2000, 120_000, p50, p99, p99 + 80) for peer, rnd, p50, p99 in rows]


def test_each_round_is_set_against_the_same_rounds_run_and_a_round_without_one_is_left_out():
    assert paired_differences(runs(), "eos", "kstreams", "p99_ms") == [4, -1, 1]
    assert paired_differences(runs(), "eos", "kstreams", "p50_ms") == [5, 0, 3]


def test_a_peer_is_not_set_against_itself_nor_against_one_that_did_not_run():
    assert paired_differences(runs(), "kstreams", "kstreams", "p99_ms") == []
    assert paired_differences(runs(), "eos", "kstreams-cache", "p99_ms") == []


def test_the_cell_gives_the_mean_and_the_range():
    assert _differences_cell([4, -1, 1]) == "+1.3 ms (-1 to +4)"
    assert _differences_cell([-2.5, -0.5]) == "-1.5 ms (-2 to +0)"
    assert _differences_cell([]) == "-"


def test_the_report_keeps_the_differences():
    summary = report([], runs(), 50_000)
    assert summary["latency"]["eos"]["minus_kstreams_ms"] == {"p50_ms": [5, 0, 3], "p99_ms": [4, -1, 1]}
    assert summary["latency"]["kstreams"]["minus_kstreams_ms"] == {"p50_ms": [], "p99_ms": []}


def test_the_peers_benchmark_refuses_a_malformed_feature_before_it_starts_anything(capsys):
    with pytest.raises(SystemExit) as info:
        peers_main(["--broker-feature", "transaction.version"])
    assert info.value.code == 2
    assert "NAME=LEVEL" in capsys.readouterr().err


def test_the_measure_counts_the_records_after_the_warm_up_and_names_the_slowest():
    sent = [float(i) for i in range(300)]
    seen = {i: sent[i] + 0.5 + (i % 10) / 1000 for i in range(300)}
    seen[3] = sent[3] + 9.0  # in the warm-up: not counted
    seen[150] = sent[150] + 1.2
    lat = Latency("eos", 1, 2000)
    assert measure(lat, sent, seen, 100) == 150
    assert lat.measured == 200
    assert lat.max_ms == pytest.approx(1200)
    assert lat.p50_ms == pytest.approx(505)
    assert lat.p99_ms == pytest.approx(509)
