"""An in-memory Kafka for tests: the calls the framework makes of a consumer, a transactional producer and
an admin client, against topics held in memory (`MemoryCluster`). `eos.testing.TopologyTestDriver` runs the
framework's own protocol code on it (planner, batch attempt, stores, restore, range reads): no broker.

What it keeps of Kafka's semantics, because the framework's correctness rests on them:

* a partition is a log of offsets; a transaction's records take offsets when produced and become visible
  to read_committed readers at commit, or never (aborted); the commit or abort marker takes an offset too,
  so a range's last offset is often a marker, never a record;
* the last stable offset is the first offset of a transaction still open; read_committed readers stop there;
* `init_transactions()` bumps the transactional id's epoch and aborts its open transaction; a producer of an
  older epoch is fenced (`ProducerFencedError`) at its next call;
* offsets sent to a transaction are committed with it, with their metadata;
* a broker answers a commit once it is decided and writes the markers after it: a partition's last stable
  offset may stay at a committed transaction's first offset for a moment after the commit returned
  (`MemoryCluster.write_markers_late` keeps it there for a number of look-ups);
* keyed records without a partition go to murmur2(key) mod partitions, as the Java client puts them.

Not kept: replication, brokers, sessions, retention, compaction (a compacted topic keeps every record; a
reader replays them in order, and the last value of a key wins, as after compaction).
"""

from __future__ import annotations

import itertools
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import TopicPartition

from transactions.admin import PartitionOffsets, settled_ends
from transactions.errors import ProducerFencedError, RetriableKafkaError
from transactions.offsets import Committed
from transactions.partitioner import murmur2, partition_for
from transactions.records import Headers, ProducerRecord, producer_token

__all__ = ["MemoryCluster", "MemoryConsumer", "MemoryProducer", "MemoryAdmin", "MemoryMessage", "murmur2",
           "partition_for"]

TP = tuple[str, int]
_OPEN, _COMMITTED, _ABORTED = 0, 1, 2


