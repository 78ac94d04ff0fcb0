"""Peers benchmark: the same exactly-once jobs on this framework, Kafka Streams (exactly_once_v2),
Quix Streams and a bare confluent-kafka transactional copy loop, side by side on one broker.

    python -m benchmarks.peers [--records 1000000] [--rounds 3] [--keys 10000]
                               [--jobs stateless,count,pipeline,window,window-field,session,sliding,stateless64,count64]
                               [--peers eos,eos-cache,kstreams,kstreams-cache,quix,copy] [--latency-rate 2000]
                               [--eos-settings '{"max_records_per_batch": 20000}'] [--no-warm-up] [--warm-up-peers [N]]
                               [--broker-feature transaction.version=1]

* stateless: parse each JSON order (~100 B), add `total`, write it; count: records per key, one output
  per input (Kafka Streams with its record cache off). pipeline: four operators in one task, as each DSL
  fuses them: keep the orders of qty >= 2, add `total`, group by key, sum the totals per key (one output
  per kept input with the cache off). window: records per key and tumbling 60 s window of event time (the
  inputs' timestamps span 10 minutes, EVENT_SPAN_MS: ~10 records per key and window), grace 10 s, one output
  per input with the cache off, keyed as Kafka Streams' windowed keys (the framework's `windowed_key="binary"`;
  Quix's `tumbling_window(...).count().current()`). window-field: the window job with event time read from
  each value, as a timestamp extractor does (Kafka Streams' `TimestampExtractor` parsing the JSON, the
  framework's `timestamp="field:id"`): the order's "id" taken as milliseconds (1M records: ~17 minutes of event
  time, ~6 records per key and window); not run on Quix. session: records per key and session of event time
  (inactivity gap 5 s, SESSION_GAP_MS; grace 10 s): a little over half the records extend their key's session,
  and each such record writes a tombstone for the session it replaces, then the longer one's count (Quix
  writes no tombstones: its update supersedes); keyed as Kafka Streams' session-windowed keys. sliding: records
  per key and sliding window of event time (time difference 5 s, SLIDING_MS; grace 10 s), as Kafka Streams'
  SlidingWindows: a record counts in its own window (the one ending at it) and in the window right after each
  of its key's records of the 5 s before it, made when a first record falls in it; one output per window a
  record updates (~2 a record), keyed as Kafka Streams' time-windowed keys (not run on Quix: its sliding windows
  are others, ~1.0M windows where Kafka Streams and the framework make ~1.56M). With record
  caches, `eos-cache` (cache_max_bytes: Kafka
  Streams' default 10 MiB shared by the tasks) and `kstreams-cache` (its default cache) run count, pipeline
  window, session and sliding emitting the latest aggregate per key (and window) per commit, and are compared with each
  other. stateless64: the
  stateless job on an input of 64 partitions (each peer's default parallelism on this machine; a Kafka
  task per partition); this framework's runs of it keep the default tasks_per_transaction="auto", which on
  the two task slots of its default master makes units of 32, so that its 64 tasks commit in two
  transactions per batch as Kafka Streams' two stream threads commit theirs (exactly_once_v2); --eos-settings
  can set another. count64: the count on that input, the same way (each task's store in
  RocksDB on every peer). The copy loop runs the stateless jobs only.
* CPU: the run's processes' CPU-seconds over the steady phase, divided by its wall time ("cores busy"); and
  the broker's, which every peer shares the two cores with ("broker cores", local brokers only), with the
  share of its JVM's JIT compiler threads in brackets.
* Interleaved: round 1 runs every peer once (A B C D), round 2 in the reverse order (D C B A), round 3 as
  round 1, ... (`round_order`), so that no peer always runs first, or always right after another; medians
  over the rounds (an even number of rounds balances the orders). Before
  round 1 the copy loop runs once over each input, not counted, so that no peer's round is the broker's
  first heavy run (--no-warm-up leaves it out); --warm-up-peers N adds N uncounted rounds of every peer and
  job. The broker this benchmark starts is young: it JIT-compiles its request paths for minutes, each run
  the kinds of request it makes (beside the framework's cached count, 0.15 cores of compiling in the first
  rounds and 0.03 after ~4 minutes of them; docs/measurements.md). A broker that has served for long does
  little of that.
* Each run reads the pre-loaded input from the start under a fresh group and writes a fresh topic.
  Progress is the group's committed input offsets, polled every 0.2 s: start-up = launch to the first
  commit, steady rate = records committed after the first commit / time from it to the last.
  Peak memory = the largest summed RSS of the run's processes (JVMs, Python workers); the largest summed
  PSS (shared pages divided among the processes sharing them) is printed too, with each role's share.
* Every run's output is verified before it counts: stateless, every input id exactly once in the
  committed output; count, pipeline and window, every key's (and window's) last aggregate exact, none
  repeated or going back
  (and, one output per input, as many outputs as inputs kept); session, every session's last count exact under
  its final end, every session a record replaced ended by a tombstone; sliding, every window's last count its
  records between its bounds, every window made and no other, one output per window update. A failed
  verification stops the benchmark.
* The machine's speed: before each run, the best of five timings of a fixed piece of Python work
  (`benchmarks.calibrate`, ~0.1 s each), printed with the run, per peer after the rounds, and in the report
  with the CPU time the hypervisor stole over the rounds. On this machine the work took ~1.7x as long in
  spells of a few seconds, with no steal to show for it, and both peers ran at a half to a third of their
  rates on slow days: a ratio is of its rounds' machine (docs/measurements.md, 2026-11-30).
* Latency (each round, stateless job, every peer but kstreams-cache): a fresh topic is fed at
  --latency-rate records/s; the time from handing a record to the harness's producer to receiving its
  output on a read_committed consumer, over the records fed after a warm-up that absorbs start-up.
  Every input must reach the output exactly once here too. Each peer's p50 and p99 are also set against
  Kafka Streams' of the same round (`paired_differences`): the two runs of a round share its conditions.
  A run whose slowest record came more than LATE_RECORD_MS after its p99 (a late commit) keeps the peer's
  log under reports/peers-logs, with the time that record was sent, to find its batch by.
* The broker: Kafka 4.3's feature levels unless --broker-feature NAME=LEVEL formats it with others;
  transaction.version=1 gives the transactions of a Kafka before 4.0, where every client adds a transaction's
  partitions and its offsets' group with requests of their own (librdkafka always does, Kafka Streams' client
  does not with the default version 2).

Kafka Streams is built from benchmarks/peers/kstreams by Maven (once); Quix Streams is installed in its
own virtualenv under .cache/peers (once), so its client pins never touch ours. Writes reports/peers.json.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import math
import os
import random
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from rich.console import Console
from rich.table import Table

from benchmarks.calibrate import cpu_times, python_ms, steal_share
from benchmarks.peers.jobs import GRACE_MS, SESSION_GAP_MS, SLIDING_MS, WINDOW_MS
from benchmarks.visible import visible
from chaos.processes import session_processes
from eos.audit.scan import scan_topic
from eos.worker.daemon import STAND_IN
from localkafka.cluster import ClusterError, format_features, parse_feature
from localkafka.provision import provide_kafka
from transactions import KafkaAdmin, TopicSpec

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PARTITIONS = 4
WIDE_PARTITIONS = 64  # the stateless64 job's input
KSTREAMS_THREADS = 2  # num.stream.threads: one per core, as this framework runs a task slot per core
console = Console(width=160)  # the tables are wide; a log file is no terminal
PEERS = ("eos", "eos-cache", "kstreams", "kstreams-cache", "quix", "copy")
JOBS = ("stateless", "count", "pipeline", "window", "window-field", "session", "sliding", "stateless64", "count64")
#: the jobs with state: the record-cache peers run these only, the copy loop none of them
AGGREGATING = ("count", "pipeline", "window", "window-field", "session", "sliding")
#: the jobs whose outputs are counts per key and tumbling window
TUMBLING = ("window", "window-field")
#: the inputs' event time: record i of n is stamped EVENT_SPAN_MS * i / n after the first, the last a minute ago
#: (the window job's 60 s windows: ten of them, ~10 records per key and window at the default 1M records on 10k keys)
EVENT_SPAN_MS = 600_000
#: the peers that run the aggregating jobs with a record cache: one output per key per commit
CACHED = ("eos-cache", "kstreams-cache")
#: each peer's ratio is taken against this Kafka Streams peer
KSTREAMS_PEER = {"eos-cache": "kstreams-cache"}
#: Kafka Streams' statestore.cache.max.bytes default; the framework's cache is per task, so it gets a share
KSTREAMS_CACHE_BYTES = 10 * 1024 * 1024
QUIX_REQUIREMENT = "quixstreams>=3.28,<4"  # session_window


@dataclass
class Run:
    peer: str
    job: str
    round: int
    startup_s: float = 0.0
    steady_rps: float = 0.0
    total_s: float = 0.0
    peak_rss_mib: float = 0.0
    peak_pss_mib: float = 0.0
    #: each role's PSS (MiB) in the sample of the largest summed PSS
    peak_processes: dict[str, float] = field(default_factory=dict)
    #: CPU-seconds of the run's processes per second of the steady phase (2.0: both cores busy)
    cores_busy: float = 0.0
    cpu_s_per_m: float = 0.0  # CPU-seconds per million records, steady phase
    #: the broker's CPU-seconds per second of the steady phase (NaN: a broker this benchmark did not start)
    broker_cores: float = float("nan")
    #: of `broker_cores`, its JVM's JIT compiler threads' (a young broker compiles its request paths for
    #: minutes, the more the more kinds of request it is sent; a broker that has served for long, little)
    broker_jit_cores: float = float("nan")
    outputs: int = 0
    verified: str = ""
    notes: list[str] = field(default_factory=list)
    #: the machine's speed just before the run: the best timing of a fixed piece of Python work
    #: (`benchmarks.calibrate`; larger on a slower spell of the machine)
    machine_ms: float = 0.0
    #: how long the run's other processes outlived the one launched once it was stopped (the next run waits
    #: for them: `outlived`)
    outlived_s: float = 0.0


@dataclass
class Latency:
    """Input-to-visible latency of the stateless job at a fixed input rate: from the moment the harness
    hands a record to its producer to the moment a read_committed consumer of the output receives it."""
    peer: str
    round: int
    rate: int
    measured: int = 0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    max_ms: float = 0.0
    verified: str = ""
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- set-up


def build_kstreams() -> list[str]:
    """The Kafka Streams peer's classpath (built with Maven once)."""
    project = HERE / "kstreams"
    built = project / "target" / "classes" / "eosbench" / "PeerJob.class"
    sources = [project / "pom.xml", *(project / "src").rglob("*.java")]
    if (not (project / "target" / "lib").is_dir() or not built.exists()
            or max(s.stat().st_mtime for s in sources) > built.stat().st_mtime):  # built once, again when edited
        console.print("building the Kafka Streams peer (mvn package) ...")
        subprocess.run([shutil.which("mvn") or "mvn", "-q", "-B", "package", "-DskipTests"], cwd=project, check=True)
    return ["java", "-Xmx1g", "-cp", f"{project / 'target' / 'classes'}:{project / 'target' / 'lib'}/*",
            "eosbench.PeerJob"]


