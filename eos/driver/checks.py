"""Start-up checks that need the broker or Spark, and the internal topics (dead letters, changelogs) the
framework creates. Each failure is a `ConfigError` that says what to change."""

from __future__ import annotations

import contextvars
import os
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from eos.config import EosConfig
from eos.dsl.base import InternalTopic
from eos.errors import ConfigError
from eos.graph.graph import table_stores
from eos.ledger import ledger_topic
from eos.topology import SubTopology, copartitioned, offset_groups, task_count
from eos.worker.progress import CommitMetadata
from recovery import ChangelogConfigError, check_source_changelogs, ensure_changelogs
from transactions import BrokerUnreachableError, KafkaAdmin, TopicSpec, check_reachable

if TYPE_CHECKING:
    from eos.app import Application

log = structlog.get_logger(__name__)

__all__ = ["preflight", "user_topics", "match_topic_patterns", "ledger_spec",
           "check_state_dir", "check_spark_conf", "check_topics", "check_broker",
           "create_internal_topics", "create_internal_topics_soon", "create_repartition_topics", "TRANSACTION_LOG"]


def preflight(config: EosConfig, *, local_master: bool, topics: Collection[str] = ()) -> None:
    """Checks that need no Spark, run before Spark starts (whose start-up lines would follow the error):
    bootstrap servers given and answering, the user's `topics` there, and (for local masters, whose executors
    share this machine) a writable state directory."""
    config.require_bootstrap()
    try:
        existing = check_reachable(config.bootstrap_servers, timeout=10)
    except BrokerUnreachableError as exc:
        raise ConfigError(f"{exc}. Is the address right? For a local cluster run `eos cluster up` and "
                          "`eval \"$(eos cluster env)\"`; or set EOS_BOOTSTRAP_SERVERS (or --bootstrap-servers) to "
                          "a reachable Kafka cluster.") from None
    missing = _still_missing(sorted(set(topics) - existing),
                             lambda names: set(names) - check_reachable(config.bootstrap_servers, timeout=10))
    if missing:
        raise _missing_topics(missing, config.bootstrap_servers)
    if local_master:
        check_state_dir(config.state_dir)


def match_topic_patterns(app: Application, admin: KafkaAdmin, *, at_start: bool = False) -> bool:
    """Have the job's topic patterns read the topics on the cluster that they match now (`app.match_patterns`);
    returns whether any pattern's topics changed. `at_start`: a pattern that matches no topic fails the start
    (a step and its repartition topics are sized by the topics it reads)."""
    if not app.graph.patterns:
        return False
    changed = app.match_patterns(admin.topic_names())
    unmatched = app.unmatched_patterns()
    if at_start and unmatched:
        raise ConfigError(f"the topic pattern of source {', '.join(unmatched)} matches no topic on "
                          f"{admin.bootstrap_servers}: create one first (`eos topics create NAME --partitions N`); "
                          "topics created while the job runs are read as they appear")
    return changed


def user_topics(subtopologies: Mapping[str, SubTopology]) -> set[str]:
    """The input, output and global-table topics the sub-topologies name (internal topics among them, such
    as repartition topics, are the run's to create)."""
    return {t for sub in subtopologies.values()
            for t in (*sub.inputs, *sub.output_topics, *(g.topic for g in sub.global_tables))}


#: How long a topic missing from the metadata is asked for again before it counts as missing
MISSING_TOPIC_GRACE_S = 3.0


def _still_missing(missing: Sequence[str], ask: Callable[[Sequence[str]], Collection[str]]) -> list[str]:
    """The topics of `missing` still missing after asking again for `MISSING_TOPIC_GRACE_S`. A broker learns of
    a topic from the controller a moment after its creation returns, so a job started right after a script
    created its topics could otherwise be told they do not exist (seen in CI on a loaded machine)."""
    deadline = time.monotonic() + MISSING_TOPIC_GRACE_S
    missing = list(missing)
    while missing and time.monotonic() < deadline:
        time.sleep(0.2)
        missing = sorted(ask(missing))
    return missing


def _missing_topics(missing: Sequence[str], bootstrap_servers: str) -> ConfigError:
    return ConfigError(
        f"topic(s) {', '.join(missing)} do not exist on {bootstrap_servers}. Create them first (input and output "
        "topics are not created by the framework; only its internal changelog and dead-letter topics are), e.g. "
        "`eos topics create --from-app job.py --partitions N` for every topic a job names.")


