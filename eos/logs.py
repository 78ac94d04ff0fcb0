"""structlog set-up. Called by entry points (the CLI, the driver runner, Spark task code), never at import.

JSON lines when the stream is not a TTY, readable console output when it is. The driver binds the
application, and task code binds application, task, batch and attempt, through structlog's contextvars
(`structlog.contextvars.bound_contextvars`), so every line names them; modules log through
`structlog.get_logger(__name__)`.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Literal

import structlog

__all__ = ["configure_logging", "reset_logging"]

_configured: tuple[str, str] | None = None


def configure_logging(fmt: Literal["auto", "json", "console"] = "auto", level: str = "INFO", *,
                      stream: Any = None) -> None:
    """Idempotent for the same arguments."""
    global _configured
    if _configured == (fmt, level) and stream is None:
        return
    stream = stream or sys.stderr
    use_json = fmt == "json" or (fmt == "auto" and not getattr(stream, "isatty", lambda: False)())
    renderer: Any = structlog.processors.JSONRenderer() if use_json else structlog.dev.ConsoleRenderer(colors=False)
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



def reset_logging() -> None:
    """Forget this process's set-up: a process forked from a configured one (the daemon's zygote, forked from
    the driver) starts as one never configured, and its first `configure_logging` applies in full."""
    global _configured
    _configured = None
    structlog.reset_defaults()
