"""Audit reports for people (a rich table with samples) and machines (JSON)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from eos.audit.auditor import AuditReport

__all__ = ["render", "write_json"]

_ROWS = {
    "lineage": [("expected", "committed input records", False), ("output_records", "output records", False),
                ("unique_origins", "distinct origins in output", False), ("dead_lettered", "dead-lettered", False),
                ("duplicates", "duplicates", True), ("lost", "lost", True), ("unexpected", "unexpected", True),
                ("index_gaps", "1-to-n index gaps", True),
                ("output_and_dead_lettered", "both output and dead-lettered", True),
                ("order_violations", "out of input order", True),
                ("aborted_visible", "aborted/open records read as output", True),
                ("overlapping_batches", "offsets in two committed batches (ledger)", True),
                ("filtered_but_output", "filtered, yet with output (ledger)", True),
                ("filtered", "filtered by the job (ledger)", False),
                ("held", "of those, held back without output yet (ledger)", False),
                ("input_deleted", "output of input since deleted by retention", False),
                ("earlier_topic", "output of an earlier topic of the same name", False),
                ("no_longer_read", "output of a topic no longer read (deleted, or taken out of the job)", False),
                ("skipped_by_retention", "input deleted by retention before processing", False),
                ("not_read", "input before where the job started (auto_offset_reset, eos reset)", False),
                ("other_dead_letters", "dead letters of other sub-topologies", False),
                ("written_by_others", "written by others to an output the step reads (its input)", False),
                ("other_steps", "outputs of the job's other steps to the same topic (their audits')", False),
                ("derived", "derived outputs (punctuation, final window results)", False),
                ("derived_duplicates", "derived outputs committed twice", True)],
    "window": [("input_records", "input records", False), ("late_records", "late records (dropped)", False),
               ("late_at_source", "of those, late at their source partition (the rest: by re-keying)", False),
               ("dead_letters", "dead-lettered input records (left out)", False),
               ("windows_expected", "windows expected", False), ("output_records", "output records", False),
               ("wrong_values", "wrong results", True), ("missing", "missing windows", True),
               ("duplicates", "duplicate results", True), ("unexpected", "unexpected windows", True),
               ("premature", "results of windows not closed yet", True),
               ("sequence_mismatches", "update sequences that differ", True)],
    "aggregate": [("input_records", "input records", False), ("output_records", "output records", False),
                  ("keys_expected", "keys expected", False), ("keys_observed", "keys observed", False),
                  ("wrong_final", "wrong final value", True), ("sequence_mismatches", "repeated/skipped steps", True),
                  ("missing_keys", "missing keys", True), ("unexpected_keys", "unexpected keys", True)],
    "join": [("input_records", "input records", False), ("late_records", "late records (dropped)", False),
             ("dead_letters", "dead-lettered inputs (left out)", False),
             ("expected", "results expected (stream records, pairs, keys)", False),
             ("output_records", "output records", False),
             ("bounded", "records bounded by the table their batch had read", False),
             ("wrong_values", "results no replay explains", True),
             ("missing", "missing results", True), ("unexpected", "unexpected or repeated results", True)],
}


#: The window audit's rows where the results were changed on their way to the topic (counted as records)
_CHANGED: dict[str, str | None] = {
    "missing": "missing results (wrong ones among them)", "unexpected": "unexpected, repeated or wrong results",
    "wrong_values": None, "duplicates": None, "premature": None, "sequence_mismatches": None}

#: Counts shown even when zero; other accounted-for counts appear only when something was accounted for.
_ALWAYS = {"expected", "output_records", "unique_origins", "dead_lettered", "input_records", "keys_expected",
           "keys_observed", "windows_expected", "late_records"}


#: The joins whose results the ledger's batches bound (`eos.audit.joins.TableReads`, `GlobalReads`): 0 there
#: says it did not
_BOUNDED_KINDS = {"stream-table", "stream-global", "table-table"}

#: Lineage checks an audit can leave out, the result's flag saying it ran, and why it would not
_UNCHECKED = {"order_violations": ("order_checked", "behind a repartition topic, where order holds per partition "
                                                   "of it only"),
              "index_gaps": ("runs_checked", "a step writes both a repartition topic and an output, and the "
                                             "job's ledger was not found: the indices of a record's outputs skip "
                                             "those of its records there")}


def render(report: AuditReport, console: Console | None = None) -> None:
    console = console or Console()
    flow = f"{', '.join(report.inputs)} -> {', '.join(report.outputs)}"
    if report.skipped and not report.offsets.partitions:  # nothing was read: no table of zeros
        console.print(f"exactly-once audit ({report.mode}): {flow}", soft_wrap=True)
        console.print(f"[bold yellow]not checked[/bold yellow]: {report.skipped}", soft_wrap=True)
        return
    table = Table(title=f"exactly-once audit ({report.mode}): {flow}")
    table.add_column("check")
    table.add_column("count", justify="right")
    table.add_column("", justify="center")
    check: Any = report.lineage or report.aggregate or report.window or report.join
    left_out = []
    relabel = _CHANGED if report.window is not None and report.window.changed else {}
    for attr, row, is_violation in _ROWS[report.mode]:
        label = relabel.get(attr, row)
        if label is None:  # (a check of windows, counted among the records above)
            continue
        value = getattr(check, attr)
        flag, why = _UNCHECKED.get(attr, ("", ""))
        if flag and not getattr(check, flag):
            table.add_row(label, "-", "[yellow]not checked[/yellow]")
            left_out.append(f"{label}: {why}")
        elif value or is_violation or attr in _ALWAYS or (attr == "bounded" and check.kind in _BOUNDED_KINDS):
            table.add_row(label, f"{value:,}", _mark(value, is_violation))
    if report.before_reset:
        table.add_row("output offsets before the last eos reset (not this run's: left out)",
                      f"{report.before_reset:,}", "")
    if report.lineage is not None:
        table.add_row("lineage ledger", "read" if report.lineage.ledger else "not found (filtering counts as lost)", "")
    table.add_row("open transactions (LSO < HW)", f"{report.transactions.open_transactions}",
                  _mark(report.transactions.open_transactions, True))
    if report.group:
        table.add_row("input partitions committed", f"{report.offsets.committed}/{report.offsets.partitions}", "")
        table.add_row("input lag (offsets)", f"{report.offsets.lag:,}", "")
        table.add_row("committed beyond end", str(report.offsets.beyond_end), _mark(report.offsets.beyond_end, True))
    console.print(table)
    for kind, items in (check.samples if check else {}).items():
        console.print(f"[bold]{kind}[/bold] (first {len(items)}):")
        for item in items:
            console.print("  " + ", ".join(f"{k}={v}" for k, v in item.items()))
    for item in report.transactions.samples:
        console.print("  open transaction: " + ", ".join(f"{k}={v}" for k, v in item.items()))
    for line in left_out:
        console.print(f"[yellow]not checked[/yellow]: {line}", soft_wrap=True)
    if relabel:
        console.print("results changed on their way to the topic: each expected one changed alike, every record "
                      "then counted once (not checked: the order of a window's updates, which a record no longer "
                      "says)", soft_wrap=True)
    if report.skipped:
        console.print(f"[bold yellow]not checked[/bold yellow]: {report.skipped}", soft_wrap=True)
    color = "green" if report.verdict == "PASS" else "red"
    console.print(f"[bold {color}]{report.verdict}[/bold {color}]: {report.violations} violation(s) "
                  f"in {report.duration_s:.1f}s")


def _mark(value: int, is_violation: bool) -> str:
    if not is_violation:
        return ""
    return "[green]ok[/green]" if value == 0 else "[red]FAIL[/red]"


def write_json(report: AuditReport, path: str | Path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(report.to_dict(), indent=2, default=_default))


def _default(obj: Any) -> Any:
    return str(obj)
