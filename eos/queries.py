"""Interactive queries: read-only views of an application's state stores, as committed.

`app.store_view(name)` reads the store's changelog topic (every partition, read_committed, up to its last
stable offset) into an in-memory copy and returns the store's own typed view over it: `get`, `range`,
`all` and `approximate_num_entries` for key-value stores and tables, `fetch`/`fetch_range`/`fetch_all` for
window stores, `fetch`/`find_sessions`/`fetch_all` for session stores. `view.position` is the changelog
offset per partition the copy reflects: a write whose transaction has not committed (or was aborted) is
never visible, and a view taken after a crash shows exactly what the last committed batches wrote. A
global table is read from its topic the same way.

`app.read_store(name, spark)` is the same read as a Spark DataFrame; `eos store get|dump JOB STORE [KEY]`
the same from the command line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eos.audit.scan import scan_topic
from eos.tables import GlobalTable
from eos.topology import offset_groups
from eos.worker.global_tables import GlobalCopy, GlobalTableView
from eos.worker.processing import input_readings
from eos.worker.stores import table_replay, view_of
from recovery import (
    Held,
    MemoryBackend,
    StoreSpec,
    StoreView,
    TimeOrderedBuffer,
    Version,
    VersionedKeyValueStore,
    WriteBuffer,
    with_derived,
)
from transactions import KafkaAdmin, Message

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from eos.app import Application

__all__ = ["StoreSnapshot", "store_view", "read_store", "store_rows", "find_store", "Scan"]

#: Reads a topic's committed records up to the given end offsets, in batches (`eos.audit.scan.scan_topic` on a
#: cluster; a test driver reads its memory).
Scan = Callable[[str, dict[tuple[str, int], int]], Iterable[list[Message]]]


@dataclass
class StoreSnapshot:
    """A committed copy of a store: `view` is the typed view (what a processor gets, read-only here),
    `position` the changelog (or topic) offset each partition was read to."""

    name: str
    kind: str
    view: Any
    position: dict[int, int]

    def __getattr__(self, item: str) -> Any:  # get, range, all, fetch, ... of the typed view
        try:
            return getattr(self.view, item)
        except AttributeError:
            if item.startswith("_"):
                raise
            reads = sorted(n for n in dir(self.view) if not n.startswith("_") and n not in _WRITES
                           and callable(getattr(self.view, n)))
            raise AttributeError(f"store {self.name!r} is a {self.kind.replace('_', '-')} store, which has no "
                                 f"{item!r}; it is read with {', '.join(reads)}") from None


#: what a typed view has that a query does not use: it writes, or it is the framework's
_WRITES = frozenset({"attach", "put", "put_if_absent", "delete", "remove", "expire_before", "key_bytes", "encoded_size",
                     "next_seq", "observe", "take_before", "take_until"})


def find_store(app: Application, name: str) -> StoreSpec | GlobalTable:
    """The store (or global table) called `name` in the application, or a KeyError naming the ones there are."""
    found: dict[str, StoreSpec | GlobalTable] = {}
    for sub in app.subtopologies.values():
        for spec in sub.stores:
            found[spec.name] = spec
        for table in sub.global_tables:
            found[table.name] = table
    if name not in found:
        raise KeyError(f"application {app.config.application_id!r} has no store {name!r}; its stores: "
                       f"{', '.join(sorted(found)) or 'none'}")
    return found[name]


def store_view(app: Application, name: str, bootstrap_servers: str | None = None, *, admin: Any = None,
               scan: Scan | None = None) -> StoreSnapshot:
    """`admin` and `scan`: where the changelog is read (the cluster at `bootstrap_servers` by default)."""
    try:
        spec: StoreSpec | GlobalTable | None = find_store(app, name)
    except KeyError:
        if not app.graph.patterns:
            raise
        spec = None  # (maybe a store of a step that reads a topic pattern not matched yet in this process)
    if admin is None or scan is None:
        bootstrap = bootstrap_servers or app.config.bootstrap_servers
        admin = KafkaAdmin(bootstrap)
        scan = _cluster_scan(bootstrap, admin)
    if spec is None:
        app.match_patterns(admin.topic_names())
        spec = find_store(app, name)
    if isinstance(spec, GlobalTable):
        copy = GlobalCopy(spec)
        position = _read(scan, admin, spec.topic, lambda msg: copy.take((msg,)))
        view = GlobalTableView(spec)
        view.copy = copy
        return StoreSnapshot(name, "global_table", view, position)
    if spec.source_topic is not None:
        per_task, position = _replayed_table(app, spec, admin, scan)
    else:
        topic = spec.changelog_topic(app.config.application_id)
        if admin.partition_counts([topic])[topic] is None:
            raise KeyError(f"store {name!r} has no changelog topic {topic} yet: the application has not run")
        per_task = {}
        position = _read(scan, admin, topic, lambda msg: per_task.setdefault(msg.partition(), {}).__setitem__(
            msg.key() or b"", msg.value()))  # (`_read` gives records with a key)

    def copy_of(changes: dict[bytes, bytes | None]) -> Any:
        backend = MemoryBackend()
        backend.write(with_derived(spec.kind, changes), None)  # (as a restore replays it: a session store's index)
        typed: StoreView = view_of(spec)
        typed.attach(WriteBuffer(backend))
        return typed

    if spec.kind == "versioned":
        copies = [copy_of(changes) for _, changes in sorted(per_task.items())]
        return StoreSnapshot(name, spec.kind, VersionedSnapshot(spec, copies), position)
    if spec.kind == "time_ordered_buffer":  # (each task numbers what it holds: copies are not merged)
        return StoreSnapshot(name, spec.kind, HeldSnapshot([copy_of(c) for _, c in sorted(per_task.items())]),
                             position)
    merged = {k: v for changes in per_task.values() for k, v in changes.items()}  # (a key is in one partition)
    return StoreSnapshot(name, spec.kind, copy_of(merged), position)


class HeldSnapshot:
    """What a stream-table join with a grace period holds, as committed, one copy per task: `all()`, each
    task's records in the order it will let them go."""

    def __init__(self, copies: list[TimeOrderedBuffer]) -> None:
        self.copies = copies

    def all(self) -> list[Held]:
        return [held for copy in self.copies for held in copy.all()]