def check_state_dir(state_dir: str) -> None:
    """The state directory (the part before any `{executor}`) can be created and written."""
    base = Path(state_dir.split("{executor}")[0] or ".").expanduser()
    probe = base
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        what = "is not a directory" if probe.exists() and not probe.is_dir() else "is not writable"
        raise ConfigError(f"state_dir {state_dir!r} cannot be used: {probe} {what}. Set state_dir to a directory "
                          "this user can write (it holds the local stores of stateful tasks).")


def check_spark_conf(conf: Mapping[str, str]) -> None:
    if str(conf.get("spark.speculation", "false")).lower() == "true":
        raise ConfigError(
            "spark.speculation is on: Spark would run a second attempt of slow tasks at the same time, and the "
            "attempts would keep fencing each other. Set spark.speculation=false for exactly-once jobs.")


def check_topics(admin: KafkaAdmin, subtopologies: Mapping[str, SubTopology],
                 clocked: frozenset[str] = frozenset()) -> dict[str, int]:
    """Input and output topics must exist; co-partitioned inputs (`eos.topology.copartitioned`; `clocked`: the
    job's topics that carry their writers' clocks) must have equal partition counts. A topic may be read by
    several sub-topologies: each commits its own progress (`eos.topology.offset_groups`). Returns the
    partition count of every input and output topic."""
    topics = sorted(user_topics(subtopologies))
    counts = admin.partition_counts(topics)

    def ask(names: Sequence[str]) -> list[str]:
        counts.update(admin.partition_counts(names))
        return [t for t in names if counts[t] is None]

    missing = _still_missing([t for t in topics if counts[t] is None], ask)
    if missing:
        raise _missing_topics(missing, admin.bootstrap_servers)
    for sub in subtopologies.values():
        sizes = {t: counts[t] for t in sub.inputs}
        if len(set(sizes.values())) > 1 and copartitioned(sub, clocked):
            detail = ", ".join(f"{t}={n}" for t, n in sizes.items())
            raise ConfigError(
                f"sub-topology {sub.name!r} reads co-partitioned topics with different partition counts ({detail}). "
                f"It {_why_copartitioned(sub, clocked)}, so each task must read the same partition index of every "
                "input and the counts must be equal: repartition the inputs to the same count (repartition(), "
                "whose topic the step then reads), or process them in separate sub-topologies.")
    return {t: n for t, n in counts.items() if n is not None}


def _why_copartitioned(sub: SubTopology, clocked: frozenset[str]) -> str:
    if sub.stores:
        return "keeps state by key (" + ", ".join(repr(s.name) for s in sub.stores[:3]) + ")"
    if set(sub.inputs) & clocked:
        return "follows the clocks of the job's own topics " + ", ".join(sorted(set(sub.inputs) & clocked))
    return "keeps stream time (windows or punctuation)"


TRANSACTION_LOG = "__transaction_state"


def check_broker(admin: KafkaAdmin, config: EosConfig) -> None:
    """The broker can run transactions at all, and accepts our transaction timeout.

    Too few brokers for the transaction log's replication factor is a configuration error only while the log
    does not exist yet (the brokers could never create it). Once it exists, a broker that is down is an
    outage: producers wait for it through their retries, and a restarted job must not refuse to start."""
    broker = admin.broker_config()
    rf = int(broker.get("transaction.state.log.replication.factor", "3"))
    min_isr = int(broker.get("transaction.state.log.min.isr", "2"))
    if min_isr > rf:
        raise ConfigError(
            f"the brokers at {admin.bootstrap_servers} have transaction.state.log.min.isr={min_isr} above "
            f"transaction.state.log.replication.factor={rf}: no transaction could ever commit. Set min.isr to at "
            "most the replication factor on the brokers.")
    if admin.partition_counts([TRANSACTION_LOG])[TRANSACTION_LOG] is None:
        brokers = admin.live_brokers()
        if rf > brokers:
            raise ConfigError(
                f"the cluster at {admin.bootstrap_servers} has {brokers} live broker(s) but transaction.state.log."
                f"replication.factor={rf} and transaction.state.log.min.isr={min_isr}: the brokers cannot create "
                f"the transaction log ({TRANSACTION_LOG}), so transactional producers cannot initialise. Set both "
                "to at most the broker count (1 for a single broker) on the brokers.")
    max_timeout = int(broker.get("transaction.max.timeout.ms", "900000"))
    if config.transaction_timeout_ms > max_timeout:
        raise ConfigError(
            f"transaction_timeout_ms={config.transaction_timeout_ms} exceeds the broker's transaction.max.timeout.ms="
            f"{max_timeout}: init_transactions() would be refused. Lower transaction_timeout_ms (and batch_timeout).")


