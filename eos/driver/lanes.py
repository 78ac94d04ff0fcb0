"""Lanes (driver side): `lanes` batch loops that run at once, each over its own share of the units, as Kafka
Streams' stream threads each run and commit their own tasks.

With one loop, a batch is one Spark job over every task, and the next batch starts when the job's last task is
done: on many partitions the worker whose tasks were quicker waited 100-250 ms of each ~1 s batch for the other
(docs/measurements.md). A lane plans its own tasks (`Planner(tasks=...)`), runs them as a Spark job of its own,
submitted from its own driver thread (Spark runs jobs of several threads at once), and plans again when that
job is done. What the lanes share is kept here, under one lock: the batch numbers, how many batches the run
may still start, which batches are in flight, and when the run is caught up.

Nothing of the exactly-once argument changes: a unit belongs to one lane, so one driver thread plans it and
at most one Spark job runs it at a time, as before; its transactions, fencing and committed offsets are the
same whichever lane runs it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

from eos.config import EosConfig
from eos.topology import SubTopology, TaskId

__all__ = ["LaneBoard", "lane_shares"]


def lane_shares(subtopologies: Mapping[str, SubTopology], partition_counts: Mapping[str, int],
                config: EosConfig) -> list[frozenset[TaskId]]:
    """The tasks of each lane: the units (`tasks_per_transaction`) of every sub-topology, in definition and
    partition order, dealt round-robin, so that each lane gets a like share of every step. A unit's tasks are
    always in one lane (they commit in one transaction). Lanes beyond the number of units get nothing."""
    n = config.tasks_per_transaction
    units = [[sub.task(p) for p in range(first, min(first + n, partition_counts[sub.inputs[0]]))]
             for sub in subtopologies.values() for first in range(0, partition_counts[sub.inputs[0]], n)]
    shares: list[set[TaskId]] = [set() for _ in range(min(config.lanes, len(units)) or 1)]
    for i, unit in enumerate(units):
        shares[i % len(shares)].update(unit)
    return [frozenset(s) for s in shares]


class LaneBoard:
    """What the lanes of one run share: batch numbers (unique across lanes; a lane keeps a number it took until a
    batch runs under it, and a failed batch is planned again under its number), the run's `max_batches`, the
    batches in flight, and whether the run is caught up. `halt` is set when the lanes are to end: a stop, the
    run caught up or its batches done, or an error in one of them."""

    def __init__(self, lanes: int, max_batches: int | None) -> None:
        self.lanes = lanes
        self.max_batches = max_batches
        self.halt = threading.Event()
        self.caught_up = False
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._next = 0
        self._in_flight: set[int] = set()
        self._done = 0
        #: (monotonic) when the latest batch of any lane ended
        self._last_end = -float("inf")
        #: for each lane that is idle and settled: when its latest such plan began (inf: it ends, its numbers
        #: all taken)
        self._idle: dict[int, float] = {}

    def take(self, lane: int) -> int | None:
        """A new batch number for `lane`, or None when the run's max_batches are all taken (the lane then ends)."""
        with self._lock:
            if self.max_batches is not None and self._next >= self.max_batches:
                self._idle[lane] = float("inf")
                self._check_caught_up()
                return None
            self._next += 1
            return self._next - 1

    def start(self, batch: int) -> int:
        """`batch` is about to run. Returns the oldest batch whose claims it must keep (`eos.worker.claims`): the
        one before the oldest batch any lane has in flight."""
        with self._lock:
            self._in_flight.add(batch)
            return min(self._in_flight) - 1

    def end(self, batch: int, *, ran: bool) -> None:
        """`batch` has ended: `ran`, its tasks all reported (else it failed, and runs again under its number)."""
        with self._lock:
            self._in_flight.discard(batch)
            self._last_end = time.monotonic()
            if ran:
                self._done += 1
                if self.max_batches is not None and self._done >= self.max_batches:
                    self.halt.set()

    def busy(self, lane: int) -> None:
        """`lane` planned work."""
        with self._lock:
            self._idle.pop(lane, None)

    def idle(self, lane: int, planned_at: float) -> None:
        """`lane` found nothing to do, and its own topics settled, in a plan begun at `planned_at` (monotonic).
        The run is caught up when every lane has, each in a plan begun after every lane's last batch ended: no
        lane's batch can then have written another's input unseen."""
        with self._lock:
            self._idle[lane] = planned_at
            self._check_caught_up()

    def fail(self, error: BaseException) -> None:
        """A lane's batch failed in a way that stops the job: the other lanes end after their batches in flight."""
        with self._lock:
            if self.error is None:
                self.error = error
            self.halt.set()

    def _check_caught_up(self) -> None:
        if len(self._idle) == self.lanes and min(self._idle.values()) > self._last_end:
            self.caught_up = True
            self.halt.set()
