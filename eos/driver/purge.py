"""Deleting the records of repartition topics once the step that reads them has committed them, as Kafka
Streams purges its repartition topics (`repartition.purge.interval.ms`): those records are consumed
exactly once and never needed again, and the topics would otherwise grow without bound."""

from __future__ import annotations

import time

import structlog

from eos.config import EosConfig
from transactions import KafkaAdmin

__all__ = ["RepartitionPurger", "PURGE_INTERVAL_S"]

log = structlog.get_logger(__name__)

PURGE_INTERVAL_S = 30.0


class RepartitionPurger:
    def __init__(self, admin: KafkaAdmin, config: EosConfig, topics: list[str],
                 interval: float = PURGE_INTERVAL_S, groups: dict[str, list[str]] | None = None) -> None:
        self.admin, self.config, self.topics, self.interval = admin, config, topics, interval
        #: topic -> the groups of its readers: records go once every reader has committed past them
        self.groups = groups or {}
        self._last = time.monotonic()
        self.purged = 0  # records deleted so far

    def maybe_purge(self, force: bool = False) -> None:
        """Every `interval` seconds: delete every record below the committed offset of each partition.
        Best effort: a failure is logged and tried again next time."""
        if not self.topics or (not force and time.monotonic() - self._last < self.interval):
            return
        self._last = time.monotonic()
        try:
            tps = [tp for topic in self.topics for tp in self.admin.topic_partitions(topic)]
            committed: dict[tuple[str, int], int | None] = {}
            for group in sorted({g for t in self.topics for g in self.groups.get(t, [self.config.group_id])}):
                readers = [tp for tp in tps if group in self.groups.get(tp[0], [self.config.group_id])]
                for tp, offset in self.admin.group_offsets(group, readers, stable=False, timeout=10).items():
                    committed[tp] = _lowest(committed[tp], offset) if tp in committed else offset
            earliest = self.admin.earliest_offsets(tps, timeout=10)
            below = {tp: offset for tp, offset in committed.items() if offset is not None and offset > earliest[tp]}
            if below:
                self.admin.delete_records(below, timeout=10)
                self.purged += sum(offset - earliest[tp] for tp, offset in below.items())
        except Exception as exc:
            log.warning("could not purge repartition topics; trying again later", error=str(exc))


def _lowest(a: int | None, b: int | None) -> int | None:
    """The offset every reader has committed past (None: a reader has committed nothing yet)."""
    return None if a is None or b is None else min(a, b)
