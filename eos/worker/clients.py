"""Per-worker-process caches of Kafka clients (task runtimes are cached apart: `eos.worker.runtime`).

A Spark Python worker is reused across tasks (`spark.python.worker.reuse`), so it may keep the producers
of the tasks it ran: creating one and calling `init_transactions()` costs broker round trips. If Spark
later runs a task elsewhere, that worker's `init_transactions()` fences the cached producer here; the
next transactional call fails as fenced and the task runner drops it and initialises a new one.
Correctness rests on the producer epoch, never on this cache.

`TaskClients` is what a batch attempt asks of it; `eos.testing` implements the same in memory, so that a
test driver runs the very same protocol code without a broker.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from eos.config import EosConfig
from eos.tables import GlobalTable
from eos.worker.global_tables import GlobalCopy
from eos.worker.topic_rules import TopicRules
from recovery import ChangelogSource
from transactions import (
    CHUNK_RECORDS,
    AtLeastOnceProducer,
    Consumer,
    KafkaAdmin,
    Message,
    OffsetRange,
    OutputProducer,
    RangeReader,
    TransactionalProducer,
    close_or_park,
    input_consumer,
    prefetch_ranges,
    range_reader,
)

__all__ = ["WorkerClients", "CLIENTS", "TaskClients", "KafkaChangelogs"]

TP = tuple[str, int]


class TaskClients(Protocol):
    """What a task's batch needs from outside the process, per application: a producer per transactional id,
    consumers (committed offsets, group metadata, range reads), its changelogs, the worker's copies of
    global tables and the rules of the topics it writes."""

    def producer(self, transactional_id: str, config: EosConfig, *, unit: bool = False
                 ) -> tuple[OutputProducer, bool]: ...
    def cached_producer(self, transactional_id: str) -> OutputProducer | None: ...
    def drop_producer(self, transactional_id: str) -> None: ...
    def consumer(self, config: EosConfig, purpose: str = "input", group: str | None = None) -> Consumer: ...
    def drop_consumers(self, config: EosConfig) -> None: ...
    def reader(self, config: EosConfig, purpose: str = "input") -> RangeReader: ...
    def prefetch(self, config: EosConfig, ranges: list[OffsetRange], purpose: str) -> RangeReader: ...
    def changelogs(self, config: EosConfig) -> ChangelogSource: ...
    def global_copy(self, config: EosConfig, table: GlobalTable) -> GlobalCopy: ...
    def topic_rules(self, config: EosConfig) -> TopicRules: ...
    def stable_ends(self, config: EosConfig, partitions: list[TP], timeout: float) -> dict[TP, int]: ...


class KafkaChangelogs:
    """A task's changelogs on the cluster: bounds from the admin client, ranges read with a consumer."""

    def __init__(self, admin: KafkaAdmin, consumer: Consumer) -> None:
        self.admin, self.consumer = admin, consumer

    def bounds(self, partitions: list[TP]) -> dict[TP, tuple[int, int]]:
        ends = self.admin.end_offsets(partitions, committed=True)
        starts = self.admin.earliest_offsets(partitions)
        return {tp: (starts[tp], ends[tp]) for tp in partitions}

    def written_ends(self, partitions: list[TP]) -> dict[TP, int]:
        return self.admin.end_offsets(partitions, committed=False)

    def settled_ends(self, at_least: dict[TP, int], within: float) -> dict[TP, int]:
        return self.admin.settled_ends(list(at_least), at_least=at_least, within=within)

    def read(self, ranges: list[OffsetRange], timeout: float) -> Iterator[list[Message]]:
        return range_reader(self.consumer)(ranges, timeout)