class MemoryMessage:
    """What a consumer returns (the calls of `confluent_kafka.Message` the framework makes), and an entry of a
    partition's log: `txn` is the transaction that wrote it (None: written outside one), `marker` whether
    it is a transaction's commit or abort marker."""

    __slots__ = ("_headers", "_key", "_offset", "_partition", "_timestamp", "_topic", "_value", "marker", "txn")

    def __init__(self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None,
                 headers: Headers | None, timestamp: int, txn: int | None = None, marker: bool = False) -> None:
        self._topic, self._partition, self._offset = topic, partition, offset
        self._key, self._value, self._headers, self._timestamp = key, value, headers, timestamp
        self.txn, self.marker = txn, marker

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> Headers | None:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return 1, self._timestamp  # (TIMESTAMP_CREATE_TIME, ms)

    def error(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"MemoryMessage({self._topic}[{self._partition}]@{self._offset} {self._key!r}: {self._value!r})"


@dataclass
class _Transaction:
    transactional_id: str
    state: int = _OPEN
    partitions: set[TP] = field(default_factory=set)
    offsets: dict[str, dict[TP, tuple[int, str]]] = field(default_factory=dict)  # group -> offsets to commit


#: The prefix of the address that names an in-memory cluster (`MemoryCluster.bootstrap_servers`)
MEMORY_SCHEME = "memory://"
_NAMED: weakref.WeakValueDictionary[str, MemoryCluster] = weakref.WeakValueDictionary()


def named_cluster(bootstrap_servers: str) -> MemoryCluster | None:
    """The in-memory cluster an address names (`MemoryCluster.bootstrap_servers`), None for any other address;
    an address of this scheme that names no cluster alive is refused."""
    if not bootstrap_servers.startswith(MEMORY_SCHEME):
        return None
    cluster = _NAMED.get(bootstrap_servers)
    if cluster is None:
        raise ValueError(f"{bootstrap_servers} names no in-memory cluster of this process")
    return cluster


class MemoryCluster:
    """Topics, transactions and consumer groups in memory. `clock`: the broker's wall clock (seconds), which
    stamps records produced without a timestamp."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.logs: dict[str, list[list[MemoryMessage]]] = {}
        self.configs: dict[str, dict[str, str]] = {}
        self.ids: dict[str, str] = {}
        self.groups: dict[str, dict[TP, tuple[int, str]]] = {}
        self.txns: dict[int, _Transaction] = {}
        self.epochs: dict[str, int] = {}
        self.open_txn: dict[str, int] = {}  # transactional id -> its open transaction
        self._txn_ids = itertools.count(1)
        self._round_robin = itertools.count()
        #: per partition, the first offset of each transaction still open in it
        self._open: dict[TP, dict[int, int]] = {}
        self._late: dict[str, int] = {}  # topic -> look-ups a committed transaction's markers wait for
        self._held: dict[TP, list[list[int]]] = {}  # per partition: [transaction, look-ups left] of held markers
        #: an address that names this cluster to the clients that read by address (`scan_consumer`,
        #: `admin_for`): what they read is this cluster's, in this process
        self.bootstrap_servers = f"{MEMORY_SCHEME}{uuid.uuid4().hex[:12]}"
        _NAMED[self.bootstrap_servers] = self

    # ------------------------------------------------------------------ topics
    def create_topic(self, name: str, partitions: int, config: Mapping[str, str] | None = None) -> bool:
        """Create a topic; False if it exists (left as it is)."""
        if name in self.logs:
            return False
        self.logs[name] = [[] for _ in range(partitions)]
        self.configs[name] = dict(config or {})
        self.ids[name] = uuid.uuid4().hex
        return True

    def add_partitions(self, topic: str, total: int) -> None:
        """Give `topic` `total` partitions, as Kafka's CreatePartitions does (never fewer than it has)."""
        logs = self.logs[topic]
        if total < len(logs):
            raise ValueError(f"{topic} has {len(logs)} partitions: Kafka cannot remove partitions")
        logs.extend([] for _ in range(total - len(logs)))

    def delete_topic(self, name: str) -> bool:
        """Delete a topic with its records; False if it does not exist. A topic created again under the name
        gets a new id, as on a broker."""
        if name not in self.logs:
            return False
        del self.logs[name], self.configs[name], self.ids[name]
        return True

    def partitions(self, topic: str) -> int:
        if topic not in self.logs:
            raise KeyError(f"topic {topic!r} does not exist")
        return len(self.logs[topic])

    def append(self, topic: str, partition: int | None, key: bytes | None, value: bytes | None,
               headers: Headers | None = None, timestamp: int | None = None,
               txn: int | None = None) -> tuple[int, int]:
        """Append a record (to `txn`, or committed at once); returns (partition, offset)."""
        parts = self.logs.get(topic)
        if parts is None:
            raise KeyError(f"topic {topic!r} does not exist")
        if partition is None:
            partition = partition_for(key, len(parts)) if key is not None else next(self._round_robin) % len(parts)
        elif not 0 <= partition < len(parts):
            raise ValueError(f"topic {topic!r} has no partition {partition} (it has {len(parts)})")
        if txn is not None and (topic, partition) in self._held:
            self._write_held((topic, partition))  # (a producer adds a partition once its markers are written)
        log = parts[partition]
        offset = len(log)
        log.append(MemoryMessage(topic, partition, offset, key, value, headers or None,
                                 int(self.clock() * 1000) if timestamp is None else timestamp, txn))
        if txn is not None:
            firsts = self._open.get((topic, partition))
            if firsts is None:
                firsts = self._open[(topic, partition)] = {}
            if txn not in firsts:
                firsts[txn] = offset
                self.txns[txn].partitions.add((topic, partition))
        return partition, offset

    def visible(self, entry: MemoryMessage) -> bool:
        return not entry.marker and (entry.txn is None or self.txns[entry.txn].state == _COMMITTED)

    def last_stable(self, topic: str, partition: int) -> int:
        """The first offset of a transaction still open in the partition, else its end."""
        firsts = self._open.get((topic, partition))
        return min(firsts.values()) if firsts else len(self.logs[topic][partition])

    def records(self, topic: str, partition: int | None = None) -> list[MemoryMessage]:
        """The committed records of a topic (or one partition), partition by partition in offset order."""
        parts = range(self.partitions(topic)) if partition is None else [partition]
        return [e for p in parts for e in self.logs[topic][p][:self.last_stable(topic, p)] if self.visible(e)]

    # ------------------------------------------------------------------ transactions
    def init_producer(self, transactional_id: str) -> int:
        """`init_transactions()`: abort the id's open transaction, bump its epoch (fencing older producers).
        Like a broker's, it returns once every earlier transaction of the id is complete: their markers written
        (`write_markers_late` or not)."""
        open_txn = self.open_txn.pop(transactional_id, None)
        if open_txn is not None:
            self._end(open_txn, commit=False)
        for tp, held in list(self._held.items()):
            for entry in [e for e in held if self.txns[e[0]].transactional_id == transactional_id]:
                held.remove(entry)
                self._write_marker(tp, entry[0])
            if not held:
                del self._held[tp]
        self.epochs[transactional_id] = self.epochs.get(transactional_id, 0) + 1
        return self.epochs[transactional_id]

    def check_epoch(self, transactional_id: str, epoch: int) -> None:
        if self.epochs.get(transactional_id) != epoch:
            raise ProducerFencedError(f"{transactional_id}: fenced by a newer producer (epoch "
                                      f"{self.epochs.get(transactional_id)} > {epoch})")

    def begin(self, transactional_id: str) -> int:
        if transactional_id in self.open_txn:
            raise RetriableKafkaError(f"{transactional_id}: a transaction is already open")
        txn = next(self._txn_ids)
        self.txns[txn] = _Transaction(transactional_id)
        self.open_txn[transactional_id] = txn
        return txn

    def add_offsets(self, txn: int, group: str, offsets: Mapping[TP, tuple[int, str]]) -> None:
        self.txns[txn].offsets.setdefault(group, {}).update(offsets)

    def end(self, transactional_id: str, txn: int, commit: bool) -> None:
        if self.open_txn.get(transactional_id) == txn:
            del self.open_txn[transactional_id]
        self._end(txn, commit)

    def _end(self, txn: int, commit: bool) -> None:
        t = self.txns[txn]
        if t.state != _OPEN:
            return
        t.state = _COMMITTED if commit else _ABORTED
        for topic, partition in sorted(t.partitions):
            lookups = self._late.get(topic)
            if lookups:
                self._held.setdefault((topic, partition), []).append([txn, lookups])
            else:
                self._write_marker((topic, partition), txn)
        if commit:
            for group, offsets in t.offsets.items():
                self.groups.setdefault(group, {}).update(offsets)

    def _write_marker(self, tp: TP, txn: int) -> None:
        self._open[tp].pop(txn, None)
        log = self.logs[tp[0]][tp[1]]
        log.append(MemoryMessage(tp[0], tp[1], len(log), None, None, None, -1, txn, True))  # takes an offset

    def _write_held(self, tp: TP) -> None:
        for txn, _ in self._held.pop(tp, []):
            self._write_marker(tp, txn)

    def write_markers_late(self, topics: Iterable[str], lookups: int = 1) -> None:
        """From now on the markers of a transaction that ends in a partition of `topics` are written after
        `lookups` more look-ups of that partition's last stable offset (`MemoryAdmin.end_offsets`), as a broker
        writes them after it has answered the commit: until then the partition's last stable offset stays at the
        transaction's first offset, while its records are in the log (the high watermark counts them). The
        offsets the transaction commits are committed at once (the group's own partition was quicker). A
        transaction that writes to the partition next has them written first."""
        self._late.update(dict.fromkeys(topics, lookups))

    def write_held_markers(self) -> None:
        """Write every marker `write_markers_late` holds now."""
        for tp in list(self._held):
            self._write_held(tp)

    def looked_up(self, tp: TP) -> None:
        """A look-up of `tp`'s last stable offset was answered: held markers come one look-up nearer."""
        held = self._held.get(tp)
        if not held:
            return
        for entry in held:
            entry[1] -= 1
        while held and held[0][1] <= 0:
            self._write_marker(tp, held.pop(0)[0])
        if not held:
            del self._held[tp]

    def pending_offsets(self, group: str, tp: TP) -> bool:
        """Whether an open transaction holds offsets of `group` for `tp` (a stable read would wait)."""
        return any(t.state == _OPEN and tp in t.offsets.get(group, {}) for t in self.txns.values())


class MemoryConsumer:
    """The consumer calls the framework makes, read_committed, for one group."""

    def __init__(self, cluster: MemoryCluster, group: str) -> None:
        self.cluster, self.group = cluster, group
        self._positions: dict[TP, int] = {}
        self._paused: set[TP] = set()
        self.known_topics: set[str] = set()

    def assign(self, partitions: Sequence[TopicPartition]) -> None:
        self._positions = {(tp.topic, tp.partition): max(0, tp.offset) for tp in partitions}
        self._paused.clear()

    def unassign(self) -> None:
        self._positions.clear()
        self._paused.clear()

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in self._positions]

    def pause(self, partitions: Sequence[TopicPartition]) -> None:
        self._paused.update((tp.topic, tp.partition) for tp in partitions)

    def resume(self, partitions: Sequence[TopicPartition]) -> None:
        self._paused.difference_update((tp.topic, tp.partition) for tp in partitions)

    def position(self, partitions: Sequence[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self._positions.get((tp.topic, tp.partition), -1001))
                for tp in partitions]

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[MemoryMessage]:
        """Visible records from the assigned partitions' positions up to their last stable offsets; the
        position moves past aborted records and markers below it, as librdkafka's does."""
        out: list[MemoryMessage] = []
        for tp, position in self._positions.items():
            if tp in self._paused:
                continue
            log, stable, txns = self.cluster.logs[tp[0]][tp[1]], self.cluster.last_stable(*tp), self.cluster.txns
            end = min(stable, position + num_messages - len(out))
            for entry in log[position:end]:  # MemoryCluster.visible, inlined: the driver's hottest loop
                if not entry.marker and (entry.txn is None or txns[entry.txn].state == _COMMITTED):
                    out.append(entry)
            position = end
            self._positions[tp] = position
        return out

    def committed(self, partitions: Sequence[TopicPartition], timeout: float = -1) -> list[TopicPartition]:
        committed = self.cluster.groups.get(self.group, {})
        out = []
        for tp in partitions:
            key = (tp.topic, tp.partition)
            if self.cluster.pending_offsets(self.group, key):
                raise RetriableKafkaError(f"{tp.topic}[{tp.partition}]: offsets pending in an open transaction")
            offset, metadata = committed.get(key, (-1001, ""))
            out.append(TopicPartition(tp.topic, tp.partition, offset, metadata=metadata)
                       if metadata else TopicPartition(tp.topic, tp.partition, offset))
        return out

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> None:
        return None

    def consumer_group_metadata(self) -> str:
        return self.group

    def close(self) -> None:
        self.unassign()


