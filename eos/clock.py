"""The wall clock the framework reads where it decides something by the time of day: wall-clock
punctuation, the `wall_clock` timestamp extractor, and what a topic accepts (timestamps against the broker's
clock). One source, so that `eos.testing.TopologyTestDriver` can move it (`advance_wall_clock`) and run the
same code deterministically."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["wall_time", "wall_ms", "clock_source"]

_source: Callable[[], float] = time.time


def wall_time() -> float:
    """Seconds since the epoch, from the current source (the system clock unless a test driver set one)."""
    return _source()


def wall_ms() -> int:
    return int(_source() * 1000)


@contextmanager
def clock_source(source: Callable[[], float]) -> Iterator[None]:
    """Read the wall clock from `source` inside the block (a test driver's clock)."""
    global _source
    previous, _source = _source, source
    try:
        yield
    finally:
        _source = previous
