"""Changelog topics: `<application_id>-<store>-changelog`, compacted (window and session stores: compacted
and deleted after their retention), one partition per task.

Created by the framework with the cluster's replication settings (or an explicit replication factor).
An existing changelog with the wrong partition count or cleanup policy is an error: restoring from it
would give a task another task's state, or lose keys to deletion.
"""

from __future__ import annotations

from collections.abc import Iterable

from recovery.store import StoreSpec
from transactions import KafkaAdmin, ProducerRecord, TopicSpec

__all__ = ["ChangelogConfigError", "ensure_changelogs", "check_source_changelogs", "changelog_record"]


class ChangelogConfigError(ValueError):
    """A changelog topic exists with settings that would break restores; the message says what to change."""


def ensure_changelogs(admin: KafkaAdmin, application_id: str, stores: Iterable[StoreSpec], partitions: int,
                      replication_factor: int | None = None) -> list[str]:
    """Create missing changelogs and validate existing ones (a store restored from its table's topic has none:
    `check_source_changelogs`). Returns the changelog topic names."""
    stores = [s for s in stores if s.source_topic is None]
    topics = [s.changelog_topic(application_id) for s in stores]
    existing = admin.partition_counts(topics)
    for topic, count in existing.items():
        if count is None:
            continue
        if count != partitions:
            raise ChangelogConfigError(
                f"changelog {topic} has {count} partitions but its sub-topology has {partitions} tasks: its input "
                f"has {'more' if partitions > count else 'fewer'} partitions than when the changelog was made, so "
                f"its keys hash to other partitions than the stores were built from. Each task restores from its "
                f"own partition: start the state over from the input (`eos reset` deletes the changelogs and the "
                f"local stores), or read the input through a step of {count} tasks (a repartition topic of {count} "
                f"partitions in front of the step, whose keys are then partitioned anew).")
        policy = admin.topic_config(topic).get("cleanup.policy", "")
        if "compact" not in policy:
            raise ChangelogConfigError(
                f"changelog {topic} has cleanup.policy={policy!r}: without compaction old values are deleted by "
                f"retention and restores lose keys. Set cleanup.policy=compact on it.")
    admin.create_topics(TopicSpec(s.changelog_topic(application_id), partitions, replication_factor,
                                  s.changelog_config())
                        for s in stores if existing[s.changelog_topic(application_id)] is None)
    return topics


def check_source_changelogs(admin: KafkaAdmin, stores: Iterable[StoreSpec]) -> None:
    """The topics that stores are restored from (`StoreSpec.source_topic`) must keep every key's last record:
    compacted, or kept forever (`retention.ms=-1` and `retention.bytes=-1`); else a restore would lose rows that
    retention deleted."""
    by_topic: dict[str, list[str]] = {}
    for spec in stores:
        if spec.source_topic is not None:
            by_topic.setdefault(spec.source_topic, []).append(spec.name)
    for topic, names in sorted(by_topic.items()):
        config = admin.topic_config(topic)
        policy = config.get("cleanup.policy", "delete")
        forever = config.get("retention.ms") == "-1" and config.get("retention.bytes", "-1") == "-1"
        if "compact" not in policy and not forever:
            raise ChangelogConfigError(
                f"table topic {topic} is the changelog of store(s) {', '.join(sorted(names))} "
                f"(topology_optimization), but it has cleanup.policy={policy!r} and retention.ms="
                f"{config.get('retention.ms')}: a restore would lose the rows retention deleted. Set "
                f"cleanup.policy=compact on {topic} (or retention.ms=-1), or run with topology_optimization='none' "
                f"so that the stores keep changelogs of their own.")


def changelog_record(topic: str, partition: int, key: bytes, value: bytes | None) -> ProducerRecord:
    """A changelog record for the task's partition; `value=None` is a tombstone."""
    return ProducerRecord(topic, partition, key, value, [], None)
