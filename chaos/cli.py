"""`eos chaos ...` (plugged into the eos CLI through the `eos.cli` entry point)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from chaos.scenario import Scenario

app = typer.Typer(no_args_is_help=True, help="Chaos and failover tests: faults under load, judged by the auditor.")
console = Console(width=None if sys.stdout.isatty() else 160)  # logs and pipes get whole table rows


@app.command("list")
def list_() -> None:
    """Built-in scenarios (TOML files in chaos/scenarios and the generated failover matrix)."""
    from chaos.scenario import builtin_scenarios

    table = Table("scenario", "job", "records", "brokers", "master", "faults", "description")
    for name, s in builtin_scenarios().items():
        faults = ", ".join(f"{f.count}x {f.kind}" for f in s.faults)
        table.add_row(name, s.job, f"{s.records:,}", str(s.brokers), s.master, faults, s.description)
    console.print(table)


def _print_result(result) -> None:  # type: ignore[no-untyped-def]
    table = Table("fault", "target", "at s", "lasted s", "recovery s")
    for r in result.recovery:
        table.add_row(r["kind"], r["target"], str(r["start_s"]), str(r["duration_s"]),
                      "-" if r["recovery_s"] is None else str(r["recovery_s"]))
    console.print(table)
    for audit in result.audits:
        check = audit.get("lineage") or audit.get("aggregate") or audit.get("window") or audit.get("join") or {}
        counts = {k: v for k, v in check.items() if isinstance(v, int) and not isinstance(v, bool)}
        console.print(f"audit {audit['mode']}: {audit['verdict']} "
                      + (f"(not checked: {audit['skipped']})" if audit.get("skipped") else str(counts)))
    for note in result.notes:
        console.print(f"note: {note}", highlight=False, soft_wrap=True)
    color = "green" if result.verdict == "PASS" else "red"
    console.print(f"[bold {color}]{result.verdict}[/bold {color}] {'; '.join(result.reasons)} — "
                  f"{result.faults_injected} fault(s), {result.job.get('restarts', 0)} job restart(s), "
                  f"{result.duration_s}s; report in {result.workdir}")


def _scenario_or_exit(source: str, **overrides: Any) -> Scenario:
    """A scenario, its job and load of the user's loaded before any cluster starts: one line and exit status 2
    if any of them is wrong."""
    from chaos.harness import own_job
    from chaos.scenario import load_scenario
    from eos.errors import ConfigError

    try:
        s = load_scenario(source).with_overrides(**overrides)
        if s.own_job:
            own_job(s)
    except (ValueError, ConfigError, TypeError) as exc:
        Console(stderr=True).print(f"[red]error[/red]: {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    return s


@app.command()
def run(scenario: str = typer.Argument(..., help="Built-in scenario name or path to a .toml file"),
        seed: int = typer.Option(None, help="Override the scenario's seed"),
        records: int = typer.Option(None, help="Override the number of input records"),
        rate: int = typer.Option(None, help="Override the input rate (records/s)"),
        out: Path = typer.Option(None, help="Directory for the report (default reports/chaos/<name>-seed<seed>)"),
        ) -> None:
    """Run one scenario; exit code 1 if the auditor finds a violation."""
    from chaos.harness import run_scenario

    s = _scenario_or_exit(scenario, seed=seed, records=records, rate=rate)
    result = run_scenario(s, out or Path("reports/chaos") / f"{s.name}-seed{s.seed}")
    _print_result(result)
    raise typer.Exit(0 if result.verdict == "PASS" else 1)


@app.command()
def matrix(repeats: int = typer.Option(5, help="Runs per scenario (seeds from the scenario's, or 1)"),
           scenario: str = typer.Option(None, help="A scenario (.toml or built-in name) whose job to put under "
                                                   "every fault kind: a job of your own, with its load"),
           records: int = typer.Option(None, help="Input records per run (200,000, or the scenario's)"),
           rate: int = typer.Option(None, help="Input records per second (5,000, or the scenario's)"),
           only: str = typer.Option(None, help="Run only scenarios whose name contains this"),
           out: Path = typer.Option(None, help="Report directory (reports/chaos/matrix, or "
                                               "reports/chaos/matrix-<scenario>)"),
           fresh: bool = typer.Option(False, help="Run again even the runs whose reports are already in --out"),
           ) -> None:
    """Every fault kind x {stateless, stateful, windowed}, or x the job of --scenario, repeated; prints the
    table and writes matrix.json."""
    from chaos.matrix import FAULT_SETTINGS, matrix_scenarios, run_matrix

    base = _scenario_or_exit(scenario, records=records, rate=rate) if scenario else None
    seed = base.seed if base is not None else 1
    try:  # (every run's scenario made now: a load too short for a fault of the matrix fails before any runs)
        scenarios = list(matrix_scenarios(records, rate, base, only).values())
        for s in scenarios:
            for repeat in range(1, repeats):
                s.with_overrides(seed=seed + repeat)
    except ValueError as exc:
        Console(stderr=True).print(f"[red]error[/red]: {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    if not scenarios:
        Console(stderr=True).print(f"[red]error[/red]: no scenario of the matrix has {only!r} in its name; "
                                   f"fault kinds: {', '.join(FAULT_SETTINGS)}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    if base is not None and base.faults:
        console.print(f"{base.name}: its own faults are replaced by each fault kind in turn", highlight=False)
    out = out or Path("reports/chaos") / ("matrix" if base is None else f"matrix-{base.name}")

    def progress(s, result, seconds) -> None:  # type: ignore[no-untyped-def]
        console.print(f"{time.strftime('%H:%M:%S')} {s.name} seed {s.seed}: {result.verdict} "
                      f"({result.violations} violations, {result.faults_injected} faults, {seconds:.0f}s)"
                      + (f" {result.reasons}" if result.reasons else "")
                      + "".join(f"; note: {note}" for note in result.notes), soft_wrap=True)

    rows = run_matrix(scenarios, repeats, out, seed=seed, resume=not fresh, on_result=progress)
    table = Table("scenario", "runs", "passed", "records/run", "faults", "violations", "median recovery s",
                  "driver crashes")
    for r in rows:
        table.add_row(r["scenario"], str(r["runs"]), str(r["passed"]), f"{r['records_per_run']:,}",
                      str(r["faults_injected"]), str(r["violations"]), str(r["median_recovery_s"]),
                      ", ".join(map(str, r["driver_crashes"])) or "0")
    console.print(table)
    raise typer.Exit(0 if all(r["passed"] == r["runs"] for r in rows) else 1)