class MemoryProducer:
    """`transactions.OutputProducer` in memory: a transactional producer (or, with `transactional=False`,
    one that writes at once and commits offsets at `commit()`, as the at-least-once producer does)."""

    def __init__(self, cluster: MemoryCluster, transactional_id: str, transactional: bool = True) -> None:
        self.cluster, self.transactional_id, self.transactional = cluster, transactional_id, transactional
        self.token = producer_token()
        self.commits = 0
        self.last_offsets: dict[TP, int] = {}
        self.epoch = 0
        self._txn: int | None = None
        self._offsets: dict[str, dict[TP, tuple[int, str]]] = {}

    @property
    def usable(self) -> bool:
        return not self.transactional or self.cluster.epochs.get(self.transactional_id) == self.epoch

    def init(self, timeout: float = 60.0) -> None:
        if self.transactional:
            self.epoch = self.cluster.init_producer(self.transactional_id)

    def begin(self) -> None:
        self.last_offsets = {}
        self._offsets = {}
        if self.transactional:
            self.cluster.check_epoch(self.transactional_id, self.epoch)
            self._txn = self.cluster.begin(self.transactional_id)

    def produce(self, topic: str, value: bytes | None, key: bytes | None = None, *, partition: int | None = None,
                headers: Headers | None = None, timestamp: int | None = None, track: bool = True) -> None:
        if self.transactional:
            self.cluster.check_epoch(self.transactional_id, self.epoch)
        p, offset = self.cluster.append(topic, partition, key, value, headers, timestamp, self._txn)
        if track:
            self.last_offsets[(topic, p)] = offset

    def produce_all(self, records: Sequence[ProducerRecord], *, track: bool = False) -> int:
        size = 0
        for r in records:
            self.produce(r.topic, r.value, r.key, partition=r.partition, headers=r.headers, timestamp=r.timestamp,
                         track=track)
            size += r.size
        return size

    def flush(self, timeout: float = 30.0) -> None:
        return None  # every record is appended as it is produced

    def send_offsets(self, offsets: list[TopicPartition], group_metadata: object, timeout: float = 30.0) -> None:
        group = str(group_metadata)
        chosen = {(tp.topic, tp.partition): (tp.offset, tp.metadata or "") for tp in offsets}
        if self.transactional:
            assert self._txn is not None
            self.cluster.check_epoch(self.transactional_id, self.epoch)
            self.cluster.add_offsets(self._txn, group, chosen)
        else:
            self._offsets.setdefault(group, {}).update(chosen)

    def commit(self, timeout: float = 60.0) -> float:
        if self.transactional:
            assert self._txn is not None
            self.cluster.check_epoch(self.transactional_id, self.epoch)
            self.cluster.end(self.transactional_id, self._txn, commit=True)
            self._txn = None
        else:
            for group, offsets in self._offsets.items():
                self.cluster.groups.setdefault(group, {}).update(offsets)
        self.commits += 1
        return 0.0

    def abort(self, timeout: float = 60.0) -> None:
        if self.transactional and self._txn is not None:
            self.cluster.end(self.transactional_id, self._txn, commit=False)
            self._txn = None
        self._offsets = {}

    def close(self) -> None:
        return None


