"""Per-worker-process caches of Kafka clients and task runtimes.

A Spark Python worker is reused across tasks (`spark.python.worker.reuse`), so it may keep the producers
of the tasks it ran: creating one and calling `init_transactions()` costs broker round trips. If Spark
later runs a task elsewhere, that worker's `init_transactions()` fences the cached producer here; the
next transactional call fails as fenced and the task runner drops it and initialises a new one.
Correctness rests on the producer epoch, never on this cache.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eos.config import EosConfig
from eos.tables import GlobalTable
from eos.worker.global_tables import GlobalCopy
from eos.worker.topic_rules import TopicRules
from transactions import (
    AtLeastOnceProducer,
    Consumer,
    KafkaAdmin,
    OutputProducer,
    TransactionalProducer,
    close_or_park,
    input_consumer,
)

if TYPE_CHECKING:
    from eos.worker.runtime import TaskRuntime

__all__ = ["WorkerClients", "CLIENTS"]


class WorkerClients:
    def __init__(self) -> None:
        self._producers: dict[str, OutputProducer] = {}
        self._consumers: dict[tuple[str, str, str], Consumer] = {}
        self._runtimes: dict[str, tuple[str, TaskRuntime]] = {}
        self._globals: dict[tuple[str, str], GlobalCopy] = {}
        self._admins: dict[str, KafkaAdmin] = {}
        self._rules: dict[tuple[str, int | None], TopicRules] = {}

    def admin(self, config: EosConfig) -> KafkaAdmin:
        admin = self._admins.get(config.bootstrap_servers)
        if admin is None:
            admin = self._admins[config.bootstrap_servers] = KafkaAdmin(config.bootstrap_servers)
        return admin

    def topic_rules(self, config: EosConfig) -> TopicRules:
        """What each topic accepts, for this application's cluster and producer settings."""
        producer_max = config.producer_config.get("message.max.bytes")
        key = (config.bootstrap_servers, None if producer_max is None else int(producer_max))
        rules = self._rules.get(key)
        if rules is None:
            rules = self._rules[key] = TopicRules(lambda: self.admin(config), key[1])
        return rules

    def producer(self, transactional_id: str, config: EosConfig) -> tuple[OutputProducer, bool]:
        """The cached producer, or a new one after `init_transactions()`. Returns (producer, fresh).
        With processing_guarantee="at_least_once", a non-transactional producer with the same calls."""
        cached = self._producers.get(transactional_id)
        if cached is not None and cached.usable:
            return cached, False
        self.drop_producer(transactional_id)
        producer: OutputProducer
        if config.processing_guarantee == "at_least_once":
            producer = AtLeastOnceProducer(config.bootstrap_servers, self.consumer(config),
                                           overrides=config.producer_config)
        else:
            producer = TransactionalProducer(config.bootstrap_servers, transactional_id,
                                             transaction_timeout_ms=config.transaction_timeout_ms,
                                             overrides=config.producer_config)
        producer.init(timeout=max(30.0, config.batch_timeout))
        self._producers[transactional_id] = producer
        return producer, True

    def drop_producer(self, transactional_id: str) -> None:
        producer = self._producers.pop(transactional_id, None)
        if producer is not None:
            producer.close()

    def consumer(self, config: EosConfig, purpose: str = "input", group: str | None = None) -> Consumer:
        """One consumer per application, purpose and group in this worker (tasks of a worker run one at a
        time). `group`: another than the application's (a sub-topology's own, `eos.topology.offset_groups`),
        for its committed offsets and group metadata."""
        key = (config.bootstrap_servers, config.group_id, purpose + (f"@{group}" if group else ""))
        consumer = self._consumers.get(key)
        if consumer is None:
            consumer = self._consumers[key] = input_consumer(
                config.bootstrap_servers, group or config.group_id, config.consumer_config,
                out_of_range="error" if purpose == "input" else "earliest")
        return consumer

    def drop_consumers(self, config: EosConfig) -> None:
        """Close this application's consumers (after failures: a client can be left stuck)."""
        for key in [k for k in self._consumers if k[:2] == (config.bootstrap_servers, config.group_id)]:
            close_or_park(self._consumers.pop(key))

    def global_copy(self, config: EosConfig, table: GlobalTable) -> GlobalCopy:
        """This worker's copy of a global table (shared by its tasks, kept between batches)."""
        key = (config.bootstrap_servers, table.topic)  # the copy holds raw bytes: any serde reads it
        copy = self._globals.get(key)
        if copy is None:
            copy = self._globals[key] = GlobalCopy(table)
        return copy

    def runtime(self, key: str, run_id: str) -> TaskRuntime | None:
        entry = self._runtimes.get(key)
        return entry[1] if entry is not None and entry[0] == run_id else None

    def set_runtime(self, key: str, run_id: str, runtime: TaskRuntime) -> None:
        """Cache a task runtime; runtimes of earlier runs (another job definition) are closed."""
        for other in [k for k, (rid, _) in self._runtimes.items() if rid != run_id or k == key]:
            self.drop_runtime(other)
        self._runtimes[key] = (run_id, runtime)

    def drop_runtime(self, key: str) -> None:
        entry = self._runtimes.pop(key, None)
        if entry is not None:
            entry[1].close()


CLIENTS = WorkerClients()
