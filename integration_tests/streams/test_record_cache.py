"""The record cache (`cache_max_bytes`) on the broker and Spark, SIGKILLed mid-batch (inside transactions too)
and restarted: a count, a windowed count and a session count (emit="update") fused in one task, and a table
aggregation, with a cache small enough to evict. Each key's (window's, session's) committed values are values its
aggregate had, in order, once each, ending with the reference's final value (a session merged away inside the
cache: none); `audit_application` (lineage, with the cache's
derived outputs, and the window audit) and the aggregate audit say PASS; a copy committed by a broken writer
fails the aggregate audit and `audit_application`."""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter

from eos.audit import AggregateSpec, audit, audit_application
from eos.audit.aggregate import is_history
from integration_tests.helpers import produce
from integration_tests.streams.test_fused_topology import commit_copy, load_job, run_killed_then_caught_up
from integration_tests.streams.test_time_and_rekey import committed_records

JOB = """
import os
from eos import Application
from eos.testing import MarkWhile
from eos.windows import SessionWindows, TumblingWindows

app = Application(os.environ["APP"], timestamp="field:at", max_records_per_batch=300, trigger_interval=0.0,
                  cache_max_bytes=int(os.environ["CACHE"]), log_format="json", log_level="WARNING",
                  state_dir=os.environ["STATE"])

orders = app.stream(os.environ["ORDERS"])
orders.group_by_key().count(name="counts").to_stream().to(os.environ["COUNTS"])
(orders.group_by_key().window(TumblingWindows(60_000)).count(name="per_minute")
    .to_stream().to(os.environ["MINUTES"]))
(orders.group_by_key().window(SessionWindows(2_000, grace=5_000)).count(name="sessions")
    .to_stream().to(os.environ["SESSIONS"]))

(app.table(os.environ["CUSTOMERS"]).group_by(lambda name, c: (c["tier"], c))
    .count(name="tiers").to_stream().to(os.environ["TIERS"]))
if os.environ.get("MARKS"):
    app.fault_hooks.on("before_commit", MarkWhile(os.environ["MARKS"], seconds=0.3))
"""