def class_data_archive() -> None:
    """The framework's driver starts with the class-data archive `make setup` makes (made here if missing)."""
    from eos.driver.classdata import ArchiveBuildError, build_archive

    try:
        console.print(f"class-data archive of the Spark driver: {build_archive()}")
    except ArchiveBuildError as exc:
        console.print(f"[yellow]the framework's driver starts without a class-data archive[/yellow]: {exc}")


def quix_python() -> str:
    env = ROOT / ".cache" / "peers" / "quix-venv"
    python = env / "bin" / "python"
    if not (env / ".complete").exists():
        console.print("installing Quix Streams in its own virtualenv ...")
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(env)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        QUIX_REQUIREMENT], check=True)
        (env / ".complete").write_text("")
    return str(python)


@dataclass
class Expected:
    """What the aggregating jobs must end with, computed from the input as it was produced."""
    counts: Counter[str] = field(default_factory=Counter)  # count: records per key
    kept: Counter[str] = field(default_factory=Counter)  # pipeline: orders of qty >= 2 per key
    revenue: dict[str, float] = field(default_factory=dict)  # pipeline: the sum of their totals, in key order
    windows: Counter[tuple[str, int]] = field(default_factory=Counter)  # window: records per key and window start
    #: window-field: the same by the event time in each value (its "id" as milliseconds)
    windows_by_id: Counter[tuple[str, int]] = field(default_factory=Counter)
    #: session: records per key and session start, and each session's end (its last record's time); `merges`:
    #: the records that made a session longer (each replaces it: a tombstone for the shorter one; a record at
    #: its session's end time changes only its count)
    sessions: Counter[tuple[str, int]] = field(default_factory=Counter)
    session_ends: dict[tuple[str, int], int] = field(default_factory=dict)
    merges: int = 0
    #: the records at the end time of a session longer than an instant: its bounds stay, and only Kafka Streams
    #: writes a tombstone for it before its new count (it removes every session it merges unless the merged one
    #: is the record's own instant); the framework and Quix write the new count alone
    restated: int = 0
    #: sliding: each key's record times, in order (a window's count is its records between its bounds), and
    #: the windows updated in all (with the cache off, one output each)
    sliding_times: dict[str, list[int]] = field(default_factory=dict)
    sliding_updates: int = 0
    #: the records a time difference + 1 ms after their key's previous one (whose window after it is the record's
    #: own), where that previous record fell in the window after an earlier one: Kafka Streams, which finds the
    #: previous record through that window, makes the record's window twice, as the window after the previous
    #: record and as the record's own, and forwards its count (1) twice; the framework makes it once
    sliding_doubled: int = 0

    def add_to_session(self, key: str, timestamp: int, started: dict[str, int]) -> None:
        """A record of `key` at `timestamp`, no earlier than the key's last (`started`: each key's open session's
        start): it extends that session if it comes within the inactivity gap of its end (inclusive, as Kafka
        Streams and Quix both merge), else starts one."""
        start = started.get(key)
        if start is not None and timestamp - self.session_ends[key, start] <= SESSION_GAP_MS:
            end = self.session_ends[key, start]
            self.merges += timestamp != end
            self.restated += timestamp == end and start != end
        else:
            start = started[key] = timestamp
        self.sessions[key, start] += 1
        self.session_ends[key, start] = timestamp

    def add_to_sliding(self, key: str, timestamp: int) -> None:
        """A record of `key` at `timestamp`, no earlier than the key's last: it is counted in its own window (the
        one ending at it, made or there already) and in the window right after each of the key's records of the
        time difference (+1 ms) before it (made when the first record falls in it), as Kafka Streams' sliding
        windows do with records in order; each such window is one update."""
        times = self.sliding_times.setdefault(key, [])
        if times and times[-1] == timestamp - SLIDING_MS - 1:
            previous = times[-1]
            self.sliding_doubled += times[bisect.bisect_left(times, previous - SLIDING_MS)] < previous
        starts = {max(0, timestamp - SLIDING_MS)}
        for earlier in reversed(times):
            if earlier + 1 + SLIDING_MS < timestamp:
                break
            if earlier < timestamp:
                starts.add(earlier + 1)
        self.sliding_updates += len(starts)
        times.append(timestamp)

    def sliding_count(self, key: str, start: int) -> int | None:
        """The records of the window of `key` starting at `start` (its end, start + the time difference,
        included); None where no such window exists: neither a record's own window (a record at its end) nor the
        window right after a record (a record at start - 1) with a later record in it."""
        times = self.sliding_times.get(key, [])
        end = start + SLIDING_MS
        def has(timestamp: int) -> bool:
            i = bisect.bisect_left(times, timestamp)
            return i < len(times) and times[i] == timestamp
        inside = bisect.bisect_right(times, end) - bisect.bisect_left(times, start)
        return inside if inside and (has(end) or has(start - 1)) else None

    def sliding_windows(self) -> int:
        """How many windows the sliding job makes: each record's own (records at one time share it), and the one
        right after each record that a later record falls in (unless it is a record's own)."""
        made = 0
        for times in self.sliding_times.values():
            starts = {max(0, t - SLIDING_MS) for t in times}
            for i, t in enumerate(times):
                j = bisect.bisect_right(times, t, lo=i)
                if j < len(times) and times[j] <= t + 1 + SLIDING_MS:
                    starts.add(t + 1)
            made += len(starts)
        return made


