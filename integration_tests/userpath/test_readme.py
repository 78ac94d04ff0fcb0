"""The README's "Writing a job" example, run verbatim: the job file is the README's Python block, and the
commands are the README's shell block (all but `eos cluster up`: the suite's cluster is used instead)."""

from __future__ import annotations

import json
import os
import re
import runpy
import subprocess
import sys
import time
from pathlib import Path

from integration_tests.helpers import read_values
from transactions import KafkaAdmin

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def readme_blocks(section: str, *, commands: bool = True) -> tuple[str, str]:
    """The first ```python and the first ```bash block under the README heading `section` (`commands`:
    the section must have both)."""
    text = README.read_text()
    start = text.index(f"\n## {section}\n")
    end = text.find("\n## ", start + 1)
    body = text[start:end if end > 0 else None]
    python = re.search(r"```python\n(.*?)```", body, re.S)
    bash = re.search(r"```bash\n(.*?)```", body, re.S)
    assert python and (bash or not commands), f"README section {section!r} lost its examples"
    return python.group(1), bash.group(1) if bash else ""


def clean_slate(bootstrap: str, app_id: str, topics: list[str]) -> None:
    """The example's names are fixed: remove what an earlier run left on a reused cluster."""
    admin = KafkaAdmin(bootstrap)
    internal = [t for t in admin.topic_names() if t.startswith(f"{app_id}-")]
    admin.delete_topics([*topics, *internal])
    admin.delete_groups([app_id, f"{app_id}.driver"])


def example_env(kafka, tmp_path) -> dict[str, str]:
    """The environment the README's commands run in: the suite's cluster, this venv's `eos` on the PATH."""
    bins = os.path.dirname(sys.executable)
    return {**os.environ, "EOS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers, "HOME": str(tmp_path),
            "PATH": f"{bins}{os.pathsep}{os.environ.get('PATH', '')}"}


def run_readme_example(section: str, job_file: str, kafka, tmp_path, app_id: str, topics: list[str]):
    """Write the section's job to `job_file`, then run its commands one by one (all but `eos cluster up`:
    the suite's cluster is used), asserting each succeeds; yields (command, completed process)."""
    job, commands = readme_blocks(section)
    (tmp_path / job_file).write_text(job)
    env = example_env(kafka, tmp_path)
    clean_slate(kafka.bootstrap_servers, app_id, topics)
    lines = [line.split("  #")[0].strip() for line in commands.splitlines() if line.strip()]
    assert lines[0].startswith("eos cluster up"), lines[0]  # the suite provides the cluster instead
    for line in lines[1:]:
        done = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, f"`{line}` exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        yield line, done


