"""The failover matrix: every fault kind x {stateless, stateful, windowed} job, each a built-in scenario named
`matrix-<job>-<fault>` (or every fault kind x a scenario's job, a job of the user's too), and a runner that
repeats each with consecutive seeds and tabulates the results."""

from __future__ import annotations

import json
import signal
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from chaos.scenario import FaultSpec, Scenario

__all__ = ["matrix_scenarios", "run_matrix", "matrix_markdown", "driver_crashes", "FAULT_SETTINGS"]

CLUSTER = "local-cluster[2,1,1024]"

# kind: (scenario settings, fault count, duration, params)
FAULT_SETTINGS: dict[str, tuple[dict[str, Any], int, float, dict[str, Any]]] = {
    "driver_kill": ({}, 3, 0, {"in_transaction": True}),
    "driver_term": ({}, 2, 0, {}),
    "driver_pause": ({}, 2, 6, {}),
    "executor_kill": ({"master": CLUSTER}, 2, 0, {}),
    "executor_pause": ({"master": CLUSTER, "rate": 3000}, 1, 20, {}),
    "worker_kill": ({}, 3, 0, {"in_transaction": True}),
    "worker_pause": ({}, 2, 5, {}),
    "zombie": ({"rate": 3000}, 2, 0, {}),
    "broker_hard_bounce": ({"brokers": 3}, 2, 5, {}),
    "broker_clean_bounce": ({"brokers": 3}, 2, 2, {}),
    "broker_pause": ({"brokers": 3}, 2, 8, {}),
    "net_latency": ({}, 2, 8, {"ms": 250}),
    "net_reset": ({}, 3, 3, {"times": 3}),
    "net_blackhole": ({}, 2, 8, {}),
    "net_partition": ({"brokers": 3}, 2, 12, {}),
    "poison": ({}, 2, 4, {"ratio": 0.2}),
}


def matrix_scenarios(records: int | None = None, rate: int | None = None, base: Scenario | None = None,
                     only: str | None = None) -> dict[str, Scenario]:
    """Every fault kind against each built-in job (`matrix-<job>-<fault>`, 200k records at 5,000/s unless
    given), or, with `base`, against that scenario's job: a job of the user's with its load, or a built-in one
    with the scenario's settings (`matrix-<name>-<fault>`; its own faults replaced by each kind in turn, its
    records and rate kept unless given). A fault kind's own settings go on top: a local-cluster master for
    executor faults (with a standby for a job with state), three brokers for broker faults, at most 3,000
    records/s for the faults that stop a process for long. `only`: the scenarios whose name contains it."""
    bases = [base] if base is not None else [Scenario(name=job, job=job) for job in ("stateless", "stateful",
                                                                                    "windowed")]
    default_records, default_rate = (base.records, base.rate) if base is not None else (200_000, 5000)
    records, rate = records or default_records, rate or default_rate
    out = {}
    for job in bases:
        stateful = _has_state(job)  # (a job of the user's is loaded once, before its first scenario)
        for kind, (settings, count, duration, params) in FAULT_SETTINGS.items():
            name = f"matrix-{job.name}-{kind}"
            if only and only not in name:
                continue
            changes: dict[str, Any] = {**settings, "records": records, "rate": min(rate, settings.get("rate", rate))}
            if stateful and str(changes.get("master", "")).startswith("local-cluster"):
                changes["standbys"] = 1  # executor faults on a job with state fail over to the standby
            described = f"{Path(job.job).name if job.own_job else job.job} job, {count} x {kind}"
            out[name] = replace(job, name=name, description=described,
                                faults=(FaultSpec(kind, count, duration, dict(params)),), **changes)
    return out


def _has_state(scenario: Scenario) -> bool:
    """The scenario's job keeps state stores (a job of the user's is loaded to find out)."""
    if not scenario.own_job:
        return scenario.job in ("stateful", "windowed")
    from chaos.harness import own_job

    app, _ = own_job(scenario)
    return bool(app.graph.stores)  # (the graph's: a step reading a topic pattern has no sub-topology until matched)