def create_repartition_topics(admin: KafkaAdmin, config: EosConfig, topics: Mapping[str, InternalTopic]) -> None:
    """Create the application's repartition topics (before the topic checks: they are its inputs and
    outputs too), each with its partition count or as many partitions as the widest of the topics it is
    `like`. Records are kept until the next step has committed them (the driver deletes them then)."""
    likes = sorted({like for t in topics.values() if t.partitions is None for like in t.likes})
    existing = admin.partition_counts(likes) if likes else {}
    counts: dict[str, int] = {}

    def partitions_of(topic: InternalTopic, seen: tuple[str, ...] = ()) -> int:
        """Its own count, or its `like`s' largest: topics on the cluster, or repartition topics made here (a
        table re-grouped after an aggregation that was itself repartitioned is like another repartition topic)."""
        if topic.partitions is not None:
            return topic.partitions
        assert topic.likes, f"{topic.name}: no partition count and no topic to size it like"
        return max(count_of(like, topic, seen) for like in topic.likes)

    def count_of(like: str, topic: InternalTopic, seen: tuple[str, ...]) -> int:
        on_cluster = existing.get(like)
        if on_cluster is not None:
            return on_cluster
        if like in topics and like not in seen:
            if like not in counts:
                counts[like] = partitions_of(topics[like], (*seen, topic.name))
            return counts[like]
        raise ConfigError(f"topic {like!r} does not exist on {admin.bootstrap_servers}: it is read before the "
                          f"repartition topic {topic.name}. Create it first.")

    admin.create_topics([TopicSpec(topic.name, partitions_of(topic), config.internal_replication_factor,
                                   {"cleanup.policy": "delete", "retention.ms": "-1", **topic.config})
                         for topic in topics.values()])


def _longest_retention(admin: KafkaAdmin, topics: list[str]) -> str:
    """The ledger must outlive the input it describes: the longest retention.ms of the inputs (-1: forever)."""
    values = [int(admin.topic_config(t).get("retention.ms", "604800000")) for t in topics]
    return "-1" if any(v < 0 for v in values) else str(max(values, default=604800000))


def ledger_spec(admin: KafkaAdmin, config: EosConfig, inputs: Iterable[str]) -> TopicSpec:
    """The lineage ledger's topic: one partition, kept as long as the longest-kept of the job's `inputs`."""
    return TopicSpec(ledger_topic(config.application_id), 1, config.internal_replication_factor,
                     {"cleanup.policy": "delete", "retention.ms": _longest_retention(admin, sorted(set(inputs)))})


def create_internal_topics(admin: KafkaAdmin, config: EosConfig, subtopologies: Mapping[str, SubTopology],
                           partition_counts: Mapping[str, int]) -> int:
    """Create the dead-letter topic (partitions = the largest task count), the lineage ledger (one partition,
    kept as long as the longest-kept input) and the changelog of every store (partitions = its sub-topology's
    task count), or validate existing ones. Store names must be unique in
    the application. Returns the dead-letter topic's partition count."""
    widest = max(task_count(sub, partition_counts) for sub in subtopologies.values())
    admin.create_topics([TopicSpec(config.dlq_topic, max(1, widest), config.internal_replication_factor)])
    if config.lineage:
        admin.create_topics([ledger_spec(admin, config, {t for sub in subtopologies.values() for t in sub.inputs})])
    seen: dict[str, str] = {}
    groups = offset_groups(subtopologies, config.group_id)
    for sub in subtopologies.values():
        for spec in sub.stores:
            if spec.name in seen:
                raise ConfigError(f"store {spec.name!r} is declared by sub-topologies {seen[spec.name]!r} and "
                                  f"{sub.name!r}: store names must be unique within an application")
            seen[spec.name] = sub.name
        if sub.stores:
            check_table_stores(admin, config, sub, groups)
            try:
                ensure_changelogs(admin, config.application_id, sub.stores, task_count(sub, partition_counts),
                                  config.internal_replication_factor)
                check_source_changelogs(admin, sub.stores)
            except ChangelogConfigError as exc:
                raise ConfigError(str(exc)) from None
    warn_orphaned_state(admin, config.application_id, {spec.changelog_topic(config.application_id)
                                                       for sub in subtopologies.values() for spec in sub.stores
                                                       if spec.source_topic is None})
    return admin.partition_counts([config.dlq_topic])[config.dlq_topic] or 1