def test_the_writing_a_job_example_runs_verbatim(kafka, tmp_path):
    for line, done in run_readme_example("Writing a job", "job.py", kafka, tmp_path, "orders-enricher", [
            "orders", "orders-enriched", "clicks", "clicks-clean", "customer-totals", "events", "events-unique"]):
        if line.startswith("eos run"):
            assert "1 of 6 input records went to the dead-letter topic orders-enricher-dlq" in done.stderr
            assert "KeyError: 'price'" in done.stderr
        if line.startswith("eos audit app"):
            assert done.stdout.count("PASS") == 3 and "FAIL" not in done.stdout, done.stdout

    bootstrap = kafka.bootstrap_servers
    enriched = [json.loads(v) for v in read_values(bootstrap, "orders-enriched")]
    assert enriched == [{"qty": 2, "price": 3.5, "total": 7.0}]
    assert [json.loads(v) for v in read_values(bootstrap, "customer-totals")] == [{"orders": 1, "revenue": 7.0}]
    assert read_values(bootstrap, "orders-enricher-dlq") == [b'{"qty": 1}']
    assert read_values(bootstrap, "clicks-clean") == [b"home"]
    assert read_values(bootstrap, "events-unique") == [b"signup"]

    env = example_env(kafka, tmp_path)
    # `python job.py` runs the same job (the `__main__` guard): one more order, processed exactly once.
    subprocess.run(["bash", "-c", "printf 'alice\\t{\"qty\": 1, \"price\": 1}\\n' | eos topics produce orders"],
                   cwd=tmp_path, env=env, check=True, capture_output=True, timeout=120)
    ran = subprocess.run([sys.executable, "job.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert ran.returncode == 0, ran.stderr
    assert [json.loads(v) for v in read_values(bootstrap, "customer-totals")] == [
        {"orders": 1, "revenue": 7.0}, {"orders": 2, "revenue": 8.0}]


def test_the_time_and_windows_example_runs_verbatim(kafka, tmp_path):
    printed = {}
    for line, done in run_readme_example("Time and windows", "pageviews.py", kafka, tmp_path, "pageviews",
                                         ["views", "views-per-page", "logins", "sessions", "pings", "silent-devices"]):
        if line.startswith("eos topics read"):
            printed[line.split()[3]] = [row.split("\t") for row in done.stdout.splitlines()]
        if line.startswith("eos audit window"):
            assert done.stdout.count("PASS") == 2 and "FAIL" not in done.stdout, done.stdout

    per_page = sorted((json.loads(key)["key"], int(value)) for key, value in printed["views-per-page"])
    assert per_page == [("cart", 1), ("home", 2)]  # the minute -1 windows are still open
    sessions = [(json.loads(key)["end"] - json.loads(key)["start"], value) for key, value in printed["sessions"]]
    assert sorted(sessions, key=str) == sorted([(0, "1"), (120_000, "2"), (0, "null"), (0, "1")], key=str)
    (device, value), = printed["silent-devices"]
    assert device == "sensor-1" and "silent_since" in json.loads(value)


def test_the_tables_and_joins_example_runs_verbatim(kafka, tmp_path):
    printed = {}
    for line, done in run_readme_example("Tables and joins", "shop.py", kafka, tmp_path, "shop", [
            "customers", "addresses", "products", "orders", "payments", "orders-with-customer", "orders-priced",
            "orders-paid", "payments-by-tier", "customer-profiles", "subscriptions", "subscriptions-with-tier",
            "customers-per-tier", "customer-activity"]):
        if line.startswith("eos topics read"):
            printed[line.split()[3]] = [(k, json.loads(v)) for k, v in
                                        (row.split("\t") for row in done.stdout.splitlines())]
        if line.startswith("eos store get"):
            assert json.loads(done.stdout)["value"] == {"tier": "gold"}, done.stdout
        if line.startswith("eos audit join"):
            assert done.stdout.count("PASS") == 6 and "FAIL" not in done.stdout, done.stdout

    by_order = {v["order"]: v for _, v in printed["orders-with-customer"]}
    assert by_order[1]["customer"] == {"tier": "gold"} and by_order[2]["customer"] == {"tier": "basic"}
    assert sorted((v["order"], v["price"]) for _, v in printed["orders-priced"]) == [(1, 5), (2, None)]
    assert [(k, v["order"], v["paid"]) for k, v in printed["orders-paid"]] == [("ann", 1, True)]
    profiles = dict(printed["customer-profiles"])  # each key's last line
    assert profiles == {"ann": {"customer": {"tier": "gold"}, "address": {"city": "Oslo"}},
                        "bob": {"customer": {"tier": "basic"}, "address": None}}
    assert dict(printed["subscriptions-with-tier"]) == {"s1": {"customer": "bob", "plan": "pro", "tier": "basic"},
                                                         "s2": {"customer": "cy", "plan": "pro", "tier": None}}
    assert dict(printed["customers-per-tier"]) == {"gold": 1, "basic": 1}
    assert dict(printed["customer-activity"]) == {"ann": {"orders": 1, "paid": 5}, "bob": {"orders": 1, "paid": 0}}


def test_the_schema_registry_example_runs_on_the_broker_with_a_registry_its_workers_share(
        kafka, schema_registry, tmp_path, monkeypatch):
    """The section's job, verbatim, on Spark: Avro payments in, Avro totals out (its store's changelog Avro
    too), written and read back by confluent-kafka's serializers with the suite's registry."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from integration_tests.helpers import produce
    from transactions import TopicSpec

    job, _ = readme_blocks("Schema Registry", commands=False)
    (tmp_path / "payments.py").write_text(job)
    bootstrap, registry = kafka.bootstrap_servers, SchemaRegistryClient({"url": schema_registry.url})
    clean_slate(bootstrap, "payments", ["payments", "eur-per-minute"])
    KafkaAdmin(bootstrap).create_topics([TopicSpec("payments", 1), TopicSpec("eur-per-minute", 1)])
    monkeypatch.setenv("SCHEMA_REGISTRY_URL", schema_registry.url)
    write = AvroSerializer(registry, runpy.run_path(str(tmp_path / "payments.py"))["PAYMENT"])  # the job's schema
    ctx = SerializationContext("payments", MessageField.VALUE)
    minute = (int(time.time()) // 60 - 10) * 60_000  # minutes ago: the broker refuses times far ahead
    payments = [(2.5, "EUR", minute), (9.0, "USD", minute + 1), (1.5, "EUR", minute + 2), (4.0, "EUR", minute + 60_000)]
    produce(bootstrap, "payments", [(b"ann", write({"amount": a, "currency": c}, ctx)) for a, c, _ in payments],
            timestamp_of=lambda n, key: payments[n][2])
    # the registry given on the command line, over the job's own default (http://localhost:8081, where none runs)
    env = {k: v for k, v in example_env(kafka, tmp_path).items() if k != "SCHEMA_REGISTRY_URL"}
    flag = ["--schema-registry-url", schema_registry.url]
    done = subprocess.run(["eos", "run", "payments.py", "--until-caught-up", *flag], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    audited = subprocess.run(["eos", "audit", "app", "payments.py", *flag], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=300)
    assert audited.returncode == 0 and "window" in audited.stdout, (audited.stdout[-3000:], audited.stderr[-3000:])
    read = AvroDeserializer(registry)
    totals = [read(v, SerializationContext("eur-per-minute", MessageField.VALUE)) for v in
              read_values(bootstrap, "eur-per-minute")]
    assert totals == [{"payments": 1, "amount": 2.5}, {"payments": 2, "amount": 4.0}, {"payments": 1, "amount": 4.0}]
    assert {"payments-value", "eur-per-minute-value", "payments-per_minute-store-changelog-value"} <= set(
        registry.get_subjects())