def preload(bootstrap: str, topic: str, n: int, keys: int, seed: int = 1) -> Expected:
    """n JSON orders of ~100 bytes on `keys` keys (murmur2-partitioned: a key's orders stay in order), their
    timestamps EVENT_SPAN_MS apart from the first to the last (`event_time`)."""
    rng = random.Random(seed)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                         "enable.idempotence": True, "partitioner": "murmur2_random"})
    expected = Expected()
    started: dict[str, int] = {}
    first = int(time.time() * 1000) - EVENT_SPAN_MS - 60_000
    for i in range(n):
        key, value = order(rng, i, keys)
        timestamp = event_time(first, i, n)
        expected.counts[key] += 1
        expected.windows[key, timestamp - timestamp % WINDOW_MS] += 1
        expected.windows_by_id[key, i - i % WINDOW_MS] += 1  # (the order's "id" is i)
        expected.add_to_session(key, timestamp, started)
        expected.add_to_sliding(key, timestamp)
        fields = json.loads(value)
        if fields["qty"] >= 2:
            expected.kept[key] += 1
            expected.revenue[key] = expected.revenue.get(key, 0) + fields["qty"] * fields["price"]
        produce(producer, topic, key, value, timestamp)
    assert producer.flush(300) == 0
    return expected


def event_time(first: int, i: int, n: int) -> int:
    """Record i of n's timestamp: in order, EVENT_SPAN_MS from the first record to the last."""
    return first + i * EVENT_SPAN_MS // max(n - 1, 1)


def order(rng: random.Random, i: int, keys: int) -> tuple[str, bytes]:
    key = f"k{rng.randrange(keys)}"
    return key, json.dumps({"id": i, "customer": key, "qty": rng.randrange(1, 9),
                            "price": round(rng.uniform(1, 99), 2), "note": "x" * 20}).encode()


def produce(producer: Producer, topic: str, key: str, value: bytes, timestamp: int = 0) -> None:
    """One record (`timestamp` 0: the producer's clock)."""
    while True:
        try:
            producer.produce(topic, key=key.encode(), value=value, timestamp=timestamp)
            return
        except BufferError:
            producer.poll(0.05)


# ---------------------------------------------------------------- one run


@dataclass
class Memory:
    """One sample of a run's processes (its session): summed RSS, summed PSS, and each process's share.

    RSS counts a page once per process mapping it, so Spark's Python workers, forked from one daemon,
    count their shared pages again each; PSS divides a shared page among its processes and sums to what
    the processes occupy together. Both are reported; the table's peak is RSS, as it always was."""
    rss_mib: float = 0.0
    pss_mib: float = 0.0
    processes: dict[str, float] = field(default_factory=dict)  # role (and how many) -> PSS MiB
    cpu_s: float = 0.0  # user + system CPU-seconds of the processes alive now


def _ticks(stat: str) -> int:
    """utime + stime (fields 14 and 15) of a /proc/<pid>/stat line."""
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _cpu_s(pids: list[int]) -> float:
    """User + system CPU-seconds of the processes `pids` (NaN without any: a broker of another machine)."""
    if not pids:
        return float("nan")
    ticks = 0
    for pid in pids:
        try:
            ticks += _ticks(Path(f"/proc/{pid}/stat").read_text())
        except (OSError, ValueError, IndexError):
            return float("nan")
    return ticks / CLOCK_TICKS


#: The threads of a HotSpot JVM that JIT-compile (`/proc/<pid>/task/<tid>/comm`, cut to 15 characters:
#: "C2 CompilerThread0" reads "C2 CompilerThre")
JIT_THREADS = ("C1 CompilerThre", "C2 CompilerThre")


def _jit_cpu_s(pids: list[int], proc: Path = Path("/proc")) -> float:
    """User + system CPU-seconds of the JIT compiler threads of the JVMs `pids` (NaN without any, or if one
    is gone). A compiler thread that has ended takes its CPU time with it, so over a span this is a floor."""
    if not pids:
        return float("nan")
    ticks = 0
    for pid in pids:
        try:
            for task in (proc / str(pid) / "task").iterdir():
                with contextlib.suppress(OSError, ValueError, IndexError):  # (a thread that ended meanwhile)
                    if (task / "comm").read_text().strip() in JIT_THREADS:
                        ticks += _ticks((task / "stat").read_text())
        except OSError:
            return float("nan")
    return ticks / CLOCK_TICKS


def _broker_cpu_s(pids: list[int]) -> tuple[float, float]:
    """The brokers' CPU-seconds so far, and their JIT compiler threads' of them."""
    return _cpu_s(pids), _jit_cpu_s(pids)


