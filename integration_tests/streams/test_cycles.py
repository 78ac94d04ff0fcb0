"""A cycle of steps through a topic on the broker and Spark, SIGKILLed mid-batch (inside a transaction too) and
restarted: tasks retried through their own topic until they have been tried three times, then written out,
each to the topic its key chooses, and counted per last digit of their number, an int key grouped through a
repartition topic with the grouping's serde, and so per digit and day, the window's key and count mapped to the
digit and JSON and routed by the digit's parity (Kafka Streams allows such a cycle; the job writes and reads the
same topic in one sub-topology).

Every task reaches its output once, tried three times; the topic holds each retry once beside the records
others wrote to it; and `audit_application` says PASS, taking those records as the step's input rather than
as outputs without an origin (and its window audit recomputes the daily counts, each changed as the map did and
counted in the topic its route chose),
and FAIL on a retry or a daily count committed twice."""

from __future__ import annotations

import json
import os
import random
from collections import Counter

from eos.audit import audit_application
from integration_tests.helpers import produce
from integration_tests.streams.test_fused_topology import commit_copy, load_job, run_killed_then_caught_up
from integration_tests.streams.test_time_and_rekey import committed_records

JOB = """
import os
from datetime import timedelta
from eos import Application
from eos.testing import MarkWhile
from eos.windows import TumblingWindows

app = Application(os.environ["APP"], max_records_per_batch=150, trigger_interval=0.0, log_format="json",
                  log_level="WARNING", state_dir=os.environ["STATE"], repartition_purge_interval=0)
routes = (app.stream(os.environ["TASKS"], value_serde="json", name="tasks").split(name="t-")
          .branch(lambda key, task: task["tries"] < 3, name="again").default_branch(name="done"))
routes["t-again"].map_values(lambda task: {**task, "tries": task["tries"] + 1}, name="retry").to(os.environ["TASKS"])
# Tasks done, each to the topic its key's parity chooses (a topic per record: to(fn, topics=[...])).
routes["t-done"].to(lambda key, task: os.environ["DONE"] if int(key[1:]) % 2 == 0 else os.environ["ODD"],
                  topics=[os.environ["DONE"], os.environ["ODD"]], name="by_parity")
# ... and counted by their number's last digit, an int key (the grouping's serde on its repartition topic),
by_digit = routes["t-done"].group_by(lambda key, task: int(key[1:]) % 10, key_serde="long", name="by_digit")
by_digit.count(name="per_digit").to_stream().to(os.environ["DIGITS"], key_serde="long")
# ... and per digit and day, the window's key and count mapped: written with the grouping's long and JSON, each
# to the topic of its digit's parity.
(by_digit.window(TumblingWindows(timedelta(days=1))).count(name="daily").to_stream()
    .map(lambda window, n: (window.key, {"day": window.start, "tasks": n}), name="flat")
    .to(lambda digit, day: os.environ["DAILY"] if digit % 2 == 0 else os.environ["DAILY_ODD"],
        topics=[os.environ["DAILY"], os.environ["DAILY_ODD"]], name="daily_by_parity"))
if os.environ.get("MARKS"):
    app.fault_hooks.on("before_commit", MarkWhile(os.environ["MARKS"], seconds=0.3))
"""

PARTITIONS, TASKS = 2, 2400


