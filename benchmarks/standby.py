"""Failover with and without a standby replica, side by side in one run on one machine.

A stateful task (a per-key count, RocksDB) holds `--keys` distinct keys, so its changelog holds as many
records. Spark runs three executor JVMs (`local-cluster[3,1,MB]`), each with its own state directory as
separate hosts would have. Once the job has caught up (and, with a standby, the standby copy too), the
executor JVM running the task is SIGKILLed and `--tail` more records arrive. Measured per mode:

* failover time: from the SIGKILL until the task's transaction has committed on another executor;
* records replayed by the moved task before that batch (its restore), and the restore time.

    python -m benchmarks.standby [--keys 1000000] [--tail 10000] [--repeats 3]

Prints a table with the medians and ratios (no standby / one standby) and writes reports/standby.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks.state import write_changelog
from chaos.processes import executor_pid
from eos import Application, TaskId
from eos.driver.runner import Runner
from eos.driver.spark import build_spark_context, live_executors
from localkafka.provision import provide_kafka
from transactions import KafkaAdmin, TopicSpec

console = Console()
TASK = TaskId("counts", 0)


def _wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


def _standby_lag(reports: list[Any]) -> int | None:
    """The task's standby lag in the latest batch report (None: no standby placed yet)."""
    for report in reversed(reports):
        placed = report.placement.get(TASK)
        if placed is not None and placed.standbys:
            return max(placed.standbys.values())
    return None