def _memory(session: int) -> Memory:
    procs: dict[int, tuple[int, str, int, int]] = {}  # pid -> (ppid, command line, RSS KiB, PSS KiB)
    ticks = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[3]) != session:  # field 6: the session id
                continue
            rollup = dict(line.split(":", 1) for line in (proc / "smaps_rollup").read_text().splitlines()[1:])
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            procs[int(proc.name)] = (int(fields[1]), cmdline, int(rollup["Rss"].split()[0]),
                                     int(rollup["Pss"].split()[0]))
            ticks += _ticks(stat)
        except (OSError, ValueError, IndexError, KeyError):
            continue
    sample = Memory(sum(p[2] for p in procs.values()) / 1024, sum(p[3] for p in procs.values()) / 1024,
                    cpu_s=ticks / CLOCK_TICKS)
    roles: dict[str, list[int]] = {}
    for ppid, cmdline, _rss, pss in procs.values():
        roles.setdefault(_role(cmdline, forked=ppid in procs and procs[ppid][1] == cmdline), []).append(pss)
    sample.processes = {f"{role} x{len(pss)}" if len(pss) > 1 else role: sum(pss) / 1024
                        for role, pss in roles.items()}
    return sample


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


#: command lines of a Python daemon: launched by Spark, or started beside the driver (the zygote)
_DAEMONS = (" -m eos.worker.daemon", " -m pyspark.daemon", " -m eos.worker.zygote")


def _role(cmdline: str, forked: bool) -> str:
    """What a process of a run is, by its command line (a worker is forked from a process like it). A daemon
    forked from the zygote counts as forked, among the workers; so does a zygote forked from the driver."""
    if Path(cmdline.split(" ", 1)[0]).name == "java":
        return "JVM"
    if cmdline == " ".join(STAND_IN):
        return "daemon stand-in"
    if forked:
        return "python workers"
    if any(name in cmdline for name in _DAEMONS):
        return "python daemon"
    return "python main"


def is_wide(job: str) -> bool:
    """Whether `job` runs on the 64-partition input (stateless64, count64)."""
    return job.endswith(str(WIDE_PARTITIONS))


def base_job(job: str) -> str:
    """The job a peer runs (stateless64 is the stateless job on the wide input)."""
    return job.removesuffix(str(WIDE_PARTITIONS))


def _shares(processes: dict[str, float]) -> str:
    """Each role's MiB of a run's peak, largest first; under 10 MiB with a decimal (the daemon's stand-in holds
    0.25, which a whole number would print as nothing)."""
    return ", ".join(f"{role} {mib:,.{0 if mib >= 10 else 1}f}"
                     for role, mib in sorted(processes.items(), key=lambda kv: -kv[1]))


