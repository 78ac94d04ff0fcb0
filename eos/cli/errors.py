"""One way for every command to fail: one line on stderr, and an exit status."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console

__all__ = ["fail"]

_stderr = Console(stderr=True)


def fail(code: int, message: str) -> NoReturn:
    _stderr.print(f"[red]error[/red]: {message}", highlight=False, soft_wrap=True, markup=True)
    raise typer.Exit(code)