class VersionedSnapshot:
    """A versioned store's committed copy, one per task: each task's store has its own observed stream time,
    so its own history bound (`recovery.versioned`). A key is answered by the copy of the task that holds it
    (a key is in one partition); `all` and `latest` go through every copy."""

    def __init__(self, spec: StoreSpec, copies: list[VersionedKeyValueStore]) -> None:
        self.spec, self.copies = spec, copies

    def _holder(self, key: Any) -> VersionedKeyValueStore | None:
        return next((c for c in self.copies if c.latest_timestamp(key) is not None), None)

    def get(self, key: Any, default: Any = None, *, as_of: int | None = None) -> Any:
        holder = self._holder(key)
        return default if holder is None else holder.get(key, default, as_of=as_of)

    def get_with_timestamp(self, key: Any, as_of: int | None = None) -> tuple[Any, int] | None:
        holder = self._holder(key)
        return None if holder is None else holder.get_with_timestamp(key, as_of)

    def versions(self, key: Any, time_from: int | None = None, time_to: int | None = None) -> list[Version]:
        holder = self._holder(key)
        return [] if holder is None else holder.versions(key, time_from, time_to)

    def latest(self) -> Iterator[tuple[Any, Any, int]]:
        for copy in self.copies:
            yield from copy.latest()

    def all(self) -> Iterator[tuple[Any, Any]]:
        for key, value, _ in self.latest():
            yield key, value

    def approximate_num_entries(self) -> int:
        return sum(c.approximate_num_entries() for c in self.copies)


def _replayed_table(app: Application, spec: StoreSpec, admin: Any,
                    scan: Scan) -> tuple[dict[int, dict[bytes, bytes | None]], dict[int, int]]:
    """A store restored from its table's topic (`StoreSpec.source_topic`), as committed: each task's copy is the
    topic's partition replayed up to the offset the task committed in it, as its restore does
    (`eos.worker.stores.table_replay`)."""
    topic = spec.source_topic
    assert topic is not None
    sub = next(s for s in app.subtopologies.values() if spec in s.stores)
    group = offset_groups(app.subtopologies, app.config.group_id)[(sub.name, topic)]
    committed = admin.group_offsets(group, admin.topic_partitions(topic))
    ends = {tp: offset or 0 for tp, offset in committed.items()}
    backends = {p: MemoryBackend() for _, p in ends}
    replays = {p: table_replay(spec, input_readings(sub)[topic], backend) for p, backend in backends.items()}
    for batch in scan(topic, {tp: end for tp, end in ends.items() if end > 0}):
        by_partition: dict[int, list[Message]] = {}
        for msg in batch:
            by_partition.setdefault(msg.partition(), []).append(msg)
        for p, records in by_partition.items():
            backends[p].write(replays[p](records), None)
    return ({p: dict(backend.iterate()) for p, backend in backends.items()},
            {p: end for (_, p), end in ends.items()})


