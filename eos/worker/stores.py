"""The state stores of one task in a worker (protocol steps 3, 5 and 7 of `eos.worker.attempt`).

* `open(source)`: lock the task's state directory, open its stores and replay each changelog partition
  from the offset the store recorded up to the partition's last stable offset, as `source` (a
  `recovery.ChangelogSource`: Kafka in a Spark task, memory in `eos.testing`) has them;
* during processing, writes go to a write buffer per store (record scopes roll back failed records);
* `changelog_records()`: one record per changed key (a tombstone for a delete of a key the store holds; a key
  made and deleted within the batch leaves nothing: `WriteBuffer.drop_idle_deletes`), produced in the batch's
  transaction to `<application_id>-<store>-changelog`, partition = task partition;
* `apply()`, called only after the commit: each buffer goes to its store in one atomic write together with
  the changelog offset it now reflects (the offset of the store's last changelog record, + 1);
* `release()`: the batch is over, whatever happened: the stores stay open for the task's next batch in this
  process (`keep`: a task's runtime; `recovery.HOLDER` closes them when another process asks for the
  directory, or when idle), or are closed and the directory unlocked;
* `close()`: the task leaves this process: stores closed, directory unlocked.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import structlog

from eos.config import EosConfig
from eos.errors import ConfigError
from eos.operators.joins import keep_update
from eos.records import Record
from eos.topology import SubTopology, TaskId
from eos.worker.executor import current_executor
from eos.worker.processing import InputReading, entries, input_readings
from recovery import (
    HOLDER,
    Backend,
    ChangelogSource,
    KeyValueStore,
    MemoryBackend,
    RecordBuffer,
    RestoreResult,
    RocksDBBackend,
    SessionStore,
    StateDirectoryError,
    StoreSpec,
    StoreView,
    SuppressionBuffer,
    TaskDirectory,
    TimeOrderedBuffer,
    VersionedKeyValueStore,
    WindowStore,
    WriteBuffer,
    changelog_record,
    changelogged,
    restore_store,
    settled_bounds,
    shared_stores,
)
from transactions import Message, ProducerRecord

__all__ = ["TaskStores", "state_root", "table_replay", "view_of"]

log = structlog.get_logger(__name__)

#: kinds of stores whose entries come and go as stream time moves (windows, sessions, buffered records): a batch's
#: deletes of what it made itself are looked for (`WriteBuffer.drop_idle_deletes`); a key-value store's deletes
#: are a table's or a user's, rarely of a key its batch made, and its batch is not scanned for them (for a keyed
#: count, the scan alone cost ~0.6 % of its instructions)
_TRANSIENT = frozenset({"window", "session", "record_buffer", "time_ordered_buffer", "suppression_buffer", "versioned"})


def state_root(config: EosConfig) -> Path:
    """`<state_dir>/<application_id>`; `{executor}` in state_dir expands to the Spark executor id."""
    base = config.state_dir.replace("{executor}", current_executor() or "local")
    return Path(base).expanduser() / config.application_id


def view_of(spec: StoreSpec) -> StoreView:
    """The typed view a processor gets for a store of `spec.kind`."""
    if spec.kind == "window":
        return WindowStore(spec)
    if spec.kind == "session":
        return SessionStore(spec)
    if spec.kind == "record_buffer":
        return RecordBuffer(spec)
    if spec.kind == "versioned":
        return VersionedKeyValueStore(spec)
    if spec.kind == "time_ordered_buffer":
        return TimeOrderedBuffer(spec)
    if spec.kind == "suppression_buffer":
        return SuppressionBuffer(spec)
    return KeyValueStore(spec)


#: A task's persistent stores stay open after its batch for at least this long, or three trigger intervals
KEEP_IDLE_S = 5.0


class TaskStores:
    def __init__(self, config: EosConfig, sub: SubTopology, partition: int, *, in_memory: bool = False,
                 keep: bool = False) -> None:
        """`in_memory`: every store in memory, persistent ones too, and no state directory (a test driver).
        `keep`: persistent stores stay open between batches (a task runtime's; not a standby copy's)."""
        self.config = config
        self.partition = partition
        self.task = TaskId(sub.name, partition)
        # each store's serdes bound to the topic it is restored from (a Schema Registry serde's subject)
        self.specs = {spec.name: _bound(spec, spec.restore_topic(config.application_id)) for spec in sub.stores}
        self.views = {name: view_of(spec) for name, spec in self.specs.items()}
        #: per store, the topic it is restored from: its changelog, or its table's topic (`source_topic`)
        self.changelogs = {name: spec.restore_topic(config.application_id) for name, spec in self.specs.items()}
        #: how a table's topic is read, for the stores restored from it (as the task reads it)
        self.readings = {t: r for t, r in input_readings(sub).items()
                         if any(spec.source_topic == t for spec in self.specs.values())}
        #: stores kept in another's store (the same table, restored from its topic): store -> that store
        self.kept_in = shared_stores(sub.stores)
        self.in_memory = in_memory
        self.directory = TaskDirectory(state_root(config), str(self.task))
        self._memory: dict[str, MemoryBackend] = {}  # in-memory stores live as long as this worker
        self._backends: dict[str, Backend] = {}
        self._buffers: dict[str, WriteBuffer] = {}
        #: per store, the changelog offset just past the records this task's last commit wrote there: where
        #: that transaction's commit marker went, unless another writer's records came first (see `open`)
        self._own_marker: dict[str, int] = {}
        self.keep = keep
        self._kept = False  # handed to HOLDER open at the last release
        self._key = str(self.directory.path.resolve())  # (HOLDER's key: what `ask_to_let_go` sends)

    @property
    def persistent(self) -> bool:
        return not self.in_memory and any(spec.persistent for spec in self.specs.values())

    def open(self, source: ChangelogSource, *, lock_timeout: float | None = None, persistent_only: bool = False,
             budget: float | None = None, current: bool = False,
             committed: Mapping[tuple[str, int], int] | None = None) -> tuple[float, int]:
        """Open and restore every store (or only the persistent ones: standby copies live on disk).
        `budget` (seconds) bounds the replay (standby refreshes); without it every store reaches its
        changelog's end. `current`: the task's last commit was this process's, applied to these stores, and
        nobody has committed the task since (`eos.worker.attempt`): stores this process kept open since
        then are up to date without asking the changelogs. `committed`: the task's committed offset in each
        table topic a store is restored from (`StoreSpec.source_topic`), where its replay ends, since the
        records after it are the batch's to process; a store whose topic has none is left as it is.
        Returns (milliseconds, changelog records replayed)."""
        started = time.monotonic()
        kept = self._kept and HOLDER.take(self._key)
        self._kept = False
        if kept and current:
            self._attach()
            return (time.monotonic() - started) * 1000, 0
        if self.persistent and not kept:
            try:
                self.directory.lock(timeout=max(60.0, self.config.batch_timeout) if lock_timeout is None
                                    else lock_timeout)
            except StateDirectoryError as exc:
                raise ConfigError(f"{exc} on executor {current_executor() or 'local'}. Set state_dir to a local "
                                  "directory every executor can write (state_dir='/data/eos/{executor}').") from exc
        tps = [(topic, self.partition) for topic in self.changelogs.values()]
        bounds = source.bounds(tps)
        replayed = 0
        for name, spec in self.specs.items():
            if (persistent_only and not spec.persistent) or name in self.kept_in:
                continue
            backend = self._backends.get(name) if kept else None
            if backend is None:
                backend = (RocksDBBackend(self.directory.store_path(spec.directory))
                           if spec.persistent and not self.in_memory
                           else self._memory.setdefault(name, MemoryBackend()))
            self._backends[name] = backend
            tp = (self.changelogs[name], self.partition)
            if spec.source_topic is not None:
                end = (committed or {}).get(tp)
                if end is not None:
                    left = None if budget is None else max(0.0, budget - (time.monotonic() - started))
                    result = restore_store(backend, source.read, tp[0], tp[1], start_offset=min(bounds[tp][0], end),
                                           end_offset=end, log=log, timeout=max(600.0, self.config.batch_timeout),
                                           budget=left,
                                           changes_of=table_replay(spec, self.readings[spec.source_topic], backend))
                    replayed += result.records
                    self._log_restored(name, result)
                continue
            recorded = backend.changelog_offset()
            if recorded is not None and recorded > bounds[tp][1]:
                bounds[tp] = settled_bounds(source, tp, recorded, bounds[tp], timeout=self.config.batch_timeout,
                                            log=log)
            own_marker = self._own_marker.pop(name, None)
            if own_marker is not None and own_marker == backend.changelog_offset() and bounds[tp][1] == own_marker + 1:
                # The changelog ends one offset past the store: the marker of the store's own last commit (it
                # follows the transaction's records, and any other writer's would end the changelog further
                # on). Reading it would only wait for a record that never comes (docs/measurements.md).
                backend.write({}, changelog_offset=own_marker + 1)
            else:
                left = None if budget is None else max(0.0, budget - (time.monotonic() - started))
                result = restore_store(backend, source.read, tp[0], tp[1], start_offset=bounds[tp][0],
                                       end_offset=bounds[tp][1], log=log,
                                       timeout=max(600.0, self.config.batch_timeout), budget=left, kind=spec.kind)
                replayed += result.records
                self._log_restored(name, result)
        self._attach()
        return (time.monotonic() - started) * 1000, replayed

    def _attach(self) -> None:
        for name, backend in self._backends.items():
            buffer = WriteBuffer(backend)
            self._buffers[name] = buffer
            self.views[name].attach(buffer)
        for name, primary in self.kept_in.items():  # (a table's rows, written alike by each join that keeps them)
            if primary in self._buffers:
                self.views[name].attach(self._buffers[primary])

    @staticmethod
    def _log_restored(name: str, result: RestoreResult) -> None:
        if result.records:
            log.info("store restored", store=name, records=result.records, seconds=round(result.seconds, 3),
                     records_per_s=round(result.rate), wiped=result.wiped)

    def offsets(self) -> dict[str, int]:
        """The changelog offset each open store reflects."""
        offsets = {name: offset for name, backend in self._backends.items()
                   if (offset := backend.changelog_offset()) is not None}
        return {**offsets, **{name: offsets[primary] for name, primary in self.kept_in.items() if primary in offsets}}

    def scoped(self) -> list[WriteBuffer]:
        return list(self._buffers.values())

    def changelog_records(self) -> list[ProducerRecord]:
        records: list[ProducerRecord] = []
        for name, buffer in self._buffers.items():
            if self.specs[name].source_topic is not None:
                continue  # (its table's topic is its changelog)
            topic = self.changelogs[name]
            if self.specs[name].kind in _TRANSIENT:
                buffer.drop_idle_deletes()
            records.extend(changelog_record(topic, self.partition, k, v)
                           for k, v in changelogged(self.specs[name].kind, buffer.changes()))
        return records

    def apply(self, last_offsets: Mapping[tuple[str, int], int],
              committed: Mapping[tuple[str, int], int] | None = None) -> None:
        """Called only after the batch's transaction committed (invariant I3). `last_offsets`: the offset of
        each changelog's last record the batch wrote; `committed`: the offsets the batch committed in the table
        topics that stores are restored from (the store reflects its topic up to there)."""
        for name, buffer in self._buffers.items():
            changes = buffer.changes()
            tp = (self.changelogs[name], self.partition)
            if self.specs[name].source_topic is not None:
                end = (committed or {}).get(tp)
                self._backends[name].write(changes, end)  # (none: the old offset stays; replaying is idempotent)
                buffer.clear()
                continue
            last = last_offsets.get(tp)
            # Without a delivered offset the old (lower) offset stays: replaying from it is idempotent.
            self._backends[name].write(changes, None if last is None else last + 1)
            buffer.clear()
            if last is None or self.config.processing_guarantee != "exactly_once":
                self._own_marker.pop(name, None)  # (at least once: no transaction, no marker)
            else:
                self._own_marker[name] = last + 1

    def release(self) -> None:
        """The batch is over (committed or not; uncommitted changes are in the buffers, dropped here): a kept
        task's persistent stores stay open, handed to `HOLDER`; others are closed."""
        for view in self.views.values():
            view.attach(None)
        self._buffers.clear()
        if self.keep and self.persistent and self._backends and self.directory.locked:
            self._kept = True
            HOLDER.keep(self._key, self._let_go, max(KEEP_IDLE_S, 3 * self.config.trigger_interval))
        else:
            self._let_go()

    def close(self) -> None:
        """The task leaves this process (or the process its run): stores closed now, the directory unlocked."""
        for view in self.views.values():
            view.attach(None)
        self._buffers.clear()
        if self._kept:
            self._kept = False
            HOLDER.let_go(self._key)
        self._let_go()

    def _let_go(self) -> None:
        try:
            for name, backend in self._backends.items():
                if self.specs[name].persistent and not self.in_memory:
                    backend.close()
        finally:
            self._backends.clear()
            self.directory.unlock()