def measure(sc: Any, bootstrap: str, admin: KafkaAdmin, keys: int, tail: int, standbys: int,
            state_root: Path) -> dict[str, Any]:
    run = uuid.uuid4().hex[:8]
    src, out = f"standby-bench-in-{run}", f"standby-bench-out-{run}"
    admin.create_topics([TopicSpec(src, 1), TopicSpec(out, 1)])
    write_changelog(bootstrap, src, keys, value_size=20)  # `keys` distinct keys -> as many changelog records
    app = Application(f"standby-bench-{standbys}-{run}", bootstrap, num_standby_replicas=standbys,
                      state_dir=str(state_root / f"standbys-{standbys}" / "{executor}"), trigger_interval=0.5,
                      max_records_per_batch=250_000, log_format="json", log_level="WARNING")
    app.stream(src, key_serde="bytes", value_serde="bytes").group_by_key().count(name="counts") \
        .to_stream().to(out)
    runner = Runner(app, sc)
    reports: list[Any] = []
    seen: list[Any] = []
    summary: dict[str, Any] = {}

    def on_batch(report: Any, results: list[Any]) -> None:
        reports.append(report)
        seen.extend(results)

    def reported_up_to_end() -> bool:  # the input's end is committed and its batch result is back
        end = admin.end_offsets([(src, 0)])[(src, 0)]
        return any(r.committed_offsets.get((src, 0), -1) >= end for r in list(seen) if r.task == TASK)

    thread = threading.Thread(target=lambda: summary.setdefault("run", runner.run(on_batch=on_batch)), daemon=True)
    started = time.monotonic()
    thread.start()
    try:
        _wait(reported_up_to_end, 900, "the initial load")
        loaded_s = time.monotonic() - started
        if standbys:
            _wait(lambda: _standby_lag(reports) == 0, 600, "the standby to catch up")
        active = [r for r in seen if r.task == TASK and r.status == "committed"][-1].executor
        changelog_records = sum(r.changelog_records for r in seen if r.task == TASK)
        if changelog_records < keys:
            raise RuntimeError(f"the task wrote {changelog_records:,} changelog records for {keys:,} keys")
        lag_at_kill = _standby_lag(reports) if standbys else None
        before = len(seen)
        killed = time.time()
        os.kill(executor_pid(active, sc.applicationId), signal.SIGKILL)
        write_changelog(bootstrap, src, tail, value_size=20)  # new input: keys seen before, counted again

        def moved() -> Any:
            return next((r for r in seen[before:]
                         if r.task == TASK and r.status == "committed" and r.executor != active), None)

        _wait(lambda: moved() is not None, 900, "the task to commit on another executor")
        result = moved()
        _wait(reported_up_to_end, 300, "the tail")
    finally:
        runner.request_stop()
        thread.join(300)
    move = next((m for m in summary["run"].moves if m.task == TASK and m.source == active), None)
    return {"standbys": standbys, "keys": keys, "changelog_records": changelog_records,
            "initial_load_s": round(loaded_s, 1), "standby_lag_at_kill": lag_at_kill,
            "failover_s": round(result.committed_at - killed, 2), "replayed_records": result.restored_records,
            "restore_s": round(result.restore_ms / 1000, 2), "moved_to": result.executor,
            "move_reason": move.reason.value if move else None, "executors_alive": len(live_executors(sc)),
            # what happened to the task from the kill on: batch, status, executor, Spark attempt, seconds after kill
            "after_kill": [(r.batch, r.status, r.executor, r.spark_attempt,
                            round(r.committed_at - killed, 2) if r.committed_at else None)
                           for r in seen[before:] if r.task == TASK][:6]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--tail", type=int, default=10_000, help="records produced right after the kill")
    parser.add_argument("--repeats", type=int, default=1, help="runs per mode (interleaved); medians are reported")
    parser.add_argument("--executor-memory-mb", type=int, default=1536)
    parser.add_argument("--report", default="reports/standby.json")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="eos-standby-bench-"))
    master = f"local-cluster[3,1,{args.executor_memory_mb}]"
    try:
        with provide_kafka(brokers=1) as kafka:
            admin = KafkaAdmin(kafka.bootstrap_servers)
            sc = build_spark_context(master, "eos-standby-benchmark")
            try:
                _wait(lambda: len(live_executors(sc)) >= 3, 180, "three executors")
                runs: list[dict[str, Any]] = []
                for _ in range(args.repeats):
                    for standbys in (0, 1):
                        runs.append(measure(sc, kafka.bootstrap_servers, admin, args.keys, args.tail, standbys,
                                            scratch))
                        console.print(runs[-1])
                        _wait(lambda: len(live_executors(sc)) >= 3, 180, "Spark to replace the killed executor")
            finally:
                sc.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    medians = {standbys: {k: statistics.median(r[k] for r in runs if r["standbys"] == standbys)
                          for k in ("changelog_records", "replayed_records", "restore_s", "failover_s")}
               for standbys in (0, 1)}
    without, with_one = medians[0], medians[1]
    ratios = {"failover_time": round(without["failover_s"] / max(with_one["failover_s"], 1e-3), 2),
              "records_replayed": (round(without["replayed_records"] / with_one["replayed_records"], 1)
                                   if with_one["replayed_records"] else None)}
    table = Table(title=f"failover of a task with {args.keys:,} keys on {master} (executor SIGKILLed), "
                        f"median of {args.repeats}")
    for col in ("standbys", "changelog records", "replayed", "restore s", "failover s"):
        table.add_column(col, justify="right")
    for standbys, r in medians.items():
        table.add_row(str(standbys), f"{r['changelog_records']:,.0f}", f"{r['replayed_records']:,.0f}",
                      str(r["restore_s"]), str(r["failover_s"]))
    console.print(table)
    replayed = (f"x{ratios['records_replayed']}" if ratios["records_replayed"] is not None else
                f"{without['replayed_records']:,.0f} vs 0")
    console.print(f"no standby / one standby: failover time x{ratios['failover_time']}, records replayed {replayed}")
    Path(args.report).parent.mkdir(parents=True, exist_ok=True)
    Path(args.report).write_text(json.dumps({"master": master, "runs": runs, "medians": medians, "ratios": ratios},
                                            indent=2))
    console.print(f"report: {args.report}")


if __name__ == "__main__":
    main()
