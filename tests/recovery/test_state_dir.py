"""A process keeps a task's stores open between batches (`recovery.HOLDER`) and lets them go when another process
needs the task's directory, or when they idle; a standby's single try asks nobody."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from recovery import RocksDBBackend, StoreError, TaskDirectory, locked_task_directories

HOLDING = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from recovery import HOLDER, RocksDBBackend, TaskDirectory
    root, idle = Path(sys.argv[1]), float(sys.argv[2])
    directory = TaskDirectory(root, "counts-0")
    directory.lock(timeout=5)
    store = RocksDBBackend(directory.store_path("counts"))
    store.write({b"a": b"4"}, changelog_offset=9)

    def let_go():
        store.close()
        directory.unlock()
        print("let go", flush=True)

    HOLDER.keep(str(directory.path.resolve()), let_go, idle)
    print("kept", flush=True)
    time.sleep(30)
""")


@pytest.fixture
def holder(tmp_path: Path):
    """A process that holds task counts-0's store open (kept) for `idle` seconds; its output lines."""
    procs: list[subprocess.Popen] = []

    def start(idle: float) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", HOLDING, str(tmp_path), str(idle)], stdout=subprocess.PIPE,
                                text=True)
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "kept"
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def test_another_process_asks_the_holder_and_gets_the_directory_at_once(tmp_path, holder):
    proc = holder(idle=60.0)
    directory = TaskDirectory(tmp_path, "counts-0")
    started = time.monotonic()
    directory.lock(timeout=10)
    assert time.monotonic() - started < 2.0  # asked, not waited out
    assert proc.stdout.readline().strip() == "let go"
    store = RocksDBBackend(directory.store_path("counts"))  # RocksDB's own lock is free too
    assert store.get(b"a") == b"4" and store.changelog_offset() == 9
    store.close()
    directory.unlock()


def test_a_standby_s_single_try_asks_nobody(tmp_path, holder):
    proc = holder(idle=60.0)
    with pytest.raises(StoreError, match="locked by another process"):
        TaskDirectory(tmp_path, "counts-0").lock(timeout=0)
    time.sleep(0.3)
    assert proc.poll() is None
    with pytest.raises(StoreError):
        TaskDirectory(tmp_path, "counts-0").lock(timeout=0)  # still held


def test_kept_stores_idle_longer_than_their_time_are_let_go_unasked(tmp_path, holder):
    proc = holder(idle=0.5)
    assert proc.stdout.readline().strip() == "let go"
    TaskDirectory(tmp_path, "counts-0").lock(timeout=0)


def test_a_holder_that_died_leaves_the_directory_free_and_the_store_whole(tmp_path, holder):
    proc = holder(idle=60.0)
    proc.kill()  # SIGKILL: no close, the write only in RocksDB's log
    proc.wait()
    directory = TaskDirectory(tmp_path, "counts-0")
    directory.lock(timeout=0)
    store = RocksDBBackend(directory.store_path("counts"))
    assert store.get(b"a") == b"4" and store.changelog_offset() == 9
    store.close()


def test_a_tool_takes_every_task_directory_of_an_application_from_its_holders(tmp_path, holder):
    proc = holder(idle=60.0)
    (tmp_path / "counts-1").mkdir()  # a task directory no process holds (and never locked: no .lock file)
    once = TaskDirectory(tmp_path, "counts-2")
    once.lock(timeout=0)  # one that was locked once and let go
    once.unlock()
    with locked_task_directories(tmp_path, timeout=10) as locked:
        assert locked == [tmp_path / "counts-0", tmp_path / "counts-2"]
        assert proc.stdout.readline().strip() == "let go"
        with pytest.raises(StoreError):
            TaskDirectory(tmp_path, "counts-0").lock(timeout=0)  # now this process's
    TaskDirectory(tmp_path, "counts-0").lock(timeout=0)  # and free again after


def test_a_request_through_another_spelling_of_the_path_reaches_the_holder(tmp_path, holder):
    proc = holder(idle=60.0)
    link = tmp_path / "link"
    link.symlink_to(tmp_path, target_is_directory=True)
    directory = TaskDirectory(link, "counts-0")
    started = time.monotonic()
    directory.lock(timeout=10)
    assert time.monotonic() - started < 2.0  # the holder knew the directory by its resolved path
    assert proc.stdout.readline().strip() == "let go"
    directory.unlock()
