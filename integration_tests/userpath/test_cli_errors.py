"""What a user sees from the command line when something is wrong: one line that says what to change, an
exit status, and no flood of client logs; and `eos topics`."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from integration_tests.helpers import produce, read_values
from transactions import KafkaAdmin

ROOT = Path(__file__).resolve().parents[2]


def eos(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "eos.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def job_file(tmp_path: Path, body: str, name: str = "job.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def environment(bootstrap: str, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "EOS_BOOTSTRAP_SERVERS": bootstrap, "HOME": str(tmp_path)}


COPY_JOB = """
    from eos import Application

    app = Application("{app}"{settings})

    @app.process(input="{src}", output="{dst}", value_serde="json")
    def copy(record):
        return record.key, record.value["n"]
    {tail}
"""


def test_a_wrong_bootstrap_address_fails_fast_with_one_line_and_no_client_log_flood(kafka, tmp_path, unique_name):
    job = job_file(tmp_path, COPY_JOB.format(app=unique_name("app"), settings="", src="a", dst="b", tail=""))
    started = time.monotonic()
    done = eos(["run", str(job), "--until-caught-up", "--bootstrap-servers", "127.0.0.1:1"],
               environment(kafka.bootstrap_servers, tmp_path), tmp_path)
    took = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    assert took < 30, f"took {took:.0f}s"
    assert "no Kafka broker answers at 127.0.0.1:1 within 10s" in done.stderr
    assert "eos cluster up" in done.stderr and "EOS_BOOTSTRAP_SERVERS" in done.stderr
    assert "rdkafka" not in done.stderr and len(done.stderr.strip().splitlines()) <= 3, done.stderr


def test_a_missing_topic_fails_before_spark_starts_with_the_error_last(kafka, topic_factory, tmp_path, unique_name):
    src = topic_factory("in", 2)
    job = job_file(tmp_path, COPY_JOB.format(app=unique_name("app"), settings="", src=src, dst=unique_name("nowhere"),
                                             tail=""))
    done = eos(["run", str(job), "--until-caught-up"], environment(kafka.bootstrap_servers, tmp_path), tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert "do not exist" in lines[-1] and "eos topics create --from-app" in lines[-1], done.stderr
    assert src not in lines[-1].split("do not exist")[0]  # only the missing one is named
    # no context was started, and the JVM launched early (eos.driver.jvm) was ended without a word
    assert not any("Spark" in line or "log4j" in line or "WARNING" in line for line in lines), done.stderr


def test_a_spark_home_without_spark_fails_fast_and_says_what_to_change(tmp_path, unique_name):
    job = job_file(tmp_path, COPY_JOB.format(app=unique_name("app"), settings="", src="a", dst="b", tail=""))
    for home in ("", str(tmp_path)):  # set but empty (PySpark then runs ./bin/spark-submit), or not Spark's
        done = eos(["run", str(job), "--until-caught-up"], {**environment("127.0.0.1:1", tmp_path), "SPARK_HOME": home},
                   tmp_path, timeout=120)
        assert done.returncode == 2, done.stderr
        line = done.stderr.strip().splitlines()[-1]
        assert f"SPARK_HOME={home!r} holds no bin/spark-submit" in line and "unset it" in line, done.stderr
        assert "Traceback" not in done.stderr and "FileNotFoundError" not in done.stderr, done.stderr


def test_app_run_at_the_top_level_of_a_loaded_file_fails_at_once_with_what_to_do(kafka, tmp_path, unique_name):
    job = job_file(tmp_path, COPY_JOB.format(app=unique_name("app"), settings="", src="a", dst="b",
                                             tail="app.run(until_caught_up=True)"))
    env = environment(kafka.bootstrap_servers, tmp_path)
    for command in (["run", str(job), "--until-caught-up"], ["audit", "app", str(job)]):
        started = time.monotonic()
        done = eos(command, env, tmp_path)
        assert done.returncode == 2, done.stdout + done.stderr
        assert time.monotonic() - started < 20
        assert "app.run() was called while" in done.stderr and 'if __name__ == "__main__":' in done.stderr


def test_misspelt_settings_and_client_properties_name_what_was_meant(kafka, tmp_path, unique_name):
    env = environment(kafka.bootstrap_servers, tmp_path)
    for settings, says in ((", bath_timeout=10", "Did you mean 'batch_timeout'?"),
                           (", producer_config={'linger.msec': 5}", "Did you mean 'linger.ms'?"),
                           (", batch_timeout='half a minute'", "batch_timeout must be a number")):
        job = job_file(tmp_path, COPY_JOB.format(app=unique_name("app"), settings=settings, src="a", dst="b", tail=""))
        done = eos(["run", str(job), "--until-caught-up"], env, tmp_path)
        assert done.returncode == 2 and says in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_a_job_that_dead_letters_most_records_is_loud_and_can_fail_the_run(kafka, topic_factory, unique_name,
                                                                            tmp_path):
    src, dst = topic_factory("in", partitions=1), topic_factory("out", partitions=1)
    produce(kafka.bootstrap_servers, src, [(b"k", b"not json")] * 9 + [(b"k", b'{"n": 1}')])
    job = job_file(tmp_path, COPY_JOB.format(app=unique_name("app"), settings="", src=src, dst=dst, tail=""))
    done = eos(["run", str(job), "--until-caught-up", "--fail-on-dead-letters"],
               environment(kafka.bootstrap_servers, tmp_path), tmp_path)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "most of the batch went to the dead-letter topic" in done.stderr  # the per-batch warning
    assert "9 of 10 input records went to the dead-letter topic" in done.stderr
    assert "(--fail-on-dead-letters)" in done.stderr and "cannot deserialize" in done.stderr
    assert read_values(kafka.bootstrap_servers, dst) == [b"1"]


def test_topics_are_created_listed_written_and_deleted_from_the_command_line(kafka, tmp_path, unique_name):
    env = environment(kafka.bootstrap_servers, tmp_path)
    a, b = unique_name("t"), unique_name("t")
    job = job_file(tmp_path, COPY_JOB.format(app=unique_name("app"), settings="", src=a, dst=b, tail=""))
    created = eos(["topics", "create", "--from-app", str(job), "--partitions", "3"], env, tmp_path)
    assert created.returncode == 0 and f"created {a} (3 partition(s))" in created.stdout, created.stderr
    again = eos(["topics", "create", a, "--compact"], env, tmp_path)
    assert f"exists  {a} (3 partition(s)), left as it is" in again.stdout
    written = subprocess.run([sys.executable, "-m", "eos.cli", "topics", "produce", a], input="k1\tv1\nv2\n",
                             env=env, capture_output=True, text=True, timeout=120)
    assert "2 record(s) written" in written.stdout, written.stderr
    assert sorted(read_values(kafka.bootstrap_servers, a)) == [b"v1", b"v2"]
    listed = eos(["topics", "list"], env, tmp_path)
    assert a in listed.stdout and b in listed.stdout
    assert f"now {a} (5 partition(s))" in eos(["topics", "partitions", a, "5"], env, tmp_path).stdout
    fewer = eos(["topics", "partitions", a, "2"], env, tmp_path)
    assert fewer.returncode == 2 and "has 5 partitions: Kafka cannot take partitions away" in fewer.stderr
    assert eos(["topics", "create"], env, tmp_path).returncode == 2
    assert f"deleted {b}" in eos(["topics", "delete", b], env, tmp_path).stdout
    missing = subprocess.run([sys.executable, "-m", "eos.cli", "topics", "produce", unique_name("nowhere")],
                             input="k\tv\n", env=env, capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "does not exist: create it first" in missing.stderr, missing.stderr
    assert "Traceback" not in missing.stderr
    ahead = subprocess.run([sys.executable, "-m", "eos.cli", "topics", "produce", "--timestamps", a],  # a day ahead
                           input=f"now\tk\tv3\n{int(time.time() * 1000) + 86_400_000}\tk\tv4\n", env=env,
                           capture_output=True, text=True, timeout=120)
    said = " ".join(ahead.stderr.split())
    assert ahead.returncode == 1 and "Traceback" not in ahead.stderr, ahead.stderr
    assert "records to " + a + " were refused" in said and "The latest timestamp given is 24.0 h ahead of now: a " \
        "broker refuses records further ahead of its clock than the topic's message.timestamp.after.max.ms" in said


TABLE_JOB = """
    from eos import Application

    app = Application("{app}", topology_optimization="{optimization}")
    app.stream("{orders}").left_join(app.table("{prices}"), lambda o, p: [o, p], name="priced").to("{out}")