def _cluster_scan(bootstrap: str, admin: KafkaAdmin) -> Scan:
    return lambda topic, until: scan_topic(bootstrap, topic, admin=admin, until=until)


def _read(scan: Scan, admin: Any, topic: str, apply: Callable[[Message], Any]) -> dict[int, int]:
    """`apply(record)` to every committed record of `topic` with a key (its value None: a tombstone); returns
    the offset each partition was read to."""
    ends = admin.end_offsets(admin.topic_partitions(topic), committed=True)
    for batch in scan(topic, ends):
        for msg in batch:
            if msg.key() is not None:
                apply(msg)
    return {p: end for (_, p), end in ends.items()}


def store_rows(snapshot: StoreSnapshot) -> list[dict[str, Any]]:
    """The snapshot's entries as rows: key, value (JSON text), and per kind timestamp, window start/end (a
    versioned store: a row per version, timestamp its start, valid_to its end)."""
    view, rows = snapshot.view, []
    if snapshot.kind == "window":
        for key, start, value, ts in view.fetch_all():
            rows.append({"key": _text(key), "window_start": start, "value": _text(value), "timestamp": ts})
    elif snapshot.kind == "session":
        for s in view.fetch_all():
            rows.append({"key": _text(s.key), "window_start": s.start, "window_end": s.end, "value": _text(s.value),
                         "timestamp": s.timestamp})
    elif snapshot.kind == "time_ordered_buffer":  # (records held back: key, value, timestamp, whence)
        rows = [{"key": _text(h.key), "value": _text(h.value), "timestamp": h.timestamp,
                 "origin": f"{h.message[0]}:{h.message[1]}:{h.message[2]}"} for h in view.all()]
    elif snapshot.kind == "suppression_buffer":  # (each key's latest update, held until its time limit passes)
        rows = [{"key": _text(s.key), "value": _text(s.value), "timestamp": s.timestamp,
                 "buffer_time": s.buffer_time} for s in view.all()]
    elif snapshot.kind == "record_buffer":
        raise ValueError(f"store {snapshot.name!r} is a join's record buffer: it holds recent records, not a "
                         "queryable table")
    elif snapshot.kind == "global_table":
        rows = [{"key": _text(k), "value": _text(v)} for k, v in view.all()]
    elif snapshot.kind == "versioned":  # every version a lookup can reach, newest first (valid_to None: current)
        for key, _, _ in view.latest():
            rows += [{"key": _text(key), "value": _text(v.value), "timestamp": v.valid_from, "valid_to": v.valid_to}
                     for v in view.versions(key)]
    else:
        for key, _ in view.all():
            value, ts = view.get_with_timestamp(key)
            rows.append({"key": _text(key), "value": _text(value), "timestamp": ts})
    return rows


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return json.dumps(value, sort_keys=True, default=repr)


def read_store(app: Application, name: str, spark: SparkSession, bootstrap_servers: str | None = None) -> DataFrame:
    """The committed contents of a store as a DataFrame (key, value as JSON text, timestamp; window stores
    add window_start, session stores window_start and window_end, versioned stores a row per version with
    valid_to). Read on the driver from the changelog."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    snapshot = store_view(app, name, bootstrap_servers)
    rows = store_rows(snapshot)
    fields = [StructField("key", StringType()), StructField("value", StringType())]
    if snapshot.kind != "global_table":
        fields.append(StructField("timestamp", LongType()))
    if snapshot.kind in ("window", "session"):
        fields.append(StructField("window_start", LongType()))
    if snapshot.kind == "session":
        fields.append(StructField("window_end", LongType()))
    if snapshot.kind == "versioned":
        fields.append(StructField("valid_to", LongType()))
    if snapshot.kind == "time_ordered_buffer":
        fields.append(StructField("origin", StringType()))
    schema = StructType(fields)
    return spark.createDataFrame([tuple(r.get(f.name) for f in fields) for r in rows], schema)
