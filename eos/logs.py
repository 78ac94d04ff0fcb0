"""structlog set-up. Called by entry points (the CLI, the driver runner, Spark task code), never at import.

JSON lines when the stream is not a TTY, readable console output when it is. Task code binds
application, task, batch and attempt, so every line of a task names them.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Literal

import structlog

__all__ = ["configure_logging", "get_logger"]

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


def get_logger(name: str, **context: Any) -> Any:
    return structlog.get_logger(name).bind(**context)