PARTITIONS, ORDERS, KEYS = 2, 4000, 60
BASE = (int(time.time()) // 3600 - 4) * 3_600_000
TIERS = ("basic", "silver", "gold")


def histories(records: list[tuple[str, int]]) -> dict[str, list[int]]:
    """Running counts per key of (key, partition-ordered) records."""
    out: dict[str, list[int]] = {}
    for key, _ in records:
        out.setdefault(key, []).append(len(out.get(key, [])) + 1)
    return out


def test_cached_aggregations_commit_a_true_history_of_each_key_across_sigkills(
        kafka, topic_factory, unique_name, tmp_path, monkeypatch):
    names = ("orders", "counts", "minutes", "sessions", "customers", "tiers")
    topics = dict(zip(names, (topic_factory(n, partitions=PARTITIONS) for n in names), strict=True))
    bootstrap = kafka.bootstrap_servers
    rng = random.Random(5)  # a few hot keys, many cold ones: the cache absorbs the hot ones, evicts cold ones
    orders = [(f"k{int(rng.paretovariate(1.0)) % KEYS}", {"id": i, "at": BASE + i * 200}) for i in range(ORDERS)]
    raw = [(k.encode(), json.dumps(v).encode()) for k, v in orders]
    raw[123] = (b"k3", b"{not json")  # a bad record: a dead letter, counted nowhere
    good = [(k, v) for i, (k, v) in enumerate(orders) if i != 123]
    produce(bootstrap, topics["orders"], raw)  # a key's records in one partition, in order
    moves = [(f"c{i % 40}", {"tier": TIERS[(i * 5) % 3], "at": BASE + i * 300}) for i in range(600)]
    produce(bootstrap, topics["customers"], [(k.encode(), json.dumps(v).encode()) for k, v in moves])

    marks = tmp_path / "marks"
    marks.mkdir()
    env = {**os.environ, "EOS_BOOTSTRAP_SERVERS": bootstrap, "APP": unique_name("app"), "CACHE": "3000",
           "STATE": str(tmp_path / "state"), "MARKS": str(marks), **{n.upper(): t for n, t in topics.items()}}
    run_killed_then_caught_up(tmp_path, JOB, env, seed=41)

    want = histories(good)
    counts = committed_records(bootstrap, topics["counts"])
    got: dict[str, list[int]] = {}
    for key, value, _ in counts:
        got.setdefault(key.decode(), []).append(int.from_bytes(value, "big"))
    assert got.keys() == want.keys()
    wrong = [k for k in want if not is_history(got[k], want[k])]
    assert not wrong, [(k, got[k][-5:], want[k][-1]) for k in wrong[:3]]
    assert len(counts) < len(good) * 0.8, "the cache held back no updates"

    minutes = histories([((k, v["at"] // 60_000 * 60_000), v) for k, v in good])  # type: ignore[misc]
    per_window: dict[tuple[str, int], list[int]] = {}
    for key, value, _ in committed_records(bootstrap, topics["minutes"]):
        windowed = json.loads(key)
        per_window.setdefault((windowed["key"], windowed["start"]), []).append(int.from_bytes(value, "big"))
    assert per_window.keys() == minutes.keys()
    assert all(is_history(per_window[w], minutes[w]) for w in minutes)

    # sessions of 2 s: each record makes its key's session anew (a longer one, the shorter merged away). Every
    # session's committed values are a true history of its own (one count, then a tombstone if it was
    # replaced); one replaced before anything of it left the cache has none; the last ones hold the final counts
    sessions: dict[tuple[str, int, int], list[int | None]] = {}
    open_session: dict[str, tuple[int, int, int]] = {}
    for key, v in good:
        start, end, n = open_session.get(key, (v["at"], v["at"], 0))
        if v["at"] - end > 2_000:
            start, n = v["at"], 0
        elif n:
            sessions[key, start, end].append(None)
        open_session[key] = (start, v["at"], n + 1)
        sessions[key, start, v["at"]] = [n + 1]
    per_session: dict[tuple[str, int, int], list[int | None]] = {}
    for key, value, _ in committed_records(bootstrap, topics["sessions"]):
        windowed = json.loads(key)
        per_session.setdefault((windowed["key"], windowed["start"], windowed["end"]), []).append(
            None if value is None else int.from_bytes(value, "big"))
    assert per_session.keys() <= sessions.keys()
    assert all(is_history(per_session[w], sessions[w]) if w in per_session else sessions[w][-1] is None
               for w in sessions)
    finals = {(key, start, end) for key, (start, end, _) in open_session.items()}
    assert finals <= per_session.keys() and len(finals) > KEYS // 2
    assert sum(map(len, per_session.values())) < len(good), "the cache held back no session updates"

    final_tiers = Counter({k: v["tier"] for k, v in moves}.values())
    last: dict[str, int] = {}
    for key, value, _ in committed_records(bootstrap, topics["tiers"]):
        last[key.decode()] = int.from_bytes(value, "big")
    assert {t: n for t, n in last.items() if n} == dict(final_tiers)

    app = load_job(tmp_path, env, monkeypatch)
    reports = audit_application(app)
    failed = [(r.mode, r.inputs, r.outputs, r.skipped) for r in reports if r.verdict != "PASS"]
    assert not failed, failed
    assert [r.mode for r in reports].count("window") == 2 and not any(r.skipped for r in reports)

    def count_audit():
        spec = AggregateSpec("count", lambda raw: None, lambda raw: int.from_bytes(raw, "big"),
                             accept=lambda raw: raw is not None and raw.startswith(b"{\""), cached=True)
        return audit(bootstrap, inputs=[topics["orders"]], outputs=[topics["counts"]], aggregate=spec,
                     group=app.config.group_id)

    assert count_audit().verdict == "PASS"
    key, value, _ = next(r for r in counts if int.from_bytes(r[1], "big") > 1)
    commit_copy(bootstrap, topics["counts"], key, value)  # an old count committed again: a step repeated
    report = count_audit()
    assert report.verdict == "FAIL" and report.aggregate is not None and report.aggregate.sequence_mismatches >= 1
    failed = [(r.mode, r.outputs) for r in audit_application(app) if r.verdict != "PASS"]  # eos audit app alone
    assert [mode for mode, _ in failed] == ["lineage"] and topics["counts"] in failed[0][1], failed
