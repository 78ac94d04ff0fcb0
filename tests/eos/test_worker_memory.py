"""A worker hands the memory its batch freed back to the system (eos.worker.memory): glibc keeps freed memory in
its arenas, resident, unless asked."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from eos.worker import memory

PROBE = """
import sys
from types import SimpleNamespace
from eos.worker.memory import TRIM_ABOVE, free_bytes, release_free_memory

def private_kib():
    fields = dict(line.split(":", 1) for line in open("/proc/self/smaps_rollup").read().splitlines()[1:])
    return int(fields["Private_Dirty"].split()[0])

print(release_free_memory())  # little free yet: nothing done
kept = []
batch = [bytes(2000) + i.to_bytes(4, "big") for i in range(40_000)]  # ~80 MiB through malloc, as a batch makes
for i in range(0, len(batch), 7):
    kept.append(batch[i])  # some live on, scattered among the freed (the next batch's, say)
del batch
free, before = free_bytes(), private_kib()
print(free > TRIM_ABOVE, release_free_memory(), (before - private_kib()) // 1024)
"""


@pytest.mark.skipif(memory.free_bytes() is None, reason="not glibc 2.33 or later: the allocator cannot tell")
def test_the_free_memory_of_a_batch_goes_back_to_the_system():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    nothing, (plenty, trimmed, released_mib) = done.stdout.split("\n")[0], done.stdout.split("\n")[1].split()
    assert nothing == "False"
    assert plenty == "True" and trimmed == "True"
    # of ~69 MiB freed in whole pages between the survivors: 44 MiB every time alone (70 probes, idle or with
    # the cores loaded), 38 once inside the suite; without the trim, none
    assert int(released_mib) > 30, done.stdout


ARENAS_PROBE = """
import ctypes, os, sys, tempfile, threading

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]

if sys.argv[1] == "capped":
    from eos.worker.memory import cap_arenas
    print(cap_arenas())
elif sys.argv[1] == "daemon":  # what the framework's daemon does before it forks the workers
    from eos.worker.daemon import preload
    preload()
    print(True)
else:
    print(False)

if os.fork() == 0:  # a worker forked from it, whose clients start their threads
    allocated, counted = threading.Barrier(9), threading.Barrier(9)
    def client_thread():
        libc.malloc(4096)  # (a thread gets its arena with its first allocation)
        allocated.wait()
        counted.wait()
    threads = [threading.Thread(target=client_thread) for _ in range(8)]
    for thread in threads:
        thread.start()
    allocated.wait()
    with tempfile.NamedTemporaryFile(suffix=".xml") as out:
        stream = libc.fopen(out.name.encode(), b"w")
        libc.malloc_info(0, stream)
        libc.fclose(stream)
        print(open(out.name).read().count("<heap nr="), flush=True)
    counted.wait()
    os._exit(0)
os.wait()
"""


def _arenas(how: str, env: dict[str, str] | None = None) -> tuple[str, int]:
    done = subprocess.run([sys.executable, "-c", ARENAS_PROBE, how], capture_output=True, text=True, check=True,
                          env=env)
    capped, arenas = done.stdout.split()
    return capped, int(arenas)


@pytest.mark.skipif(memory.free_bytes() is None, reason="not glibc 2.33 or later")
def test_a_workers_threads_share_at_most_two_malloc_arenas():
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    assert _arenas("uncapped", env) == ("False", 9)  # glibc: an arena per thread (up to eight per core)
    assert _arenas("capped", env) == ("True", memory.ARENAS)
    assert _arenas("daemon", env) == ("True", memory.ARENAS)  # the daemon's workers: capped before their fork


@pytest.mark.skipif(memory.free_bytes() is None, reason="not glibc 2.33 or later")
def test_malloc_arena_max_in_the_environment_is_the_users_choice():
    capped, arenas = _arenas("capped", {**os.environ, "MALLOC_ARENA_MAX": "4"})
    assert (capped, arenas) == ("False", 4)


def test_a_worker_of_pysparks_own_daemon_caps_its_arenas_when_it_first_loads_a_job(monkeypatch):
    """Cluster masters fork their workers from PySpark's daemon, not the framework's: a worker caps its arenas
    itself, before its first task makes clients."""
    from pyspark import cloudpickle

    from eos.worker import entry

    calls: list[int] = []
    monkeypatch.setattr(entry, "cap_arenas", lambda: calls.append(1) or True)
    task = entry.SparkTaskFunction(SimpleNamespace(value=cloudpickle.dumps({"job": 1})))
    assert task._job() == {"job": 1} and task._job() == {"job": 1}
    assert calls == [1]


def test_a_tasks_input_is_handed_over_in_small_chunks_a_units_and_a_restores_in_large_ones():
    """A streamed task processes each chunk its read hands over and drops it: `INPUT_CHUNK` records at a time
    (the chunk's records are Python objects). A unit keeps everything it reads until its tasks take it, and a
    restore applies each chunk to the store: those read in chunks of `CHUNK_RECORDS`. The test driver's worker
    reads as a worker does."""
    from eos.config import EosConfig
    from eos.testing.clients import MemoryClients
    from eos.worker.clients import INPUT_CHUNK, UNIT_PURPOSE, WorkerClients
    from transactions import CHUNK_RECORDS, OffsetRange
    from transactions.memory import MemoryCluster, MemoryConsumer

    n = CHUNK_RECORDS + INPUT_CHUNK + 1
    cluster = MemoryCluster()
    cluster.create_topic("in", 1)
    for i in range(n):
        cluster.append("in", 0, b"k", b"%d" % i, [], None)
    config, clients = EosConfig("app", "127.0.0.1:1"), WorkerClients()

    def chunks(purpose: str, prefetched: bool = False) -> list[int]:
        clients._consumers[(config.bootstrap_servers, config.group_id, purpose)] = MemoryConsumer(  # type: ignore[assignment]
            cluster, config.group_id)
        ranges = [OffsetRange("in", 0, 0, n)]
        read = clients.prefetch(config, ranges, purpose) if prefetched else clients.reader(config, purpose)
        return [len(chunk) for chunk in read(ranges, 5)]

    small, large = [INPUT_CHUNK] * (n // INPUT_CHUNK) + [n % INPUT_CHUNK], [CHUNK_RECORDS, n - CHUNK_RECORDS]
    assert chunks("input") == small
    assert chunks("input", prefetched=True) == small  # (the next task's input, fetched while one runs)
    assert chunks(UNIT_PURPOSE) == chunks("restore") == large

    memory, ranges = MemoryClients(cluster), [OffsetRange("in", 0, 0, n)]
    assert [len(chunk) for chunk in memory.reader(config, "input")(ranges, 5)] == small
    assert [len(chunk) for chunk in memory.prefetch(config, ranges, "input")(ranges, 5)] == small
    assert [len(chunk) for chunk in memory.reader(config, UNIT_PURPOSE)(ranges, 5)] == large
