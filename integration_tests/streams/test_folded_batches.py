"""Folded batches (eos.worker.folding) on the broker and Spark: a count that is the first step of its
sub-topology and a sum behind a filter and a map_values, so both steps' batches are folded in one loop,
with a record cache small enough that folds stop where it would evict, and without a cache (each update
an output); bad records of every kind.
The job is SIGKILLed three times (at least once inside a transaction) and restarted until caught up, then
a second wave of input runs on the restored state. Each key's committed counts and sums are values its
aggregate had, in order, once each, ending with the reference's (without a cache: all of them); every bad
record is a dead letter once; the run reports folded records; and `audit_application` says PASS, then
FAIL once a broken writer commits a count a second time."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter

import pytest

from eos.audit import audit_application
from eos.audit.aggregate import is_history
from integration_tests.helpers import produce
from integration_tests.streams.test_fused_topology import commit_copy, load_job, run_killed_then_caught_up
from integration_tests.streams.test_time_and_rekey import committed_records

JOB = """
import os
from eos import Application
from eos.testing import MarkWhile

app = Application(os.environ["APP"], max_records_per_batch=400, trigger_interval=0.0,
                  cache_max_bytes=int(os.environ["CACHE"]), log_format="json",
                  log_level=os.environ.get("LEVEL", "WARNING"), state_dir=os.environ["STATE"])

app.stream(os.environ["ORDERS"], value_serde="bytes").group_by_key().count(name="counts").to_stream().to(
    os.environ["COUNTS"])
(app.stream(os.environ["ORDERS"], name="amounts")
    .filter(lambda key, order: order is None or order["qty"] != 3, name="not-three")
    .map_values(lambda order: None if order is None else order["qty"] * 2, name="doubled")
    .group_by_key().sum(lambda qty: qty, name="qty").to_stream().to(os.environ["QTY"]))
if os.environ.get("MARKS"):
    app.fault_hooks.on("before_commit", MarkWhile(os.environ["MARKS"], seconds=0.3))
