"""Broker configuration for local KRaft clusters (docs/design.md, section 7).

Every node is a combined broker + controller. A node has three listeners on loopback:
CLIENT (what clients bootstrap from), INTERNAL (replication between brokers) and CONTROLLER (the KRaft
quorum). The advertised ports of CLIENT and INTERNAL may differ from the bound ports, so that a TCP proxy
per broker can sit between clients and brokers (network faults in chaos scenarios). A proxied cluster
also has a DIRECT listener, never proxied, for tools that must not be affected by the faults (load
generators, the auditor).
"""

from __future__ import annotations

import random
import socket
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["NodeSpec", "render_node_properties", "free_port", "ephemeral_ports"]

HOST = "127.0.0.1"


@dataclass
class NodeSpec:
    node_id: int
    client_port: int
    internal_port: int
    controller_port: int
    advertised_client_port: int | None = None
    advertised_internal_port: int | None = None
    direct_port: int | None = None
    pid: int | None = None

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.advertised_client_port or self.client_port}"

    @property
    def direct_bootstrap(self) -> str:
        """An address that bypasses any proxy (the DIRECT listener, else the bound client port)."""
        return f"{HOST}:{self.direct_port or self.client_port}"


@dataclass(frozen=True)
class ClusterSettings:
    """Settings that depend on the cluster size: 1 node has RF 1 / min ISR 1, 3 nodes RF 3 / min ISR 2."""

    brokers: int
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def replication_factor(self) -> int:
        return 1 if self.brokers == 1 else 3

    @property
    def min_isr(self) -> int:
        return 1 if self.brokers == 1 else 2


#: where free ports are looked for: below the kernel's ephemeral range (`ephemeral_ports`), from here up
PORTS_FROM = 20_000
_given: set[int] = set()


def ephemeral_ports() -> tuple[int, int]:
    """The range the kernel takes the local ports of outgoing connections from (Linux's default if unknown)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32_768, 60_999


def free_port() -> int:
    """A loopback port nothing listens on, for a broker (or proxy) to bind later. Taken below the ephemeral
    range: a port from it (what binding port 0 gives) can be taken by any outgoing connection of any process
    between this check and the broker's bind, which stops the broker ("Address already in use"); below it,
    only another listener could take it. A port is given once per process."""
    low = ephemeral_ports()[0]
    rng = random.SystemRandom()
    for _ in range(200) if low - PORTS_FROM > 1_000 else ():
        port = rng.randrange(PORTS_FROM, low)
        if port in _given:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((HOST, port))
            except OSError:
                continue
        _given.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # (no room below the range: any free port)
        s.bind((HOST, 0))
        port = s.getsockname()[1]
    _given.add(port)
    return int(port)


def render_node_properties(node: NodeSpec, nodes: list[NodeSpec], settings: ClusterSettings, log_dir: str) -> str:
    voters = ",".join(f"{n.node_id}@{HOST}:{n.controller_port}" for n in nodes)
    rf, min_isr = settings.replication_factor, settings.min_isr
    listeners = (f"CLIENT://{HOST}:{node.client_port},INTERNAL://{HOST}:{node.internal_port},"
                 f"CONTROLLER://{HOST}:{node.controller_port}")
    advertised = (f"CLIENT://{HOST}:{node.advertised_client_port or node.client_port},"
                  f"INTERNAL://{HOST}:{node.advertised_internal_port or node.internal_port}")
    protocols = "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT"
    if node.direct_port:
        listeners += f",DIRECT://{HOST}:{node.direct_port}"
        advertised += f",DIRECT://{HOST}:{node.direct_port}"
        protocols += ",DIRECT:PLAINTEXT"
    props: dict[str, object] = {
        "process.roles": "broker,controller",
        "node.id": node.node_id,
        "controller.quorum.voters": voters,
        "listeners": listeners,
        "advertised.listeners": advertised,
        "listener.security.protocol.map": protocols,
        "inter.broker.listener.name": "INTERNAL",
        "controller.listener.names": "CONTROLLER",
        "log.dirs": log_dir,
        # Replication: 1 node RF 1 / min ISR 1 (or transactional producers never initialise);
        # 3 nodes RF 3 / min ISR 2 (Kafka's advice for exactly-once).
        "default.replication.factor": rf,
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": rf,
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": min_isr,
        "share.coordinator.state.topic.replication.factor": rf,
        "share.coordinator.state.topic.min.isr": min_isr,
        # Fewer coordinator partitions: a fresh cluster becomes ready in seconds, not tens of seconds.
        "offsets.topic.num.partitions": 10,
        "transaction.state.log.num.partitions": 10,
        "num.partitions": 1,
        # Topics are created on purpose (missing topics are a configuration error the engine reports).
        "auto.create.topics.enable": "false",
        "unclean.leader.election.enable": "false",
        "group.initial.rebalance.delay.ms": 0,
        # Abort timed-out transactions (zombies) within seconds rather than the default ten.
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 2000,
        "log.cleaner.backoff.ms": 2000,
    }
    props.update(settings.extra)
    return "".join(f"{k}={v}\n" for k, v in props.items())
