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
                 interval: float = PURGE_INTERVAL_S) -> None:
        self.admin, self.config, self.topics, self.interval = admin, config, topics, interval
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
            committed = self.admin.group_offsets(self.config.group_id, tps, stable=False, timeout=10)
            earliest = self.admin.earliest_offsets(tps, timeout=10)
            below = {tp: offset for tp, offset in committed.items() if offset is not None and offset > earliest[tp]}
            if below:
                self.admin.delete_records(below, timeout=10)
                self.purged += sum(offset - earliest[tp] for tp, offset in below.items())
        except Exception as exc:
            log.warning("could not purge repartition topics; trying again later", error=str(exc))
