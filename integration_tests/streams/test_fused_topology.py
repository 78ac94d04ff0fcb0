"""Fused sub-topologies on the broker and Spark, SIGKILLed mid-batch (inside transactions too) and restarted:

* a fluent pipeline, filter -> map_values -> split: the "checkout" branch left-joined with a customers table,
  mapped and routed by tier into two topics (the join audit replays the steps before and after the join, and
  checks each result's topic), the rest grouped by page
  (a repartition topic) into a windowed count with emit="final";
* filter -> map_values -> split -> a windowed count per user, and both branches cogrouped per user and minute
  (emit="final"), and each user's checkouts counted and let go at most once per 30 s (`suppress`), all in one
  task (no repartition);
* the seeds' word count with the Processor API: a source, a processor with a store and stream-time
  punctuation, a sink; and a second processor connected to the same store (`Milestones`), with its own
  sink.

Outputs equal a reference computation, the store holds the reference counts, and `audit_application` (the
lineage of every step, derived outputs included, and the window audit, the cogroup's too) says PASS, and FAIL
on a final result committed twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import Producer

from eos.audit import audit_application
from eos.cli.loader import load_application
from integration_tests.engine.test_kill_restart import kill_job_repeatedly
from integration_tests.helpers import produce
from integration_tests.streams.test_time_and_rekey import committed_records
from tests.eos.test_suppress import reference as suppressed
from tests.eos.test_suppress import running_counts

JOB = """
import os
from eos import Application, store
from eos.examples.wordcount import Milestones, WordCount
from eos.testing import MarkWhile
from eos.windows import TumblingWindows

app = Application(os.environ["APP"], timestamp="field:at", max_records_per_batch=int(os.environ["BATCH"]),
                  trigger_interval=0.0, log_format="json", log_level="WARNING", state_dir=os.environ["STATE"],
                  repartition_purge_interval=0)

customers = app.table(os.environ["CUSTOMERS"])
clicks = (app.stream(os.environ["CLICKS"])
          .filter(lambda user, click: not click.get("bot"), name="humans")
          .map_values(lambda click: {**click, "page": click["page"].lower()}, name="clean"))
routes = (clicks.split(name="route-")
          .branch(lambda user, click: click["page"] == "checkout", name="checkout")
          .default_branch(name="browse"))
(routes["route-checkout"]
    .left_join(customers, lambda click, c: {"id": click["id"], "tier": c and c["tier"]}, name="with_tier")
    .map_values(lambda joined: {**joined, "vip": joined["tier"] == "gold"}, name="vip")
    .to(lambda user, joined: os.environ["VIPS" if joined["vip"] else "CHECKOUTS"],
        topics=[os.environ["CHECKOUTS"], os.environ["VIPS"]], name="by_tier"))
(routes["route-browse"].group_by(lambda user, click: click["page"], name="by_page")
    .window(TumblingWindows(60_000, grace=5_000), emit="final").count(name="pages")
    .to_stream().to(os.environ["PAGES"]))

# Per user and minute, fused behind a filter, a map and a branch (the window audit replays all three).
visits = (app.stream(os.environ["CLICKS"], name="clicks-per-user")
          .filter(lambda user, click: not click.get("bot"), name="people")
          .map_values(lambda click: click["page"].lower(), name="page")
          .split(name="kind-").branch(lambda user, page: page == "checkout", name="buy").default_branch(name="look"))
(visits["kind-look"].group_by_key().window(TumblingWindows(60_000, grace=5_000), emit="final").count(name="per_user")
    .to_stream().to(os.environ["USERS"]))
# Both branches cogrouped per user and minute, each counted by its own aggregator, in the same task.
(visits["kind-buy"].group_by_key().cogroup(lambda user, page, n: {**n, "buy": n["buy"] + 1})
    .cogroup(visits["kind-look"].group_by_key(), lambda user, page, n: {**n, "look": n["look"] + 1})
    .window(TumblingWindows(60_000, grace=5_000), emit="final")
    .aggregate(lambda: {"buy": 0, "look": 0}, name="minutes").to_stream().to(os.environ["MINUTES"]))
