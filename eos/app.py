"""The user API: an application with one or more sub-topologies, run on Spark.

    app = Application("orders-enricher", bootstrap_servers="localhost:9092")

    @app.process(input="orders", output="orders-enriched", value_serde="json")
    def enrich(record):                       # record in, zero or more records out
        return record.key, {**record.value, "total": record.value["qty"] * record.value["price"]}

    @app.process_batch(input="clicks", output="clicks-clean", format="pandas")
    def clean(df):                            # all records of a task's batch in, a table out
        return df[df.value.str.len() > 0]

    app.run(until_caught_up=True)
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from eos.config import EosConfig
from eos.dsl.base import InternalTopic, SerdeSpec
from eos.dsl.processor_api import GraphMethods
from eos.errors import ConfigError
from eos.graph import ProcessorGraph, SourceNode
from eos.hooks import FaultHooks
from eos.serde import Serde, serde_for
from eos.tables import history_retention
from eos.time import TimestampSpec, timestamp_extractor
from eos.topology import clocked_topics, table_changelogs
from recovery import StoreSpec

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import DataFrame, SparkSession

    from eos.describe import TopologyDescription
    from eos.driver.reports import RunSummary
    from eos.driver.spark import ContextStart
    from eos.queries import StoreSnapshot
    from eos.schema_registry import RegistrySerde
    from transactions import TopicSpec

__all__ = ["Application", "store"]

def store(name: str, *, key_serde: SerdeSpec = "bytes", value_serde: SerdeSpec = "json",
          persistent: bool = True, versioned: int | timedelta | None = None) -> StoreSpec:
    """Declare a key-value store: RocksDB when `persistent`, else in memory; changelog-backed either way.
    `versioned=history retention` (ms or a timedelta): a versioned store (`recovery.VersionedKeyValueStore`:
    values by timestamp, `get(key, as_of=t)`)."""
    retention = history_retention(versioned, f"store {name!r}")
    return StoreSpec(name, serde_for(key_serde), serde_for(value_serde), persistent,
                     kind="key_value" if retention is None else "versioned", retention_ms=retention,
                     serdes_from=(f"key_serde= of store({name!r})", f"value_serde= of store({name!r})"))


_LOADING: contextvars.ContextVar[str | None] = contextvars.ContextVar("eos_loading_job", default=None)


@contextlib.contextmanager
def loading_job(source: str) -> Iterator[None]:
    """While a tool (`eos run`, `eos audit app`) imports a job file to get its Application, `app.run()`
    called at the file's top level would start the job in the middle of the import: it fails at once."""
    token = _LOADING.set(source)
    try:
        yield
    finally:
        _LOADING.reset(token)


