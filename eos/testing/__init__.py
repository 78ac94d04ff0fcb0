"""Testing a job: `TopologyTestDriver` runs an application in one process on an in-memory Kafka, with the
framework's own planner, batch protocol, processors, stores, windows, joins, punctuation and dead letters,
crashes included; picklable fault hooks (`MarkWhile`, `CrashWorker`, ...) for jobs on a real cluster.

The driver is imported on first use: Spark's Python workers import this package for the hooks only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from eos.testing.hooks import CrashWorker, MarkWhile, Match, RaiseError, StopSelf

if TYPE_CHECKING:
    from eos.testing.driver import CrashPoint, DeadLetter, ExactlyOnceReport, TestRecord, TopologyTestDriver

__all__ = ["Match", "CrashWorker", "StopSelf", "MarkWhile", "RaiseError", "TopologyTestDriver", "TestRecord",
           "DeadLetter", "CrashPoint", "ExactlyOnceReport"]

_DRIVER = {"TopologyTestDriver", "TestRecord", "DeadLetter", "CrashPoint", "ExactlyOnceReport"}


def __getattr__(name: str) -> Any:
    if name in _DRIVER:
        from eos.testing import driver

        return getattr(driver, name)
    raise AttributeError(f"module 'eos.testing' has no attribute {name!r}")
