"""The driver's placement loop: live executors from Spark, changelog ends from Kafka, decisions from
`eos.assignment.Placement`, and what actually happened from task results (where a task ran is where its
state now is, whatever was planned). Also records every move of a task with its restore time."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from eos.assignment import Move, Placement
from eos.batch import StandbyPlan, StandbyResult, TaskPlan, TaskResult
from eos.config import EosConfig
from eos.topology import SubTopology
from transactions import KafkaAdmin

__all__ = ["Placer", "located_rdd", "live_executors", "executor_locations"]


def live_executors(sc: Any) -> list[str]:
    """Executor ids Spark currently has (none in local mode, where the driver runs every task)."""
    if sc.master == "local" or sc.master.startswith("local["):
        return []  # (asking would log "Requesting executors is not supported" on every batch)
    ids = sc._jsc.sc().getExecutorIds().mkString(",")
    return [e for e in ids.split(",") if e and e != "driver"]


def executor_locations(sc: Any) -> dict[str, str]:
    """Spark's location string (`executor_<host>_<id>`) of each executor Spark's status store knows, so that
    executors no task has run on yet can hold tasks and standbys too."""
    out = {}
    executors = sc._jsc.sc().statusStore().executorList(True).iterator()
    while executors.hasNext():
        info = executors.next()
        if info.id() != "driver":
            out[info.id()] = f"executor_{info.hostPort().rsplit(':', 1)[0]}_{info.id()}"
    return out


def located_rdd(sc: Any, items: list[Any], locations: list[str | None]) -> Any:
    """One partition per item, each with its preferred location, built on the JVM with
    `SparkContext.makeRDD` (PySpark has no API for it) and wrapped as a Python RDD."""
    from pyspark.rdd import RDD
    from pyspark.serializers import BatchedSerializer, CPickleSerializer

    jvm, pickler = sc._jvm, CPickleSerializer()
    convert = jvm.scala.jdk.javaapi.CollectionConverters
    pairs = jvm.java.util.ArrayList()
    for item, location in zip(items, locations):
        prefs = jvm.java.util.ArrayList()
        if location:
            prefs.add(location)
        # Each element is one pickled batch of one item: the framing PySpark's workers read.
        pairs.add(jvm.scala.Tuple2(pickler.dumps([item]), convert.asScala(prefs).toSeq()))
    tag = jvm.scala.reflect.ClassTag.apply(jvm.java.lang.Class.forName("[B"))
    jrdd = sc._jsc.sc().makeRDD(convert.asScala(pairs).toSeq(), tag).toJavaRDD()
    return RDD(jrdd, sc, BatchedSerializer(CPickleSerializer(), 1))


class Placer:
    def __init__(self, sc: Any, admin: KafkaAdmin, config: EosConfig, subtopologies: Mapping[str, SubTopology],
                 partition_counts: Mapping[str, int], log: Any) -> None:
        self.sc, self.admin, self.log, self.config = sc, admin, log, config
        self.placement = Placement(config.num_standby_replicas, config.acceptable_recovery_lag)
        self.tasks: list[str] = []
        self.changelogs: dict[str, dict[str, tuple[str, int]]] = {}  # task -> store -> changelog partition
        self.subtopology_of: dict[str, tuple[str, int]] = {}
        for sub in subtopologies.values():
            for p in range(partition_counts[sub.inputs[0]]):
                task = f"{sub.name}-{p}"
                self.tasks.append(task)
                self.subtopology_of[task] = (sub.name, p)
                persistent = [s for s in sub.stores if s.persistent]
                if persistent:
                    self.changelogs[task] = {s.name: (s.changelog_topic(config.application_id), p) for s in persistent}
        self.moves: list[dict[str, Any]] = []
        self._planned: dict[str, Move] = {}
        self._ran_on: dict[str, str] = {}  # task -> executor of its last committed batch (what happened)
        self._ends: dict[str, dict[str, int]] = {}  # changelog ends read for the latest plan

    def ends(self) -> dict[str, dict[str, int]]:
        tps = [tp for stores in self.changelogs.values() for tp in stores.values()]
        offsets = self.admin.end_offsets(tps, timeout=10) if tps else {}
        return {task: {store: offsets[tp] for store, tp in stores.items()} for task, stores in self.changelogs.items()}

    def place(self, plans: list[TaskPlan], batch: int) -> tuple[list[TaskPlan], list[StandbyPlan]]:
        alive = live_executors(self.sc)
        if not alive:
            return plans, []
        for executor in self.placement.forget_lost(alive):
            self.log.warning("executor lost: its tasks move to the copies with the least lag", executor=executor)
        known = executor_locations(self.sc)
        self.placement.locations.update({e: known[e] for e in alive if e in known and e not in self.placement.locations})
        ends = self._ends = self.ends()
        for move in self.placement.assign(self.tasks, alive, ends):
            self._planned[move.task] = move
            if move.reason != "first placement":
                self.log.info("task moves", task=move.task, source=move.source, target=move.target,
                              reason=move.reason, lag=move.lag)
        located = [replace(p, preferred_location=self.placement.location(self.placement.active.get(p.task)))
                   for p in plans]
        standbys = []
        for task in self.changelogs:
            for executor in self.placement.standby_targets(task, alive, ends[task]):
                lag = self.placement.lag(task, executor, ends[task])
                if lag > 0:
                    sub, partition = self.subtopology_of[task]
                    standbys.append(StandbyPlan(sub, partition, batch, self.placement.location(executor), lag,
                                                self._standby_budget(bool(plans))))
        return located, standbys

    def _standby_budget(self, with_active_tasks: bool) -> float:
        """Standbys run beside the batch's active tasks for up to the full budget; a batch of standbys only
        is kept to about a trigger interval, so input that arrives meanwhile does not wait behind it."""
        budget = self.config.standby_refresh_budget
        return budget if with_active_tasks else min(budget, max(self.config.trigger_interval, 0.2))

    def observe(self, results: list[Any]) -> None:
        alive = set(live_executors(self.sc))
        for r in results:
            if isinstance(r, StandbyResult):
                if r.status == "refreshed":
                    self.placement.observe_copy(r.task, r.executor, r.location, r.store_offsets)
                continue
            if not isinstance(r, TaskResult) or r.status != "committed" or r.executor is None:
                continue
            planned = self._planned.pop(r.task, None)
            self.placement.observe_active(r.task, r.executor, r.location, r.store_offsets)
            moved_from = self._ran_on.get(r.task)
            self._ran_on[r.task] = r.executor
            if moved_from is not None and moved_from != r.executor:
                reason = planned.reason if planned is not None and planned.target == r.executor else (
                    "executor lost" if moved_from not in alive else "spark placed it elsewhere")
                move = {"task": r.task, "batch": r.batch, "source": moved_from, "target": r.executor, "reason": reason,
                        "restore_ms": round(r.restore_ms, 1), "restored_records": r.restored_records}
                self.moves.append(move)
                self.log.info("task moved", **move)

    def snapshot(self) -> dict[str, Any]:
        """Each task's active executor and its copies with their lag (records) against the changelog ends
        read for the latest plan: what the batch report and the "batch done" log carry."""
        return self.placement.snapshot(self._ends)
