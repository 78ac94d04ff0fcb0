"""Chaos reports: the auditor's verdict with counts, the fault timeline, records/s over time, and the
recovery time after each fault (until the job commits again), as JSON and as a PNG plot."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chaos.harness import ChaosResult
    from chaos.timeline import Timeline

__all__ = ["finish_result", "plot"]

_NOT_FAULTS = {"job", "load", "faults", "drain"}


def _batches(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _unmeasured(recovery: dict[str, Any], sent_all_s: float | None) -> str:
    """Why a fault's recovery time is "-": no batch that started after it committed."""
    fault = f"{recovery['kind']} at {recovery['start_s']:.1f} s: no recovery time (\"-\"), as no batch that started " \
            "after it committed"
    if sent_all_s is not None and sent_all_s <= recovery["start_s"]:
        return f"{fault}: the load had sent its last record at {sent_all_s:.1f} s, before it, so the job had no " \
               "input left to commit (the drain and the audits still judge the run)"
    return f"{fault} before the run ended"


def finish_result(result: ChaosResult, workdir: Path, timeline: Timeline) -> None:
    batches = _batches(workdir / "batches.jsonl")
    committed = sorted((b for b in batches if b["committed"]), key=lambda b: b["ended"])
    origin = timeline.started
    for span in timeline.spans():
        if span["kind"] in _NOT_FAULTS:
            continue
        after = next((b for b in committed if b["started"] >= span["start"]), None)
        result.recovery.append({
            "kind": span["kind"], "target": span["target"], "start_s": round(span["start"] - origin, 2),
            "duration_s": round(span["end"] - span["start"], 2),
            # from the fault's start until a batch that started after it has committed
            "recovery_s": None if after is None else round(after["ended"] - span["start"], 2),
            "after_end_s": None if after is None else round(max(0.0, after["ended"] - span["end"]), 2)})
    buckets: dict[int, int] = {}
    for b in batches:
        second = int(b["ended"] - origin)
        buckets[second] = buckets.get(second, 0) + b["records_in"]
    result.throughput = sorted(buckets.items())
    result.job.update({"batches": len(batches), "transactions": sum(b["committed"] for b in batches),
                       "fenced_tasks": sum(b.get("fenced", 0) for b in batches)})
    result.violations = sum(a["violations"] for a in result.audits)
    if result.faults_injected < len(result.schedule):  # a fault that never happened proves nothing
        skipped = sorted({e.get("reason", "") for e in result.timeline if e["phase"] == "skipped"})
        result.reasons.append(f"only {result.faults_injected} of {len(result.schedule)} scheduled faults were "
                              f"injected ({'; '.join(skipped) or 'the run ended first'})")
    result.notes += [f"{e['kind']} at {e['t']:.1f} s struck outside a transaction: {e.get('reason', '')}, so the run "
                     "did not try that kill mid-transaction"
                     for e in result.timeline if e["phase"] == "outside_transaction"]
    sent_all = next((e.get("sent_all") for e in timeline.events if e["kind"] == "load" and e["phase"] == "end"), None)
    result.notes += [_unmeasured(r, None if sent_all is None else sent_all - origin)
                     for r in result.recovery if r["recovery_s"] is None]
    if not result.audits:
        result.reasons.append("no audit ran")
    for audit in result.audits:
        if audit["verdict"] != "PASS":
            result.reasons.append(f"audit ({audit['mode']}) found {audit['violations']} violation(s)")
    result.verdict = "PASS" if not result.reasons else "FAIL"
    (workdir / "report.json").write_text(json.dumps(asdict(result), indent=2, default=str))
    try:
        plot(result, workdir / "timeline.png", origin)
    except Exception as exc:  # a plot must never hide the verdict
        result.reasons.append(f"(plot failed: {exc})")


def plot(result: ChaosResult, path: Path, origin: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(12, 4.5))
    if result.throughput:
        xs, ys = zip(*result.throughput, strict=True)
        ax.bar(xs, ys, width=1.0, color="#4c72b0", alpha=0.8, label="records processed per second (committed)")
    if result.input_rate:
        xs, ys = zip(*result.input_rate, strict=True)
        ax.step(xs, ys, where="post", color="#dd8452", linewidth=1.2, label="input records produced per second")
    colors = plt.get_cmap("tab10")
    kinds = sorted({r["kind"] for r in result.recovery})
    for r in result.recovery:
        color = colors(kinds.index(r["kind"]) % 10)
        ax.axvspan(r["start_s"], r["start_s"] + max(r["duration_s"], 0.4), color=color, alpha=0.25)
        label = r["kind"] + (f" (recovered {r['recovery_s']:.1f}s)" if r["recovery_s"] is not None else "")
        ax.annotate(label, (r["start_s"], 0), xytext=(2, 10), textcoords="offset points", rotation=90,
                    fontsize=7, va="bottom")
    for e in result.timeline:
        if e["kind"] == "job" and e["phase"] in ("start", "exit"):
            ax.axvline(e["t"], color="red" if e["phase"] == "exit" else "green", linewidth=0.8, linestyle=":")
    scenario = result.scenario
    ax.set_title(f"{scenario['name']} (seed {scenario['seed']}): {result.verdict}, {result.violations} violation(s), "
                 f"{result.faults_injected} fault(s), {result.job.get('restarts', 0)} job restart(s)")
    ax.set_xlabel("seconds since start (dotted: job exit red / start green)")
    ax.set_ylabel("records/s")
    if ax.get_legend_handles_labels()[0]:  # (a run that stopped before its load has no curve)
        ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
