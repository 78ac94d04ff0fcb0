"""Topic admin and offset queries: partition counts, topic creation with configs, configs read back,
last stable offset (read_committed end) vs high watermark, group offsets, broker settings.

The AdminClient is kept on the instance: confluent-kafka fails pending futures if it is destroyed.

Group offsets are read and set through a consumer of the group that never joins it, not through the admin
API: librdkafka 2.16's admin ListConsumerGroupOffsets dereferences the admin handle's (absent) consumer
group when the broker answers NOT_COORDINATOR, and the process dies on SIGSEGV whenever the group
coordinator moves (librdkafka #5040, seen in the chaos matrix at broker bounces). A consumer handles the
same answer by looking the coordinator up again."""

from __future__ import annotations

import concurrent.futures
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic, OffsetSpec, ResourceType

from transactions.deadline import StuckClientError, call_with_deadline, close_or_park, park
from transactions.errors import STALE_METADATA_CODES, KafkaEosError, RetriableKafkaError, classify
from transactions.offsets import Committed, stable_committed
from transactions.retry import DEFAULT_POLICY, call
from transactions.settings import RECONNECT_BACKOFF_MS, learn_brokers

__all__ = ["KafkaAdmin", "TopicSpec", "PartitionOffsets", "BrokerUnreachableError", "admin_for", "check_reachable"]

TP = tuple[str, int]
K = TypeVar("K")


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int | None = None  # None: the broker's default.replication.factor
    config: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionOffsets:
    earliest: int
    last_stable: int  # end of the partition for read_committed readers
    high_watermark: int  # end for read_uncommitted readers

    @property
    def open_transaction(self) -> bool:
        return self.last_stable < self.high_watermark


def settled_ends(admin: Any, partitions: Iterable[TP], *, at_least: Mapping[TP, int] | None = None,
                 within: float = 10.0, timeout: float = 30.0,
                 waited_out: dict[TP, int] | None = None) -> dict[TP, int]:
    """`KafkaAdmin.settled_ends` through any admin's `end_offsets` (the in-memory Kafka's too). `waited_out`,
    kept by the caller from call to call: per partition, the highest target a call waited for in vain; a
    partition whose target is no higher is not waited for again (and is updated when a wait runs out)."""
    partitions = list(partitions)
    targets = dict(at_least) if at_least is not None else admin.end_offsets(partitions, committed=False,
                                                                           timeout=timeout)
    given_up = waited_out if waited_out is not None else {}
    waiting = [tp for tp in partitions if targets[tp] > given_up.get(tp, -1)]
    deadline, pause = time.monotonic() + within, 0.002
    while True:
        stable = admin.end_offsets(partitions, committed=True, timeout=timeout)
        if all(stable[tp] >= targets[tp] for tp in waiting):
            return stable
        if time.monotonic() >= deadline:
            given_up.update((tp, targets[tp]) for tp in waiting if stable[tp] < targets[tp])
            return stable
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


