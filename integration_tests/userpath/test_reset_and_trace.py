"""The README's "Reprocessing from scratch" and "Trace context" sections on its job, run verbatim: a dry
run changes nothing, a reset puts the inputs back to earliest and removes internal topics and local state,
the next run writes the same results again, which its audit passes, a reset while the job runs is refused;
a traced order's context is followed to its enriched record and to the total it updated.
The tests share one run of the README's example (`example`) and run in the module's order, as pytest runs
them: the trace adds an order and its results, the refused reset changes nothing, and the reset comes last.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time

import pytest

from integration_tests.helpers import read_values
from integration_tests.userpath.test_readme import README, example_env, run_readme_example
from transactions import KafkaAdmin

APP = "orders-enricher"
TOPICS = ["orders", "orders-enriched", "clicks", "clicks-clean", "customer-totals", "events", "events-unique"]
OUTPUTS = ["orders-enriched", "customer-totals", "clicks-clean", "events-unique", f"{APP}-dlq"]
CHANGELOG = f"{APP}-totals-store-changelog"


def reset_commands() -> list[str]:
    text = README.read_text()
    start = text.index("\n## Reprocessing from scratch\n")
    block = re.search(r"```bash\n(.*?)```", text[start:], re.S)
    assert block, "the README's reset section lost its commands"
    return [line.split("  #")[0].strip() for line in block.group(1).splitlines() if line.strip()]


@pytest.fixture(scope="module")
def example(kafka, tmp_path_factory):
    """The directory where the README's "Writing a job" example ran, with its job file and local state."""
    cwd = tmp_path_factory.mktemp("example")
    for _ in run_readme_example("Writing a job", "job.py", kafka, cwd, APP, TOPICS):
        pass
    return cwd


