"""A test driver's worker: `eos.worker.clients.TaskClients` on an in-memory Kafka (`transactions.memory`), and
the runtimes that worker keeps. A crash replaces the worker: its producers, consumers, runtimes and
in-memory stores are gone, as a dead process's are, and the next one restores from the changelogs."""

from __future__ import annotations

from typing import cast

from eos.config import EosConfig
from eos.tables import GlobalTable
from eos.worker.clients import KafkaChangelogs, chunk_records
from eos.worker.global_tables import GlobalCopy
from eos.worker.runtime import RuntimeCache
from eos.worker.topic_rules import TopicRules
from recovery import ChangelogSource
from transactions import Consumer, KafkaAdmin, OffsetRange, OutputProducer, RangeReader, prefetch_ranges, range_reader
from transactions.memory import MemoryAdmin, MemoryCluster, MemoryConsumer, MemoryProducer

__all__ = ["MemoryClients", "MemoryWorker"]


class MemoryClients:
    """The clients one worker process would keep, against `cluster`."""

    def __init__(self, cluster: MemoryCluster) -> None:
        self.cluster = cluster
        self.admin = MemoryAdmin(cluster)
        self._producers: dict[str, MemoryProducer] = {}
        self._consumers: dict[tuple[str, str], MemoryConsumer] = {}
        self._globals: dict[str, GlobalCopy] = {}
        self._rules: TopicRules | None = None

    def producer(self, transactional_id: str, config: EosConfig, *, unit: bool = False
                 ) -> tuple[OutputProducer, bool]:
        cached = self._producers.get(transactional_id)
        if cached is not None and cached.usable:
            return cached, False
        producer = MemoryProducer(self.cluster, transactional_id,
                                  transactional=config.processing_guarantee != "at_least_once")
        producer.init()
        self._producers[transactional_id] = producer
        return producer, True

    def cached_producer(self, transactional_id: str) -> OutputProducer | None:
        return self._producers.get(transactional_id)

    def drop_producer(self, transactional_id: str) -> None:
        self._producers.pop(transactional_id, None)

    def consumer(self, config: EosConfig, purpose: str = "input", group: str | None = None) -> Consumer:
        key = (purpose, group or config.group_id)
        consumer = self._consumers.get(key)
        if consumer is None:
            consumer = self._consumers[key] = MemoryConsumer(self.cluster, key[1])
        return cast(Consumer, consumer)

    def drop_consumers(self, config: EosConfig) -> None:
        self._consumers.clear()

    def reader(self, config: EosConfig, purpose: str = "input") -> RangeReader:
        return range_reader(self.consumer(config, purpose), chunk_records(purpose))

    def prefetch(self, config: EosConfig, ranges: list[OffsetRange], purpose: str) -> RangeReader:
        return prefetch_ranges(self.consumer(config, purpose), ranges, config.batch_timeout, chunk_records(purpose))

    def changelogs(self, config: EosConfig) -> ChangelogSource:
        return KafkaChangelogs(cast(KafkaAdmin, self.admin), self.consumer(config, purpose="restore"))

    def stable_ends(self, config: EosConfig, partitions: list[tuple[str, int]],
                    timeout: float) -> dict[tuple[str, int], int]:
        return self.admin.end_offsets(partitions)

    def global_copy(self, config: EosConfig, table: GlobalTable) -> GlobalCopy:
        copy = self._globals.get(table.topic)
        if copy is None:
            copy = self._globals[table.topic] = GlobalCopy(table)
        return copy

    def topic_rules(self, config: EosConfig) -> TopicRules:
        if self._rules is None:
            producer_max = config.producer_config.get("message.max.bytes")
            self._rules = TopicRules(lambda: cast(KafkaAdmin, self.admin),
                                     None if producer_max is None else int(producer_max))
        return self._rules


class MemoryWorker:
    """One simulated worker process: its clients and the task runtimes it keeps between batches."""

    def __init__(self, cluster: MemoryCluster) -> None:
        self.clients = MemoryClients(cluster)
        self.runtimes = RuntimeCache()

    def close(self) -> None:
        self.runtimes.clear()
