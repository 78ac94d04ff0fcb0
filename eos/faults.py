"""Fault-injection points in the task protocol, for tests and chaos scenarios.

A hook is a picklable callable `hook(point: FaultPoint) -> None` registered on the application
(`app.fault_hooks.on("before_commit", fn)`). It runs inside the Spark task at that point and may raise,
sleep, SIGSTOP or SIGKILL its own process. Points, in protocol order:

* `after_read`     records read, nothing produced yet
* `after_produce`  outputs produced inside the open transaction, offsets not yet added
* `before_commit`  offsets added, `commit_transaction()` not yet called
* `after_commit`   the transaction committed, local state not yet updated
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["FaultHooks", "FaultPoint", "POINTS"]

PointName = Literal["after_read", "after_produce", "before_commit", "after_commit"]
POINTS: tuple[str, ...] = ("after_read", "after_produce", "before_commit", "after_commit")


@dataclass(frozen=True)
class FaultPoint:
    name: str
    task: str
    partition: int
    batch: int
    spark_attempt: int
    batch_attempt: int


@dataclass
class FaultHooks:
    hooks: dict[str, list[Callable[[FaultPoint], None]]] = field(default_factory=dict)

    def on(self, point: PointName, hook: Callable[[FaultPoint], None]) -> None:
        if point not in POINTS:
            raise ValueError(f"unknown fault point {point!r}; points are {POINTS}")
        self.hooks.setdefault(point, []).append(hook)

    def clear(self) -> None:
        self.hooks.clear()

    def fire(self, point: FaultPoint) -> None:
        for hook in self.hooks.get(point.name, ()):
            hook(point)
