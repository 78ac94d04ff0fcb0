"""Task placement on Spark executors (driver side), in the spirit of Kafka Streams' KIP-441 assignor.

What the driver knows comes from task results: where each task ran and the changelog offsets its
stores reached there, and where standby copies were refreshed. From that, each batch:

* an active task stays on the executor where it last ran (its state is warm there);
* if that executor is gone, the task moves to the live executor whose copy has the least lag
  (changelog end - the copy's offset), else to the least loaded executor;
* standby copies go to `num_standby_replicas` other executors, keeping existing copies where possible;
* to even out load, a task moves only to an executor whose copy lags by at most `acceptable_lag`
  records; otherwise a warm-up copy is built there first (refreshed every batch) and the move happens
  once it has caught up.

Placement is best effort (Spark's `spark.locality.wait` decides in the end); correctness never depends on
it, only restore time does.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from eos.topology import TaskId

__all__ = ["TaskAssignor", "Move", "MoveReason", "TaskPlacement"]

#: store name -> changelog end offset (or the offset a copy reflects)
StoreOffsets = Mapping[str, int]


class MoveReason(enum.StrEnum):
    FIRST_PLACEMENT = "first placement"
    EXECUTOR_LOST = "executor lost"
    BALANCE = "balance"
    SPARK_PLACED_ELSEWHERE = "spark placed it elsewhere"


@dataclass(frozen=True)
class Move:
    task: TaskId
    source: str | None
    target: str
    reason: MoveReason
    lag: int | None


@dataclass(frozen=True)
class TaskPlacement:
    """Where a task runs and where its copies are, each copy with its lag in records."""

    active: str | None
    standbys: dict[str, int]
    warming: dict[str, int]


@dataclass
class TaskAssignor:
    standbys: int = 0
    acceptable_lag: int = 10_000
    active: dict[TaskId, str] = field(default_factory=dict)  # task -> executor id
    copies: dict[TaskId, dict[str, dict[str, int]]] = field(default_factory=dict)  # task -> executor -> offsets
    locations: dict[str, str] = field(default_factory=dict)  # executor id -> Spark location string
    warming: dict[TaskId, str] = field(default_factory=dict)  # task -> executor where a warm-up copy is built
    standby_of: dict[TaskId, list[str]] = field(default_factory=dict)  # task -> executors holding standbys

    # ------------------------------------------------------------------ learning from results
    def observe_active(self, task: TaskId, executor: str | None, location: str | None,
                       store_offsets: Mapping[str, int]) -> None:
        if executor is None or location is None:
            return
        self.active[task] = executor
        self.locations[executor] = location
        if store_offsets:
            self.copies.setdefault(task, {})[executor] = dict(store_offsets)

    def observe_copy(self, task: TaskId, executor: str | None, location: str | None,
                     store_offsets: Mapping[str, int]) -> None:
        if executor is None or location is None:
            return
        self.locations[executor] = location
        self.copies.setdefault(task, {})[executor] = dict(store_offsets)

    def forget_lost(self, alive: Iterable[str]) -> list[str]:
        """Drop what lived on executors that are gone; returns the lost executor ids."""
        alive = set(alive)
        lost = [e for e in self.locations if e not in alive]
        for executor in lost:
            self.locations.pop(executor, None)
            for copies in self.copies.values():
                copies.pop(executor, None)
        for task, executor in list(self.warming.items()):
            if executor in lost:
                del self.warming[task]
        return lost

    # ------------------------------------------------------------------ decisions
    def lag(self, task: TaskId, executor: str, ends: StoreOffsets) -> int:
        """Records a copy must replay to reach the changelogs' ends (no copy: all of them)."""
        offsets = self.copies.get(task, {}).get(executor, {})
        return sum(max(0, end - offsets.get(store, 0)) for store, end in ends.items())

    def assign(self, tasks: list[TaskId], alive: list[str], ends: Mapping[TaskId, StoreOffsets]) -> list[Move]:
        """Choose an executor for every task. `ends[task]` = {store: changelog end offset}."""
        alive = [e for e in alive if e in self.locations]
        if not alive:
            return []
        moves: list[Move] = []
        moved: set[TaskId] = set()
        load = dict.fromkeys(alive, 0)
        for task in tasks:
            current = self.active.get(task)
            if current in load:
                load[current] += 1
        for task in tasks:
            current = self.active.get(task)
            if current in load:
                continue
            target = min(alive, key=lambda e: (self.lag(task, e, ends.get(task, {})), load[e], e))
            reason = MoveReason.EXECUTOR_LOST if current is not None else MoveReason.FIRST_PLACEMENT
            moves.append(Move(task, current, target, reason, self.lag(task, target, ends.get(task, {}))))
            self.active[task] = target
            load[target] += 1
            moved.add(task)
        moves += self._balance([t for t in tasks if t not in moved], alive, load, ends)
        return moves

    def _balance(self, tasks: list[TaskId], alive: list[str], load: dict[str, int],
                 ends: Mapping[TaskId, StoreOffsets]) -> list[Move]:
        """Move tasks off executors above their fair share, only to copies that are caught up (within
        `acceptable_lag`); else warm one up first."""
        cap = math.ceil(sum(load.values()) / len(alive))
        moves = []
        for task in sorted(tasks):
            source = self.active[task]
            if load[source] <= cap:
                continue
            target = min(alive, key=lambda e: (load[e], e))
            if load[target] >= cap or target == source:
                continue
            lag = self.lag(task, target, ends.get(task, {}))
            if not ends.get(task) or lag <= self.acceptable_lag:  # stateless, or the copy there is caught up
                moves.append(Move(task, source, target, MoveReason.BALANCE, lag))
                self.active[task] = target
                load[source] -= 1
                load[target] += 1
                self.warming.pop(task, None)
            elif task not in self.warming and target not in self.warming.values():
                self.warming[task] = target  # build a copy there first
        return moves

    def standby_targets(self, task: TaskId, alive: list[str], ends: StoreOffsets) -> list[str]:
        """Executors that should hold a copy of `task` besides its active one: its standbys (preferring
        executors that already have a copy) and its warm-up target."""
        active = self.active.get(task)
        candidates = [e for e in alive if e != active and e in self.locations]
        counts: dict[str, int] = dict.fromkeys(candidates, 0)
        for targets in self.standby_of.values():
            for e in targets:
                if e in counts:
                    counts[e] += 1
        ranked = sorted(candidates, key=lambda e: (self.lag(task, e, ends), counts[e], e))
        chosen = ranked[: self.standbys]
        self.standby_of[task] = chosen
        warm = self.warming.get(task)
        if warm is not None and warm in candidates and warm not in chosen:
            chosen = [*chosen, warm]
        return chosen

    def location(self, executor: str | None) -> str | None:
        return self.locations.get(executor) if executor is not None else None

    def snapshot(self, ends: Mapping[TaskId, StoreOffsets]) -> dict[TaskId, TaskPlacement]:
        """Where each task and its standby copies are, with each copy's lag in records (for logs and metrics)."""
        def lags(task: TaskId, executors: Iterable[str]) -> dict[str, int]:
            return {e: self.lag(task, e, ends.get(task, {})) for e in executors}

        return {task: TaskPlacement(self.active.get(task), lags(task, self.standby_of.get(task, [])),
                                    lags(task, [self.warming[task]] if task in self.warming else []))
                for task in sorted(set(self.active) | set(self.standby_of))}
