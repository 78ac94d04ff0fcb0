"""The peers benchmark's reading of the broker's JIT: the CPU time of its JVM's compiler threads."""

from __future__ import annotations

import math
from pathlib import Path

from benchmarks.peers.__main__ import CLOCK_TICKS, _broker_cell, _jit_cpu_s


def _thread(proc: Path, pid: int, tid: int, comm: str, utime: int, stime: int) -> None:
    task = proc / str(pid) / "task" / str(tid)
    task.mkdir(parents=True)
    (task / "comm").write_text(comm + "\n")
    # fields after the command: state, then ppid ... utime is the 12th, stime the 13th
    rest = ["S"] + ["0"] * 10 + [str(utime), str(stime)] + ["0"] * 30
    (task / "stat").write_text(f"{tid} ({comm}) " + " ".join(rest) + "\n")


def test_only_the_compiler_threads_of_every_broker_count(tmp_path):
    _thread(tmp_path, 10, 10, "java", 500, 50)
    _thread(tmp_path, 10, 11, "C2 CompilerThre", 300, 20)
    _thread(tmp_path, 10, 12, "C1 CompilerThre", 40, 2)
    _thread(tmp_path, 10, 13, "data-plane-kafk", 900, 90)
    _thread(tmp_path, 20, 21, "C2 CompilerThre", 7, 1)
    (tmp_path / "10" / "task" / "14").mkdir()  # a thread that ended while it was listed: no comm, no stat
    assert _jit_cpu_s([10, 20], tmp_path) == (300 + 20 + 40 + 2 + 7 + 1) / CLOCK_TICKS


def test_no_broker_or_a_broker_gone_reads_as_unknown(tmp_path):
    assert math.isnan(_jit_cpu_s([], tmp_path))
    _thread(tmp_path, 10, 11, "C2 CompilerThre", 300, 20)
    assert math.isnan(_jit_cpu_s([10, 99], tmp_path))


def test_the_broker_cell_gives_the_jit_share_where_there_is_one():
    assert _broker_cell(0.2849, 0.1111) == "0.28 (JIT 0.11)"
    assert _broker_cell(0.2849, float("nan")) == "0.28"
    assert _broker_cell(float("nan"), float("nan")) == "-"
    assert _broker_cell(None, None) == "-"