class Application(GraphMethods):
    """An exactly-once application: sub-topologies built with `process`, `process_batch`, `add_processor`,
    `repartition`, `aggregate`/`count`/`sum`/`reduce`, `table`/`global_table`/`join` (see `eos.dsl`), run on
    Spark by `run()`."""

    def __init__(self, application_id: str, bootstrap_servers: str | None = None, *,
                 timestamp: TimestampSpec = None, **settings: Any) -> None:
        """`settings` are `EosConfig` fields (an unknown name is refused with the closest valid ones).
        `timestamp` is the default event time of the sub-topologies (see `eos.time`; the record's own
        timestamp if not given).

        Bootstrap servers, in order of precedence: `eos run --bootstrap-servers`, then `bootstrap_servers`
        given here, then $EOS_BOOTSTRAP_SERVERS (read when the Application is created)."""
        bootstrap = bootstrap_servers or os.environ.get("EOS_BOOTSTRAP_SERVERS", "")
        self.config = EosConfig.create(application_id=application_id, bootstrap_servers=bootstrap, **settings)
        self.graph = ProcessorGraph()
        self.table_sources: dict[str, str] = {}
        self.internal_topics: dict[str, InternalTopic] = {}
        self.default_timestamp = timestamp_extractor(timestamp) if timestamp is not None else None
        self.fault_hooks = FaultHooks()
        #: the registry settings every Schema Registry serde of this application reads (`_registry_serde`)
        self._registry: dict[str, str] = {}

    # ------------------------------------------------------------------ configuration
    def configure(self, **changes: Any) -> Application:
        """Override settings (None values are ignored); validated like the constructor's. A new
        `schema_registry_url` or `schema_registry_auth` holds for the Schema Registry serdes made already too."""
        self.config = self.config.with_overrides(**changes)
        if self._registry:
            self._registry.clear()
            self._registry.update(self._registry_settings())
        return self

    def topic_specs(self, partitions: int, replication_factor: int | None = None,
                    settings: dict[str, str] | None = None) -> list[TopicSpec]:
        """The topics the job reads and writes, internal ones left out (the framework creates those at
        start-up): every input, output and global table topic, `partitions` each; a table's topic that is also
        its stores' changelog (`topology_optimization`) compacted (`eos topics create --from-app`)."""
        from transactions import TopicSpec

        subs = self.every_step()  # (a pattern's topics are named by whoever writes them)
        named = {t for sub in subs.values()
                 for t in (*sub.inputs, *sub.output_topics, *(g.topic for g in sub.global_tables))} - {
            p.pattern for p in self.graph.patterns.values()}
        tables = table_changelogs(subs)
        return [TopicSpec(t, partitions, replication_factor,
                          {"cleanup.policy": "compact", **(settings or {})} if t in tables else dict(settings or {}))
                for t in sorted(named - set(self.internal_topics))]

    def input_serdes(self, topic: str) -> tuple[Serde, Serde]:
        """The key and value serdes the step reading `topic` reads it with, bound to it (what a record written
        to the topic for this job is serialized with); a KeyError names the job's inputs if no step reads it."""
        subs = self.subtopologies.values()
        for sub in subs:
            if topic in sub.per_topic:
                ks, vs, _ = sub.per_topic[topic]
                break
            if topic in sub.inputs:
                ks, vs = sub.key_serde, sub.value_serde
                break
            table = next((t for t in sub.global_tables if t.topic == topic), None)
            if table is not None:
                ks, vs = table.key_serde, table.value_serde
                break
        else:
            source = next((self.graph.nodes[n] for n, p in self.graph.patterns.items() if p.fullmatch(topic)), None)
            if isinstance(source, SourceNode):  # (a topic a pattern will read, matched or not yet)
                return source.key_serde.bind(topic, True), source.value_serde.bind(topic, False)
            inputs = [*sorted({t for s in subs for t in s.inputs}),
                      *(f"a topic matching {p.pattern!r}" for p in self.graph.patterns.values())]
            raise KeyError(f"no step of {self.config.application_id!r} reads topic {topic!r}: write to one of its "
                           f"inputs ({', '.join(inputs)})")
        return ks.bind(topic, True), vs.bind(topic, False)

    # ------------------------------------------------------------------ Schema Registry serdes
    def avro(self, schema: str | None = None, **options: Any) -> RegistrySerde:
        """An Avro serde of the application's Schema Registry (`eos.schema_registry`): `schema` is the writer's
        schema (JSON text); None reads with each record's writer schema. Options: subject_strategy
        ("topic", "record", "topic_record"), auto_register, use_latest_version, to_dict, from_dict."""
        return self._registry_serde("avro", schema, options)

    def protobuf(self, message_type: Any, **options: Any) -> RegistrySerde:
        """A Protobuf serde of the application's Schema Registry for the generated message class
        `message_type` (values are instances of it)."""
        return self._registry_serde("protobuf", message_type, options)

    def json_schema(self, schema: str, **options: Any) -> RegistrySerde:
        """A JSON Schema serde of the application's Schema Registry (`schema`: the JSON Schema text)."""
        return self._registry_serde("json_schema", schema, options)

    def _registry_serde(self, format: Any, schema: Any, options: dict[str, Any]) -> RegistrySerde:
        from eos.schema_registry import RegistrySerde

        if not self.config.schema_registry_url:
            raise ConfigError(f"app.{'json_schema' if format == 'json_schema' else format}(...) needs the Schema "
                              "Registry: Application(..., schema_registry_url='http://host:8081')")
        if not self._registry:
            self._registry.update(self._registry_settings())
        return RegistrySerde(format, schema, self._registry, **options)

    @property
    def uses_schema_registry(self) -> bool:
        """Whether the job has Schema Registry serdes (`avro`, `protobuf`, `json_schema`)."""
        return bool(self._registry)

    def _registry_settings(self) -> dict[str, str]:
        cfg = self.config
        registry = {"url": cfg.schema_registry_url or ""}
        if cfg.schema_registry_auth:
            registry["basic.auth.user.info"] = cfg.schema_registry_auth
        return registry

    def describe(self) -> TopologyDescription:
        """The topology: sub-topologies with their source topics, step, stores and sink topics (`print()` it
        for Kafka Streams' layout; `.render("mermaid" | "dot")` for a picture)."""
        from eos.describe import describe

        return describe(self)

    # ------------------------------------------------------------------ topic patterns
    def match_patterns(self, topics: Iterable[str]) -> bool:
        """Have every source read by a pattern (`app.stream(re.compile(...))`) read the topics of `topics` it
        matches, the application's own internal topics and those starting with "__" left out; a repartition
        topic after such a source takes the partition count of its first topic. Returns whether any source's
        topics changed (the sub-topologies are then cut anew)."""
        from eos.ledger import ledger_topic

        cfg = self.config
        own = {cfg.dlq_topic, ledger_topic(cfg.application_id), *self.internal_topics,
               *(s.changelog_topic(cfg.application_id) for s in self.graph.stores.values())}
        changed = self.graph.match_patterns((t for t in topics if not t.startswith("__")), own)
        matched = self.graph.pattern_topics()
        for name, topic in list(self.internal_topics.items()):
            if topic.like_source is not None:
                self.internal_topics[name] = replace(topic, matched=tuple(matched[topic.like_source]))
        return changed

    def unmatched_patterns(self) -> list[str]:
        """The pattern sources that read no topic (none matched yet), as `'source' (pattern)`."""
        matched = self.graph.pattern_topics()
        return [f"{name!r} ({pattern.pattern!r})" for name, pattern in self.graph.patterns.items() if not matched[name]]

    @property
    def clocked_topics(self) -> frozenset[str]:
        """The topics between two of the job's steps whose records carry their writers' clocks
        (`eos.streamtime`; none with stream_time_across_topics="largest_seen")."""
        if self.config.stream_time_across_topics != "source_clocks":
            return frozenset()
        return clocked_topics(self.subtopologies)

    # ------------------------------------------------------------------ interactive queries
    def store_view(self, name: str, *, bootstrap_servers: str | None = None) -> StoreSnapshot:
        """A read-only view of the store (or global table) `name` as committed now: `get`, `range`, `all`,
        window `fetch`/`fetch_range`, and `.position`, the changelog offsets it reflects (see `eos.queries`)."""
        from eos.queries import store_view

        return store_view(self, name, bootstrap_servers)

    def read_store(self, name: str, spark: SparkSession, *, bootstrap_servers: str | None = None) -> DataFrame:
        """The committed contents of a store as a Spark DataFrame (see `eos.queries.read_store`)."""
        from eos.queries import read_store

        return read_store(self, name, spark, bootstrap_servers)

    def require_steps(self) -> None:
        """Raise `ConfigError` if the application has no step to run (a table or a global table alone is
        read only by the steps that join it)."""
        if not self.subtopologies and not self.graph.patterns:
            raise ConfigError(f"application {self.config.application_id!r} has no sub-topology: add one with "
                              "app.stream(...).to(...), @app.process, @app.process_batch, app.aggregate or "
                              "app.add_processor (a table or a global table is read by the steps that join it)")

    def preflight(self, master: str) -> None:
        """What can be checked before Spark starts: a sub-topology exists, the bootstrap servers answer and
        have the input and output topics, and (local masters) the state directory is writable. Raises
        `ConfigError` saying what to change."""
        from eos.driver.checks import preflight, user_topics

        self.require_steps()
        internal = {t.name for t in self.internal_topics.values()}  # created by the run (repartition topics)
        preflight(self.config, local_master=master.startswith("local"),
                  topics=user_topics(self.subtopologies) - internal)

    def run(self, spark: SparkContext | SparkSession | ContextStart | None = None, *, master: str | None = None,
            until_caught_up: bool = False, max_batches: int | None = None, max_seconds: float | None = None,
            handle_signals: bool = False, keep_task_results: bool = False,
            on_batch: Callable[..., None] | None = None) -> RunSummary:
        """Run on `spark` (a SparkContext, a SparkSession, or a `ContextStart` still starting one, after
        `preflight`; default: a new context on `master`, started while the driver prepares) until stopped,
        caught up, or a limit is reached."""
        from eos.driver.runner import Runner
        from eos.driver.spark import ContextStart, resolve_master, spark_context_of

        loading = _LOADING.get()
        if loading is not None:
            raise ConfigError(
                f"app.run() was called while {loading} was being loaded by an eos command, which runs (or audits) "
                "the application itself. Guard the call so it runs only when the file is executed directly:\n"
                "    if __name__ == \"__main__\":\n        app.run(until_caught_up=True)")
        _enable_faulthandler()
        sc: SparkContext | ContextStart | None = spark if isinstance(spark, ContextStart) else (
            spark_context_of(spark) if spark is not None else None)
        if sc is None and master is None:  # a context the program (or spark-submit's shell) already runs
            from pyspark import SparkContext

            sc = SparkContext._active_spark_context
        if sc is None:
            resolved = resolve_master(master)
            self.preflight(master=resolved)  # before the JVM starts, whose start-up lines would bury its error
            sc = ContextStart(resolved, app_name=self.config.application_id)  # Kafka's preparations overlap it
        elif not isinstance(sc, ContextStart):  # (whoever started a ContextStart ran the preflight before)
            self.preflight(master=str(sc.master))
        runner = Runner(self, sc)
        return runner.run(until_caught_up=until_caught_up, max_batches=max_batches, max_seconds=max_seconds,
                          handle_signals=handle_signals, keep_task_results=keep_task_results, on_batch=on_batch)


def _enable_faulthandler() -> None:
    """Have a crash in native code called from a Python thread of the driver (RocksDB, a client call) print
    every thread's Python stack to stderr instead of a bare "Segmentation fault"; left alone where stderr is
    not a real file. Crashes inside librdkafka's own threads bypass any handler (those threads block
    signals): the kernel log (`dmesg`) then names the library and offset."""
    import faulthandler

    if not faulthandler.is_enabled():
        try:
            faulthandler.enable()
        except (AttributeError, ValueError, OSError):  # e.g. notebooks, where stderr has no file descriptor
            pass
