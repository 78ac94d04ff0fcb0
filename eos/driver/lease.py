"""One driver per application: a lease held through the consumer group `<application_id>.driver`.

Two drivers of one application would plan the same batches and fence each other's tasks on every batch:
exactly-once would hold (producer epochs see to that), but neither would make progress, silently. So a
driver takes the lease before it plans anything, and a second driver waits for it (up to
`driver_lease_timeout`, enough for a crashed driver's session to expire) and then refuses to start,
naming the driver that holds it. A running driver that finds another one holding the lease stops.
"""

from __future__ import annotations

import structlog

from eos.config import EosConfig
from eos.errors import ConfigError
from transactions import GroupLease, KafkaAdmin, LeaseState, TopicSpec

__all__ = ["acquire_driver_lease", "check_driver_lease", "lease_topic"]

log = structlog.get_logger(__name__)


def lease_topic(config: EosConfig) -> str:
    return f"{config.application_id}-driver-lease"


def acquire_driver_lease(admin: KafkaAdmin, config: EosConfig) -> GroupLease:
    """Take the application's driver lease, or raise `ConfigError` if another driver holds it. When the
    group cannot settle in time (the cluster is in trouble), go on with a warning: correctness never rests
    on the lease, only on producer epochs."""
    topic = lease_topic(config)
    admin.create_topics([TopicSpec(topic, 1, config.internal_replication_factor)])
    lease = GroupLease(config.bootstrap_servers, f"{config.application_id}.driver", topic)
    if lease.acquire(config.driver_lease_timeout):
        return lease
    if lease.state is LeaseState.ELSEWHERE:
        holders = lease.holders()
        lease.release()
        raise ConfigError(
            f"another driver of application {config.application_id!r} is running"
            f"{' (' + ', '.join(holders) + ')' if holders else ''}: two drivers would fence each other's tasks on "
            f"every batch. Stop it first (a driver that died releases its lease within seconds), or give this "
            f"job another application_id.")
    log.warning("could not confirm the driver lease (the consumer group did not settle); going on",
                group=lease.group, waited_s=config.driver_lease_timeout)
    return lease


def check_driver_lease(lease: GroupLease, config: EosConfig) -> None:
    """Raise `ConfigError` when another driver now holds the lease (this one was paused or cut off for
    longer than its session and a newer driver took over): this driver must stop."""
    if lease.state is LeaseState.ELSEWHERE:
        raise ConfigError(f"another driver of application {config.application_id!r} took over "
                          f"({', '.join(lease.holders()) or 'see consumer group ' + lease.group}); this driver stops")
