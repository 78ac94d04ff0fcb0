"""Fixtures for integration tests: a real Kafka cluster and real Spark.

Kafka (session-scoped), in this order: the cluster named by EOS_BOOTSTRAP_SERVERS; a testcontainers
container when a Docker daemon answers a ping; a local KRaft cluster from the Maven jars. A Schema Registry
likewise (`localkafka.registry`), for the tests that ask for one.
Every test gets unique topic and group names.
"""

from __future__ import annotations

import gc
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from eos.driver.classdata import cache_root
from eos.driver.spark import DEFAULT_MASTER, build_spark_context, stop_context, with_java_tmpdir
from localkafka.cluster import JVM_OPTIONS_ENV
from localkafka.provision import KafkaEndpoint, provide_kafka
from localkafka.registry import RegistryEndpoint, provide_registry
from transactions import KafkaAdmin, TopicSpec

# The suite's JVMs compile with C1 only: it starts many that live seconds to minutes, and on two cores the
# CPU C2 spends compiling their start-up paths is the suite's time. A job's driver JVM does so by default
# (eos.driver.spark, spark.eos.quickJit); executors (local-cluster masters) through PySpark's launch arguments;
# the local brokers' (this process's and subprocesses') through localkafka: one broker's start plus 200,000
# records took 11.7 CPU-s with the defaults and 7 with C1 only.
# No Spark configuration directory is set: one with files in it is on the driver's classpath, where it keeps
# the class-data archive of `make setup` from fitting any driver (eos.driver.classdata). With the archive an
# `eos run` of a two-record job took 6.6 CPU-s and 5.4 s against 10.4 CPU-s and 8.3 s (2026-11-27).
# Tests that run the CLI with a HOME of their own find the archive, and recorded launches, where set-up made them.
os.environ.setdefault("PYSPARK_SUBMIT_ARGS",
                      "--conf spark.executor.extraJavaOptions=-XX:TieredStopAtLevel=1 pyspark-shell")
os.environ.setdefault("EOS_CLASS_DATA_CACHE", str(cache_root()))
os.environ.setdefault(JVM_OPTIONS_ENV, "-XX:TieredStopAtLevel=1")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Spark workers cannot import test modules: ship functions defined in them by value."""
    from pyspark import cloudpickle

    for module in {item.module for item in items if getattr(item, "module", None) is not None}:
        cloudpickle.register_pickle_by_value(module)


@pytest.fixture(scope="session", autouse=True)
def spark_scratch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Spark's scratch (`blockmgr-*`, `spark-*`) and the rest of its drivers' temporary files in the session's
    temporary directory, which pytest removes after three runs: a process a test kills (a chaos fault, a
    failover) cannot remove its own, and a `make test` left 36 block managers and 74 scratch directories in /tmp
    (SPARK_LOCAL_DIRS: none and 35), and of its 36 killed drivers' JVMs lz4's native library (~145 KB with its
    lock file), a faulthandler directory, spark-submit's scratch and a Unix socket each (`java.io.tmpdir`, which
    spark-submit gives the driver's JVM from SPARK_SUBMIT_OPTS). Processes the tests start inherit both; the
    caller's own SPARK_LOCAL_DIRS, or java.io.tmpdir in SPARK_SUBMIT_OPTS, is kept, and /tmp where the session's
    directory is too long for the drivers' Unix sockets."""
    with pytest.MonkeyPatch.context() as patch:
        if "SPARK_LOCAL_DIRS" not in os.environ:
            patch.setenv("SPARK_LOCAL_DIRS", str(tmp_path_factory.mktemp("spark-scratch")))
        options = with_java_tmpdir(os.environ.get("SPARK_SUBMIT_OPTS", ""), str(tmp_path_factory.mktemp("jvm-tmp")))
        if options:
            patch.setenv("SPARK_SUBMIT_OPTS", options)
        yield


@pytest.fixture(scope="session")
def kafka() -> Iterator[KafkaEndpoint]:
    with provide_kafka(brokers=1) as endpoint:
        yield endpoint
        gc.collect()  # (clients tests left in reference cycles close before their broker stops, not log refusals)


@pytest.fixture(scope="session")
def kafka3() -> Iterator[KafkaEndpoint]:
    """A local 3-node KRaft cluster (RF 3, min ISR 2) with per-broker fault controls."""
    with provide_kafka(brokers=3) as endpoint:
        yield endpoint
        gc.collect()


@pytest.fixture(scope="session")
def schema_registry() -> Iterator[RegistryEndpoint]:
    """A Schema Registry every process of a job shares: EOS_SCHEMA_REGISTRY_URL's, an Apicurio container
    where Docker answers, else the in-memory one of `localkafka.registry` in a process of its own."""
    with provide_registry() as endpoint:
        yield endpoint


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """`unique_name("in")` -> "in-<test name>-<random>": a fresh topic/group/app id per test."""
    stem = re.sub(r"[^a-zA-Z0-9]+", "-", request.node.name)[:40].strip("-")

    def make(prefix: str) -> str:
        return f"{prefix}-{stem}-{uuid.uuid4().hex[:8]}"

    return make


@pytest.fixture
def topic_factory(kafka: KafkaEndpoint, unique_name: Callable[[str], str]) -> Callable[..., str]:
    return make_topic_factory(kafka, unique_name)


def make_topic_factory(endpoint: KafkaEndpoint, unique_name: Callable[[str], str]) -> Callable[..., str]:
    admin = KafkaAdmin(endpoint.bootstrap_servers)

    def create(prefix: str = "topic", partitions: int = 1, config: dict[str, str] | None = None) -> str:
        """A new topic, returned once the cluster's metadata lists it."""
        name = unique_name(prefix)
        admin.create_topics([TopicSpec(name, partitions, min(endpoint.brokers, 3), config or {})], timeout=30)
        return name

    return create


class SparkContexts:
    """One SparkContext per process: switch masters by stopping the running session first."""

    def __init__(self) -> None:
        self.master: str | None = None
        self.session = None

    def get(self, master: str, conf: dict[str, str] | None = None):
        if self.session is not None and self.master != master:
            self.stop()
        if self.session is None:
            self.session = build_spark_context(master, app_name="eos-tests", conf=conf)
            self.master = master
        return self.session

    def stop(self) -> None:
        if self.session is not None:
            stop_context(self.session)
            self.session, self.master = None, None


@pytest.fixture(scope="session")
def spark_contexts() -> Iterator[SparkContexts]:
    sessions = SparkContexts()
    yield sessions
    sessions.stop()


@pytest.fixture
def spark(spark_contexts: SparkContexts):
    """A SparkContext in local mode (2 threads, up to 4 attempts per task), speculation off."""
    return spark_contexts.get(DEFAULT_MASTER)


@pytest.fixture
def spark_cluster(spark_contexts: SparkContexts):
    """A SparkContext in local-cluster mode: two executor JVMs with one core each."""
    return spark_contexts.get("local-cluster[2,1,1024]")


@pytest.fixture
def spark_cluster3(spark_contexts: SparkContexts):
    """Three executor JVMs with one core each; executors lost to a test are replaced by Spark."""
    sc = spark_contexts.get("local-cluster[3,1,1024]")
    from eos.driver.spark import live_executors

    deadline = time.monotonic() + 120
    while len(live_executors(sc)) < 3 and time.monotonic() < deadline:
        time.sleep(0.5)
    return sc