def table_replay(spec: StoreSpec, reading: InputReading,
                 backend: Backend) -> Callable[[list[Message]], dict[bytes, bytes | None]]:
    """The writes a chunk of a table topic's records makes to the store `spec` over `backend` that keeps the
    table, as the task's processing made them (`StoreSpec.source_topic`): each record read as the task reads
    the topic (`reading`), a bad record (dead-lettered when it was processed) and one without a key skipped,
    each update kept by `keep_update`.

    A plain table's row is its key's last good record, whatever came before: its chunk is read from the end,
    each key's records only until one is good (a topic not yet compacted holds many updates of a key)."""
    key_serde, value_serde, timestamp = reading
    view = view_of(spec)
    latest_only = spec.kind == "key_value"

    def changes_of(records: list[Message]) -> dict[bytes, bytes | None]:
        buffer = WriteBuffer(backend)
        view.attach(buffer)
        try:
            if latest_only:
                _keep_last_rows(view, records, reading)  # type: ignore[arg-type]
            else:
                for _, record, _ in entries(records, key_serde, value_serde, timestamp):
                    if isinstance(record, Record) and record.key is not None:
                        keep_update(view, record)  # type: ignore[arg-type]
        finally:
            view.attach(None)
        return buffer.changes()
    return changes_of


