"""Typed, frozen, validated configuration of an exactly-once application.

Validation runs when the config is built and says what to change. Settings that need the broker or
Spark (topics, partition counts, speculation, broker limits) are checked at start-up by `eos.driver.checks`.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from eos.errors import ConfigError
from eos.offset_reset import offset_reset
from transactions import UnsafeClientSetting, check_client_properties, consumer_settings, producer_settings

__all__ = ["EosConfig", "BadRecordPolicy", "ProcessingGuarantee"]

BadRecordPolicy = Literal["dead_letter", "fail"]
ProcessingGuarantee = Literal["exactly_once", "at_least_once"]
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


@dataclass(frozen=True)
class EosConfig:
    application_id: str
    bootstrap_servers: str
    #: "exactly_once" (one transaction per task and batch) or "at_least_once" (flush outputs, then commit
    #: offsets outside a transaction: duplicates possible after failures; for comparison and lenient jobs).
    processing_guarantee: ProcessingGuarantee = "exactly_once"
    #: Upper bound of records read from one input partition in one batch (a batch of one partition that was
    #: not capped reads on to its last stable offset when its task starts reading, within it:
    #: `BatchAttempt.extend_to_stable_end`).
    max_records_per_batch: int = 200_000
    #: Behind a backlog, size batches to take about `trigger_interval` (as Kafka Streams commits every
    #: `commit.interval.ms` while it works through one): from 200,000 records a batch over the widest
    #: sub-topology's partitions (50,000 each up to 4 partitions; at most max_records_per_batch each), scaled by
    #: how long the last backlog batch took, within first_batch_max_records (per partition, shared the same way
    #: past 4 partitions) and max_records_per_batch. False, or a trigger_interval of 0: every batch behind a
    #: backlog takes max_records_per_batch per partition.
    size_backlog_batches: bool = True
    #: Upper bound of the same in a run's first batch (at most max_records_per_batch; a unit of tasks sharing a
    #: transaction, `tasks_per_transaction`, runs only its first task with input then). The first batch also
    #: starts Spark's Python workers and the Kafka clients; a small one makes the first outputs visible (and
    #: a restarted job's recovery) that much sooner.
    first_batch_max_records: int = 5_000
    #: How many tasks of a sub-topology share one transaction: partitions [k*n, (k+1)*n) are one unit, with one
    #: transactional id (`<application_id>-<subtopology>-<first>x<n>`), run together by one worker and
    #: committed by one transaction per batch (Kafka Streams' exactly_once_v2 commits all of a thread's tasks
    #: in one). 1: a transaction per task. Fewer, larger transactions cost fewer commits and commit markers on
    #: many partitions; a unit is also the smallest thing that moves between workers. "auto": a unit per task
    #: slot (the sub-topology's tasks over the application's task slots, rounded up) where that puts at least
    #: `AUTO_UNIT_MIN_TASKS` tasks in a unit, else 1; chosen at the application's first run and kept after it
    #: (its commits record it), so that it never changes by itself. A change takes effect safely: a task first
    #: fences the transactional id that last committed it (docs/design.md, section 3, on when a change is
    #: exactly-once).
    tasks_per_transaction: int | Literal["auto"] = "auto"
    #: Seconds between the starts of two batches. A batch that takes longer, or that `max_records_per_batch`
    #: capped (the input is behind), is followed at once.
    trigger_interval: float = 1.0
    #: A task reading one input partition through a processor streams its batch: it reads, processes and
    #: produces it in slices, handing the producer its outputs (and dead letters) whenever this many have
    #: gathered, so a batch is never held whole. 0: every batch is read whole, then processed, then produced.
    batch_slice_records: int = 5_000
    #: A unit of tasks sharing a transaction (`tasks_per_transaction`) reads the input of consecutive tasks in
    #: one read of at most this many offsets (a task with more reads alone), and holds it until each of them
    #: processes its own: larger is fewer reads and more memory held.
    unit_read_records: int = 50_000
    #: Longest time a task may need to produce and commit one batch. Must stay below the transaction timeout.
    batch_timeout: float = 30.0
    #: transaction.timeout.ms of the task producers; the broker aborts a transaction open longer than this.
    transaction_timeout_ms: int = 60_000
    #: What to do with a record that cannot be deserialized or processed.
    on_bad_record: BadRecordPolicy = "dead_letter"
    #: Dead-letter topic; default `<application_id>-dlq` (created by the framework).
    dead_letter_topic: str | None = None
    #: Add the `eos.origin` lineage header (input topic, partition, offset, index) to every output.
    lineage: bool = True
    #: An OpenTelemetry span per task and batch, linked to the traces of its input records (`eos.tracing`;
    #: needs opentelemetry-api, and an SDK configured where tasks run to export anything)
    tracing: bool = False
    #: Where a partition starts when the group has no committed offset (`eos.offset_reset`): "earliest",
    #: "latest", "none" (refuse to start), or a datetime.timedelta back from the start ("by_duration:PT1H").
    #: A source's own (`app.stream(..., auto_offset_reset=...)`) overrides it.
    auto_offset_reset: str = "earliest"
    #: Attempts of one batch inside one Spark task (abortable errors, recreated producers).
    max_batch_attempts: int = 5
    #: Consecutive failed batches (planning errors, Spark jobs that failed) the driver re-plans before it
    #: gives up. Re-planning is always safe: the committed offsets are the only record of progress.
    max_failed_batches: int = 5
    #: Local state directory (stores live in <state_dir>/<application_id>/<task>/<store>).
    state_dir: str = "~/.eos/state"
    #: Kafka Streams' record cache (statestore.cache.max.bytes), per task: keyed, windowed (emit="update")
    #: and table aggregations forward the latest value per key once per batch, or when the cache is full,
    #: instead of every update (`eos.cache`: fewer outputs, a change of semantics). 0: off.
    cache_max_bytes: int = 0
    #: Kafka Streams' topology.optimization: "reuse_table_source_topics" (or "all", which is it here): a table
    #: read from a topic and kept only by stream-table joins uses that topic as its stores' changelog (none of
    #: their own; restored up to the task's committed offset in it; the topic must be compacted). "none":
    #: every store writes its own changelog.
    topology_optimization: Literal["none", "all", "reuse_table_source_topics"] = "none"
    #: Extra copies of each task's persistent stores on other executors, refreshed from the changelogs.
    num_standby_replicas: int = 0
    #: Longest a standby copy replays its changelogs in one batch (s); a copy further behind catches up
    #: over several batches instead of holding a batch (and its active tasks' next batch) up.
    standby_refresh_budget: float = 2.0
    #: A task moves for balance only to a copy at most this many records behind (else it warms one up).
    acceptable_recovery_lag: int = 10_000
    #: Keep tasks on the executors where their state is (Spark preferred locations; best effort).
    placement: bool = True
    #: Replication factor of internal topics (changelogs, dead letters); None: the broker default.
    internal_replication_factor: int | None = None
    #: librdkafka passthrough (cannot weaken exactly-once: see transactions.settings.PROTECTED).
    producer_config: Mapping[str, Any] = field(default_factory=dict)
    consumer_config: Mapping[str, Any] = field(default_factory=dict)
    #: A batch that sends more than this share of a task's input records to the dead-letter topic is
    #: logged as a warning (the run summary counts such batches; `eos run --fail-on-dead-letters` fails).
    dead_letter_warn_ratio: float = 0.5
    #: Stream time of a step that reads a topic another step of the job writes: "source_clocks" (records
    #: carry their writers' clocks and the step's stream time is the slowest source's: eos.streamtime), or
    #: "largest_seen" (Kafka Streams' rule: the largest timestamp the task has seen, which over a backlog
    #: calls much of such a topic late).
    stream_time_across_topics: Literal["source_clocks", "largest_seen"] = "source_clocks"
    #: ... and how long (s) a task of the writing step may have no input before it tells those readers
    #: not to wait for its clock (it is idle); 0: at once. Readers wait for a quiet source that long.
    source_idle_timeout: float = 30.0
    #: A step that has dropped more than this share of its input as late (over the run so far) is warned
    #: about loudly, once; with `late_fail_ratio` set, a step above that share stops the job.
    late_warn_ratio: float = 0.01
    late_fail_ratio: float | None = None
    #: Refuse to start while another driver of the same application runs (a lease through a consumer
    #: group); a new driver waits up to `driver_lease_timeout` seconds for a dead one's lease to expire.
    driver_lease: bool = True
    driver_lease_timeout: float = 15.0
    #: seconds between purges of the consumed records of repartition topics (Kafka Streams'
    #: repartition.purge.interval.ms); 0 keeps them (the window audit of a step that reads one needs them)
    repartition_purge_interval: float = 30.0
    #: seconds between a running job's looks at its input topics: topics created since that a source's topic
    #: pattern matches (`app.stream(re.compile(...))`), and partitions added to an input (Kafka Streams'
    #: metadata.max.age.ms, 5 minutes there)
    metadata_refresh_interval: float = 10.0
    #: Serve Prometheus metrics on this port of the driver (None: off), bound to `metrics_host`.
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    #: The Schema Registry of `app.avro(...)`, `app.protobuf(...)`, `app.json_schema(...)` serdes (None: none;
    #: "mock://name": confluent-kafka's in-memory registry of one process, for tests), and its basic auth
    #: "user:password"
    schema_registry_url: str | None = None
    schema_registry_auth: str | None = None
    #: Logging: "auto" (console on a TTY, JSON otherwise), "json" or "console"; and the level.
    log_format: Literal["auto", "json", "console"] = "auto"
    log_level: str = "INFO"

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            object.__setattr__(self, f.name, offset_reset(value) if f.name == "auto_offset_reset" else
                               _coerce(f.name, value, _HINTS[f.name]))
        self._validate()

    @classmethod
    def create(cls, **settings: Any) -> EosConfig:
        """Build from keyword settings; an unknown name is refused with the closest valid names."""
        check_setting_names(settings)
        return cls(**settings)

    def with_overrides(self, **changes: Any) -> EosConfig:
        """A copy with `changes` applied (None values are ignored), validated like the original."""
        check_setting_names(changes)
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    @property
    def dlq_topic(self) -> str:
        return self.dead_letter_topic or f"{self.application_id}-dlq"

    @property
    def group_id(self) -> str:
        return self.application_id

    def require_bootstrap(self) -> None:
        """Checked at start-up rather than construction: the CLI and environment may supply it late."""
        if not self.bootstrap_servers:
            raise ConfigError("bootstrap_servers is empty: give host:port[,host:port] of the Kafka cluster "
                              "(--bootstrap-servers, or set EOS_BOOTSTRAP_SERVERS; `eval \"$(eos cluster env)\"` "
                              "for a local cluster)")

    def _validate(self) -> None:
        if not _NAME.match(self.application_id or ""):
            raise ConfigError(f"application_id {self.application_id!r} must be 1-200 characters of "
                              "[A-Za-z0-9._-] (it names transactional ids, the consumer group and internal topics)")
        _positive("max_records_per_batch", self.max_records_per_batch)
        _positive("first_batch_max_records", self.first_batch_max_records)
        _positive("batch_timeout", self.batch_timeout)
        _positive("max_batch_attempts", self.max_batch_attempts)
        if self.tasks_per_transaction != "auto":
            _positive("tasks_per_transaction", self.tasks_per_transaction)
        _positive("standby_refresh_budget", self.standby_refresh_budget)
        if self.tracing:
            try:
                import opentelemetry.trace  # noqa: F401
            except ImportError:
                raise ConfigError("tracing=True needs OpenTelemetry: pip install 'eos-spark-kafka[tracing]' "
                                  "(opentelemetry-api; an SDK and exporter where the tasks run to see spans)") from None
        if self.acceptable_recovery_lag < 0:
            raise ConfigError(f"acceptable_recovery_lag must be >= 0 records, got {self.acceptable_recovery_lag}")
        if self.trigger_interval < 0:
            raise ConfigError(f"trigger_interval must be >= 0 seconds, got {self.trigger_interval}")
        if self.transaction_timeout_ms < self.batch_timeout * 1000:
            raise ConfigError(
                f"transaction_timeout_ms={self.transaction_timeout_ms} is shorter than batch_timeout="
                f"{self.batch_timeout}s: the broker would abort transactions that are still committing. "
                f"Raise transaction_timeout_ms to at least {int(self.batch_timeout * 1000)} (2x is a good margin), "
                "or lower batch_timeout and max_records_per_batch.")
        if self.batch_slice_records < 0:
            raise ConfigError(f"batch_slice_records must be >= 0 records (0: batches held whole, not streamed), got "
                              f"{self.batch_slice_records}")
        if self.unit_read_records < 1:
            raise ConfigError(f"unit_read_records must be >= 1 offsets (the most a unit of tasks reads at once), got "
                              f"{self.unit_read_records}")
        if self.cache_max_bytes < 0:
            raise ConfigError(f"cache_max_bytes must be >= 0 bytes (0: no record cache; Kafka Streams' default is "
                              f"10485760), got {self.cache_max_bytes}")
        if self.num_standby_replicas < 0:
            raise ConfigError(f"num_standby_replicas must be >= 0, got {self.num_standby_replicas}")
        if self.dead_letter_topic is not None and not _NAME.match(self.dead_letter_topic):
            raise ConfigError(f"dead_letter_topic {self.dead_letter_topic!r} is not a valid topic name")
        _positive("driver_lease_timeout", self.driver_lease_timeout)
        if self.metrics_port is not None and not 0 < self.metrics_port < 65536:
            raise ConfigError(f"metrics_port must be a TCP port (1-65535) or None, got {self.metrics_port}")
        if self.repartition_purge_interval < 0:
            raise ConfigError(f"repartition_purge_interval must be >= 0 seconds (0: never purge), got "
                              f"{self.repartition_purge_interval}")
        _positive("metadata_refresh_interval", self.metadata_refresh_interval)
        if not 0 < self.dead_letter_warn_ratio <= 1:
            raise ConfigError(f"dead_letter_warn_ratio must be in (0, 1], got {self.dead_letter_warn_ratio}")
        if self.stream_time_across_topics not in ("source_clocks", "largest_seen"):
            raise ConfigError(f"stream_time_across_topics must be 'source_clocks' or 'largest_seen', got "
                              f"{self.stream_time_across_topics!r}")
        if self.source_idle_timeout < 0:
            raise ConfigError(f"source_idle_timeout must be >= 0 seconds, got {self.source_idle_timeout}")
        for name in ("late_warn_ratio", "late_fail_ratio"):
            ratio = getattr(self, name)
            if ratio is not None and not 0 <= ratio <= 1:
                raise ConfigError(f"{name} must be a share of a step's input in [0, 1], got {ratio}")
        try:
            producer_settings(self.bootstrap_servers or "unset", "check", self.transaction_timeout_ms,
                              self.producer_config)
            consumer_settings(self.bootstrap_servers or "unset", "check", self.consumer_config)
            check_client_properties(producer_settings("", "check", self.transaction_timeout_ms, self.producer_config),
                                    consumer_settings("", "check", self.consumer_config))
        except (UnsafeClientSetting, ValueError) as exc:
            raise ConfigError(str(exc)) from None


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise ConfigError(f"{name} must be > 0, got {value}")


_HINTS = typing.get_type_hints(EosConfig)
SETTINGS = tuple(f.name for f in fields(EosConfig))


#: Kafka Streams' settings that are named or given otherwise here (by their names with "_" for ".")
_KAFKA_STREAMS = {
    "commit_interval_ms": "each batch commits once: trigger_interval is the seconds between batches",
    "statestore_cache_max_bytes": "cache_max_bytes", "cache_max_bytes_buffering": "cache_max_bytes",
    "num_stream_threads": "tasks run on Spark's executors: the master's cores (local[N], or the cluster's) "
                          "set how many run at once",
    "replication_factor": "internal_replication_factor",
    "repartition_purge_interval_ms": "repartition_purge_interval (seconds)",
    "metadata_max_age_ms": "metadata_refresh_interval (seconds), how often a running job looks for new topics its "
                           "patterns match and partitions added to its inputs",
    "default_key_serde": "serdes are given per topic: key_serde= and value_serde= on stream(), table() and to()",
    "default_value_serde": "serdes are given per topic: key_serde= and value_serde= on stream(), table() and to()",
    "default_timestamp_extractor": "timestamp= on stream() and table() (\"record\", \"field:<name>\", a function)",
    "default_deserialization_exception_handler": "on_bad_record (bad records go to the dead-letter topic)",
    "default_production_exception_handler": "on_bad_record (bad records go to the dead-letter topic)",
}


def check_setting_names(settings: Mapping[str, Any]) -> None:
    """Refuse names that are not settings, with what a Kafka Streams setting of that name is here, or the
    closest valid names, and the list of all of them."""
    for name in settings:
        if name not in _HINTS:
            close = difflib.get_close_matches(name, SETTINGS, n=3, cutoff=0.6)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            streams = _KAFKA_STREAMS.get(name.replace(".", "_").lower())
            if streams is not None:
                ks = name.replace("_", ".")
                hint = (f" Kafka Streams' {ks} is {streams} here." if streams.split(" (")[0] in SETTINGS
                        else f" Kafka Streams' {ks}: {streams} here.")
            raise ConfigError(f"unknown setting {name!r}.{hint} Valid settings: {', '.join(SETTINGS)}. "
                              "(librdkafka properties go in producer_config / consumer_config.)")


_TRUE, _FALSE = {"true", "yes", "on", "1"}, {"false", "no", "off", "0"}


def _coerce(name: str, value: Any, hint: Any) -> Any:
    """The value as the setting's type: numbers and booleans given as strings (environment, command line)
    are converted; anything else of the wrong type is refused, naming the setting."""
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        named = [a for o in options if typing.get_origin(o) is Literal for a in typing.get_args(o)]
        if value in named:  # a word the setting takes besides its type's values (tasks_per_transaction="auto")
            return value
        hint = next(o for o in options if o is not type(None) and typing.get_origin(o) is not Literal)
        if named:
            try:
                return _coerce(name, value, hint)
            except ConfigError:
                raise ConfigError(f"{name} must be {'an integer' if hint is int else 'a number'} or "
                                  f"{' or '.join(repr(a) for a in named)}, got {value!r}") from None
        origin = typing.get_origin(hint)
    if origin is Literal:
        allowed = typing.get_args(hint)
        if value not in allowed:
            also = (" (Kafka Streams' exactly_once_v2 is exactly_once here: a transaction per task and batch)"
                    if name == "processing_guarantee" and str(value).startswith("exactly_once") else "")
            raise ConfigError(f"{name} must be one of {', '.join(repr(a) for a in allowed)}, got {value!r}{also}")
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise ConfigError(f"{name} must be true or false, got {value!r}")
    if hint in (int, float):
        if isinstance(value, bool):
            raise ConfigError(f"{name} must be a number, got {value!r}")
        if isinstance(value, (int, float)) or isinstance(value, str):
            try:
                number = float(value) if hint is float else _as_int(value)
            except ValueError:
                raise ConfigError(f"{name} must be {'a number' if hint is float else 'an integer'}, "
                                  f"got {value!r}") from None
            return number
        raise ConfigError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{name} must be a string, got {type(value).__name__} {value!r}")
        return value
    if (origin is not None and issubclass(origin, Mapping)) or hint is Mapping:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{name} must be a mapping of librdkafka properties, got {type(value).__name__}")
        return dict(value)
    return value


def _as_int(value: int | float | str) -> int:
    if isinstance(value, int):
        return value
    number = float(value)
    if not number.is_integer():
        raise ValueError(value)
    return int(number)
