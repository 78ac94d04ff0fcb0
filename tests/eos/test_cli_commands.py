"""`eos`'s commands are added to the command line as asked for: a framework command imports its own module
only (not the local cluster's tooling, the auditor, or the layers plugged in above), and anything else lists
every command, the plugged-in ones too; no command imports pydantic (typer 0.29's per-option adapters cost
every command ~0.2 CPU-s)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eos.cli.app import COMMANDS

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
import typer.main
from eos.cli.app import app, register_commands
register_commands(sys.argv[1:])
command = typer.main.get_command(app)
listed = sorted(command.list_commands(None))
if sys.argv[1:2] == ["describe"]:
    command.main(sys.argv[1:], standalone_mode=False)  # parsed and run, its options coerced
print(json.dumps({"commands": listed,
                  "modules": sorted(m for m in ("localkafka", "chaos", "eos.cli.audit", "pydantic", "eos.cli.commands")
                                    if m in sys.modules)}))
"""


def registered(*argv: str) -> dict[str, list[str]]:
    out = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=True,
                         cwd=ROOT).stdout
    return json.loads(out.splitlines()[-1])


@pytest.mark.parametrize("argv", [("run", "job.py"), ("describe", "eos/examples/orders.py")])
def test_a_job_command_imports_its_module_only(argv):
    seen = registered(*argv)
    assert seen["modules"] == ["eos.cli.commands"], seen
    assert {"run", "describe", "demo", "package", "kafka", "spark"} <= set(seen["commands"]), seen
    assert not {"cluster", "audit", "topics", "store", "reset", "chaos"} & set(seen["commands"]), seen


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_is_found_by_its_name_when_registered_alone(name):
    # (an app of one command and no callback would be that command: `eos reset job.py` once took "reset" for
    # its argument)
    assert name in registered(name, "x")["commands"]


def test_the_only_command_of_its_module_is_still_a_command():
    shown = subprocess.run([sys.executable, "-m", "eos.cli", "reset", "--help"], capture_output=True, text=True,
                           cwd=ROOT, env={**os.environ, "COLUMNS": "200"})
    assert shown.returncode == 0 and "eos.cli reset [OPTIONS]" in shown.stdout, shown.stdout + shown.stderr


@pytest.mark.parametrize("argv", [(), ("--help",), ("chaos", "soak"), ("rnu",)])
def test_anything_else_lists_every_command_with_those_plugged_in(argv):
    seen = registered(*argv)
    # every command of the framework's is in COMMANDS (else asking for it imports every module), and chaos plugs in
    assert set(seen["commands"]) == set(COMMANDS) | {"chaos"}, seen
    assert "pydantic" not in seen["modules"], seen


def test_a_mistyped_command_is_told_the_name_it_may_mean():
    done = subprocess.run([sys.executable, "-m", "eos.cli", "rnu"], capture_output=True, text=True)
    assert done.returncode == 2 and "Did you mean 'run'?" in done.stderr, done.stderr


@pytest.mark.parametrize("argv,phrase", [((), "sink topics, in the layout of Kafka Streams'"),
                                         (("audit",), "changelog topics and its lineage ledger. Each sub-topology")])
def test_a_group_lists_its_commands_with_their_help_on_one_line(argv, phrase):
    # (typer lists a command's first paragraph with its docstring's line breaks unless given a short help)
    shown = subprocess.run([sys.executable, "-m", "eos.cli", *argv, "--help"], capture_output=True, text=True,
                           cwd=ROOT, env={**os.environ, "COLUMNS": "400"})
    assert shown.returncode == 0 and phrase in shown.stdout, shown.stdout + shown.stderr


def test_topics_read_shows_each_serde_s_values_as_text():
    from decimal import Decimal

    from eos.cli.topics import _show
    from eos.serde import serde_for

    shown = {name: _show(serde_for(name), serde_for(name).serialize(value)) for name, value in [
        ("decimal", Decimal("12.30")), ("long", 7), ("json", {"a": [1, None]}), ("string", "é")]}
    assert shown == {"decimal": "12.30", "long": "7", "json": '{"a": [1, null]}', "string": "é"}
    assert _show(serde_for("long"), b"\x01") == "\x01" and _show(serde_for("decimal"), None) == "null"
