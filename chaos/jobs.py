"""The jobs chaos scenarios run, and their runner process (`python -m chaos.jobs <config.json>`).

* stateless: JSON orders -> {"id", "n2"}; records that are not JSON go to the dead-letter topic.
* stateful: a running count and sum of "n" per key in a RocksDB store.
* windowed: the sum of "n" per key and one-second tumbling window of record time (half a second of
  grace), one final result per window (emit="final"), in a window store.
* broken: the stateless job at-least-once (offsets committed outside the transaction, after the flush).
  It is here to prove the harness catches a real bug: under kills it duplicates output.
* a job of the user's (`job = "job.py"`): loaded as `eos run` loads it, its settings for the scenario's
  cluster, state directory, batch size and transaction timeout set over its own.

The runner appends one JSON line per batch to the batch log (time, duration, records, transactions), from
which the harness computes throughput over time and recovery after faults.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from chaos.scenario import BUILT_IN_JOBS
from eos import Application
from eos.testing import MarkWhile
from eos.windows import TumblingWindows

__all__ = ["build", "main", "transform", "add"]


def transform(record: Any) -> tuple[Any, dict[str, Any]]:
    return record.key, {"id": record.value["id"], "n2": record.value["n"] * 2}


def n_of(value: dict[str, Any]) -> int:
    return int(value["n"])


def add(key: Any, value: dict[str, Any], totals: dict[str, int]) -> dict[str, int]:
    return {"count": totals["count"] + 1, "sum": totals["sum"] + value["n"]}


def build(cfg: dict[str, Any]) -> Application:
    if cfg["job"] not in BUILT_IN_JOBS:
        return _own(cfg)
    app = Application(cfg["app_id"], cfg["bootstrap"], max_records_per_batch=cfg["max_records_per_batch"],
                      trigger_interval=cfg.get("trigger_interval", 0.5),
                      transaction_timeout_ms=cfg["transaction_timeout_ms"],
                      batch_timeout=min(30.0, cfg["transaction_timeout_ms"] / 1000 * 0.6),
                      state_dir=cfg["state_dir"], num_standby_replicas=cfg.get("standbys", 0),
                      log_format="json", log_level="WARNING",
                      processing_guarantee="at_least_once" if cfg["job"] == "broken" else "exactly_once")
    if cfg["job"] == "stateful":
        app.aggregate(cfg["input"], cfg["output"], name="totals", initializer=lambda: {"count": 0, "sum": 0},
                      aggregator=add)
    elif cfg["job"] == "windowed":
        app.sum(cfg["input"], cfg["output"], name="windowed", value=n_of,
                windows=TumblingWindows(1_000, grace=500), emit="final")
    else:
        app.process(input=cfg["input"], output=cfg["output"], key_serde="string", value_serde="json",
                    name="transform")(transform)
    return _marked(app, cfg)


def _own(cfg: dict[str, Any]) -> Application:
    """The user's job, set for the scenario's cluster (its own application id, topics and steps kept)."""
    from eos.cli.loader import load_application

    app = load_application(cfg["job"])
    app.configure(bootstrap_servers=cfg["bootstrap"], state_dir=cfg["state_dir"],
                  max_records_per_batch=cfg["max_records_per_batch"],
                  transaction_timeout_ms=cfg["transaction_timeout_ms"],
                  batch_timeout=min(30.0, cfg["transaction_timeout_ms"] / 1000 * 0.6),
                  num_standby_replicas=cfg.get("standbys", 0), log_format="json", log_level="WARNING",
                  schema_registry_url=cfg.get("schema_registry_url"))  # (the run's registry; None: the job's own)
    return _marked(app, cfg)


def _marked(app: Application, cfg: dict[str, Any]) -> Application:
    if cfg.get("marks_dir"):  # an observable produce -> commit window for in-transaction faults
        app.fault_hooks.on("before_commit", MarkWhile(cfg["marks_dir"], seconds=cfg.get("mark_seconds", 0.2)))
    return app


def main() -> None:
    from eos.driver.spark import build_spark_context, stop_context

    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    app = build(cfg)
    sc = build_spark_context(cfg["master"], cfg["app_id"], cfg.get("spark_conf") or {})
    log = open(cfg["batch_log"], "a", buffering=1)

    def on_batch(report: Any, results: Any) -> None:
        log.write(json.dumps({"pid": os.getpid(), "started": report.started, "ended": time.time(),
                              "duration_s": report.duration_s, "records_in": report.records_in,
                              "committed": report.committed, "fenced": report.fenced}) + "\n")

    app.run(sc, handle_signals=True, on_batch=on_batch, until_caught_up="--until-caught-up" in sys.argv)
    stop_context(sc)


if __name__ == "__main__":
    main()