class MemoryAdmin:
    """The admin calls the framework makes (topics, offsets, configs, groups)."""

    def __init__(self, cluster: MemoryCluster, *, settle_once: bool = False) -> None:
        self.cluster = cluster
        self.bootstrap_servers = cluster.bootstrap_servers
        self._waited_out: dict[TP, int] | None = {} if settle_once else None  # (as `KafkaAdmin`'s)

    def partition_counts(self, topics: Iterable[str], timeout: float = 30.0) -> dict[str, int | None]:
        return {t: len(self.cluster.logs[t]) if t in self.cluster.logs else None for t in topics}

    def create_topics(self, specs: Iterable[Any], timeout: float = 60.0) -> list[str]:
        return [s.name for s in specs if self.cluster.create_topic(s.name, s.partitions, s.config)]

    def add_partitions(self, topic: str, total: int, timeout: float = 60.0) -> None:
        self.cluster.add_partitions(topic, total)

    def topic_names(self, timeout: float = 30.0) -> list[str]:
        return sorted(self.cluster.logs)

    def topic_ids(self, topics: Iterable[str], timeout: float = 30.0) -> dict[str, str | None]:
        return {t: self.cluster.ids.get(t) for t in topics}

    def topic_config(self, topic: str, timeout: float = 30.0) -> dict[str, str]:
        if topic not in self.cluster.configs:
            raise KeyError(f"topic {topic!r} does not exist")
        return dict(self.cluster.configs[topic])

    def topic_partitions(self, topic: str) -> list[TP]:
        return [(topic, p) for p in range(self.cluster.partitions(topic))]

    def partition_offsets(self, partitions: Iterable[TP], timeout: float = 30.0) -> dict[TP, PartitionOffsets]:
        partitions = list(partitions)
        low = self.earliest_offsets(partitions)
        lso, hwm = self.end_offsets(partitions), self.end_offsets(partitions, committed=False)
        return {tp: PartitionOffsets(low[tp], lso[tp], hwm[tp]) for tp in partitions}

    def end_offsets(self, partitions: Iterable[TP], *, committed: bool = True, timeout: float = 30.0) -> dict[TP, int]:
        ends = {(t, p): self.cluster.last_stable(t, p) if committed else len(self.cluster.logs[t][p])
                for t, p in partitions}
        if committed:
            for tp in ends:
                self.cluster.looked_up(tp)
        return ends

    def settled_ends(self, partitions: Iterable[TP], *, at_least: Mapping[TP, int] | None = None,
                     within: float = 10.0, timeout: float = 30.0) -> dict[TP, int]:
        return settled_ends(self, partitions, at_least=at_least, within=within, timeout=timeout,
                            waited_out=self._waited_out)

    def earliest_offsets(self, partitions: Iterable[TP], timeout: float = 30.0) -> dict[TP, int]:
        return dict.fromkeys(partitions, 0)

    def offsets_for_time(self, partitions: Iterable[TP], timestamp_ms: int, timeout: float = 30.0) -> dict[TP, int]:
        """As `KafkaAdmin.offsets_for_time`: per partition, the first record at or after `timestamp_ms` (the
        end when none is that late)."""
        out = {}
        for t, p in partitions:
            log = self.cluster.logs[t][p]
            out[(t, p)] = next((m.offset() for m in log if not m.marker and m.timestamp()[1] >= timestamp_ms),
                               len(log))
        return out

    def group_commits(self, group: str, partitions: Iterable[TP], *, stable: bool = True,
                      timeout: float = 30.0) -> dict[TP, Committed]:
        committed = self.cluster.groups.get(group, {})
        out = {}
        for tp in partitions:
            offset, metadata = committed.get(tp, (-1, ""))
            out[tp] = Committed(offset if offset >= 0 else None, metadata or None)
        return out

    def group_offsets(self, group: str, partitions: Iterable[TP], *, stable: bool = True,
                      timeout: float = 30.0) -> dict[TP, int | None]:
        return {tp: c.offset for tp, c in self.group_commits(group, partitions, stable=stable).items()}

    def set_group_offsets(self, group: str, offsets: Mapping[TP, int], timeout: float = 30.0,
                          metadata: Mapping[TP, str] | None = None) -> None:
        self.cluster.groups.setdefault(group, {}).update({tp: (o, (metadata or {}).get(tp, "")) for tp, o in
                                                          offsets.items()})

    def append(self, topic: str, records: Iterable[tuple[bytes | None, bytes | None]], timeout: float = 60.0) -> int:
        n = 0
        for key, value in records:
            self.cluster.append(topic, None, key, value)
            n += 1
        return n

    def delete_groups(self, groups: Iterable[str], timeout: float = 30.0) -> None:
        for group in groups:
            self.cluster.groups.pop(group, None)

    def delete_topics(self, names: Iterable[str], timeout: float = 60.0) -> list[str]:
        return [name for name in list(names) if self.cluster.delete_topic(name)]

    def close(self) -> None:
        return None