# Each user's checkouts counted, a count let go at most once per user per 30 s of stream time, in the same task.
(visits["kind-buy"].group_by_key().count(name="buys").suppress(30_000, name="buys-limited")
    .to_stream().to(os.environ["LIMITED"]))


app.add_source("sentences", os.environ["TEXT"], value_serde="string", timestamp="record")
app.add_processor("words", WordCount, "sentences")
app.add_state_store(store("word-counts", key_serde="string", value_serde="long"), "words")
app.add_sink("counts", os.environ["WORDS"], "words", value_serde="long")
# A second processor sharing the store, fanning out to a second sink of the same task.
app.add_processor("milestones", Milestones, "sentences")
app.connect_processor_and_state_stores("milestones", "word-counts")
app.add_sink("reached", os.environ["MILESTONES"], "milestones", value_serde="long")
if os.environ.get("MARKS"):
    app.fault_hooks.on("before_commit", MarkWhile(os.environ["MARKS"], seconds=0.3))
"""

def run_killed_then_caught_up(tmp_path, job: str, env: dict[str, str], *, seed: int, kills: int = 3,
                              pause: tuple[float, float] = (5.0, 10.0)) -> None:
    """Write `job` to job.py, SIGKILL its `eos run` `kills` times (at least once inside a transaction; the job
    marks its transactions in `env["MARKS"]`; the others after a random `pause`), then run it until caught up."""
    (tmp_path / "job.py").write_text(job)
    in_txn = kill_job_repeatedly(tmp_path, env, kills, Path(env["MARKS"]), seed=seed, pause=pause)
    assert in_txn >= 1
    env = {k: v for k, v in env.items() if k != "MARKS"}
    done = subprocess.run([sys.executable, "-m", "eos.cli", "run", "job.py", "--until-caught-up"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def load_job(tmp_path, env: dict[str, str], monkeypatch):
    """The Application of tmp_path/job.py, its environment (topics, application id) as the run had it."""
    for key, value in env.items():
        if key != "MARKS" and os.environ.get(key) != value:
            monkeypatch.setenv(key, value)
    sys.path.insert(0, str(tmp_path))
    try:
        return load_application(str(tmp_path / "job.py"))
    finally:
        sys.path.remove(str(tmp_path))


def commit_copy(bootstrap: str, topic: str, key: bytes | None, value: bytes | None,
                headers: dict[str, bytes] | None = None) -> None:
    """A broken writer: commit one more copy of a record (with `headers`, its origin too) in a transaction of
    its own."""
    copy = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"copy-{time.time_ns()}"})
    copy.init_transactions(30)
    copy.begin_transaction()
    copy.produce(topic, key=key, value=value, headers=list((headers or {}).items()))
    copy.commit_transaction(30)


PARTITIONS, PER_PARTITION, STEP_MS = 2, 1200, 2_500
BASE = (int(time.time()) // 3600 - 4) * 3_600_000
PAGES = ["Home", "cart", "Checkout", "search", "HELP"]
WORDS = ["kafka", "spark", "exactly", "once", "stream", "table"]


def clicks() -> list[dict]:
    """Clicks of 14 users in event-time order, a bot's now and then, and a last click of every user much
    later, so that every partition's windows close."""
    out = [{"id": str(i), "user": f"u{i % 14}", "page": PAGES[(i * 3) % 5], "at": BASE + i * STEP_MS,
            "bot": i % 11 == 10} for i in range(PER_PARTITION * PARTITIONS)]
    end = BASE + (PER_PARTITION * PARTITIONS + 100) * STEP_MS
    return out + [{"id": f"end-{u}", "user": f"u{u}", "page": "end", "at": end} for u in range(14)]