class KafkaAdmin:
    def __init__(self, bootstrap_servers: str, overrides: Mapping[str, object] | None = None, *,
                 settle_once: bool = False) -> None:
        """`settle_once`: an admin for one look at the cluster (an audit) waits out a partition's open
        transaction once (`settled_ends`); asked again for the same end, it answers at once."""
        self.bootstrap_servers = bootstrap_servers
        self._waited_out: dict[TP, int] | None = {} if settle_once else None
        # The error callback holds the admin weakly: a bound method would make a reference cycle, and the
        # client (with its threads and reconnect loop) would outlive its last user until a gc pass.
        this = weakref.ref(self)

        def on_error(err: Any) -> None:
            admin = this()
            if admin is not None and err.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
                admin._replace = True

        # reconnect.backoff.ms: as the producers', so a broker the client has just learned of is connected at once
        self._settings: dict[str, Any] = {"bootstrap.servers": bootstrap_servers, "error_cb": on_error,
                                          "reconnect.backoff.ms": RECONNECT_BACKOFF_MS, **(overrides or {})}
        self._replace = False
        self.replacements = 0  # clients replaced so far (for logs and tests)
        self._admin = self._new_client()
        self._learned = False  # whether the client has asked for the cluster's metadata (see _fresh)
        self._readers: dict[tuple[str, bool], Consumer] = {}
        self._seen: set[tuple[str, TP]] = set()  # (group, partition) seen with a committed offset
        weakref.finalize(self, _close_consumers, self._readers)

    def close(self) -> None:
        """Close the group-offset consumers now (they are closed when the admin is collected otherwise)."""
        _close_consumers(self._readers)

    def _new_client(self) -> AdminClient:
        return AdminClient(self._settings)

    def _fresh(self) -> AdminClient:
        """The admin client, replaced first if it lost a connection or its metadata went stale: librdkafka
        2.16 admin clients can stop answering group requests after their connections were reset, and keep
        sending a stale leader epoch after leadership moved, while a new client answers at once."""
        self._admin.poll(0)
        if self._replace:
            self._replace = False
            self.replacements += 1
            self._admin = self._new_client()
            self._learned = False
        if not self._learned:
            self._learned = True
            learn_brokers(self._admin, LEARN_TIMEOUT_S)
        return self._admin

    def _request(self, operation: str, send: Callable[[], Mapping[K, concurrent.futures.Future]],
                 timeout: float, check: Callable[[dict[K, Any]], None] | None = None,
                 missing_ok: bool = False) -> dict[K, Any]:
        """Send an admin request and wait for all its results; on a retriable failure the request is sent
        again (a future completes once, so waiting on it again would not retry anything). `check` may
        refuse an answer (RetriableKafkaError): the request is then sent again through a new client.
        `missing_ok`: a result for a topic that does not exist is None instead of an error."""

        def result(fut: concurrent.futures.Future) -> Any:
            try:
                return fut.result(timeout)
            except KafkaException as exc:
                if missing_ok and exc.args and exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    return None
                raise

        def attempt() -> dict[K, Any]:
            self._fresh()
            futures = send()
            try:
                results = {key: result(fut) for key, fut in futures.items()}
                if check is not None:
                    try:
                        check(results)
                    except RetriableKafkaError:
                        self._replace = True
                        raise
                return results
            except concurrent.futures.TimeoutError as exc:
                self._replace = True  # replaced before the next attempt
                raise RetriableKafkaError(f"{operation}: no answer within {timeout:.0f}s") from exc
            except KafkaException as exc:
                error = classify(exc, operation)
                if error.code in STALE_METADATA_CODES:
                    self._replace = True
                raise error from exc

        return DEFAULT_POLICY.retrying()(attempt)

    # ------------------------------------------------------------------ topics
    def partition_counts(self, topics: Iterable[str], timeout: float = 30.0) -> dict[str, int | None]:
        """Partition count per topic; None for a topic that does not exist."""
        md = call("list_topics", self._admin.list_topics, timeout=timeout)
        out: dict[str, int | None] = {}
        for topic in topics:
            meta = md.topics.get(topic)
            out[topic] = None if meta is None or meta.error is not None else len(meta.partitions)
        return out

    def create_topics(self, specs: Iterable[TopicSpec], timeout: float = 60.0) -> list[str]:
        """Create the topics that do not exist yet; returns the names created, once the cluster's metadata
        lists them (a broker learns of a new topic from the controller a moment after the creation returns,
        and a check right after would find it missing)."""
        specs = list(specs)
        existing = self.partition_counts([s.name for s in specs])
        new = [NewTopic(s.name, s.partitions, s.replication_factor or -1, config=dict(s.config))
               for s in specs if existing[s.name] is None]
        if not new:
            return []
        created = []
        for name, fut in self._admin.create_topics(new, request_timeout=timeout).items():
            try:
                fut.result(timeout)
                created.append(name)
            except KafkaException as exc:
                if exc.args[0].code() != exc.args[0].TOPIC_ALREADY_EXISTS:
                    raise classify(exc, f"create topic {name}") from exc
        deadline = time.monotonic() + timeout
        while (missing := [n for n, count in self.partition_counts([t.topic for t in new]).items() if count is None]):
            if time.monotonic() > deadline:
                raise KafkaEosError(f"topic(s) {', '.join(missing)} created but not in the cluster's metadata after "
                                    f"{timeout:.0f} s")
            time.sleep(0.1)
        return created

    def add_partitions(self, topic: str, total: int, timeout: float = 60.0) -> None:
        """Give `topic` `total` partitions (Kafka adds partitions, never removes them), once the cluster's metadata
        lists them all."""
        fut = self._admin.create_partitions([NewPartitions(topic, total)], request_timeout=timeout)[topic]
        try:
            fut.result(timeout)
        except KafkaException as exc:
            raise classify(exc, f"add partitions to {topic}") from exc
        deadline = time.monotonic() + timeout
        while (self.partition_counts([topic])[topic] or 0) < total:
            if time.monotonic() > deadline:
                raise KafkaEosError(f"{topic} given {total} partitions but not in the cluster's metadata after "
                                    f"{timeout:.0f} s")
            time.sleep(0.1)

    def delete_topics(self, names: Iterable[str], timeout: float = 60.0) -> list[str]:
        """Delete the topics that exist; returns the names deleted (deletion completes asynchronously on
        the brokers: a topic may be listed for a moment after this returns)."""
        names = list(names)
        existing = [n for n, count in self.partition_counts(names).items() if count is not None]
        if not existing:
            return []
        for name, fut in self._admin.delete_topics(existing, request_timeout=timeout).items():
            try:
                fut.result(timeout)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise classify(exc, f"delete topic {name}") from exc
        return existing

    def topic_ids(self, topics: Iterable[str], timeout: float = 30.0) -> dict[str, str | None]:
        """Each topic's id (a topic deleted and created again under the same name gets a new one); None for a
        topic that does not exist."""
        topics = list(topics)
        if not topics:
            return {}
        result = self._request("describe topics", lambda: self._admin.describe_topics(
            TopicCollection(topics), request_timeout=timeout), timeout, missing_ok=True)
        return {t: (str(d.topic_id) if d is not None else None) for t, d in result.items()}

    def delete_records(self, before: Mapping[TP, int], timeout: float = 30.0) -> dict[TP, int]:
        """Delete every record below the given offset of each partition (the log start offset moves there,
        as retention would move it). Returns each partition's new log start offset."""
        request = [TopicPartition(t, p, o) for (t, p), o in before.items()]
        if not request:
            return {}
        result = self._request("delete records", lambda: self._admin.delete_records(
            request, request_timeout=timeout, operation_timeout=timeout), timeout)
        return {(tp.topic, tp.partition): info.low_watermark for tp, info in result.items()}

    def topic_names(self, timeout: float = 30.0) -> list[str]:
        """Every topic except Kafka's internal ones (`__consumer_offsets`, `__transaction_state`)."""
        md = call("list_topics", self._admin.list_topics, timeout=timeout)
        return sorted(t for t in md.topics if not t.startswith("__"))

    def append(self, topic: str, records: Iterable[tuple[bytes | None, bytes | None]], timeout: float = 60.0) -> int:
        """Write (key, value) records to `topic` outside any transaction (idempotent, acks=all) and wait until
        each is acknowledged; returns the count (a tool's own records, such as a reset's in the ledger)."""
        from transactions.clients import produce_pairs

        return produce_pairs(self.bootstrap_servers, topic, records, timeout=timeout)

    def delete_groups(self, groups: Iterable[str], timeout: float = 30.0) -> None:
        """Delete consumer groups (with their committed offsets); groups that do not exist are skipped."""
        groups = list(groups)
        if not groups:
            return
        for group, fut in self._admin.delete_consumer_groups(groups, request_timeout=timeout).items():
            try:
                fut.result(timeout)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.GROUP_ID_NOT_FOUND:
                    raise classify(exc, f"delete group {group}") from exc

    def topic_config(self, topic: str, timeout: float = 30.0) -> dict[str, str]:
        resource = ConfigResource(ResourceType.TOPIC, topic)
        result = self._request(f"describe configs of {topic}",
                               lambda: self._admin.describe_configs([resource], request_timeout=timeout), timeout)
        return {k: v.value for k, v in result[resource].items()}

    def broker_config(self, timeout: float = 30.0) -> dict[str, str]:
        """Configuration of one broker (the controller's view of a live broker)."""
        md = call("list_topics", self._admin.list_topics, timeout=timeout)
        broker_id = sorted(md.brokers)[0]
        resource = ConfigResource(ResourceType.BROKER, str(broker_id))
        result = self._request("describe broker configs",
                               lambda: self._admin.describe_configs([resource], request_timeout=timeout), timeout)
        return {k: v.value for k, v in result[resource].items()}

    def live_brokers(self, timeout: float = 30.0) -> int:
        return len(call("list_topics", self._admin.list_topics, timeout=timeout).brokers)

    # ------------------------------------------------------------------ offsets
    def _list_offsets(self, partitions: Iterable[TP], spec: OffsetSpec, isolation: IsolationLevel,
                      timeout: float) -> dict[TP, int]:
        request = {TopicPartition(t, p): spec for t, p in partitions}
        if not request:
            return {}
        result = self._request("list_offsets", lambda: self._admin.list_offsets(
            request, isolation_level=isolation, request_timeout=timeout), timeout, check=_real_offsets)
        return {(tp.topic, tp.partition): info.offset for tp, info in result.items()}

    def end_offsets(self, partitions: Iterable[TP], *, committed: bool = True, timeout: float = 30.0) -> dict[TP, int]:
        """Last stable offset (`committed=True`, what read_committed readers can reach) or high watermark."""
        isolation = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
        return self._list_offsets(partitions, OffsetSpec.latest(), isolation, timeout)

    def settled_ends(self, partitions: Iterable[TP], *, at_least: Mapping[TP, int] | None = None,
                     within: float = 10.0, timeout: float = 30.0) -> dict[TP, int]:
        """Last stable offsets once the transactions written to the partitions by now are decided and their
        markers written: read again until each reaches its target (`at_least`, or else the high watermark
        read first), for at most `within` seconds, then returned as they are. A broker answers a commit
        before it writes the markers, so a last stable offset read just after a commit was still the
        transaction's first offset in 200 of 1,000 commits on a local broker: an audit reading committed
        offsets, then outputs up to their last stable offsets, would miss the outputs of a transaction whose
        offsets it counted; a store that applied the transaction would look ahead of its changelog."""
        return settled_ends(self, partitions, at_least=at_least, within=within, timeout=timeout,
                            waited_out=self._waited_out)

    def earliest_offsets(self, partitions: Iterable[TP], timeout: float = 30.0) -> dict[TP, int]:
        return self._list_offsets(partitions, OffsetSpec.earliest(), IsolationLevel.READ_UNCOMMITTED, timeout)

    def offsets_for_time(self, partitions: Iterable[TP], timestamp_ms: int, timeout: float = 30.0) -> dict[TP, int]:
        """Per partition, the first offset whose record's timestamp is at or after `timestamp_ms` (the end
        offset when no record is that late)."""
        partitions = list(partitions)
        request = {TopicPartition(t, p): OffsetSpec.for_timestamp(timestamp_ms) for t, p in partitions}
        if not request:
            return {}
        result = self._request("list_offsets by time", lambda: self._admin.list_offsets(
            request, isolation_level=IsolationLevel.READ_UNCOMMITTED, request_timeout=timeout), timeout)
        found = {(tp.topic, tp.partition): info.offset for tp, info in result.items()}
        ends = self.end_offsets([tp for tp, offset in found.items() if offset < 0], committed=False, timeout=timeout)
        return {tp: offset if offset >= 0 else ends[tp] for tp, offset in found.items()}

    def group_members(self, group: str, timeout: float = 30.0) -> list[str]:
        """The members of a consumer group (`client_id@host`), none for a group that does not exist."""
        futures = self._admin.describe_consumer_groups([group], request_timeout=timeout)
        try:
            description = futures[group].result(timeout)
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND:
                return []
            raise classify(exc, f"describe group {group}") from exc
        return [f"{m.client_id}@{m.host}" for m in description.members]

    def partition_offsets(self, partitions: Iterable[TP], timeout: float = 30.0) -> dict[TP, PartitionOffsets]:
        partitions = list(partitions)
        low = self.earliest_offsets(partitions, timeout)
        lso = self.end_offsets(partitions, committed=True, timeout=timeout)
        hwm = self.end_offsets(partitions, committed=False, timeout=timeout)
        return {tp: PartitionOffsets(low[tp], lso[tp], hwm[tp]) for tp in partitions}

    def topic_partitions(self, topic: str) -> list[TP]:
        count = self.partition_counts([topic])[topic]
        if count is None:
            raise KeyError(f"topic {topic!r} does not exist")
        return [(topic, p) for p in range(count)]

    def _group_reader(self, group: str, stable: bool) -> Consumer:
        """A consumer of `group` that never subscribes, so never joins it: it only reads and sets offsets.
        `stable`: read_committed, whose offset reads wait out pending transactional offsets (RequireStable)."""
        reader = self._readers.get((group, stable))
        if reader is None:
            reader = self._readers[(group, stable)] = Consumer({
                "bootstrap.servers": self.bootstrap_servers, "group.id": group, "enable.auto.commit": False,
                "isolation.level": "read_committed" if stable else "read_uncommitted"})
        return reader

    def _drop_stuck_reader(self, group: str, stable: bool) -> None:
        park(self._readers.pop((group, stable)))  # a call is still inside it: never destroy it

    def group_offsets(self, group: str, partitions: Iterable[TP], *, stable: bool = True,
                      timeout: float = 30.0) -> dict[TP, int | None]:
        """Committed offsets of `group` (None where nothing is committed). `stable` waits out pending
        transactional offsets (RequireStable). Partitions are always listed explicitly."""
        return {tp: c.offset for tp, c in self.group_commits(group, partitions, stable=stable, timeout=timeout).items()}

    def group_commits(self, group: str, partitions: Iterable[TP], *, stable: bool = True,
                      timeout: float = 30.0) -> dict[TP, Committed]:
        """Committed offsets of `group` with their commit metadata (see `group_offsets`)."""
        partitions = list(partitions)
        if not partitions:
            return {}

        def read() -> dict[TP, Committed]:
            try:
                committed = stable_committed(self._group_reader(group, stable), partitions, timeout=timeout)
            except StuckClientError:
                self._drop_stuck_reader(group, stable)
                raise
            offsets = {tp: c.offset for tp, c in committed.items()}
            # librdkafka 2.16 answers an OffsetFetch refused with NOT_COORDINATOR (coordinator moving) as
            # "nothing committed", with no error. Committed offsets never disappear while a job runs, so
            # such an answer for a partition this admin has seen committed is asked again, unless its topic
            # was deleted (its group offsets went with it).
            vanished = sorted(tp for tp, o in offsets.items() if o is None and (group, tp) in self._seen)
            if vanished:
                topics = sorted({t for t, _ in vanished})
                gone = {t for t, n in self.partition_counts(topics, timeout=timeout).items() if n is None}
                self._seen -= {(group, tp) for tp in vanished if tp[0] in gone}
                vanished = [tp for tp in vanished if tp[0] not in gone]
            if vanished:
                raise RetriableKafkaError(f"offsets of group {group}: {vanished} answered as never committed")
            self._seen.update({(group, tp) for tp, o in offsets.items() if o is not None})
            return committed

        return DEFAULT_POLICY.retrying()(read)

    def group_lag(self, group: str, topics: Iterable[str], timeout: float = 30.0) -> int:
        """Records of `topics` the group has yet to commit: last stable offset - committed offset (nothing
        committed counts from the partition's earliest offset). 0 means the group has caught up."""
        tps = [tp for topic in topics for tp in self.topic_partitions(topic)]
        committed = self.group_offsets(group, tps, stable=False, timeout=timeout)
        ends, starts = self.end_offsets(tps, timeout=timeout), self.earliest_offsets(tps, timeout=timeout)
        lag = 0
        for tp in tps:
            position = committed.get(tp)
            lag += max(0, ends[tp] - (starts[tp] if position is None else position))
        return lag

    def set_group_offsets(self, group: str, offsets: Mapping[TP, int], timeout: float = 30.0,
                          metadata: Mapping[TP, str] | None = None) -> None:
        """Set committed offsets of a group without members (outside any transaction: start-up use only), each
        with its `metadata` if given."""
        given = metadata or {}
        tps = [TopicPartition(t, p, o) if (t, p) not in given else TopicPartition(t, p, o, metadata=given[(t, p)])
               for (t, p), o in offsets.items()]  # (the client takes a string for metadata, or none at all)
        if not tps:
            return
        reader = self._group_reader(group, True)
        try:
            result = call(f"set offsets of group {group}", call_with_deadline, f"set offsets of group {group}",
                          lambda: reader.commit(offsets=tps, asynchronous=False), timeout)
        except StuckClientError:
            self._drop_stuck_reader(group, True)
            raise
        for tp in result or []:
            if tp.error is not None:
                raise classify(tp.error, f"set offset of group {group} for {tp.topic}[{tp.partition}]")


