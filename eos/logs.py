"""structlog set-up. Called by entry points (the CLI, the driver runner, Spark task code), never at import.

JSON lines when the stream is not a TTY, readable console output when it is. The driver binds the
application, and task code binds application, task, batch and attempt, through structlog's contextvars
(`structlog.contextvars.bound_contextvars`), so every line names them; modules log through
`structlog.get_logger(__name__)`. The modules `eos run` imports before it launches Spark's JVM (eos.driver.spark,
eos.driver.classdata) log through `logger(__name__)` instead: importing structlog (~0.15 s, with what it imports)
waits until the JVM has been launched, and what the launch logs is held until logging is configured
(`hold_logs`).
"""

from __future__ import annotations

import logging
import sys
from functools import partialmethod
from typing import Any, Literal

__all__ = ["configure_logging", "reset_logging", "logger", "hold_logs"]

_configured: tuple[str, str] | None = None
#: what was logged through `logger` since `hold_logs`, until `configure_logging`: (name, level, event, fields)
_held: list[tuple[str, str, str, dict[str, Any]]] | None = None


class _HeldLogger:
    """Stands for structlog's logger `name` while logs are held: keeps each line for `configure_logging`."""

    def __init__(self, name: str, held: list[tuple[str, str, str, dict[str, Any]]]) -> None:
        self._name, self._held = name, held

    def _keep(self, level: str, event: str, **fields: Any) -> None:
        self._held.append((self._name, level, event, fields))

    debug = partialmethod(_keep, "debug")
    info = partialmethod(_keep, "info")
    warning = partialmethod(_keep, "warning")
    error = partialmethod(_keep, "error")


def logger(name: str) -> Any:
    """structlog's logger `name` (`structlog.get_logger`), structlog imported only when asked for; while logs
    are held (`hold_logs`), a stand-in that keeps what is logged until logging is configured."""
    if _held is not None:
        return _HeldLogger(name, _held)
    import structlog

    return structlog.get_logger(name)


def hold_logs() -> None:
    """Hold what is logged through `logger` until the next `configure_logging`, which logs it then, in the
    format and at the level configured (`eos run` launches Spark's JVM before it imports structlog and reads
    how to log; a line the launch logs, such as a missing class-data archive, comes out as the run's lines)."""
    global _held
    if _held is None:
        _held = []


def configure_logging(fmt: Literal["auto", "json", "console"] = "auto", level: str = "INFO", *,
                      stream: Any = None) -> None:
    """Idempotent for the same arguments. Then logs what was held (`hold_logs`)."""
    global _configured, _held
    import structlog

    held, _held = _held or [], None
    if _configured != (fmt, level) or stream is not None:
        stream = stream or sys.stderr
        use_json = fmt == "json" or (fmt == "auto" and not getattr(stream, "isatty", lambda: False)())
        renderer: Any = (structlog.processors.JSONRenderer() if use_json
                         else structlog.dev.ConsoleRenderer(colors=False))
        structlog.configure(
            processors=[
                structlog.contextvars.merge_contextvars,
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                structlog.processors.format_exc_info,
                renderer,
            ],
            wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
            logger_factory=structlog.PrintLoggerFactory(stream),
            cache_logger_on_first_use=False,
        )
        _configured = (fmt, level)
    for name, level_name, event, fields in held:
        getattr(structlog.get_logger(name), level_name)(event, **fields)


def reset_logging() -> None:
    """Forget this process's set-up: a process forked from a configured one (the daemon's zygote, forked from
    the driver) starts as one never configured, and its first `configure_logging` applies in full."""
    global _configured
    _configured = None
    import structlog

    structlog.reset_defaults()