def command(peer: str, job: str, bootstrap: str, source: str, sink: str, group: str, scratch: Path,
            kstreams: list[str], quix: str | None) -> tuple[list[str], dict[str, str]]:
    env = {**os.environ, "EOS_BOOTSTRAP_SERVERS": bootstrap}
    job = base_job(job)  # (the wide jobs read another input)
    if peer.startswith("eos"):
        # The run starts in the scratch directory, where `import eos` would find whatever the interpreter's
        # environment has installed (an editable install of another checkout measured that one's code): this
        # checkout's packages come first
        path = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        env |= {"PEER_APP": group, "PEER_JOB": job, "PEER_INPUT": source, "PEER_OUTPUT": sink,
                "PEER_STATE": str(scratch / "state"), "PYTHONPATH": path}
        settings = json.loads(env.get("PEER_SETTINGS") or "{}")
        if peer == "eos-cache":  # Kafka Streams' default cache, shared by its tasks as its threads share it
            settings = {"cache_max_bytes": KSTREAMS_CACHE_BYTES // PARTITIONS, **settings}
        env["PEER_SETTINGS"] = json.dumps(settings)
        master = ["--master", env["PEER_MASTER"]] if env.get("PEER_MASTER") else []  # --eos-master
        return [sys.executable, "-m", "eos.cli", "run", str(HERE / "eos_job.py"), "--no-live", *master], env
    if peer.startswith("kstreams"):
        cache = "on" if peer == "kstreams-cache" else "off"
        # its state directory goes under java.io.tmpdir: the scratch directory, removed after the run
        return [kstreams[0], f"-Djava.io.tmpdir={scratch}", *kstreams[1:], bootstrap, job, source, sink, group,
                str(KSTREAMS_THREADS), "1000", cache, str(WINDOW_MS), str(GRACE_MS), str(SESSION_GAP_MS),
                str(SLIDING_MS)], env
    if peer == "quix":
        assert quix is not None
        return [quix, str(HERE / "quix_job.py"), bootstrap, job, source, sink, group, str(scratch / "quix"),
                str(WINDOW_MS), str(GRACE_MS), str(SESSION_GAP_MS)], env
    return [sys.executable, str(HERE / "copy_loop.py"), bootstrap, source, sink, group], env


@contextmanager
def launched(cmd: list[str], env: dict[str, str], scratch: Path, run: Run | None = None) -> Iterator[subprocess.Popen]:
    """The peer's process, in a session of its own (its RSS is summed per session), stopped afterwards, with
    every process of its session: the next run starts only once they have all exited (`outlived`)."""
    with open(scratch / "run.log", "wb") as log:
        proc = subprocess.Popen(cmd, env=env, cwd=scratch, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            yield proc
        finally:
            with contextlib.suppress(ProcessLookupError):  # (a peer that exited on its own has left no group to stop)
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            left_for = outlived(proc.pid, 30.0)
            if run is not None:
                run.outlived_s = left_for


def outlived(session: int, timeout: float) -> float:
    """Wait until no process of `session` is left (SIGKILL for those left after `timeout` s); returns how long
    they outlived the call. A peer's processes can exit after the one the benchmark launched (a JVM running its
    shutdown hooks, a daemon's workers): the next run would share the cores with them."""
    began = time.monotonic()
    deadline, killed = began + timeout, False
    while left := [p.pid for p in session_processes(session)]:
        if time.monotonic() > deadline:
            if killed:  # (a process the kernel has not let go of yet: the run goes on beside it)
                console.print(f"processes {left} of a stopped peer are still there after SIGKILL")
                break
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            deadline, killed = time.monotonic() + 10.0, True
        time.sleep(0.05)
    return time.monotonic() - began


def round_order(peers: list[str], rnd: int) -> list[str]:
    """The order the peers run in round `rnd`: as given in odd rounds, reversed in even ones. In pairs of runs
    alternated by hand, which ran first moved the rates more than the change measured (docs/measurements.md,
    thirtieth session): with one order in every round, whatever running first costs or gains fell on the same
    peer in every round."""
    return list(peers) if rnd % 2 else list(reversed(peers))


def run_once(peer: str, job: str, rnd: int, bootstrap: str, admin: KafkaAdmin, source: str, n: int,
             expected: Expected, kstreams: list[str], quix: str | None, timeout: float,
             brokers: list[int] | None = None) -> Run:
    run = Run(peer, job, rnd)
    tag = uuid.uuid4().hex[:8]
    sink, group = f"peers-{peer}-{job}-{tag}", f"peers-{peer}-{job}-{tag}"
    admin.create_topics([TopicSpec(sink, PARTITIONS)])
    tps = admin.topic_partitions(source)
    scratch = Path(tempfile.mkdtemp(prefix="peers-"))
    cmd, env = command(peer, job, bootstrap, source, sink, group, scratch, kstreams, quix)
    first: tuple[float, int] | None = None
    done_at = None
    cpu_first = cpu_done = 0.0
    broker_first = broker_done = (0.0, 0.0)
    with launched(cmd, env, scratch, run) as proc:
        launched_at = time.monotonic()
        while time.monotonic() - launched_at < timeout:
            time.sleep(0.2)
            sample = _memory(proc.pid)
            run.peak_rss_mib = max(run.peak_rss_mib, sample.rss_mib)
            if sample.pss_mib > run.peak_pss_mib:
                run.peak_pss_mib, run.peak_processes = sample.pss_mib, sample.processes
            if proc.poll() is not None:
                raise RuntimeError(f"{peer} exited with {proc.returncode}; see {scratch / 'run.log'}")
            committed = sum(o or 0 for o in admin.group_offsets(group, tps, stable=False).values())
            now = time.monotonic()
            if committed and first is None:
                first, cpu_first, broker_first = (now, committed), sample.cpu_s, _broker_cpu_s(brokers or [])
            if committed >= n:
                done_at, cpu_done, broker_done = now, _memory(proc.pid).cpu_s, _broker_cpu_s(brokers or [])
                break
        if done_at is None or first is None:
            raise RuntimeError(f"{peer} did not finish {job} in {timeout:.0f} s; see {scratch / 'run.log'}")
    run.startup_s = first[0] - launched_at
    run.total_s = done_at - launched_at
    run.steady_rps = (n - first[1]) / (done_at - first[0]) if done_at > first[0] else float("nan")
    if done_at > first[0] and n > first[1]:
        run.cores_busy = (cpu_done - cpu_first) / (done_at - first[0])
        run.cpu_s_per_m = (cpu_done - cpu_first) / (n - first[1]) * 1e6
        run.broker_cores, run.broker_jit_cores = ((done - began) / (done_at - first[0])
                                                  for began, done in zip(broker_first, broker_done, strict=True))
    if first[1] > n / 2:
        run.notes.append(f"the first commit held {first[1]:,} of {n:,} records: the steady rate is rough")
    if run.startup_s > SLOW_STARTUP_S:
        run.notes.append(f"start-up {run.startup_s:.1f} s: {keep_log(scratch, f'{peer}-{job}-round{rnd}-{tag}')}")
    if run.outlived_s >= OUTLIVED_NOTE_S:
        run.notes.append(f"its processes outlived it by {run.outlived_s:.1f} s")
    verify(run, bootstrap, admin, sink, n, expected)
    shutil.rmtree(scratch, ignore_errors=True)
    return run


#: A run whose processes outlived the one launched by this long says so
OUTLIVED_NOTE_S = 0.5
#: A start-up slower than this keeps the peer's log (this machine's usual start-ups are 3-18 s)
SLOW_STARTUP_S = 25.0
#: A latency run whose slowest record came this much later than its p99 keeps the peer's log: a commit came late
#: (the usual gap on this machine is 50-130 ms; one late commit in 20 s moves a round's p99 by tens of ms)
LATE_RECORD_MS = 150.0


def keep_log(scratch: Path, name: str) -> str:
    """Copy the run's log out of its scratch directory (removed after the run); says where it went."""
    kept = ROOT / "reports" / "peers-logs" / f"{name}.log"
    kept.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(scratch / "run.log", kept)
    return f"its log is kept in {kept.relative_to(ROOT)}"


def latency_once(peer: str, rnd: int, bootstrap: str, admin: KafkaAdmin, rate: int, warmup_s: int,
                 seconds: int, keys: int, kstreams: list[str], quix: str | None) -> Latency:
    """Feed a fresh topic at `rate` records/s for `warmup_s + seconds` while the peer runs the stateless job;
    latencies of the records fed after the warm-up (which absorbs start-up) count. Every input must reach
    the committed output exactly once."""
    result = Latency(peer, rnd, rate)
    tag = uuid.uuid4().hex[:8]
    source, sink, group = (f"peers-latency-{peer}-{tag}-in", f"peers-latency-{peer}-{tag}-out",
                           f"peers-latency-{peer}-{tag}")
    admin.create_topics([TopicSpec(source, PARTITIONS), TopicSpec(sink, PARTITIONS)])
    scratch = Path(tempfile.mkdtemp(prefix="peers-"))
    cmd, env = command(peer, "stateless", bootstrap, source, sink, group, scratch, kstreams, quix)
    total = rate * (warmup_s + seconds)
    sent = [0.0] * total
    seen: dict[int, float] = {}
    repeated = 0
    observer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{group}-observer", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "fetch.wait.max.ms": 5})
    observer.assign([TopicPartition(sink, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])

    def feed() -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": True,
                             "partitioner": "murmur2_random"})
        rng, started, fed = random.Random(rnd), time.monotonic(), 0
        while fed < total:
            due = min(total, int((time.monotonic() - started) * rate) + 1)
            for i in range(fed, due):
                key, value = order(rng, i, keys)
                sent[i] = time.time()
                produce(producer, source, key, value)
            fed = due
            producer.poll(0)
            time.sleep(0.005)
        producer.flush(60)

    feeder = threading.Thread(target=feed, daemon=True)
    with launched(cmd, env, scratch) as proc:
        feeder.start()
        deadline = time.monotonic() + warmup_s + seconds + 120
        while len(seen) < total and time.monotonic() < deadline:
            for msg in visible(observer):
                if msg.error() is not None:
                    continue
                now, i = time.time(), json.loads(msg.value())["id"]
                if i in seen:
                    repeated += 1
                else:
                    seen[i] = now
            if proc.poll() is not None:
                raise RuntimeError(f"{peer} exited with {proc.returncode}; see {scratch / 'run.log'}")
        feeder.join()
        time.sleep(2)  # anything committed twice would show up now
        repeated += sum(1 for msg in observer.consume(10_000, 1.0) if msg.error() is None)
    observer.close()
    if len(seen) != total or repeated:
        raise RuntimeError(f"{peer} latency run: {len(seen):,} of {total:,} ids, {repeated:,} repeated")
    slowest = measure(result, sent, seen, rate * warmup_s)
    result.verified = f"{total:,} ids once each"
    if result.max_ms - result.p99_ms > LATE_RECORD_MS:
        at = datetime.fromtimestamp(sent[slowest], UTC).strftime("%H:%M:%S.%f")[:-3]
        result.notes.append(f"its slowest record, sent at {at} UTC, took {result.max_ms:,.0f} ms: "
                            + keep_log(scratch, f"{peer}-latency-round{rnd}-{tag}"))
    shutil.rmtree(scratch, ignore_errors=True)
    return result


def measure(result: Latency, sent: list[float], seen: dict[int, float], first: int) -> int:
    """Fill in the latencies of the records from `first` on (sent and seen: wall-clock seconds by id); the id
    of the slowest."""
    latencies = sorted(((seen[i] - sent[i]) * 1000, i) for i in range(first, len(sent)))
    result.measured = len(latencies)
    result.p50_ms = latencies[len(latencies) // 2][0]
    result.p99_ms = latencies[int(len(latencies) * 0.99)][0]
    result.max_ms, slowest = latencies[-1]
    return slowest


def _number(peer: str, job: str, raw: bytes) -> float:
    """An aggregate as the peer writes it: a count as a long (8 bytes, big-endian) or JSON (Quix); a revenue
    as a double (Kafka Streams, 8 bytes) or JSON (the others)."""
    if job in ("count", *TUMBLING, "session", "sliding"):
        return int.from_bytes(raw, "big", signed=True) if len(raw) == 8 else int(json.loads(raw))
    return struct.unpack(">d", raw)[0] if peer.startswith("kstreams") else float(json.loads(raw))


def _aggregated(peer: str, job: str, key: bytes, value: bytes) -> tuple[str | tuple[str, int], float]:
    """What an output of an aggregating job aggregates (a key, or a key and its window's start) and its aggregate.
    A window's key as each peer writes it: the framework's binary windowed key (the key's bytes, the window's
    end and start, 8 bytes each), Kafka Streams' time-windowed one (the key's bytes and the start), and Quix the
    record's own key with {"start", "end", "value"} as its value."""
    if job not in (*TUMBLING, "sliding"):
        return key.decode(), _number(peer, job, value)
    if peer == "quix":
        window = json.loads(value)
        return (key.decode(), int(window["start"])), int(window["value"])
    start = int.from_bytes(key[-8:], "big")
    return (key[:-16 if peer.startswith("eos") else -8].decode(), start), _number(peer, job, value)


def _session(peer: str, key: bytes, value: bytes | None) -> tuple[str, int, int, int | None]:
    """A session job's output: its key, the session's start and end (its last record's time) and count, None for
    a tombstone. Kafka Streams' and the framework's session-windowed keys are the key's bytes, then the end and
    the start, 8 bytes each; Quix writes the record's own key with {"start", "end", "value"}, its end exclusive
    (the last record's time + 1), and no tombstones (a longer session's update supersedes the shorter one's)."""
    if peer == "quix":
        assert value is not None
        session = json.loads(value)
        return key.decode(), int(session["start"]), int(session["end"]) - 1, int(session["value"])
    count = None if value is None else int(_number(peer, "session", value))
    return key[:-16].decode(), int.from_bytes(key[-8:], "big"), int.from_bytes(key[-16:-8], "big"), count


def verify_sessions(run: Run, batches: Iterable[list[Any]], n: int, expected: Expected) -> None:
    """The session job's committed output: every session's last count exact, under its final end; each start's
    counts rising, none repeated (a record applied twice); every shorter session a record replaced ended by a
    tombstone (its last output one); with the cache off, an output per input and a tombstone per extension."""
    counts: dict[tuple[str, int], int] = {}  # each session start's latest count
    latest: dict[tuple[str, int, int], int | None] = {}  # each (key, start, end)'s last output
    outputs = tombstones = backwards = 0
    for batch in batches:
        for msg in batch:
            key, start, end, count = _session(run.peer, msg.key(), msg.value())
            outputs += 1
            latest[key, start, end] = count
            if count is None:
                tombstones += 1
                continue
            backwards += count <= counts.get((key, start), 0)
            counts[key, start] = count
    run.outputs = outputs
    wrong = sum(1 for (key, start), count in expected.sessions.items()
                if latest.get((key, start, expected.session_ends[key, start])) != count)
    stale = 0 if run.peer == "quix" else sum(
        1 for (key, start, end), count in latest.items()
        if count is not None and expected.session_ends.get((key, start)) != end)
    if wrong or len(counts) != len(expected.sessions) or backwards or stale:
        raise RuntimeError(f"{run.peer} session: {wrong:,} of {len(expected.sessions):,} sessions without their "
                           f"exact last count, {len(counts):,} session starts in the output, {backwards:,} counts "
                           f"repeated or going back, {stale:,} replaced sessions without a tombstone")
    tombstones_wanted = {"quix": 0}.get(run.peer, expected.merges) + (expected.restated if run.peer.startswith(
        "kstreams") else 0)
    want = (n + tombstones_wanted, tombstones_wanted)
    if run.peer not in CACHED and (outputs, tombstones) != want:
        raise RuntimeError(f"{run.peer} session: {outputs:,} outputs, {tombstones:,} of them tombstones, for {n:,} "
                           f"inputs of which {expected.merges:,} extended a session and {expected.restated:,} came at "
                           f"its end time ({want[0]:,} and {want[1]:,} expected)")
    run.verified = f"{len(expected.sessions):,} sessions' final counts exact, {outputs:,} outputs"


def verify_sliding(run: Run, batches: Iterable[list[Any]], expected: Expected) -> None:
    """The sliding job's committed output: every window's last count its records between its bounds, every window
    made there, none that should not be; each window's counts rising, none repeated (a record applied twice);
    with the cache off, one output per window a record updated."""
    last: dict[tuple[str, int], int] = {}
    outputs = backwards = 0
    for batch in batches:
        for msg in batch:
            window, count = _aggregated(run.peer, "sliding", msg.key(), msg.value())
            backwards += count <= last.get(window, 0)  # type: ignore[call-overload]
            last[window] = int(count)  # type: ignore[index]
            outputs += 1
    run.outputs = outputs
    wrong = sum(1 for (key, start), count in last.items() if expected.sliding_count(key, start) != count)
    made = expected.sliding_windows()
    doubled = expected.sliding_doubled if run.peer == "kstreams" else 0  # (a cache holds one of the two)
    if wrong or len(last) != made or backwards != doubled:
        raise RuntimeError(f"{run.peer} sliding: {wrong:,} of {len(last):,} windows in the output with a wrong last "
                           f"count or not a window at all, {made:,} windows made, {backwards:,} counts repeated or "
                           f"going back ({doubled:,} expected)")
    if run.peer not in CACHED and outputs != expected.sliding_updates + doubled:
        raise RuntimeError(f"{run.peer} sliding: {outputs:,} outputs for {expected.sliding_updates:,} window updates "
                           f"(one each expected, and {doubled:,} windows made twice)")
    run.verified = f"{made:,} windows' final counts exact, {outputs:,} outputs"


def verify(run: Run, bootstrap: str, admin: KafkaAdmin, sink: str, n: int, expected: Expected) -> None:
    """Exactly-once of the committed output, or RuntimeError."""
    job = base_job(run.job)
    if job == "session":
        verify_sessions(run, scan_topic(bootstrap, sink, admin=admin), n, expected)
        return
    if job == "sliding":
        verify_sliding(run, scan_topic(bootstrap, sink, admin=admin), expected)
        return
    if job not in AGGREGATING:
        ids: Counter[int] = Counter()
        for batch in scan_topic(bootstrap, sink, admin=admin):
            for msg in batch:
                order = json.loads(msg.value())
                if "total" not in order:
                    raise RuntimeError(f"{run.peer} stateless: an output without its total: {order}")
                ids[order["id"]] += 1
        run.outputs = sum(ids.values())
        repeated = sum(1 for c in ids.values() if c > 1)
        if len(ids) != n or repeated:
            raise RuntimeError(f"{run.peer} stateless: {len(ids):,} of {n:,} ids, {repeated:,} repeated")
        run.verified = f"{n:,} ids once each"
        return
    # every input adds to its key's aggregate (a count by one, a revenue by a positive total; the window job's
    # keys are a key and a window), so an aggregate repeated or going back is a record applied twice
    want: dict[Any, float] = dict({"count": expected.counts, "window": expected.windows,
                                   "window-field": expected.windows_by_id}.get(job, expected.revenue))
    inputs = n if job != "pipeline" else sum(expected.kept.values())
    last: dict[Any, float] = {}
    outputs = backwards = 0
    for batch in scan_topic(bootstrap, sink, admin=admin):
        for msg in batch:
            key, value = _aggregated(run.peer, job, msg.key(), msg.value())
            backwards += value <= last.get(key, 0)
            last[key] = value
            outputs += 1
    run.outputs = outputs
    # the same additions in the same order: the sums agree to the last bit; the tolerance only spares
    # a peer that adds in another order
    wrong = sum(1 for k, v in want.items() if k not in last or not math.isclose(last[k], v, rel_tol=1e-9))
    if wrong or len(last) != len(want) or backwards:
        raise RuntimeError(f"{run.peer} {run.job}: {wrong:,} of {len(want):,} keys with a wrong final aggregate, "
                           f"{len(last):,} keys in the output, {backwards:,} aggregates repeated or going back")
    if run.peer not in CACHED and outputs != inputs:
        raise RuntimeError(f"{run.peer} {run.job}: {outputs:,} outputs for {inputs:,} inputs (one per input "
                           "expected)")
    run.verified = f"{len(want):,} final aggregates exact, {outputs:,} outputs"


# ---------------------------------------------------------------- the table


#: timings of the fixed Python work before each run (~0.1 s each here): the best is the machine's speed
MACHINE_REPEATS = 5


def machine_line(runs: list[Run], steal: float | None) -> str:
    """How fast the machine was around the runs: the fixed Python work's best timing before each run (its
    range, and the median per peer, so that a peer whose runs met slower spells shows), and the share of CPU
    time stolen over the rounds. Empty without runs."""
    timed = [r for r in runs if r.machine_ms > 0]
    if not timed:
        return ""
    all_ms = [r.machine_ms for r in timed]
    per_peer = ", ".join(f"{peer} {statistics.median(r.machine_ms for r in timed if r.peer == peer):.0f}"
                         for peer in dict.fromkeys(r.peer for r in timed))
    line = (f"machine: the fixed Python work of benchmarks.calibrate took {min(all_ms):.0f}-{max(all_ms):.0f} ms "
            f"before the runs (median per peer: {per_peer}; larger is slower)")
    return line + (f"; {steal:.1%} of the CPU time stolen over the rounds" if steal is not None else "")


def _broker_cell(cores: float | None, jit: float | None) -> str:
    """The broker's cores, with its JIT's share: "0.28 (JIT 0.11)"; "-" for a broker not started here."""
    if cores is None or math.isnan(cores):
        return "-"
    return f"{cores:.2f}" + ("" if jit is None or math.isnan(jit) else f" (JIT {jit:.2f})")


def report(runs: list[Run], latencies: list[Latency], n: int) -> dict:
    def median(peer: str, job: str, attr: str) -> float | None:
        values = [getattr(r, attr) for r in runs if r.peer == peer and r.job == job]
        return statistics.median(values) if values else None

    def spread(peer: str, job: str, attr: str) -> str:
        values = [getattr(r, attr) for r in runs if r.peer == peer and r.job == job]
        return f"{min(values):,.{1 if attr == 'startup_s' else 0}f}-{max(values):,.{1 if attr == 'startup_s' else 0}f}"

    summary: dict = {}
    for job in JOBS:
        attrs = ("steady_rps", "startup_s", "peak_rss_mib", "peak_pss_mib", "cores_busy", "cpu_s_per_m",
                 "broker_cores", "broker_jit_cores")
        rows = {p: {a: median(p, job, a) for a in attrs} for p in PEERS if median(p, job, "steady_rps") is not None}
        if not rows:
            continue
        table = Table(title=f"{job}: {n:,} records, medians (min-max) of {max(r.round for r in runs)} interleaved "
                            "rounds")
        for column in ("peer", "steady rec/s", "vs Kafka Streams", "vs copy loop", "start-up to 1st commit",
                       "peak PSS", "peak RSS", "cores busy", "CPU-s per 1M", "broker cores"):
            table.add_column(column, justify="left" if column == "peer" else "right")
        copy = rows.get("copy", {}).get("steady_rps")
        for peer, row in rows.items():
            rate = row["steady_rps"]
            ks_row = rows.get(KSTREAMS_PEER.get(peer, "kstreams"), {})
            row["vs_kstreams"] = {a: row[a] / ks_row[a] for a in ("steady_rps", "startup_s", "peak_pss_mib")
                                  if ks_row.get(a)}
            ratio = row["vs_kstreams"].get("steady_rps")
            table.add_row(peer, f"{rate:,.0f} ({spread(peer, job, 'steady_rps')})",
                          f"{ratio:.2f}x" if ratio else "-", f"{rate / copy:.2f}x" if copy else "-",
                          f"{row['startup_s']:.1f} s ({spread(peer, job, 'startup_s')})",
                          f"{row['peak_pss_mib']:,.0f} MiB ({spread(peer, job, 'peak_pss_mib')})",
                          f"{row['peak_rss_mib']:,.0f} MiB", f"{row['cores_busy']:.2f}", f"{row['cpu_s_per_m']:.1f}",
                          _broker_cell(row["broker_cores"], row["broker_jit_cores"]))
        console.print(table)
        summary[job] = rows
    if latencies:
        table = Table(title=f"stateless latency at {latencies[0].rate:,} records/s, input to visible "
                            f"(read_committed), medians of {max(r.round for r in latencies)} rounds")
        for column in ("peer", "p50", "p99", "max", "records measured", "p50 / p99 - Kafka Streams', per round"):
            table.add_column(column, justify="left" if column == "peer" else "right")
        summary["latency"] = {}
        for peer in dict.fromkeys(r.peer for r in latencies):
            mine = [r for r in latencies if r.peer == peer]
            row: dict = {a: statistics.median(getattr(r, a) for r in mine) for a in ("p50_ms", "p99_ms", "max_ms")}
            against = KSTREAMS_PEER.get(peer, "kstreams")
            row["minus_kstreams_ms"] = {a: paired_differences(latencies, peer, against, a)
                                        for a in ("p50_ms", "p99_ms")}
            table.add_row(peer, f"{row['p50_ms']:,.0f} ms", f"{row['p99_ms']:,.0f} ms", f"{row['max_ms']:,.0f} ms",
                          f"{mine[0].measured:,}",
                          " / ".join(_differences_cell(d) for d in row["minus_kstreams_ms"].values()))
            summary["latency"][peer] = row
        console.print(table)
    return summary


def paired_differences(latencies: list[Latency], peer: str, against: str, attr: str) -> list[float]:
    """`peer`'s `attr` less `against`'s in each round both ran, in round order: the rounds' conditions (the
    machine's speed, the broker's state) move both runs of a round alike, so their differences spread less
    than either peer's figures do. Empty for a peer against itself, or one it never ran beside."""
    if peer == against:
        return []
    theirs = {r.round: getattr(r, attr) for r in latencies if r.peer == against}
    return [getattr(r, attr) - theirs[r.round] for r in sorted(latencies, key=lambda r: r.round)
            if r.peer == peer and r.round in theirs]


def _differences_cell(differences: list[float]) -> str:
    """'+2.3 ms (-1 to +7)': the mean of a peer's per-round differences and their range; '-' for none."""
    if not differences:
        return "-"
    low, high = (round(v) for v in (min(differences), max(differences)))
    return f"{statistics.fmean(differences):+.1f} ms ({low:+d} to {high:+d})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--jobs", default=",".join(JOBS))
    parser.add_argument("--peers", default=",".join(PEERS))
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one run may take")
    parser.add_argument("--latency-rate", type=int, default=2000,
                        help="records/s of the latency runs (stateless job, every peer, each round); 0: none")
    parser.add_argument("--latency-warmup", type=int, default=30, help="seconds fed before latencies count")
    parser.add_argument("--latency-seconds", type=int, default=20, help="seconds of measured latencies")
    parser.add_argument("--eos-settings", default="", metavar="JSON",
                        help='the framework\'s Application settings to try, e.g. \'{"max_records_per_batch": 20000}\'')
    parser.add_argument("--no-warm-up", dest="warm_up", action="store_false",
                        help="no uncounted copy-loop run over each input before the first round")
    parser.add_argument("--warm-up-peers", type=int, nargs="?", const=1, default=0, metavar="ROUNDS",
                        help="also ROUNDS (default 1) uncounted rounds of every peer's every job before the first "
                        "(a young broker JIT-compiles its request paths for minutes; each run prints how much)")
    parser.add_argument("--eos-master", default="", help="the Spark master of the framework's runs (default: "
                        "the framework's own default, local[2,4])")
    parser.add_argument("--broker-feature", action="append", default=[], metavar="NAME=LEVEL",
                        help="format the benchmark's broker with this feature level, e.g. transaction.version=1 "
                        "(the transactions of a Kafka before 4.0, whose clients add a transaction's partitions and "
                        "groups with requests of their own); repeatable")
    args = parser.parse_args(argv)
    try:
        features = dict(parse_feature(f) for f in args.broker_feature)
    except ClusterError as exc:
        parser.error(str(exc))
    if args.eos_master:
        os.environ["PEER_MASTER"] = args.eos_master
    if args.eos_settings:
        try:
            if not isinstance(json.loads(args.eos_settings), dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            parser.error(f"--eos-settings must be a JSON object of Application settings: {exc}")
        os.environ["PEER_SETTINGS"] = args.eos_settings  # the framework's job reads it (eos_job.py)
    jobs, peers = args.jobs.split(","), [p for p in args.peers.split(",") if p]
    unknown = set(peers) - set(PEERS)
    if unknown or not set(jobs) <= set(JOBS):
        parser.error(f"peers are {', '.join(PEERS)}; jobs are {', '.join(JOBS)}")
    kstreams = build_kstreams() if any(p.startswith("kstreams") for p in peers) else []
    quix = quix_python() if "quix" in peers else None
    if any(p.startswith("eos") for p in peers):
        class_data_archive()
    runs: list[Run] = []
    latencies: list[Latency] = []
    with provide_kafka(brokers=1, features=features) as kafka, contextlib.ExitStack() as stack:
        admin = KafkaAdmin(kafka.bootstrap_servers)
        stack.callback(admin.close)  # its group readers, before the broker stops (or they log reconnects)
        brokers = [b.pid for b in kafka.cluster.status() if b.pid] if kafka.cluster is not None else []
        if features:
            console.print(f"the broker's storage formatted with {format_features(features)}")
        sources: dict[str, str] = {}
        for partitions in sorted({WIDE_PARTITIONS if is_wide(job) else PARTITIONS for job in jobs}):
            source = sources[str(partitions)] = f"peers-orders-{partitions}-{uuid.uuid4().hex[:8]}"
            admin.create_topics([TopicSpec(source, partitions)])
            t0 = time.monotonic()
            expected = preload(kafka.bootstrap_servers, source, args.records, args.keys)
            console.print(f"loaded {args.records:,} orders on {len(expected.counts):,} keys into {partitions} "
                          f"partitions in {time.monotonic() - t0:.1f} s")
            if args.warm_up:
                # The first heavy run on a fresh broker ran slower with the broker busier, whichever peer made it
                # (64 partitions, 2026-11-27): no peer's round is that run. (It did not close the gap measured.)
                t0 = time.monotonic()
                run_once("copy", "stateless", 0, kafka.bootstrap_servers, admin, source, args.records, expected,
                         kstreams, quix, args.timeout, brokers)
                console.print(f"warmed the broker up: the copy loop over them, not counted "
                              f"({time.monotonic() - t0:.1f} s)")
        rounds_began = cpu_times()
        for rnd in range(1 - args.warm_up_peers, args.rounds + 1):
            order = round_order(peers, rnd)
            for job in jobs:
                for peer in order:
                    if ((peer == "copy" and base_job(job) in AGGREGATING) or (peer in CACHED and job not in AGGREGATING)
                            or (peer == "quix" and job in ("sliding", "window-field"))):
                        continue
                    source = sources[str(WIDE_PARTITIONS if is_wide(job) else PARTITIONS)]
                    machine_ms = python_ms(MACHINE_REPEATS)
                    run = run_once(peer, job, rnd, kafka.bootstrap_servers, admin, source, args.records, expected,
                                   kstreams, quix, args.timeout, brokers)
                    if rnd <= 0:  # --warm-up-peers: not counted
                        console.print(f"warmed the broker up: {job} {peer}, not counted ({run.total_s:.1f} s, "
                                      f"broker {_broker_cell(run.broker_cores, run.broker_jit_cores)})")
                        continue
                    run.machine_ms = machine_ms
                    runs.append(run)
                    console.print(f"round {rnd} {job:11} {peer:14} {run.steady_rps:>10,.0f} rec/s  start-up "
                                  f"{run.startup_s:5.1f} s  peak {run.peak_rss_mib:7,.0f} MiB RSS, "
                                  f"{run.peak_pss_mib:,.0f} PSS, {run.cores_busy:.2f} cores busy, broker "
                                  f"{_broker_cell(run.broker_cores, run.broker_jit_cores)} "
                                  f"({_shares(run.peak_processes)}), machine {run.machine_ms:.0f} ms  {run.verified}"
                                  + (f"  ({'; '.join(run.notes)})" if run.notes else ""))
            for peer in order if args.latency_rate > 0 and rnd > 0 else []:
                if peer in CACHED:
                    continue
                lat = latency_once(peer, rnd, kafka.bootstrap_servers, admin, args.latency_rate, args.latency_warmup,
                                   args.latency_seconds, args.keys, kstreams, quix)
                latencies.append(lat)
                console.print(f"round {rnd} latency   {peer:14} p50 {lat.p50_ms:7,.0f} ms  p99 {lat.p99_ms:7,.0f} ms  "
                              f"max {lat.max_ms:7,.0f} ms  {lat.verified}"
                              + (f"  ({'; '.join(lat.notes)})" if lat.notes else ""))
        steal = steal_share(rounds_began, cpu_times())
        # the admin client goes with the stack's close, before the broker stops: kept to the end of this function,
        # it logged every second that it could not reconnect to the stopped broker
        del admin
    summary = report(runs, latencies, args.records)
    machine = machine_line(runs, steal)
    if machine:
        console.print(machine)
    out = ROOT / "reports" / "peers.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"records": args.records, "keys": args.keys, "rounds": args.rounds,
                               "broker_features": features, "medians": summary, "steal": steal,
                               "runs": [asdict(r) for r in runs], "latency_runs": [asdict(r) for r in latencies]},
                              indent=2))
    console.print(f"report: {out}")


if __name__ == "__main__":
    main()
