"""How fast this machine is while a benchmark runs, so that runs of different days can be told apart.

On the shared two-core machine these benchmarks run on, both peers' rates moved by 2-3x from one day to the
next (docs/measurements.md, 2026-11-30), and the ratios with them. `python -m benchmarks.peers` times the
work below before each run and reports the steal over its rounds:

* `python_ms`: the best of several timings of one fixed piece of Python work (parse a ~100 B JSON order, add a
  field, serialize it, count its key: 20,000 times), the kind of work a Python worker does per record. The
  best timing is the least disturbed one; a slower day shows as a larger best. Taken just after a run, it also
  shares the machine with the broker's work on what the run wrote (149-191 ms against 111-114 on the idle
  machine minutes later, 2026-11-30): it tells fast days and slow spells apart, not one run's conditions
  exactly.
* `steal`: the share of the machine's CPU time the hypervisor gave to others (`/proc/stat`), over the run.

    python -m benchmarks.calibrate        # prints one sample
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CpuTimes", "python_ms", "cpu_times", "steal_share", "WORK_RECORDS"]

#: records of the fixed work per timing
WORK_RECORDS = 20_000
_ORDERS = [json.dumps({"id": i, "customer": f"c{i % 97}", "qty": i % 9 + 1, "price": 12.5 + i % 7}).encode()
           for i in range(100)]


def _work() -> int:
    counts: dict[str, int] = {}
    n = 0
    for i in range(WORK_RECORDS):
        order = json.loads(_ORDERS[i % 100])
        order["total"] = order["qty"] * order["price"]
        n += len(json.dumps(order))
        counts[order["customer"]] = counts.get(order["customer"], 0) + 1
    return n + len(counts)


def python_ms(repeats: int = 5) -> float:
    """The fastest of `repeats` timings of the fixed work, in milliseconds."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        _work()
        best = min(best, time.perf_counter() - t0)
    return best * 1000


@dataclass(frozen=True)
class CpuTimes:
    """The machine's CPU time so far, in clock ticks: busy (user, nice, system, irq, softirq), idle (with I/O
    wait), and stolen by the hypervisor."""

    busy: int
    idle: int
    steal: int


def cpu_times(stat: str | None = None) -> CpuTimes | None:
    """The first line of `/proc/stat` (or `stat`'s), or None where there is none (not Linux)."""
    if stat is None:
        try:
            stat = Path("/proc/stat").read_text()
        except OSError:
            return None
    lines = stat.splitlines()
    fields = lines[0].split() if lines else []
    if not fields or fields[0] != "cpu":
        return None
    ticks = [int(f) for f in fields[1:]] + [0] * 8
    user, nice, system, idle, iowait, irq, softirq, steal = ticks[:8]
    return CpuTimes(user + nice + system + irq + softirq, idle + iowait, steal)


def steal_share(before: CpuTimes | None, after: CpuTimes | None) -> float | None:
    """The share of the machine's CPU time stolen between two readings (None without both, or without time)."""
    if before is None or after is None:
        return None
    busy, idle, steal = after.busy - before.busy, after.idle - before.idle, after.steal - before.steal
    total = busy + idle + steal
    return steal / total if total > 0 else None


def main() -> None:
    before = cpu_times()
    ms = python_ms()
    steal = steal_share(before, cpu_times())
    print(f"the fixed Python work ({WORK_RECORDS:,} records): {ms:.1f} ms (best of 5)"
          + (f"; steal {steal:.1%} meanwhile" if steal is not None else ""))


if __name__ == "__main__":
    main()
