"""Machine instructions per record of a job's record path, counted (not timed): the peers' jobs through the
test driver, under valgrind's callgrind.

    python -m benchmarks.instructions [--jobs stateless,count,pipeline,window,session,sliding,"cached count"]
                                      [--records 10000] [--timestamp field:at] [--record-at-a-time]

On a shared machine a timed run of the same code moves by a third from one run to the next, so a change of a
few percent in a worker's cost per record cannot be seen in the peers' rates. An instruction count can: each
job runs twice in a process of its own under callgrind, with the same hash seed, once writing `--records`
pre-serialized records into the test driver's in-memory Kafka and once writing and processing them (reading,
deserializing, the job, serializing, the topic's rules, lineage, producing and committing, as a worker does);
the difference over the records is the job's instructions per record, within ~0.5 % from run to run. The
windowed jobs (window, session, sliding) run on RocksDB stores with the peers' event times (a key's records ~6 s
apart), after 30,000 records processed in both runs, so that what is counted meets the state a running task holds
(~3.5 minutes per job). The in-memory Kafka stands in for librdkafka, so its own share differs from a worker's.
Needs `valgrind` (Debian: `apt-get install valgrind`); ~1.5 minutes per other job. To compare two commits, run it
in a checkout of each. `--timestamp SPEC` gives the application that event time (`field:at`: each value carries
its record's timestamp as "at"); `--record-at-a-time` turns off the direct loop and the fold, so every record
takes the graph's record-at-a-time loop. Writes reports/instructions.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmarks.peers.jobs import JOBS

ROOT = Path(__file__).resolve().parents[1]
console = Console()


#: the peers' jobs, and their count with the record cache of the peers' `eos-cache` (a task's share of Kafka
#: Streams' 10 MiB), in batches of `CACHED_BATCH` records on 4 partitions (as a peers worker's: ~2,500 keys a
#: task, each updated a few times a batch, then flushed, written and committed). Its stores are in memory:
#: RocksDB's background threads flush and compact when they will, which moved a count by ~5 % between runs.
ALL_JOBS = (*JOBS, "cached count")
CACHED = "cached count"
CACHED_BATCH = 40_000
#: the jobs of event-time windows: their records carry the peers' timestamps (EVENT_SPAN_MS over 1M records: a key's
#: records ~6 s apart on 10k keys), and `WINDOWED_WARM_UP` records go first, in batches of `WINDOWED_BATCH`, written
#: and processed in both runs, so that the records counted meet the windows, sessions and buffered records a
#: running task holds, not an empty store
WINDOWED = ("window", "window-field", "session", "sliding")
WINDOWED_WARM_UP, WINDOWED_BATCH = 30_000, 10_000


def _app(job: str):  # type: ignore[no-untyped-def]
    from benchmarks.peers.jobs import define
    from eos import Application

    cache = {"cache_max_bytes": 10 * 1024 * 1024 // 4} if job == CACHED else {}
    app = Application("instructions", trigger_interval=1.0, max_records_per_batch=1_000_000,
                      timestamp=os.environ.get(_TIMESTAMP) or None, **cache)
    define(app, "count" if job == CACHED else job, "in", "out")  # the peers' job
    return app


#: the child's settings, from the parent's options: the application's event time, and the loops turned off
_TIMESTAMP, _ONE_AT_A_TIME = "EOS_INSTRUCTIONS_TIMESTAMP", "EOS_INSTRUCTIONS_RECORD_AT_A_TIME"


def _stamped(value: bytes, timestamp: int) -> bytes:
    """A peers' JSON value with its record's timestamp in it, as "at" (for `--timestamp field:at`; the values are
    left as they are without the option, so that counts stay comparable with earlier runs')."""
    return b'%s, "at": %d}' % (value[:-1], timestamp)


def child(job: str, records: int, process: bool) -> None:
    """What callgrind counts: the records written to the driver, and processed when `process`."""
    from benchmarks.peers.__main__ import order
    from eos.testing import TopologyTestDriver

    if os.environ.get(_ONE_AT_A_TIME):
        from eos.worker import processing

        processing.fold_target = processing.direct_step = lambda processor: None  # type: ignore[assignment]
    rng = random.Random(1)
    data = [order(rng, i, 10_000) for i in range(records)]  # the peers' records
    if os.environ.get(_TIMESTAMP):
        data = [(key, _stamped(value, 1_700_000_000_000 + i)) for i, (key, value) in enumerate(data)]
    # Kafka 4's default upper bound on output timestamps (one hour ahead), as on a broker
    topic_configs = {"out": {"message.timestamp.after.max.ms": "3600000"}}
    if job == CACHED:
        driver = TopologyTestDriver(_app(job), partitions=4, topic_configs=topic_configs)
        for i in range(0, records, CACHED_BATCH):
            driver.pipe_records((("in", key.encode(), value) for key, value in data[i:i + CACHED_BATCH]),
                                process=process, serialized=True)
        if process:  # every key's last committed count is its count
            last = {r.key: r.value for r in driver.read("out")}
            assert last == Counter(key for key, _value in data), "the cached count's last outputs are not the counts"
        return
    if job in WINDOWED:
        from benchmarks.peers.__main__ import EVENT_SPAN_MS

        with tempfile.TemporaryDirectory() as state:  # (RocksDB stores, as a worker's)
            windowed(job, records, process, state, EVENT_SPAN_MS / 1_000_000)
        return
    driver = TopologyTestDriver(_app(job), topic_configs=topic_configs)
    driver.pipe_records((("in", key.encode(), value) for key, value in data), process=process, serialized=True)
    if process:  # one output per record (the pipeline's: per record it keeps), committed (the log's stable end
        # counts commit markers too)
        kept = records if job != "pipeline" else sum(json.loads(value)["qty"] >= 2 for _key, value in data)
        stable = _committed_offsets(driver)
        assert stable > kept, f"{stable} offsets committed to the output for {kept} outputs"


def windowed(job: str, records: int, process: bool, state: str, ms_per_record: float) -> None:
    """`child` of a windowed job: the warm-up processed, then the records counted written (and processed)."""
    from benchmarks.peers.__main__ import order
    from eos.testing import TopologyTestDriver

    rng = random.Random(1)
    total = WINDOWED_WARM_UP + records
    data = [(*order(rng, i, 10_000), 1_700_000_000_000 + int(i * ms_per_record)) for i in range(total)]
    if os.environ.get(_TIMESTAMP):
        data = [(key, _stamped(value, t), t) for key, value, t in data]
    app = _app(job)
    driver = TopologyTestDriver(app, topic_configs={"out": {"message.timestamp.after.max.ms": "3600000"}},
                                state_dir=state)
    for i in range(0, WINDOWED_WARM_UP, WINDOWED_BATCH):
        driver.pipe_records([("in", key.encode(), value, t) for key, value, t in data[i:i + WINDOWED_BATCH]],
                            serialized=True)
    before = _committed_offsets(driver)
    driver.pipe_records([("in", key.encode(), value, t) for key, value, t in data[WINDOWED_WARM_UP:]],
                        process=process, serialized=True)
    if process:  # at least one output per record, committed
        stable = _committed_offsets(driver)
        assert stable - before > records, f"{stable - before} offsets committed to the output for {records} records"


def _committed_offsets(driver) -> int:  # type: ignore[no-untyped-def]
    """The output topic's stable offsets, summed over its partitions (commit markers count too)."""
    return sum(driver.cluster.last_stable("out", p) for p in range(driver.cluster.partitions("out")))


def count(valgrind: str, job: str, records: int, process: bool) -> int:
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run(
            [valgrind, "--tool=callgrind", f"--callgrind-out-file={scratch}/out", sys.executable, "-m",
             "benchmarks.instructions", "--child", job, str(records), "process" if process else "write"],
            cwd=ROOT, env={**os.environ, "PYTHONHASHSEED": "0"}, capture_output=True, text=True, check=False)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"{job}: the run under valgrind failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default=",".join(JOBS), help=f"of {', '.join(ALL_JOBS)}")
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--timestamp", help="the application's event time (field:at: each record's timestamp, "
                                             "from its value)")
    parser.add_argument("--record-at-a-time", action="store_true",
                        help="every record through the graph's record-at-a-time loop (no direct loop, no fold)")
    parser.add_argument("--child", nargs=3, metavar=("JOB", "RECORDS", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.timestamp:
        os.environ[_TIMESTAMP] = args.timestamp
    if args.record_at_a_time:
        os.environ[_ONE_AT_A_TIME] = "1"
    if args.child:
        child(args.child[0], int(args.child[1]), args.child[2] == "process")
        return
    jobs = [j for j in args.jobs.split(",") if j]
    if not jobs or set(jobs) - set(ALL_JOBS):
        parser.error(f"jobs are {', '.join(ALL_JOBS)}")
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        parser.error("valgrind is not installed (Debian: apt-get install valgrind)")
    per_record: dict[str, float] = {}
    for job in jobs:
        written = count(valgrind, job, args.records, process=False)
        processed = count(valgrind, job, args.records, process=True)
        per_record[job] = (processed - written) / args.records
        console.print(f"{job}: {per_record[job]:,.0f} instructions per record")
    table = Table(title=f"instructions per record, {args.records:,} records through the test driver")
    table.add_column("job")
    table.add_column("instructions per record", justify="right")
    for job, n in per_record.items():
        table.add_row(job, f"{n:,.0f}")
    console.print(table)
    out = ROOT / "reports" / "instructions.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"records": args.records, "instructions_per_record": per_record}, indent=2))


if __name__ == "__main__":
    main()
