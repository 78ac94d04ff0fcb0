"""Local Apache Kafka (KRaft) clusters from Maven-resolved jars, and cluster provisioning for tests.

Tooling below every layer of the framework: it imports nothing from `eos`, `recovery` or `transactions`.
"""

from localkafka.cluster import BrokerStatus, ClusterError, LocalCluster
from localkafka.jars import KafkaJars, ToolMissingError, ensure_kafka_jars, kafka_version

__all__ = [
    "BrokerStatus",
    "ClusterError",
    "KafkaJars",
    "LocalCluster",
    "ToolMissingError",
    "ensure_kafka_jars",
    "kafka_version",
]