def _keep_last_rows(view: KeyValueStore, records: list[Message], reading: InputReading) -> None:
    """Each key's last good record of `records` into `view` (a plain table's store), read from the end: a key
    seen (as its bytes in the topic, or as the store keys it) is done; a bad record leaves it to the ones
    before."""
    done_raw: set[bytes | None] = set()
    done: set[bytes] = set()
    for msg in reversed(records):
        raw = msg.key()
        if raw in done_raw or raw is None:
            continue
        for _, record, _ in entries((msg,), *reading):
            if isinstance(record, Record) and record.key is not None:
                done_raw.add(raw)
                key = view.key_bytes(record.key)
                if key not in done:
                    done.add(key)
                    keep_update(view, record)


def _bound(spec: StoreSpec, changelog: str) -> StoreSpec:
    """The spec with serdes bound to the changelog topic (`eos.serde.Serde.bind`; a serde without `bind` as
    it is)."""
    key, value = _bind(spec.key_serde, changelog, True), _bind(spec.value_serde, changelog, False)
    return spec if (key, value) == (spec.key_serde, spec.value_serde) else replace(spec, key_serde=key,
                                                                                     value_serde=value)


def _bind(serde: Any, topic: str, is_key: bool) -> Any:
    bind = getattr(serde, "bind", None)
    return serde if bind is None else bind(topic, is_key)
