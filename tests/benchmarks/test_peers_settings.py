"""The settings the peers benchmark gives this framework's runs (`benchmarks.peers.command`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.peers.__main__ import command


def settings(monkeypatch: pytest.MonkeyPatch, peer: str, job: str, tried: dict | None = None) -> dict:
    if tried is None:
        monkeypatch.delenv("PEER_SETTINGS", raising=False)
    else:
        monkeypatch.setenv("PEER_SETTINGS", json.dumps(tried))
    _, env = command(peer, job, "b:9092", "in", "out", "g", Path("/tmp"), ["java"], None)
    return json.loads(env["PEER_SETTINGS"])


def test_the_framework_runs_with_its_defaults_but_for_the_cache_and_what_is_tried(monkeypatch):
    """The wide job keeps the default tasks_per_transaction ("auto": units of 32 on two task slots, as Kafka
    Streams' two threads commit their 64 tasks in two transactions; tests/eos/test_planner.py)."""
    assert settings(monkeypatch, "eos", "stateless64") == {}
    assert settings(monkeypatch, "eos", "stateless") == {}
    assert settings(monkeypatch, "eos-cache", "count") == {"cache_max_bytes": 10 * 1024 * 1024 // 4}
    # what --eos-settings tries wins
    assert settings(monkeypatch, "eos", "stateless64", {"tasks_per_transaction": 8}) == {"tasks_per_transaction": 8}
    assert settings(monkeypatch, "eos", "stateless", {"max_records_per_batch": 10}) == {"max_records_per_batch": 10}


def test_the_framework_s_runs_import_this_checkout_whatever_is_installed(monkeypatch, tmp_path):
    """`eos run` starts in a scratch directory: without the checkout first on its path, it imported the `eos` of
    whatever checkout the interpreter's environment had installed, and the benchmark measured that one's code."""
    import subprocess
    import sys

    import eos

    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    (tmp_path / "eos").mkdir()
    (tmp_path / "eos" / "__init__.py").write_text("raise ImportError('another checkout')")
    cmd, env = command("eos", "stateless", "b:9092", "in", "out", "g", tmp_path, ["java"], None)
    assert cmd[:3] == [sys.executable, "-m", "eos.cli"]
    found = subprocess.run([sys.executable, "-c", "import eos; print(eos.__file__)"], env=env, cwd=tmp_path / "eos",
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(found) == Path(eos.__file__).resolve()


@pytest.mark.parametrize("tried, interval", [(None, 1.0), ({"trigger_interval": 2.0}, 2.0)])
def test_the_framework_s_job_triggers_every_second_unless_a_trigger_interval_is_tried(monkeypatch, tmp_path, tried,
                                                                                     interval):
    """The job's own trigger interval (Kafka Streams' commit.interval.ms of 1,000 beside it) was passed beside
    the tried settings, and trying another raised a TypeError for a keyword given twice."""
    import runpy

    for name, value in {"PEER_APP": "peer-settings", "PEER_STATE": str(tmp_path), "PEER_JOB": "stateless",
                        "PEER_INPUT": "in", "PEER_OUTPUT": "out"}.items():
        monkeypatch.setenv(name, value)
    if tried is None:
        monkeypatch.delenv("PEER_SETTINGS", raising=False)
    else:
        monkeypatch.setenv("PEER_SETTINGS", json.dumps(tried))
    app = runpy.run_path(str(Path(__file__).parents[2] / "benchmarks" / "peers" / "eos_job.py"))["app"]
    assert app.config.trigger_interval == interval


def test_a_peer_that_exited_on_its_own_is_not_stopped_again(tmp_path):
    """Stopping the process group of a peer that had exited and been reaped raised ProcessLookupError, which
    hid the peer's own error (its exit code and log)."""
    import sys

    from benchmarks.peers.__main__ import launched

    with launched([sys.executable, "-c", "pass"], {}, tmp_path) as proc:
        assert proc.wait(30) == 0
