"""Exactly-once Kafka pipelines on Apache Spark."""