def test_a_fused_pipeline_and_a_processor_api_word_count_are_exactly_once_across_sigkills(
        kafka, topic_factory, unique_name, tmp_path, monkeypatch):
    names = ("clicks", "customers", "checkouts", "vips", "pages", "users", "text", "words", "milestones", "minutes",
             "limited")
    topics = dict(zip(names, (topic_factory(n, partitions=PARTITIONS) for n in names), strict=True))
    data = clicks()
    bootstrap = kafka.bootstrap_servers
    # Users are keys, so a user's clicks and customer row share a partition (the topics are co-partitioned).
    users = sorted({c["user"] for c in data})
    tiers = {u: ("gold" if i % 3 == 0 else "basic") for i, u in enumerate(users) if i % 5 != 4}  # some unknown
    produce(bootstrap, topics["customers"], [(u.encode(), json.dumps({"tier": t, "at": BASE - 1}).encode())
                                             for u, t in tiers.items()])
    produce(bootstrap, topics["clicks"], [(r["user"].encode(), json.dumps(r).encode()) for r in data])
    sentences = [" ".join(WORDS[(i * j) % len(WORDS)] for j in range(1, 4 + i % 3)) for i in range(900)]
    # One partition: the word count (as the seeds' example) counts per task, and the store view merges tasks.
    produce(bootstrap, topics["text"], [(None, s.encode()) for s in sentences], partition_of=lambda n, key: 0)

    marks = tmp_path / "marks"
    marks.mkdir()
    env = {**os.environ, "EOS_BOOTSTRAP_SERVERS": bootstrap, "APP": unique_name("app"),
           "STATE": str(tmp_path / "state"), "MARKS": str(marks), "BATCH": "300",
           **{n.upper(): t for n, t in topics.items()}}
    run_killed_then_caught_up(tmp_path, JOB, env, seed=27)

    humans = [c for c in data if not c.get("bot") and c["page"] != "end"]
    checkouts = Counter((c["id"], tiers.get(c["user"])) for c in humans if c["page"] == "Checkout")
    got = Counter()
    for topic in ("checkouts", "vips"):  # (routed by tier)
        for _, value, _ in committed_records(bootstrap, topics[topic]):
            joined = json.loads(value)
            got[(joined["id"], joined["tier"])] += 1
            assert joined["vip"] == (joined["tier"] == "gold") == (topic == "vips")
    assert got == checkouts  # each once, with the tier the table held, in its tier's topic

    windows = Counter((c["page"].lower(), c["at"] // 60_000 * 60_000) for c in humans if c["page"] != "Checkout")
    seen: Counter = Counter()
    for key, value, _ in committed_records(bootstrap, topics["pages"]):
        windowed = json.loads(key)
        window = (windowed["key"], windowed["start"])
        assert window not in seen, f"a second final result for {window}"
        seen[window] = int.from_bytes(value, "big")
    assert seen == windows

    per_user = Counter((c["user"], c["at"] // 60_000 * 60_000) for c in humans if c["page"] != "Checkout")
    users: Counter = Counter()
    for key, value, _ in committed_records(bootstrap, topics["users"]):
        windowed = json.loads(key)
        users[(windowed["key"], windowed["start"])] += int.from_bytes(value, "big")
    assert users == per_user

    # The windowed cogroup: each user's minute once, its checkouts and other pages counted apart.
    minutes: dict[tuple[str, int], dict[str, int]] = {}
    for c in humans:
        row = minutes.setdefault((c["user"], c["at"] // 60_000 * 60_000), {"buy": 0, "look": 0})
        row["buy" if c["page"] == "Checkout" else "look"] += 1
    cogrouped: dict[tuple[str, int], dict[str, int]] = {}
    for key, value, _ in committed_records(bootstrap, topics["minutes"]):
        windowed = json.loads(key)
        window = (windowed["key"], windowed["start"])
        assert window not in cogrouped, f"a second final result for {window}"
        cogrouped[window] = json.loads(value)
    assert cogrouped == minutes

    # The suppressed checkout counts: per user, exactly what suppressing its task's counts gives (each task's
    # counts in its partition's order, stream time the largest checkout time its step saw), none twice.
    read = committed_records(bootstrap, topics["clicks"], partition=True)
    expected, waiting = {}, {}
    for partition in range(PARTITIONS):
        bought = [(c["user"], c["at"]) for c in (json.loads(v) for _, v, _, p in read if p == partition)
                  if not c.get("bot") and c["page"] == "Checkout"]
        let_go, held = suppressed(running_counts(bought), 30_000)
        for user, n, at in let_go:
            expected.setdefault(user, []).append((n, at))
        waiting.update(held)
    limited: dict[str, list[tuple[int, int]]] = {}
    for key, value, ts in committed_records(bootstrap, topics["limited"]):
        limited.setdefault(key.decode(), []).append((int.from_bytes(value, "big"), ts))
    assert limited == expected and sum(map(len, limited.values())) > 2 * len(waiting) > 0

    totals = Counter(w for s in sentences for w in s.split())
    emitted: dict[str, list[int]] = {}
    for key, value, _ in committed_records(bootstrap, topics["words"]):
        emitted.setdefault(key.decode(), []).append(int.from_bytes(value, "big"))
    assert emitted and all(counts == sorted(counts) and counts[-1] <= totals[w] for w, counts in emitted.items())
    reached = Counter((k.decode(), int.from_bytes(v, "big")) for k, v, _ in committed_records(bootstrap,
                                                                                             topics["milestones"]))
    assert reached == Counter((w, n) for w, total in totals.items() for n in range(100, total + 1, 100))

    app = load_job(tmp_path, env, monkeypatch)
    assert sorted(app.subtopologies) == ["humans", "pages", "people", "words"]
    assert dict(app.store_view("word-counts").all()) == dict(totals)
    held = app.store_view("buys-limited-buffer").all()
    assert {s.key: (s.buffer_time, s.value, s.timestamp) for s in held} == waiting
    reports = audit_application(app)
    failed = [(r.mode, r.inputs, r.outputs) for r in reports if r.verdict != "PASS"]
    audited = [r for r in reports if not r.skipped]
    # lineage: humans with pages (linked), people, words; 3 windows; the checkout branch's join, replayed by the
    # join audit through the filter, the map and the split before it and the map and the route after it
    assert not failed and len(audited) == 7 and not [r for r in reports if r.skipped], failed
    assert [r.mode for r in audited].count("window") == 3
    (join,) = [r.join for r in reports if r.mode == "join"]
    assert [r.outputs for r in reports if r.mode == "join"] == [[topics["checkouts"], topics["vips"]]]
    assert (join.kind, join.how, join.output_records, join.expected) == ("stream-table", "left",
                                                                         sum(checkouts.values()), join.output_records)
    # A second result forged for a checkout click, as if the join had made two of it (another output index): the
    # lineage audit cannot tell (a step may make several outputs of a record), the join audit can: one record
    # of that click reaches the join.
    key, value, _, headers = committed_records(bootstrap, topics["checkouts"], headers=True)[0]
    origin = headers["eos.origin"].decode().rsplit(":", 1)[0]
    commit_copy(bootstrap, topics["checkouts"], key, value, {"eos.origin": f"{origin}:1".encode()})
    forged = [r for r in audit_application(app) if r.verdict != "PASS"]
    assert [(r.mode, r.join.unexpected) for r in forged] == [("join", 1)], [(r.mode, r.outputs) for r in forged]

    # A final result committed twice (a broken writer): `audit_application` alone says FAIL, twice: the lineage
    # audit of the fused step (a derived output's id committed twice) and its window audit (a second result).
    commit_copy(bootstrap, topics["users"], *committed_records(bootstrap, topics["users"])[0][:2])
    reports = audit_application(app)
    failed = [(r.mode, r.outputs) for r in reports if r.verdict != "PASS" and r.mode != "join"]  # (forged above)
    assert [mode for mode, _ in failed] == ["lineage", "window"], failed
    assert all(topics["users"] in outputs for _, outputs in failed), failed
    # The same for the windowed cogroup, whose window audit replays both branches through their marking steps.
    commit_copy(bootstrap, topics["minutes"], *committed_records(bootstrap, topics["minutes"])[0][:2])
    failed = [(r.mode, r.outputs) for r in audit_application(app) if r.verdict != "PASS"]
    assert ("window", [topics["minutes"]]) in failed, failed
