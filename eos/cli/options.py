"""Options shared by several commands, and where the bootstrap servers come from.

Precedence, the same everywhere (and in `Application`): the `--bootstrap-servers` flag, then the job's
own `bootstrap_servers` (for commands that load a job), then $EOS_BOOTSTRAP_SERVERS.
"""

from __future__ import annotations

import os
from typing import Any

import typer

__all__ = ["bootstrap_option", "resolve_bootstrap"]


def bootstrap_option() -> Any:
    return typer.Option(None, "--bootstrap-servers", "-b", show_default=False,
                        help="Kafka bootstrap servers [default: the job's own setting, then $EOS_BOOTSTRAP_SERVERS]")


def resolve_bootstrap(flag: str | None, job_setting: str | None = None) -> str:
    return flag or job_setting or os.environ.get("EOS_BOOTSTRAP_SERVERS", "")
