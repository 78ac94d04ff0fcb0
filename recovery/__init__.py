"""State stores (RocksDB and in-memory), write buffers, changelog topics, restore by replay, local state
directories. Imports only from `transactions`."""

from recovery.backends import Backend, MemoryBackend, RocksDBBackend, StoreError
from recovery.changelog import ChangelogConfigError, changelog_record, check_source_changelogs, ensure_changelogs
from recovery.restore import ChangelogSource, KnownBounds, RestoreResult, restore_store, settled_bounds
from recovery.state_dir import HOLDER, StateDirectoryError, StoreHolder, TaskDirectory, locked_task_directories
from recovery.store import KeyValueStore, StoreKind, StoreSpec, StoreView, shared_stores
from recovery.versioned import NOT_PUT, VALID_TO_UNDEFINED, Version, VersionedKeyValueStore
from recovery.windows import (
    Held,
    RecordBuffer,
    Session,
    SessionStore,
    Suppressed,
    SuppressionBuffer,
    TimeOrderedBuffer,
    WindowStore,
    changelogged,
    with_derived,
)
from recovery.write_buffer import WriteBuffer

__all__ = [
    "Backend",
    "ChangelogConfigError",
    "KeyValueStore",
    "MemoryBackend",
    "RestoreResult",
    "RocksDBBackend",
    "StoreError",
    "StateDirectoryError",
    "StoreKind",
    "StoreSpec",
    "StoreView",
    "Version",
    "NOT_PUT",
    "VALID_TO_UNDEFINED",
    "VersionedKeyValueStore",
    "RecordBuffer",
    "TimeOrderedBuffer",
    "SuppressionBuffer",
    "Suppressed",
    "Held",
    "Session",
    "SessionStore",
    "WindowStore",
    "changelogged",
    "with_derived",
    "TaskDirectory",
    "StoreHolder",
    "HOLDER",
    "WriteBuffer",
    "changelog_record",
    "ensure_changelogs",
    "shared_stores",
    "check_source_changelogs",
    "restore_store",
    "settled_bounds",
    "locked_task_directories",
    "ChangelogSource",
    "KnownBounds",
]
