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
    from eos.testing.topics import TestInputTopic, TestOutputTopic

__all__ = ["Match", "CrashWorker", "StopSelf", "MarkWhile", "RaiseError", "TopologyTestDriver", "TestRecord",
           "DeadLetter", "CrashPoint", "ExactlyOnceReport", "TestInputTopic", "TestOutputTopic"]

_DRIVER = {"TopologyTestDriver", "TestRecord", "DeadLetter", "CrashPoint", "ExactlyOnceReport"}
_TOPICS = {"TestInputTopic", "TestOutputTopic"}


def __getattr__(name: str) -> Any:
    if name in _DRIVER:
        from eos.testing import driver

        return getattr(driver, name)
    if name in _TOPICS:
        from eos.testing import topics

        return getattr(topics, name)
    raise AttributeError(f"module 'eos.testing' has no attribute {name!r}")
