"""The timeline of a chaos run: fault starts and ends, job starts and exits, in wall-clock time."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["Timeline"]


class Timeline:
    def __init__(self) -> None:
        self.started = time.time()
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def record(self, kind: str, phase: str, target: str = "", **detail: Any) -> dict[str, Any]:
        event = {"wall": time.time(), "t": round(time.time() - self.started, 3), "kind": kind, "phase": phase,
                 "target": target, **detail}
        with self._lock:
            self.events.append(event)
        return event

    @contextmanager
    def span(self, kind: str, target: str) -> Iterator[None]:
        self.record(kind, "start", target)
        try:
            yield
        finally:
            self.record(kind, "end", target)

    def skip(self, kind: str, reason: str) -> str:
        self.record(kind, "skipped", reason=reason)
        return f"skipped: {reason}"

    def spans(self, kinds: set[str] | None = None) -> list[dict[str, Any]]:
        """Completed faults as {kind, target, start, end} (wall-clock)."""
        open_: dict[tuple[str, str], float] = {}
        out = []
        for e in self.events:
            if kinds is not None and e["kind"] not in kinds:
                continue
            key = (e["kind"], e["target"])
            if e["phase"] == "start":
                open_[key] = e["wall"]
            elif e["phase"] == "end" and key in open_:
                out.append({"kind": e["kind"], "target": e["target"], "start": open_.pop(key), "end": e["wall"]})
        return out
