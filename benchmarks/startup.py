"""Start-up benchmark: from `eos run` to the first commit, as shipped and with each of the framework's
start-up measures turned off in turn, interleaved on one local broker.

    python -m benchmarks.startup [--rounds 5] [--records 200000] [--job stateless|count] [--partitions 4]
                                 [--settle 0]

Every run is the peers benchmark's stateless (or, `--job count`, count) job (`benchmarks/peers/eos_job.py`)
under `eos run` on a local master, reading a pre-loaded 4-partition topic from the start under a fresh
group; the time is from launching `eos run` to the first committed input offset (the group's offsets,
polled every 0.1 s), then the run is stopped. `--partitions`: the input's and output's partitions (64: the
peers' wide jobs); `--settle`: seconds between creating a run's output topic and launching it (0: at once, as
the peers benchmark does, the broker still making the new partitions' logs while the run starts). Variants:

* shipped: as the framework runs by default;
* no-archive: without the driver JVM's class-data archive (`spark.eos.classDataArchive=false`);
* zip-daemon: Spark's own Python daemon, importing pyspark from its zip (`spark.python.daemon.module=
  pyspark.daemon`);
* full-first-batch: the first batch as large as the others (`first_batch_max_records=50000`);
* full-jit: the driver JVM with its JIT's optimizing tier (`spark.eos.quickJit=false`);
* g1-heap: the driver JVM with the JVM's own collector (G1) and initial heap, not the serial collector
  from 16 MiB (`spark.eos.serialGc=false`);
* no-zygote: the daemon imports its modules when Spark launches it, not in a zygote started with the JVM
  (`spark.eos.daemonZygote=false`);
* started-zygote: the zygote started as a process of its own beside the JVM, not forked from the driver, as
  for a driver whose hash seed is the user's (`PYTHONHASHSEED=1`);
* tcp-sockets: the JVM talks to the Python daemon, its workers and the driver's accumulator server over
  loopback TCP rather than Unix domain sockets (`spark.python.unix.domain.socket.enabled=false`).

* late-jvm: the driver's JVM launched when the context is created, after the job is loaded and checked, not
  before (`spark.eos.earlyJvm=false`);
* submit-scripts: the JVM launched early through spark-submit's scripts and launcher every time, not with the
  command recorded from an earlier launch (`spark.eos.launchRecord=false`).
* dlq-exists: the application's dead-letter topic made before the launch, with the job's partitions, as it is
  from an application's second start on (every other variant is a first start, which creates it);
* source-modules: the framework's own modules compiled from their source at every start (a copy of its packages
  without `__pycache__`, first on `PYTHONPATH`, and `PYTHONDONTWRITEBYTECODE=1`), as on a machine that sets
  that variable and whose checkout set-up did not compile (`make setup` compiles it, as pip does a package it
  installs).

(The JVM starting while the driver prepares Kafka has no switch.) Rounds run the variants in turn
(A B C D, A B C D, ...); the table has each variant's median and its difference to "shipped". Writes
reports/startup.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmarks.peers.__main__ import PARTITIONS, class_data_archive, command, launched, preload
from eos.config import EosConfig
from localkafka.provision import provide_kafka
from transactions import KafkaAdmin, TopicSpec

ROOT = Path(__file__).resolve().parents[1]
console = Console()

#: variant -> (extra `eos run` arguments, extra environment)
VARIANTS: dict[str, tuple[list[str], dict[str, str]]] = {
    "shipped": ([], {}),
    "no-archive": (["--spark-conf", "spark.eos.classDataArchive=false"], {}),
    "zip-daemon": (["--spark-conf", "spark.python.daemon.module=pyspark.daemon"], {}),
    "full-first-batch": ([], {"PEER_SETTINGS": '{"first_batch_max_records": 50000}'}),
    "full-jit": (["--spark-conf", "spark.eos.quickJit=false"], {}),
    "g1-heap": (["--spark-conf", "spark.eos.serialGc=false"], {}),
    "no-zygote": (["--spark-conf", "spark.eos.daemonZygote=false"], {}),
    "started-zygote": ([], {"PYTHONHASHSEED": "1"}),
    "tcp-sockets": (["--spark-conf", "spark.python.unix.domain.socket.enabled=false"], {}),
    "late-jvm": (["--spark-conf", "spark.eos.earlyJvm=false"], {}),
    "submit-scripts": (["--spark-conf", "spark.eos.launchRecord=false"], {}),
    "source-modules": ([], {"PYTHONDONTWRITEBYTECODE": "1"}),
    "dlq-exists": ([], {}),
}
#: the framework's packages, copied without their compiled modules for the source-modules variant
PACKAGES = ("eos", "transactions", "recovery", "chaos", "localkafka", "benchmarks")


def first_commit(bootstrap: str, admin: KafkaAdmin, source: str, variant: str, job: str, partitions: int = PARTITIONS,
                 settle: float = 0.0, timeout: float = 120.0) -> float:
    args, extra_env = VARIANTS[variant]
    tag = uuid.uuid4().hex[:8]
    sink, group = f"startup-out-{tag}", f"startup-{variant}-{tag}"
    if variant == "dlq-exists":  # (the peers' job names its application after the group)
        admin.create_topics([TopicSpec(EosConfig(group, bootstrap).dlq_topic, partitions)])
    admin.create_topics([TopicSpec(sink, partitions)])
    time.sleep(settle)
    scratch = Path(tempfile.mkdtemp(prefix="startup-"))
    cmd, env = command("eos", job, bootstrap, source, sink, group, scratch, [], None)  # the peers' eos run
    if variant == "source-modules":
        for package in PACKAGES:
            shutil.copytree(ROOT / package, scratch / "source" / package,
                            ignore=shutil.ignore_patterns("__pycache__", "target"))
        env["PYTHONPATH"] = os.pathsep.join((str(scratch / "source"), env["PYTHONPATH"]))
    tps = admin.topic_partitions(source)
    started = time.monotonic()
    with launched([*cmd, *args], {**env, **extra_env}, scratch) as proc:
        while time.monotonic() - started < timeout:
            if proc.poll() is not None:
                raise RuntimeError(f"{variant}: eos run exited with {proc.returncode}; see {scratch / 'run.log'}")
            if sum(o or 0 for o in admin.group_offsets(group, tps, stable=False).values()):
                return time.monotonic() - started
            time.sleep(0.1)
        raise RuntimeError(f"{variant}: no commit in {timeout:.0f} s; see {scratch / 'run.log'}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--job", default="stateless", choices=("stateless", "count"))
    parser.add_argument("--partitions", type=int, default=PARTITIONS)
    parser.add_argument("--settle", type=float, default=0.0, help="seconds from creating a run's output to its launch")
    args = parser.parse_args(argv)
    if args.partitions < 1 or args.settle < 0:
        parser.error("--partitions takes a count of at least 1, --settle seconds of at least 0")
    variants = [v for v in args.variants.split(",") if v]
    if not variants or set(variants) - set(VARIANTS):
        parser.error(f"variants are {', '.join(VARIANTS)}")
    class_data_archive()
    times: dict[str, list[float]] = {v: [] for v in variants}
    with provide_kafka(brokers=1) as kafka:
        admin = KafkaAdmin(kafka.bootstrap_servers)
        try:
            source = f"startup-in-{uuid.uuid4().hex[:8]}"
            admin.create_topics([TopicSpec(source, args.partitions)])
            preload(kafka.bootstrap_servers, source, args.records, 10_000)
            for rnd in range(1, args.rounds + 1):
                for variant in variants:
                    took = first_commit(kafka.bootstrap_servers, admin, source, variant, args.job, args.partitions,
                                        args.settle)
                    times[variant].append(took)
                    console.print(f"round {rnd} {variant:17} first commit after {took:5.2f} s")
        finally:
            admin.close()
    medians = {v: statistics.median(t) for v, t in times.items()}
    settled = f", {args.settle:g} s settle" if args.settle else ""
    table = Table(title=f"eos run -> first commit, {args.job} job, {args.rounds} rounds, {args.records:,} records "
                        f"backlog on {args.partitions} partitions{settled}")
    for column in ("variant", "median s", "runs s", "vs shipped"):
        table.add_column(column, justify="left" if column == "variant" else "right")
    base = medians.get("shipped")
    for v in variants:
        table.add_row(v, f"{medians[v]:.2f}", " ".join(f"{t:.2f}" for t in times[v]),
                      f"{medians[v] - base:+.2f} s" if base is not None else "-")
    console.print(table)
    out = ROOT / "reports" / "startup.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"job": args.job, "records": args.records, "partitions": args.partitions,
                               "settle": args.settle, "rounds": args.rounds, "seconds": times,
                               "medians": medians}, indent=2))
    console.print(f"written: {out}")


if __name__ == "__main__":
    main()