def test_the_trace_context_example_follows_an_order_through_a_stateless_and_a_stateful_step(kafka, example):
    from eos.tracing import parse_traceparent

    env = example_env(kafka, example)
    text = README.read_text()
    block = re.search(r"```bash\n(.*?)```", text[text.index("\n## Trace context\n"):], re.S)
    assert block, "the README's trace section lost its commands"
    shown = {}
    for line in [line.split("  #")[0].strip() for line in block.group(1).splitlines() if line.strip()]:
        done = subprocess.run(["bash", "-c", line], cwd=example, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, f"`{line}`: {done.stderr}"
        if line.startswith("eos topics read"):
            shown[line.split()[3]] = [row.split("\t") for row in done.stdout.splitlines()]
    spans = set()
    for topic in ("orders-enriched", "customer-totals"):
        (_, _, context), = [row for row in shown[topic] if row[0] == "carol"]
        trace, span, flags = parse_traceparent(context.encode())
        assert (trace, flags) == ("4bf92f3577b34da6a3ce929b0e0e4736", "01") and span != "00f067aa0ba902b7"
        spans.add(span)
        assert all(row[2] == "-" for row in shown[topic] if row[0] != "carol")  # untraced orders stay untraced
    assert len(spans) == 2  # each output its own span


def test_a_reset_while_the_job_runs_is_refused(kafka, example):
    env, admin = example_env(kafka, example), KafkaAdmin(kafka.bootstrap_servers)
    job = subprocess.Popen([sys.executable, "-m", "eos.cli", "run", "job.py"], cwd=example, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not admin.group_members(f"{APP}.driver"):
            assert job.poll() is None and time.monotonic() < deadline, "the job did not take its lease"
            time.sleep(0.5)
        done = subprocess.run([sys.executable, "-m", "eos.cli", "reset", "job.py"], cwd=example, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and "is running" in done.stderr and "stop it first" in done.stderr, done.stderr
        assert admin.partition_counts([CHANGELOG])[CHANGELOG] is not None  # nothing was deleted
    finally:
        job.send_signal(signal.SIGTERM)  # (during start-up this ends the process at once)
        job.wait(120)
    stopped = time.monotonic()
    while admin.group_members(f"{APP}.driver"):  # the lease goes with its holder, at the latest when its
        assert time.monotonic() - stopped < 60, "the stopped driver still holds its lease"  # session expires
        time.sleep(0.2)


def test_a_reset_plan_starts_each_input_where_it_is_told(kafka, topic_factory, tmp_path):
    from eos import Application
    from eos.driver.reset import plan_reset
    from eos.errors import ConfigError
    from integration_tests.helpers import produce

    clicks, views = topic_factory("clicks", partitions=1), topic_factory("views", partitions=1)
    now = int(time.time() * 1000)
    ages = [180, 120, 30, 5]  # minutes ago
    for topic in (clicks, views):
        produce(kafka.bootstrap_servers, topic, [(b"k", b"{}")] * len(ages),
                timestamp_of=lambda n, key: now - ages[n] * 60_000)
    app = Application("reset-plan", kafka.bootstrap_servers, state_dir=str(tmp_path / "{executor}"))
    app.stream(clicks).to(topic_factory("out"))
    app.stream(views).group_by_key().count(name="n").to_stream().to(topic_factory("counts"))
    admin = KafkaAdmin(kafka.bootstrap_servers)
    plan = plan_reset(app, admin, to="-1h", inputs={views: "latest"}, now_ms=now)
    assert plan.starts == {clicks: "-1h", views: "latest"}
    assert plan.offsets["reset-plan"] == {(clicks, 0): 2, (views, 0): 4}  # the first record of the last hour
    assert plan.starts_after == {(clicks, 0): 0, (views, 0): 0}  # (the records before: not the next run's input)
    assert plan_reset(app, admin, to="earliest", now_ms=now).offsets["reset-plan"] == {(clicks, 0): 0, (views, 0): 0}
    assert plan_reset(app, admin, to="earliest", now_ms=now).starts_after == {}
    (tmp_path / "exec-1" / "reset-plan").mkdir(parents=True)
    assert plan_reset(app, admin, now_ms=now).local_state == [tmp_path / "exec-1" / "reset-plan"]
    with pytest.raises(ConfigError, match="not an input topic"):
        plan_reset(app, admin, inputs={"nowhere": "earliest"})
    with pytest.raises(ConfigError, match="not a timestamp"):
        plan_reset(app, admin, to="yesterday")


def test_reset_then_run_writes_the_same_results_again_and_a_dry_run_changes_nothing(kafka, example):
    bootstrap, env = kafka.bootstrap_servers, example_env(kafka, example)
    admin = KafkaAdmin(bootstrap)
    first = {t: sorted(read_values(bootstrap, t)) for t in OUTPUTS}
    assert all(first.values()), first
    state = example / ".eos" / "state" / APP
    orders = admin.topic_partitions("orders")
    committed = admin.group_offsets(APP, orders)
    assert state.is_dir() and {tp: o or 0 for tp, o in committed.items()} == admin.end_offsets(orders)  # all read

    dry, reset, rerun, audit = reset_commands()
    done = subprocess.run(["bash", "-c", dry], cwd=example, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"delete internal topic {CHANGELOG}" in done.stdout and f"delete local state directory {state}" in \
        done.stdout and "group orders-enricher: orders from earliest" in done.stdout, done.stdout
    assert admin.group_offsets(APP, orders) == committed and state.is_dir()  # the dry run touched nothing
    assert admin.partition_counts([CHANGELOG])[CHANGELOG] is not None

    done = subprocess.run(["bash", "-c", reset], cwd=example, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert not state.exists() and admin.partition_counts([CHANGELOG])[CHANGELOG] is None
    assert set(admin.group_offsets(APP, orders).values()) == {0}

    done = subprocess.run(["bash", "-c", rerun], cwd=example, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    again = {t: sorted(read_values(bootstrap, t)) for t in OUTPUTS}
    assert again == {t: sorted(values * 2) for t, values in first.items()}  # the same results, once more each
    # the audit holds the run since the reset to what it wrote since (the first run's records made it a FAIL)
    done = subprocess.run(["bash", "-c", audit], cwd=example, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "output offsets before the last eos reset" in done.stdout, done.stdout[-4000:]
