"""The machine's speed beside a benchmark's figures (`benchmarks.calibrate`, `benchmarks.peers.machine_line`)."""

from __future__ import annotations

import itertools

import pytest

from benchmarks import calibrate
from benchmarks.calibrate import CpuTimes, cpu_times, python_ms, steal_share
from benchmarks.peers.__main__ import Run, machine_line

STAT = "cpu  1000 20 300 5000 40 6 7 80 0 0\ncpu0 500 10 150 2500 20 3 3 40 0 0\n"


def test_a_proc_stat_line_is_read_as_busy_idle_and_stolen_ticks():
    # user + nice + system + irq + softirq; idle + iowait; steal
    assert cpu_times(STAT) == CpuTimes(busy=1000 + 20 + 300 + 6 + 7, idle=5000 + 40, steal=80)
    assert cpu_times("cpu  1 2 3 4\n") == CpuTimes(busy=6, idle=4, steal=0)  # an old kernel's shorter line
    assert cpu_times("") is None and cpu_times("intr 1 2 3\n") is None


def test_the_stolen_share_is_of_all_the_time_between_two_readings():
    before, after = CpuTimes(100, 100, 0), CpuTimes(160, 130, 10)
    assert steal_share(before, after) == pytest.approx(10 / 100)
    assert steal_share(before, CpuTimes(150, 150, 0)) == 0.0
    assert steal_share(None, after) is None and steal_share(before, None) is None
    assert steal_share(before, before) is None  # no time passed


def test_the_machine_s_speed_is_the_fastest_timing(monkeypatch):
    ticks = iter([0.0, 0.3, 1.0, 1.1, 2.0, 2.5])  # timings of 0.3, 0.1 and 0.5 s
    monkeypatch.setattr(calibrate.time, "perf_counter", lambda: next(ticks))
    calls = itertools.count()
    monkeypatch.setattr(calibrate, "_work", lambda: next(calls))
    assert python_ms(3) == pytest.approx(100.0)
    assert next(calls) == 3  # the work ran once per timing
    with pytest.raises(ValueError, match="at least 1"):
        python_ms(0)


def test_the_fixed_work_takes_time_on_a_real_machine():
    assert 0 < python_ms(1) < 60_000


def test_the_report_names_the_range_each_peer_s_median_and_the_steal():
    runs = [Run("eos", "count", 1, machine_ms=110), Run("kstreams", "count", 1, machine_ms=190),
            Run("eos", "count", 2, machine_ms=114), Run("kstreams", "count", 2, machine_ms=112),
            Run("eos", "count", 3, machine_ms=190)]
    line = machine_line(runs, 0.012)
    assert "110-190 ms" in line
    assert "eos 114, kstreams 151" in line  # medians: a peer whose runs met a slow spell shows
    assert "1.2% of the CPU time stolen" in line
    assert "stolen" not in machine_line(runs, None)
    assert machine_line([Run("eos", "count", 1)], 0.0) == ""  # no timing taken