def check_table_stores(admin: KafkaAdmin, config: EosConfig, sub: SubTopology, groups: Mapping[tuple[str, str], str]
                       ) -> None:
    """A store that keeps a table read from a topic must not start empty where the sub-topology has already read
    the topic: it would hold none of the rows read before, and join every later record without them. That is a
    store whose changelog does not exist yet (turning `topology_optimization` off again, a join added to a
    sub-topology that reads the table, a changelog deleted by hand) while a batch has committed offsets in the
    table's topic (offsets `eos reset` wrote name no batch's producer: a reset means to start afresh)."""
    if sub.graph is None:
        return
    specs = {s.name: s for s in sub.stores if s.source_topic is None}
    kept = {name: topic for name, topic in table_stores(sub.graph).items() if name in specs}
    changelogs = {name: specs[name].changelog_topic(config.application_id) for name in kept}
    missing = admin.partition_counts(list(changelogs.values()))
    for name, topic in sorted(kept.items()):
        if missing[changelogs[name]] is not None:
            continue
        commits = admin.group_commits(groups[(sub.name, topic)], admin.topic_partitions(topic))
        read = {p: c.offset for (_, p), c in commits.items()
                if c.offset and CommitMetadata.decode(c.metadata).producer}
        if read:
            raise ConfigError(
                f"store {name!r} keeps table {topic} but has no changelog ({changelogs[name]}), while "
                f"{sub.name!r} has already read {topic} (committed offsets by partition: {read}): the store would "
                f"start empty and join every record without the rows read before. If the application ran with "
                f"topology_optimization='all', run it so again (the store is restored from {topic}); to read the "
                f"table again from the start, reset the application first (eos reset).")


def create_internal_topics_soon(config: EosConfig, subtopologies: Mapping[str, SubTopology],
                                partition_counts: Mapping[str, int],
                                new_admin: Callable[[], KafkaAdmin] | None = None) -> Future[int]:
    """`create_internal_topics` on a thread of its own, with an admin client of its own, so that the driver's other
    preparations and the JVM's start overlap it: a broker takes about a second to create a 64-partition topic (the
    dead-letter topic of a 64-partition job, and each changelog as wide), which a fresh run of such a job waited
    for before its other look-ups (docs/measurements.md). The future's result is the dead-letter topic's partition
    count, or what creating or validating the topics raised."""
    future: Future[int] = Future()

    def create() -> None:
        try:
            admin = new_admin() if new_admin is not None else KafkaAdmin(config.bootstrap_servers)
            try:
                future.set_result(create_internal_topics(admin, config, subtopologies, partition_counts))
            finally:
                admin.close()  # (its client's threads and connections, not kept for the run's life)
        except BaseException as exc:  # handed to the thread that asks for the result
            if not future.done():
                future.set_exception(exc)

    # a daemon thread (a driver that stops on an error meanwhile does not wait for the broker), in the caller's
    # context (its log lines name the application as the driver's do)
    threading.Thread(target=contextvars.copy_context().run, args=(create,), name="eos-internal-topics",
                     daemon=True).start()
    return future


def orphaned_changelogs(topics: Iterable[str], application_id: str, changelogs: set[str]) -> list[str]:
    """The application's changelog topics that no store of its topology writes any more."""
    prefix = f"{application_id}-"
    return sorted(t for t in topics if t.startswith(prefix) and t.endswith("-changelog") and t not in changelogs)


def warn_orphaned_state(admin: KafkaAdmin, application_id: str, changelogs: set[str]) -> list[str]:
    """Kafka Streams' lesson on topology changes: a store renamed (a generated name that shifted when a step
    was inserted before it, or a new `name=`) starts empty, and the state kept under its old name is orphaned.
    Say so at start-up, naming the topics, rather than let a job silently recount from zero."""
    orphans = orphaned_changelogs(admin.topic_names(), application_id, changelogs)
    if orphans:
        log.warning("changelog topics of this application belong to no store of its topology: a store renamed "
                    "since they were written starts empty. Pin stateful steps' names (name=...) to keep their state, "
                    "or delete these topics if the state is no longer wanted", topics=orphans)
    return orphans
