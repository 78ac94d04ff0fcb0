"""Fault-injection hooks at points of the batch protocol, for tests and chaos scenarios.

A hook is a picklable callable `hook(point: FaultPoint) -> None` registered on the application
(`app.fault_hooks.on("before_commit", fn)`). It runs inside the Spark task at that point and may raise,
sleep, SIGSTOP or SIGKILL its own process. Points, in protocol order (`eos.worker.attempt`):

* `after_slice`    a slice of a streamed batch's outputs produced inside the open transaction, more input to
                   come (a task reading one input partition reads, processes and produces in slices)
* `before_top_up`  a streamed batch read to the end it was cut off at, about to take what arrived since (the
                   top-up): its outputs so far, the ledger's opening and the offsets committed before it are
                   in the open transaction
* `after_read`     records read and processed; nothing produced yet, or (streamed) every slice but the last
* `after_produce`  outputs produced inside the open transaction, offsets not yet added
* `before_commit`  offsets added, `commit_transaction()` not yet called
* `after_commit`   the transaction committed, local state not yet updated
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["FaultHooks", "FaultPoint", "HookPoint"]


class HookPoint(enum.StrEnum):
    AFTER_SLICE = "after_slice"
    BEFORE_TOP_UP = "before_top_up"
    AFTER_READ = "after_read"
    AFTER_PRODUCE = "after_produce"
    BEFORE_COMMIT = "before_commit"
    AFTER_COMMIT = "after_commit"


@dataclass(frozen=True)
class FaultPoint:
    """Where a hook fires: the point, the task and its partition, the batch, and the attempt numbers."""

    name: HookPoint
    task: str
    partition: int
    batch: int
    spark_attempt: int
    batch_attempt: int


@dataclass
class FaultHooks:
    hooks: dict[HookPoint, list[Callable[[FaultPoint], None]]] = field(default_factory=dict)

    def on(self, point: HookPoint | str, hook: Callable[[FaultPoint], None]) -> None:
        try:
            name = HookPoint(point)
        except ValueError:
            raise ValueError(f"unknown fault point {point!r}; points are {[p.value for p in HookPoint]}") from None
        self.hooks.setdefault(name, []).append(hook)

    def clear(self) -> None:
        self.hooks.clear()

    def fire(self, point: FaultPoint) -> None:
        for hook in self.hooks.get(point.name, ()):
            hook(point)