class BrokerUnreachableError(ConnectionError):
    """No broker answered at the bootstrap servers."""


def admin_for(bootstrap_servers: str, *, settle_once: bool = False) -> KafkaAdmin:
    """The admin of the cluster at `bootstrap_servers`: a `KafkaAdmin`, or the admin of the in-memory cluster
    the address names (`transactions.memory.MemoryCluster.bootstrap_servers`, as a test driver's).
    `settle_once`: see `KafkaAdmin`."""
    from transactions.memory import MemoryAdmin, named_cluster  # (it imports this module)

    cluster = named_cluster(bootstrap_servers)
    if cluster is None:
        return KafkaAdmin(bootstrap_servers, settle_once=settle_once)
    return cast(KafkaAdmin, MemoryAdmin(cluster, settle_once=settle_once))


def check_reachable(bootstrap_servers: str, timeout: float = 10.0) -> frozenset[str]:
    """Ask the bootstrap servers for cluster metadata once, quietly (no librdkafka log lines); returns the
    names of the cluster's topics. Raises `BrokerUnreachableError` naming the address when none answers in
    `timeout`."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 0,
                         "socket.connection.setup.timeout.ms": int(timeout * 1000)})
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else exc
        detail = err.str() if isinstance(err, KafkaError) else str(err)
        raise BrokerUnreachableError(f"no Kafka broker answers at {bootstrap_servers} within {timeout:.0f}s "
                                     f"({detail})") from None
    return frozenset(metadata.topics)


#: Longest wait for a new client's first metadata; its first request goes ahead after it in any case
LEARN_TIMEOUT_S = 2.0


def _real_offsets(result: Mapping[TopicPartition, Any]) -> None:
    """An offset answer is never negative. librdkafka 2.16 can answer ListOffsets during a broker restart
    with -1001 (no offset) and no error; taken as a changelog's end, that once had a store wiped and
    "restored" from nothing (chaos matrix, stateful job, broker clean bounce)."""
    bad = {f"{tp.topic}[{tp.partition}]": info.offset for tp, info in result.items() if info.offset < 0}
    if bad:
        raise RetriableKafkaError(f"list_offsets: no offset in the answer for {bad}")


def _close_consumers(consumers: dict[Any, Consumer]) -> None:
    while consumers:
        close_or_park(consumers.popitem()[1])
