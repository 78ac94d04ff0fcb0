"""The `eos` command line. The application's entry point: the only place that configures logging.

`main` starts `eos run` with PySpark's string hashing before anything is imported (`_hash_as_pyspark_workers`);
the commands themselves are in `eos.cli.app`.
"""

from __future__ import annotations

import os
import sys

__all__ = ["main"]


def main() -> None:
    if sys.argv[1:2] == ["run"]:
        _hash_as_pyspark_workers()
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
