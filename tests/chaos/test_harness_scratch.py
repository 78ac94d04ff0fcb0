"""The environment the chaos harness gives its job (chaos.harness.scratch_environment): the temporary files of
processes it kills go in the scenario's scratch, which the harness removes, not in /tmp."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from chaos.harness import scratch_environment


@pytest.fixture
def short_path():
    """A directory whose path is short enough for Unix sockets (as the harness's scratch is; pytest's are not)."""
    with tempfile.TemporaryDirectory(prefix="eos-scratch-", dir="/tmp") as directory:
        yield Path(directory)


def test_the_jobs_python_and_every_jvm_it_starts_write_their_temporary_files_in_the_scratch(short_path):
    scratch = short_path / "tmp"
    env = scratch_environment(scratch, {"PATH": "/bin", "TMPDIR": "/var/tmp"})
    assert scratch.is_dir()
    assert env == {"PATH": "/bin", "TMPDIR": str(scratch), "JAVA_TOOL_OPTIONS": f"-Djava.io.tmpdir={scratch}"}


def test_the_callers_jvm_options_are_kept_and_its_own_temporary_directory_stands(short_path):
    env = scratch_environment(short_path, {"JAVA_TOOL_OPTIONS": "-Xss1m"})
    assert env["JAVA_TOOL_OPTIONS"] == f"-Xss1m -Djava.io.tmpdir={short_path}"
    env = scratch_environment(short_path, {"JAVA_TOOL_OPTIONS": "-Djava.io.tmpdir=/data/tmp"})
    assert env["JAVA_TOOL_OPTIONS"] == "-Djava.io.tmpdir=/data/tmp" and env["TMPDIR"] == str(short_path)


def test_a_directory_too_long_for_the_drivers_unix_sockets_leaves_the_jvms_their_own(tmp_path):
    scratch = tmp_path / ("d" * 80)
    env = scratch_environment(scratch, {"JAVA_TOOL_OPTIONS": "-Xss1m"})
    assert env == {"JAVA_TOOL_OPTIONS": "-Xss1m", "TMPDIR": str(scratch)}
