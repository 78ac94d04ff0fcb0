"""Picklable fault hooks for `app.fault_hooks.on(point, hook)` (re-exported by `eos.testing`).

They run inside Spark tasks, so they live in an importable module (functions defined in a test file are
not importable on Spark workers).
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from eos.hooks import FaultPoint

__all__ = ["Match", "CrashWorker", "StopSelf", "MarkWhile", "RaiseError"]


@dataclass(frozen=True)
class Match:
    """Which points a hook acts on; None matches anything."""

    partition: int | None = None
    spark_attempt: int | None = None
    batch: int | None = None
    every_nth_batch: int | None = None

    def __call__(self, p: FaultPoint) -> bool:
        return ((self.partition is None or p.partition == self.partition)
                and (self.spark_attempt is None or p.spark_attempt == self.spark_attempt)
                and (self.batch is None or p.batch == self.batch)
                and (self.every_nth_batch is None or p.batch % self.every_nth_batch == 0))


@dataclass(frozen=True)
class CrashWorker:
    """`os._exit` the Python worker: the task dies mid-protocol, its transaction left open."""

    match: Match = Match()
    exit_code: int = 17

    def __call__(self, point: FaultPoint) -> None:
        if self.match(point):
            os._exit(self.exit_code)


@dataclass(frozen=True)
class StopSelf:
    """SIGSTOP the worker's own process (it becomes a zombie attempt when resumed later)."""

    match: Match = Match()

    def __call__(self, point: FaultPoint) -> None:
        if self.match(point):
            os.kill(os.getpid(), signal.SIGSTOP)


@dataclass(frozen=True)
class MarkWhile:
    """Create `<directory>/<point>-<task>-<pid>`, sleep `seconds`, remove it: an observable window
    (e.g. between produce and commit) in which a test can kill the job."""

    directory: str
    seconds: float = 0.3
    match: Match = Match()

    def __call__(self, point: FaultPoint) -> None:
        if not self.match(point):
            return
        marker = Path(self.directory) / f"{point.name}-{point.task}-{os.getpid()}"
        marker.touch()
        try:
            time.sleep(self.seconds)
        finally:
            marker.unlink(missing_ok=True)


@dataclass(frozen=True)
class RaiseError:
    """Raise an exception at the point (e.g. to make a Spark task fail and be retried)."""

    match: Match = Match()
    message: str = "injected fault"

    def __call__(self, point: FaultPoint) -> None:
        if self.match(point):
            raise RuntimeError(f"{self.message} at {point.name} of {point.task} batch {point.batch}")
