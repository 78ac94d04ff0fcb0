from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest
import yaml

from localkafka import ToolMissingError, kafka_version
from localkafka.cluster import JVM_OPTIONS_ENV, _new_cluster_id, broker_jvm_options
from localkafka.config import PORTS_FROM, ClusterSettings, NodeSpec, ephemeral_ports, free_port, render_node_properties
from localkafka.jars import check_java, ensure_kafka_jars
from localkafka.registry import APICURIO_IMAGE

ROOT = Path(__file__).resolve().parents[2]


def props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def nodes(n: int) -> list[NodeSpec]:
    return [NodeSpec(i, 9000 + i, 9100 + i, 9200 + i) for i in range(1, n + 1)]


def test_single_node_uses_rf1_for_transaction_log_and_offsets():
    ns = nodes(1)
    p = props(render_node_properties(ns[0], ns, ClusterSettings(1), "/data"))
    assert p["transaction.state.log.replication.factor"] == "1"
    assert p["transaction.state.log.min.isr"] == "1"
    assert p["offsets.topic.replication.factor"] == "1"
    assert p["controller.quorum.voters"] == "1@127.0.0.1:9201"
    assert p["auto.create.topics.enable"] == "false"


def test_three_nodes_use_rf3_and_min_isr_2():
    ns = nodes(3)
    p = props(render_node_properties(ns[1], ns, ClusterSettings(3), "/data"))
    assert p["node.id"] == "2"
    assert p["default.replication.factor"] == "3"
    assert p["min.insync.replicas"] == "2"
    assert p["transaction.state.log.replication.factor"] == "3"
    assert p["transaction.state.log.min.isr"] == "2"
    assert p["controller.quorum.voters"] == "1@127.0.0.1:9201,2@127.0.0.1:9202,3@127.0.0.1:9203"
    assert all("127.0.0.1" in part for part in p["listeners"].split(","))  # loopback only


def test_advertised_ports_can_point_at_a_proxy():
    ns = nodes(1)
    ns[0].advertised_client_port = 7777
    p = props(render_node_properties(ns[0], ns, ClusterSettings(1), "/data"))
    assert "CLIENT://127.0.0.1:7777" in p["advertised.listeners"]
    assert "CLIENT://127.0.0.1:9001" in p["listeners"]
    assert ns[0].bootstrap == "127.0.0.1:7777"


def test_broker_jvm_options_take_extra_ones_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(JVM_OPTIONS_ENV, raising=False)
    plain = broker_jvm_options("256m", tmp_path)
    assert plain[:2] == ["-Xms256m", "-Xmx256m"] and f"-Dkafka.logs.dir={tmp_path}" in plain
    monkeypatch.setenv(JVM_OPTIONS_ENV, " -XX:TieredStopAtLevel=1  -Dx=y ")
    assert broker_jvm_options("256m", tmp_path) == [*plain, "-XX:TieredStopAtLevel=1", "-Dx=y"]


def test_cluster_ids_look_like_kafka_uuids():
    for _ in range(200):
        cid = _new_cluster_id()
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cid) and not cid.startswith("-")


def test_missing_java_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(ToolMissingError, match="Java 17"):
        check_java()


def test_missing_maven_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("EOS_KAFKA_CACHE", str(tmp_path))  # empty cache: Maven would be needed
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "java").symlink_to(Path(check_java()).resolve())  # java yes, mvn no
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(ToolMissingError, match="Maven"):
        ensure_kafka_jars()


def test_docker_compose_matches_the_local_cluster_settings():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    registry = compose["services"].pop("schema-registry")  # the registry the testcontainers path starts too
    assert registry["image"] == APICURIO_IMAGE and all(p.startswith("127.0.0.1:") for p in registry["ports"])
    services = compose["services"]
    assert len(services) == 3
    envs = [s["environment"] for s in services.values()]
    assert {e["KAFKA_NODE_ID"] for e in envs} == {"1", "2", "3"}
    assert len({e["CLUSTER_ID"] for e in envs}) == 1
    for service, env in zip(services.values(), envs, strict=True):
        assert service["image"] == f"apache/kafka:{kafka_version()}"
        assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "3"
        assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "2"
        assert env["KAFKA_MIN_INSYNC_REPLICAS"] == "2"
        assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "3"
        voters = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")
        assert [v.split("@")[0] for v in voters] == ["1", "2", "3"]
        assert service["healthcheck"]["test"]
        assert all(port.startswith("127.0.0.1:") for port in service["ports"])


def test_free_ports_are_below_the_ephemeral_range_where_no_outgoing_connection_takes_them():
    """A port from the ephemeral range (binding port 0) can be taken as the local port of any outgoing
    connection before the broker binds it; one broker of a chaos scenario's cluster failed to start so
    ("Address already in use")."""
    low, _ = ephemeral_ports()
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == 50 and all(PORTS_FROM <= p < low for p in ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[0]))
