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


def test_the_wide_job_commits_its_64_tasks_in_two_transactions_as_kafka_streams_two_threads(monkeypatch):
    assert settings(monkeypatch, "eos", "stateless64") == {"tasks_per_transaction": 32}
    assert settings(monkeypatch, "eos", "stateless") == {}
    assert settings(monkeypatch, "eos-cache", "count") == {"cache_max_bytes": 10 * 1024 * 1024 // 4}
    # what --eos-settings tries wins
    assert settings(monkeypatch, "eos", "stateless64", {"tasks_per_transaction": 8}) == {"tasks_per_transaction": 8}
    assert settings(monkeypatch, "eos", "stateless", {"max_records_per_batch": 10}) == {"max_records_per_batch": 10}