def test_a_cycle_of_retries_through_its_own_topic_then_routed_by_key_is_exactly_once_across_sigkills(
        kafka, topic_factory, unique_name, tmp_path, monkeypatch):
    topics = {n: topic_factory(n, partitions=PARTITIONS) for n in ("tasks", "done", "odd", "digits", "daily",
                                                                   "daily_odd")}
    bootstrap = kafka.bootstrap_servers
    rng = random.Random(41)
    tasks = {f"t{i}": rng.randrange(0, 4) for i in range(TASKS)}  # tries so far: 0-3 (3: done at once)
    produce(bootstrap, topics["tasks"], [(k.encode(), json.dumps({"id": k, "tries": n}).encode())
                                         for k, n in tasks.items()])

    marks = tmp_path / "marks"
    marks.mkdir()
    env = {**os.environ, "EOS_BOOTSTRAP_SERVERS": bootstrap, "APP": unique_name("app"),
           "STATE": str(tmp_path / "state"), "MARKS": str(marks), **{n.upper(): t for n, t in topics.items()}}
    run_killed_then_caught_up(tmp_path, JOB, env, seed=43, kills=2, pause=(3.0, 6.0))

    done = Counter((k.decode(), json.loads(v)["tries"], topic) for topic in ("done", "odd")
                   for k, v, _ in committed_records(bootstrap, topics[topic]))
    # every task once, tried three times, in the topic of its key's parity
    assert done == Counter({(k, 3, "done" if int(k[1:]) % 2 == 0 else "odd"): 1 for k in tasks})
    written = Counter((k.decode(), json.loads(v)["tries"]) for k, v, _ in committed_records(bootstrap, topics["tasks"]))
    assert written == Counter({(k, t): 1 for k, n in tasks.items() for t in range(n, 4)})  # each retry once

    digits = {int.from_bytes(k, "big"): int.from_bytes(v, "big")
              for k, v, _ in committed_records(bootstrap, topics["digits"])}  # each digit's last count
    assert digits == Counter(int(k[1:]) % 10 for k in tasks)
    daily = {(int.from_bytes(k, "big"), json.loads(v)["day"]): json.loads(v)["tasks"]
             for k, v, _ in committed_records(bootstrap, topics["daily"])}  # each digit's and day's last count
    odd = {(int.from_bytes(k, "big"), json.loads(v)["day"]): json.loads(v)["tasks"]
           for k, v, _ in committed_records(bootstrap, topics["daily_odd"])}
    assert {d % 2 for d, _ in daily} == {0} and {d % 2 for d, _ in odd} == {1}  # each in its parity's topic
    daily.update(odd)
    per_digit: Counter = Counter()
    for (digit, _), n in daily.items():
        per_digit[digit] += n
    assert per_digit == digits and all(isinstance(day, int) for _, day in daily)

    app = load_job(tmp_path, env, monkeypatch)
    reports = audit_application(app)
    assert all(r.verdict == "PASS" for r in reports), [(r.mode, r.outputs, r.lineage) for r in reports]
    (window,) = [r for r in reports if r.mode == "window"]  # the daily count, its results mapped and routed: recomputed
    assert window.skipped is None and window.window.output_records == sum(1 for t in ("daily", "daily_odd") for _ in
                                                                         committed_records(bootstrap, topics[t]))
    assert window.window.windows_expected >= 10 and window.outputs == [topics["daily"], topics["daily_odd"]], window
    (lineage,) = [r for r in reports if topics["tasks"] in r.outputs]
    assert lineage.lineage.written_by_others == TASKS and lineage.lineage.expected == sum(written.values())

    # A retry committed twice (a broken writer): the audit says so.
    key, value, _, headers = next(r for r in committed_records(bootstrap, topics["tasks"], headers=True)
                                  if "eos.origin" in r[3])
    commit_copy(bootstrap, topics["tasks"], key, value, {"eos.origin": headers["eos.origin"]})
    # ... and a daily count committed twice, without its origin: the window audit counts it unexpected.
    commit_copy(bootstrap, topics["daily"], *committed_records(bootstrap, topics["daily"])[-1][:2])
    reports = audit_application(app)
    (lineage,) = [r for r in reports if topics["tasks"] in r.outputs]
    assert lineage.verdict == "FAIL" and lineage.lineage.duplicates == 1, lineage.lineage
    (window,) = [r for r in reports if r.mode == "window"]
    assert window.verdict == "FAIL" and window.window.unexpected == 1, window.window