"""

PARTITIONS, KEYS = 2, 80


def wave(rng: random.Random, start: int, n: int) -> list[tuple[bytes | None, bytes | None]]:
    """Orders on hot and cold keys, with keyless ones, tombstones, values that are not JSON and quantities
    that are not numbers."""
    out: list[tuple[bytes | None, bytes | None]] = []
    for i in range(start, start + n):
        key: bytes | None = f"k{int(rng.paretovariate(1.0)) % KEYS}".encode()
        value: bytes | None = json.dumps({"id": i, "qty": rng.randrange(1, 6)}).encode()
        r = rng.random()
        if r < 0.01:
            key = None
        elif r < 0.02:
            value = None
        elif r < 0.03:
            value = b"{not json"
        elif r < 0.04:
            value = json.dumps({"id": i, "qty": "two"}).encode()
        out.append((key, value))
    return out


def references(orders: list[tuple[bytes | None, bytes | None]]) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """Each key's running count (of every keyed record with a value) and running sum of twice the good
    quantities but 3."""
    counts: dict[str, list[int]] = {}
    sums: dict[str, list[int]] = {}
    for key, value in orders:
        if key is None or value is None:
            continue
        k = key.decode()
        counts.setdefault(k, []).append(len(counts.get(k, [])) + 1)
        try:
            qty = json.loads(value)["qty"]
        except ValueError:
            continue
        if isinstance(qty, int) and qty != 3:
            sums.setdefault(k, []).append((sums.get(k) or [0])[-1] + 2 * qty)
    return counts, sums


# Both in the default suite (~45 s each): without a cache the updates of records without headers, the count's
# and the sum's behind its filter and map_values, are made into their outputs in one call
# (`eos.worker.folding._direct_take`), a path only an uncached fold takes
@pytest.mark.parametrize("cache", [1500, 0], ids=["cached", "uncached"])
def test_folded_counts_and_sums_are_exactly_once_across_sigkills_and_a_restart(
        kafka, topic_factory, unique_name, tmp_path, monkeypatch, cache):
    names = ("orders", "counts", "qty")
    topics = dict(zip(names, (topic_factory(n, partitions=PARTITIONS) for n in names), strict=True))
    bootstrap = kafka.bootstrap_servers
    rng = random.Random(17)
    first = wave(rng, 0, 6000)
    produce(bootstrap, topics["orders"], first)  # a key's records in one partition, in order

    marks = tmp_path / "marks"
    marks.mkdir()
    env = {**os.environ, "EOS_BOOTSTRAP_SERVERS": bootstrap, "APP": unique_name("app"), "CACHE": str(cache),
           "STATE": str(tmp_path / "state"), "MARKS": str(marks), **{n.upper(): t for n, t in topics.items()}}
    run_killed_then_caught_up(tmp_path, JOB, env, seed=23)

    second = wave(rng, 6000, 3000)
    produce(bootstrap, topics["orders"], second)
    env = {k: v for k, v in env.items() if k != "MARKS"} | {"LEVEL": "INFO"}
    done = subprocess.run([sys.executable, "-m", "eos.cli", "run", "job.py", "--until-caught-up"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    finished = [json.loads(line) for line in (done.stdout + done.stderr).splitlines()
                if line.startswith("{") and '"run finished"' in line]
    assert finished, done.stderr[-3000:]
    run = finished[-1]  # both steps folded batches; with the small cache some folds stopped where it would evict
    assert run["records_in"] == 2 * len(second), run
    assert (0 < run["records_folded"] < run["records_in"]) if cache else run["records_folded"] == run["records_in"]

    orders = first + second
    want_counts, want_sums = references(orders)
    got_counts: dict[str, list[int]] = {}
    for key, value, _ in committed_records(bootstrap, topics["counts"]):
        got_counts.setdefault(key.decode(), []).append(int.from_bytes(value, "big"))
    got_sums: dict[str, list[int]] = {}
    for key, value, _ in committed_records(bootstrap, topics["qty"]):
        got_sums.setdefault(key.decode(), []).append(json.loads(value))
    assert got_counts.keys() == want_counts.keys() and got_sums.keys() == want_sums.keys()
    if cache:  # some of each key's values, in order, none twice, ending with the last
        wrong = [k for k in want_counts if not is_history(got_counts[k], want_counts[k])]
        assert not wrong, [(k, got_counts[k][-5:], want_counts[k][-1]) for k in wrong[:3]]
        wrong = [k for k in want_sums if not is_history(got_sums[k], want_sums[k])]
        assert not wrong, [(k, got_sums[k][-5:], want_sums[k][-1]) for k in wrong[:3]]
        updates = sum(len(v) for v in got_counts.values())
        assert updates < sum(len(v) for v in want_counts.values()) * 0.8, "the cache held back no updates"
    else:  # every value, once, in order
        assert got_counts == want_counts and got_sums == want_sums

    app = load_job(tmp_path, env, monkeypatch)
    letters = Counter((r[3]["eos.dlq.subtopology"], int(r[3]["eos.dlq.offset"]), int(r[3]["eos.dlq.partition"]))
                      for r in committed_records(bootstrap, app.config.dlq_topic, headers=True))
    assert max(letters.values()) == 1  # each bad record a dead letter once
    keyless = sum(1 for k, v in orders if k is None and v is not None)
    bad_json = sum(1 for k, v in orders if k is not None and v == b"{not json")
    not_numbers = sum(1 for k, v in orders if k is not None and v is not None and b'"two"' in v)
    filtered_keyless = sum(1 for k, v in orders if k is None and v is not None and b'"qty": 3}' in v)
    # keyless in both steps (but those the sum's filter drops first), the rest in the sum's
    assert len(letters) == 2 * keyless - filtered_keyless + bad_json + not_numbers
    reports = audit_application(app)
    failed = [(r.mode, r.inputs, r.outputs, r.skipped) for r in reports if r.verdict != "PASS"]
    assert not failed, failed

    key, value, _ = committed_records(bootstrap, topics["counts"])[-1]
    commit_copy(bootstrap, topics["counts"], key, value)  # a broken writer commits a folded count again
    failed = [(r.mode, r.outputs) for r in audit_application(app) if r.verdict != "PASS"]  # eos audit app alone
    assert [mode for mode, _ in failed] == ["lineage"] and topics["counts"] in failed[0][1], failed