"""


def test_a_table_topic_that_is_its_stores_changelog_is_created_compacted_and_refused_when_not(
        kafka, topic_factory, unique_name, tmp_path):
    """`topology_optimization="all"`: `eos topics create --from-app` creates the table's topic compacted (it is
    its stores' changelog); turning the optimization off after a run is refused (the stores would start empty),
    and so is a job whose table topic retention would empty, both at start-up, saying what to change."""
    env = environment(kafka.bootstrap_servers, tmp_path)
    app, orders, prices, out = unique_name("app"), unique_name("orders"), unique_name("prices"), unique_name("out")
    job = job_file(tmp_path, TABLE_JOB.format(app=app, orders=orders, prices=prices, out=out, optimization="all"))
    created = eos(["topics", "create", "--from-app", str(job)], env, tmp_path)
    assert f"created {prices} (1 partition(s)), compacted: the changelog of its table's stores" in created.stdout, \
        created.stdout + created.stderr
    assert f"created {orders} (1 partition(s))\n" in created.stdout
    assert KafkaAdmin(kafka.bootstrap_servers).topic_config(prices)["cleanup.policy"] == "compact"
    produce(kafka.bootstrap_servers, prices, [(b"apple", b"3")])
    produce(kafka.bootstrap_servers, orders, [(b"apple", b'"o1"')])
    done = eos(["run", str(job), "--until-caught-up"], env, tmp_path)
    assert done.returncode == 0 and read_values(kafka.bootstrap_servers, out) == [b'["o1",3]'], done.stderr[-2000:]
    job = job_file(tmp_path, TABLE_JOB.format(app=app, orders=orders, prices=prices, out=out, optimization="none"))
    done = eos(["run", str(job), "--until-caught-up"], env, tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"store 'priced-{prices}' keeps table {prices} but has no changelog" in done.stderr, done.stderr
    assert "run it so again" in done.stderr and "eos reset" in done.stderr and "Traceback" not in done.stderr

    orders, prices, out = (topic_factory(n, partitions=1) for n in ("orders", "prices", "out"))
    job = job_file(tmp_path, TABLE_JOB.format(app=unique_name("app"), orders=orders, prices=prices, out=out,
                                              optimization="all"))
    done = eos(["run", str(job), "--until-caught-up"], env, tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"table topic {prices} is the changelog of store(s) priced-{prices}" in done.stderr, done.stderr
    assert f"Set cleanup.policy=compact on {prices}" in done.stderr and "Traceback" not in done.stderr


def test_every_command_that_talks_to_kafka_checks_the_address_first(tmp_path, unique_name):
    """eos audit (each mode) and eos store answer a wrong address in about 10 s with one line, as eos run and
    eos topics do (they took ~2 minutes and ~2,500 lines before a traceback)."""
    env = environment("127.0.0.1:1", tmp_path)
    job = job_file(tmp_path, COPY_JOB.format(app=unique_name("app"), settings="", src="a", dst="b", tail=""))
    commands = [["audit", "app", str(job)], ["audit", "window", str(job)], ["audit", "join", str(job)],
                ["audit", "lineage", "-i", "a", "-o", "b"], ["store", "get", str(job), "s", "k"]]
    # the commands wait on the address side by side (each alone took ~11 s of waiting, one after the other)
    with ThreadPoolExecutor(len(commands)) as pool:
        for command, (done, took) in zip(commands, pool.map(lambda c: timed_eos(c, env, tmp_path), commands),
                                         strict=True):
            assert done.returncode == 2, (command, done.stdout, done.stderr)
            assert "no Kafka broker answers at 127.0.0.1:1 within 10s" in done.stderr, (command, done.stderr)
            assert took < 30 and len(done.stderr.strip().splitlines()) <= 3, (command, took, done.stderr)


def timed_eos(args: list[str], env: dict[str, str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = eos(args, env, cwd, timeout=120)
    return done, time.monotonic() - started


def test_audit_help_names_every_mode(tmp_path):
    done = eos(["audit", "--help"], {**os.environ, "COLUMNS": "200"}, tmp_path)
    for mode in ("app", "window", "join", "lineage", "aggregate"):
        assert mode in done.stdout.split("Commands")[0], done.stdout
