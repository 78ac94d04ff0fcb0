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

__all__ = ["ChangelogConfigError", "ensure_changelogs", "changelog_record"]


class ChangelogConfigError(ValueError):
    """A changelog topic exists with settings that would break restores; the message says what to change."""


def ensure_changelogs(admin: KafkaAdmin, application_id: str, stores: Iterable[StoreSpec], partitions: int,
                      replication_factor: int | None = None) -> list[str]:
    """Create missing changelogs and validate existing ones. Returns the changelog topic names."""
    stores = list(stores)
    topics = [s.changelog_topic(application_id) for s in stores]
    existing = admin.partition_counts(topics)
    for topic, count in existing.items():
        if count is None:
            continue
        if count != partitions:
            raise ChangelogConfigError(
                f"changelog {topic} has {count} partitions but its sub-topology has {partitions} tasks. Each task "
                f"restores from its own partition, so the counts must match: delete the changelog (and the "
                f"application's local state) to start over, or give the inputs {count} partitions again.")
        policy = admin.topic_config(topic).get("cleanup.policy", "")
        if "compact" not in policy:
            raise ChangelogConfigError(
                f"changelog {topic} has cleanup.policy={policy!r}: without compaction old values are deleted by "
                f"retention and restores lose keys. Set cleanup.policy=compact on it.")
    admin.create_topics(TopicSpec(s.changelog_topic(application_id), partitions, replication_factor,
                                  s.changelog_config())
                        for s in stores if existing[s.changelog_topic(application_id)] is None)
    return topics


def changelog_record(topic: str, partition: int, key: bytes, value: bytes | None) -> ProducerRecord:
    """A changelog record for the task's partition; `value=None` is a tombstone."""
    return ProducerRecord(topic, partition, key, value, [], None)