# Exit codes of a driver that was stopped (0: stopped or a SIGTERM it handled) or killed by a fault (SIGKILL,
# SIGTERM); any other exit is the driver failing on its own: an error it gave up on (1), a crash (SIGSEGV).
_EXPECTED_EXITS = {0, -signal.SIGKILL, -signal.SIGTERM}


def driver_crashes(timeline: list[dict[str, Any]]) -> list[int]:
    """Exit codes of the times the job's driver died on its own during a run (the harness restarted it)."""
    return [int(e["code"]) for e in timeline
            if e.get("kind") == "job" and e.get("phase") == "exit" and e.get("code") not in _EXPECTED_EXITS]


def run_matrix(scenarios: list[Scenario], repeats: int, out_dir: Path, *, seed: int = 1, resume: bool = True,
               on_result: Any = None) -> list[dict[str, Any]]:
    """Run every scenario `repeats` times (seeds seed, seed+1, ...); returns one summary row per scenario.

    With `resume`, a run whose report is already in `out_dir` (same scenario, seed and record count) is read
    back instead of run again, so a long matrix can be stopped and continued later."""
    from chaos.harness import run_scenario

    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for scenario in scenarios:
        runs = []
        for rep in range(repeats):
            s = scenario.with_overrides(seed=seed + rep)
            workdir = out_dir / f"{s.name}-seed{s.seed}"
            previous = _previous(workdir, s) if resume else None
            if previous is not None:
                runs.append(previous)
                continue
            started = time.time()
            result = run_scenario(s, workdir)
            runs.append(result)
            if on_result is not None:
                on_result(s, result, time.time() - started)
        recoveries = [r["recovery_s"] for res in runs for r in res.recovery if r["recovery_s"] is not None]
        rows.append({
            "scenario": scenario.name, "runs": len(runs), "passed": sum(r.verdict == "PASS" for r in runs),
            "records_per_run": scenario.records, "faults_injected": sum(r.faults_injected for r in runs),
            "violations": sum(r.violations for r in runs),
            "failed_reasons": sorted({reason for r in runs for reason in r.reasons}),
            "notes": sorted({note for r in runs for note in r.notes}),
            "median_recovery_s": round(statistics.median(recoveries), 2) if recoveries else None,
            "max_recovery_s": round(max(recoveries), 2) if recoveries else None,
            "job_restarts": sum(r.job.get("restarts", 0) for r in runs),
            "driver_crashes": sorted(code for r in runs for code in driver_crashes(r.timeline))})
        (out_dir / "matrix.json").write_text(json.dumps(rows, indent=2))
        (out_dir / "matrix.md").write_text(matrix_markdown(rows))
    return rows


def matrix_markdown(rows: list[dict[str, Any]]) -> str:
    """The matrix as a Markdown table (also written as matrix.md beside matrix.json)."""
    lines = ["| scenario | runs | passed | records/run | faults injected | violations | median recovery s | "
             "max recovery s | driver crashes (exit codes) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        crashes = r.get("driver_crashes") or []
        lines.append(f"| {r['scenario']} | {r['runs']} | {r['passed']} | {r['records_per_run']:,} | "
                     f"{r['faults_injected']} | {r['violations']} | {r['median_recovery_s']} | {r['max_recovery_s']} | "
                     f"{len(crashes)}{' (' + ', '.join(map(str, crashes)) + ')' if crashes else ''} |")
    notes = [f"* {r['scenario']}: {note}" for r in rows for note in r.get("notes") or ()]
    return "\n".join(lines + (["", *notes] if notes else [])) + "\n"


def _previous(workdir: Path, scenario: Scenario) -> Any:
    from chaos.harness import ChaosResult

    report = workdir / "report.json"
    if not report.is_file():
        return None
    result = ChaosResult.from_report(report)
    same = {k: result.scenario.get(k) for k in ("name", "seed", "records", "rate")}
    return result if same == {k: getattr(scenario, k) for k in same} else None
