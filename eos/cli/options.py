"""Options shared by several commands, and where the bootstrap servers come from.

Precedence, the same everywhere (and in `Application`): the `--bootstrap-servers` flag, then the job's
own `bootstrap_servers` (for commands that load a job), then $EOS_BOOTSTRAP_SERVERS.
"""

from __future__ import annotations

import os
from typing import Any

import typer

__all__ = ["bootstrap_option", "registry_option", "resolve_bootstrap", "require_reachable"]


def bootstrap_option() -> Any:
    return typer.Option(None, "--bootstrap-servers", "-b", show_default=False,
                        help="Kafka bootstrap servers [default: the job's own setting, then $EOS_BOOTSTRAP_SERVERS]")


def registry_option() -> Any:
    return typer.Option(None, "--schema-registry-url", show_default=False,
                        help="The Schema Registry of the job's registry serdes [default: the job's own setting]")


def resolve_bootstrap(flag: str | None, job_setting: str | None = None) -> str:
    return flag or job_setting or os.environ.get("EOS_BOOTSTRAP_SERVERS", "")


def require_reachable(bootstrap_servers: str) -> str:
    """The bootstrap servers, checked before a command talks to Kafka: none given, or none answering within
    10 s, ends the command with one line (exit status 2) instead of minutes of client retries."""
    from eos.cli.errors import fail
    from transactions import BrokerUnreachableError, check_reachable

    if not bootstrap_servers:
        fail(2, "no bootstrap servers: pass --bootstrap-servers or set EOS_BOOTSTRAP_SERVERS "
                "(`eval \"$(eos cluster env)\"` for a local cluster)")
    try:
        check_reachable(bootstrap_servers)
    except BrokerUnreachableError as exc:
        fail(2, f"{exc}. For a local cluster run `eos cluster up` and `eval \"$(eos cluster env)\"`.")
    return bootstrap_servers
