"""The `eos` command line. The application's entry point: the only place that configures logging.

`main` starts `eos run` with PySpark's string hashing before anything is imported (`_hash_as_pyspark_workers`),
then launches Spark's JVM (`_launch_jvm`); the commands themselves are in `eos.cli.app`.
"""

from __future__ import annotations

import os
import sys
from typing import Literal

__all__ = ["main", "launch_options", "log_format", "key_values"]


def main() -> None:
    if sys.argv[1:2] == ["run"]:
        _hash_as_pyspark_workers()
        _launch_jvm(sys.argv[2:])
    from eos.cli.app import main as commands

    commands()


def _hash_as_pyspark_workers() -> None:
    """`eos run` hashes strings as PySpark's Python workers do (PYTHONHASHSEED=0, which PySpark gives them), so
    that the daemon's zygote can be a fork of the driver (`eos.driver.spark.fork_zygote_early`). Started
    without a seed, it starts again in this process with that one, before importing anything (~40 ms). A seed
    set in the environment is the user's to keep (the zygote is then started as its own process)."""
    if "PYTHONHASHSEED" in os.environ or not sys.platform.startswith("linux"):
        return
    os.execve(sys.executable, sys.orig_argv, {**os.environ, "PYTHONHASHSEED": "0"})


def log_format(value: str | None) -> Literal["auto", "json", "console"]:
    """`--log-format`'s value as logging takes it (anything else is "auto" until the job's configuration, which
    checks it, is loaded)."""
    return "json" if value == "json" else "console" if value == "console" else "auto"


def key_values(items: list[str]) -> dict[str, str]:
    """`key=value` options (`--spark-conf`, `--config`) as a dict (an item without `=` is none)."""
    return dict(item.split("=", 1) for item in items if "=" in item)


#: `eos run`'s options that the launch of Spark's JVM depends on
_LAUNCH_OPTIONS = ("--master", "--spark-conf", "--log-format")


def launch_options(args: list[str]) -> dict[str, list[str]] | None:
    """The values of `_LAUNCH_OPTIONS` among `eos run`'s arguments `args` (`--name value` or `--name=value`, each
    name's in order); None when they cannot be told without the command's own parser (`--help`, a name with
    no value after it)."""
    if "--help" in args:
        return None
    given: dict[str, list[str]] = {}
    items = iter(args)
    for arg in items:
        if arg == "--":
            break
        name, eq, value = arg.partition("=")
        if name in _LAUNCH_OPTIONS:
            following = value if eq else next(items, None)
            if following is None:
                return None
            given.setdefault(name, []).append(following)
    return given


def _launch_jvm(args: list[str]) -> None:
    """`eos run` launches Spark's JVM first (`eos.driver.spark.launch_jvm_early`), from the options it depends on,
    read here before the command line's modules are imported (~0.3 s that the JVM's start then overlaps), and
    before structlog is imported (~0.15 s more: what the launch logs is held until logging is configured). What
    cannot be read here is left to the `run` command, which launches it then; and a JVM launched for other
    settings than the ones the command settles on is not used (the context checks)."""
    given = launch_options(args)
    if given is None:
        return
    from eos.driver.spark import launch_jvm_early, resolve_master
    from eos.errors import ConfigError
    from eos.logs import configure_logging, hold_logs

    hold_logs()  # (structlog is imported, and logging configured, once the JVM is launched)
    try:
        launch_jvm_early(resolve_master(given["--master"][-1] if "--master" in given else None),
                         key_values(given.get("--spark-conf", [])))
    except ConfigError:
        pass  # (the command says what is wrong)
    finally:
        configure_logging(log_format(given.get("--log-format", ["auto"])[-1]))
