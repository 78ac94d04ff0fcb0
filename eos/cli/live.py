"""What `eos run` shows on a terminal while the job runs: one table, redrawn after every batch, with the
records each sub-topology committed, its rate over the last batches, the input lag, dead letters,
records dropped as late, transactions and commit latency. Log lines scroll above it."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

__all__ = ["LiveView"]


class LiveView:
    def __init__(self, application_id: str, console: Console | None = None) -> None:
        self.application_id = application_id
        self.console = console or Console(stderr=True)
        self.totals: dict[str, dict[str, float]] = {}
        self.recent: deque[tuple[float, int]] = deque(maxlen=10)  # (time, records in) of the last batches
        self.batches = self.lag = self.standby_lag = 0
        self.started = time.monotonic()
        self._live: Live | None = None

    def __enter__(self) -> LiveView:
        # redirect_stderr: log lines written to sys.stderr from now on print above the table
        self._live = Live(self.render(), console=self.console, refresh_per_second=4, redirect_stderr=True,
                          transient=False)
        self._live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)

    def on_batch(self, report: Any, results: list[Any]) -> None:
        self.batches += 1
        self.lag, self.standby_lag = report.input_lag, report.max_standby_lag
        self.recent.append((time.monotonic(), report.records_in))
        for r in results:
            row = self.totals.setdefault(r.task.subtopology, {"in": 0, "out": 0, "dlq": 0, "late": 0, "txn": 0,
                                                              "commit_ms": 0.0})
            if r.status.value != "committed":
                continue
            row["in"] += r.records_in
            row["out"] += r.records_out
            row["dlq"] += r.dead_letters
            row["late"] += r.dropped.get("late", 0)
            row["txn"] += 1
            row["commit_ms"] = max(row["commit_ms"] * 0.8, r.commit_ms)  # a decaying maximum
        if self._live is not None:
            self._live.update(self.render())

    def rate(self) -> float:
        if len(self.recent) < 2:
            return 0.0
        span = self.recent[-1][0] - self.recent[0][0]
        return sum(n for _, n in list(self.recent)[1:]) / span if span > 0 else 0.0

    def render(self) -> Group:
        table = Table(title=f"{self.application_id}: batch {self.batches}, "
                            f"{time.monotonic() - self.started:,.0f} s", title_justify="left")
        for column in ("sub-topology", "records in", "records out", "dead letters", "late (dropped)", "transactions",
                       "commit ms"):
            table.add_column(column, justify="left" if column == "sub-topology" else "right")
        for name, row in sorted(self.totals.items()):
            late = Text(f"{row['late']:,.0f}", style="bold yellow" if row["late"] else "")
            table.add_row(name, f"{row['in']:,.0f}", f"{row['out']:,.0f}", f"{row['dlq']:,.0f}", late,
                          f"{row['txn']:,.0f}", f"{row['commit_ms']:,.0f}")
        footer = Text(f"input lag {self.lag:,} records · {self.rate():,.0f} records/s · "
                      f"standby lag {self.standby_lag:,}", style="dim")
        return Group(table, footer)
