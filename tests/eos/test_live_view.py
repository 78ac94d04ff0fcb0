"""The terminal view of a running job: totals per sub-topology, input lag and rate from the batch reports."""

from __future__ import annotations

import io

from rich.console import Console

from eos.cli.live import LiveView
from eos.driver.reports import BatchReport
from eos.topology import TaskId
from eos.worker.plans import TaskResult, TaskStatus


def result(sub: str, records: int, status: TaskStatus = TaskStatus.COMMITTED) -> TaskResult:
    return TaskResult(TaskId(sub, 0), 0, status, records_in=records, records_out=records, commit_ms=12.0)


def test_the_view_sums_committed_work_per_subtopology_and_shows_the_lag():
    out = io.StringIO()
    view = LiveView("shop", Console(file=out, width=120, force_terminal=False))
    for batch in range(3):
        report = BatchReport.of(batch, 0.0, 0.1, [result("enrich", 100), result("totals", 50)])
        report.input_lag = 1_000 - 300 * batch
        view.on_batch(report, [result("enrich", 100), result("totals", 50), result("totals", 7, TaskStatus.FENCED)])
    view.console.print(view.render())
    text = out.getvalue()
    assert "batch 3" in text and "input lag 400 records" in text
    enrich = next(line for line in text.splitlines() if "enrich" in line)
    assert "300" in enrich and enrich.count("3") >= 2  # 300 in, 300 out, 3 transactions
    totals = next(line for line in text.splitlines() if "totals" in line)
    assert "150" in totals  # the fenced attempt's 7 records are not counted