#: The consumer a unit's tasks read their input together with (`eos.worker.attempt.UnitAttempt._read_together`)
UNIT_PURPOSE = "input-unit"
#: Its read-ahead: a read of many small ranges at once, which librdkafka would otherwise fill with up to 1 MiB a
#: partition fetched (`max.partition.fetch.bytes`) and 64 MiB held (`queued.max.messages.kbytes`), all but a
#: range's records of it unread and dropped at the read's end
UNIT_READS = {"max.partition.fetch.bytes": 65_536, "queued.max.messages.kbytes": 8_192}
#: The purposes that read a partition's whole backlog at once (a store's changelog, a global table's topic), and
#: their read-ahead: four slices (`queued.min.messages`) rather than the input consumers' one
#: (transactions.settings). A changelog of 1M records restored at 216-288k records/s with four, at 167-216k with
#: one (`python -m benchmarks.state --records 20000`, alternated).
BULK_PURPOSES = ("restore", "global")
BULK_READS = {"queued.min.messages": 20_000}
#: The producer of a unit of several tasks (`tasks_per_transaction`): it writes its tasks' outputs to all their
#: output partitions (64 in a 64-partition job), and librdkafka sends one partition per produce request
#: (librdkafka#1700; the broker checks each partition's first request against the transaction), so at the
#: producers' 50 ms linger (transactions.settings) it sent one small request per partition every 50 ms. 250 ms:
#: 41 % fewer produce requests, the peers' stateless64 +2 to +15 % and count64 +9 to +23 % (two alternated
#: pairs), peak PSS +13 MiB. Not for a task alone: on 4 partitions the rates stayed within their spread and peak
#: PSS rose 3-8 MiB (docs/measurements.md). A commit sends what is queued without waiting out the linger.
UNIT_WRITES = {"linger.ms": 250}
#: What a task's own input read hands over at a time (one `consume()`; `transactions.CHUNK_RECORDS` for the
#: unit's and the bulk reads, which keep everything they read or apply it chunk by chunk). A streamed task
#: processes each chunk and drops it, and the chunk's records are Python objects (the message, its value and
#: key, a string of its topic: ~350 bytes a record): at 10,000 a worker's object arenas grew to hold several of
#: them. 2,500: the peers' stateless job's peak PSS 309-311 against 323-328 MiB, the count's 318-322 against
#: 331-334, in five alternated pairs of each, both orders; the rates within their spread (docs/measurements.md).
INPUT_CHUNK = 2_500


def chunk_records(purpose: str) -> int:
    """The most records a read for `purpose` hands over at a time: `INPUT_CHUNK` for a task's own input."""
    return CHUNK_RECORDS if purpose == UNIT_PURPOSE or purpose in BULK_PURPOSES else INPUT_CHUNK


class WorkerClients:
    def __init__(self) -> None:
        self._producers: dict[str, OutputProducer] = {}
        self._consumers: dict[tuple[str, str, str], Consumer] = {}
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

    def stable_ends(self, config: EosConfig, partitions: list[TP], timeout: float) -> dict[TP, int]:
        """The partitions' last stable offsets now (how far read_committed reads reach), in one request."""
        return self.admin(config).end_offsets(partitions, committed=True, timeout=timeout)

    def producer(self, transactional_id: str, config: EosConfig, *, unit: bool = False
                 ) -> tuple[OutputProducer, bool]:
        """The cached producer, or a new one after `init_transactions()`. Returns (producer, fresh).
        With processing_guarantee="at_least_once", a non-transactional producer with the same calls. `unit`:
        the id commits several tasks at once, whose producer lingers longer (`UNIT_WRITES`) unless the
        application's producer_config says otherwise."""
        cached = self._producers.get(transactional_id)
        if cached is not None and cached.usable:
            return cached, False
        self.drop_producer(transactional_id)
        producer: OutputProducer
        overrides = {**UNIT_WRITES, **config.producer_config} if unit else config.producer_config
        if config.processing_guarantee == "at_least_once":
            producer = AtLeastOnceProducer(config.bootstrap_servers, self.consumer(config), overrides=overrides)
        else:
            producer = TransactionalProducer(config.bootstrap_servers, transactional_id,
                                             transaction_timeout_ms=config.transaction_timeout_ms,
                                             overrides=overrides)
        producer.init(timeout=max(30.0, config.batch_timeout))
        self._producers[transactional_id] = producer
        return producer, True

    def cached_producer(self, transactional_id: str) -> OutputProducer | None:
        """This worker's producer of `transactional_id` (from an earlier batch here), if it has one."""
        return self._producers.get(transactional_id)

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
            read_ahead = UNIT_READS if purpose == UNIT_PURPOSE else BULK_READS if purpose in BULK_PURPOSES else {}
            settings = {**read_ahead, **config.consumer_config}
            consumer = self._consumers[key] = input_consumer(
                config.bootstrap_servers, group or config.group_id, settings,
                out_of_range="error" if purpose.startswith("input") else "earliest")
        return consumer

    def reader(self, config: EosConfig, purpose: str = "input") -> RangeReader:
        """Reads offset ranges read_committed with this worker's consumer for `purpose`."""
        return range_reader(self.consumer(config, purpose), chunk_records(purpose))

    def prefetch(self, config: EosConfig, ranges: list[OffsetRange], purpose: str) -> RangeReader:
        """Starts fetching `ranges` now with this worker's consumer for `purpose`; returns the reader of them."""
        return prefetch_ranges(self.consumer(config, purpose), ranges, min(10.0, config.batch_timeout),
                               chunk_records(purpose))

    def changelogs(self, config: EosConfig) -> ChangelogSource:
        return KafkaChangelogs(self.admin(config), self.consumer(config, purpose="restore"))

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


CLIENTS = WorkerClients()
