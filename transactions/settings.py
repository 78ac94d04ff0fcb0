"""librdkafka settings for exactly-once clients, and the user passthrough that cannot weaken them."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer

__all__ = ["producer_settings", "consumer_settings", "check_client_properties", "UnsafeClientSetting",
           "ClientPropertyError", "PROTECTED"]


class UnsafeClientSetting(ValueError):
    """A passthrough setting would break exactly-once; the message names the setting and why."""


class ClientPropertyError(ValueError):
    """librdkafka refused a property (unknown name or invalid value); the message says which."""


# Settings users may not override, with the reason shown when they try.
PROTECTED: dict[str, tuple[object, str]] = {
    "enable.idempotence": (True, "transactions need the idempotent producer"),
    "acks": ("all", "a record acknowledged by one replica can be lost on failover"),
    "isolation.level": ("read_committed", "reading aborted or open transactions breaks exactly-once"),
    "enable.auto.commit": (False, "offsets are committed inside the batch's transaction only"),
    "enable.auto.offset.store": (False, "offsets are committed inside the batch's transaction only"),
    "transactional.id": (None, "the framework derives one stable id per task"),
    "group.id": (None, "the consumer group is the application id"),
    "auto.offset.reset": (None, "the framework decides where a partition starts: set the application's "
                                "auto_offset_reset instead"),
}

#: librdkafka's reconnect.backoff.ms for the framework's producers and admin clients (see the producers')
RECONNECT_BACKOFF_MS = 10


def learn_brokers(client: Any, timeout: float) -> None:
    """Ask a new client (producer or admin) for the cluster's metadata before its first real request.
    librdkafka 2.16 drops the bootstrap connection as soon as metadata names the broker behind it, and a
    request that needs a broker in between waits on librdkafka's timers: a producer's
    `init_transactions()` a fixed 500 ms (14 of 42 inits on a local broker; none of 138 after this), an admin
    client's first ListOffsets 3.0 s, its leader query failed with the dropped connection (a Spark worker's
    first store restore, in 10 of 17 peers runs of the count job; docs/measurements.md). An application's
    metadata request is sent again at once on the broker it learned, so after it the client has a connection
    its requests can use. Best effort: what is wrong with the cluster, the request itself reports."""
    try:
        client.list_topics(timeout=timeout)
    except KafkaException:
        pass

_PRODUCER_DEFAULTS: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "max.in.flight.requests.per.connection": 5,
    # Every delivery is reported: the producers track the last offset per partition (stores record the
    # exact changelog offset they reflect). Measured: no visible cost next to produce() itself.
    "delivery.report.only.error": False,
    # retry.backoff.ms also paces the transaction RPCs (AddPartitionsToTxn, EndTxn retries on
    # CONCURRENT_TRANSACTIONS); librdkafka's 100 ms default adds directly to commit latency.
    "retry.backoff.ms": 20,
    "retry.backoff.max.ms": 500,
    # A batch's outputs are produced at once and sent in full by the commit (commit_transaction and flush
    # send without waiting out linger.ms: a 500 ms linger committed in 14-39 ms), so a longer linger only
    # makes fuller produce requests, with less work per record for the worker and the broker. Peers
    # benchmark, stateless job, 600,000 records, four alternations: 38,000 -> 42,600 rec/s (median), 5 -> 50 ms.
    "linger.ms": 50,
    "batch.num.messages": 10000,
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
    # librdkafka waits this long before it connects to a broker it has just learned of (the bootstrap
    # connection is dropped once metadata names the broker): every new producer waited it out before its
    # init_transactions() could go on. 100 ms (the default) -> 10: an init took 60-65 -> 20-25 ms on a local
    # broker. A broker that stays down is retried exponentially up to reconnect.backoff.max.ms as before.
    "reconnect.backoff.ms": RECONNECT_BACKOFF_MS,
    # Same partitioner as the Java client and Kafka Streams (librdkafka's default is CRC32-based).
    "partitioner": "murmur2_random",
}

_CONSUMER_DEFAULTS: dict[str, Any] = {
    "isolation.level": "read_committed",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,
    "auto.offset.reset": "earliest",
    # A consumer that reaches a partition's end sends a fetch the broker holds this long, and librdkafka
    # sends a broker's next fetch only when it returns: a worker's consumer, reused from read to read, began
    # each read after reaching an end (a caught-up input, a changelog past its commit marker) up to 100 ms
    # late. Consumers are assigned only while they read, so the shorter wait costs no idle fetching.
    "fetch.wait.max.ms": 10,
    # How far librdkafka reads ahead per partition. A streamed batch takes its records in slices of 5,000,
    # and a read that reaches its range's end unassigns the partition, which drops what librdkafka had fetched
    # past it: at 20,000 the broker served a count job's input 2-3.5 times over (its JMX byte meters), and each
    # worker held up to 20,000 records a partition it would not use. 5,000 (one slice): the bytes the broker
    # served fell by a quarter to a third, peak PSS by 10-15 MiB (count and cached count of the peers benchmark, two
    # alternated pairs, rates within their spread; docs/measurements.md). 100,000 held ~70 MiB more than
    # 20,000 before, at the same rate.
    "queued.min.messages": 5_000,
    # When a partition's prefetch queue is over queued.min.messages, librdkafka postpones its next fetch by
    # this much (1,000 ms by default), and a worker's consumer, reused from task to task, prefetches past the
    # end of every range it reads: 3 to 7 of a count job's ~20 reads stalled for 1 s each. 10 ms: none
    # stalled, and the job's 1M records took 12.5-13.7 s instead of 17.9-19.9 s (three alternations).
    "fetch.queue.backoff.ms": 10,
}


# Values librdkafka treats as the protected one: acks=-1 means all.
_SAME = {("acks", "-1"): "all", ("acks", "all"): "all"}


def _check_passthrough(overrides: Mapping[str, Any]) -> None:
    for key, value in overrides.items():
        if key in PROTECTED:
            safe, why = PROTECTED[key]
            given = _SAME.get((key, str(value).lower()), str(value).lower())
            if safe is None or given != str(safe).lower():
                raise UnsafeClientSetting(
                    f"client setting {key}={value!r} is not allowed: {why}. Remove it from the passthrough "
                    f"config{'' if safe is None else f' (the framework uses {key}={safe})'}.")


def producer_settings(bootstrap_servers: str, transactional_id: str, transaction_timeout_ms: int,
                      overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    overrides = dict(overrides or {})
    _check_passthrough(overrides)
    if "transaction.timeout.ms" in overrides and int(overrides["transaction.timeout.ms"]) != transaction_timeout_ms:
        raise UnsafeClientSetting(
            f"producer_config sets transaction.timeout.ms={overrides['transaction.timeout.ms']} but "
            f"transaction_timeout_ms={transaction_timeout_ms}: the framework checks the batch timeout against "
            "transaction_timeout_ms. Remove transaction.timeout.ms from producer_config and set "
            "transaction_timeout_ms instead.")
    settings = {**_PRODUCER_DEFAULTS, **overrides}
    settings.update({
        "bootstrap.servers": bootstrap_servers,
        "transactional.id": transactional_id,
        "transaction.timeout.ms": transaction_timeout_ms,
    })
    # librdkafka refuses message.timeout.ms > transaction.timeout.ms for transactional producers.
    settings["message.timeout.ms"] = min(int(settings.get("message.timeout.ms", transaction_timeout_ms)),
                                         transaction_timeout_ms)
    return settings


def consumer_settings(bootstrap_servers: str, group_id: str,
                      overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    overrides = dict(overrides or {})
    _check_passthrough(overrides)
    return {**_CONSUMER_DEFAULTS, **overrides, "bootstrap.servers": bootstrap_servers, "group.id": group_id}


# Names offered as "did you mean" (librdkafka's properties and their common aliases).
_KNOWN_PROPERTIES = (
    "acks allow.auto.create.topics api.version.request auto.commit.interval.ms auto.offset.reset batch.num.messages "
    "batch.size bootstrap.servers broker.address.family check.crcs client.dns.lookup client.id client.rack "
    "compression.codec compression.level compression.type connections.max.idle.ms debug delivery.report.only.error "
    "enable.auto.commit enable.auto.offset.store enable.idempotence enable.partition.eof "
    "enable.ssl.certificate.verification fetch.error.backoff.ms fetch.max.bytes fetch.message.max.bytes "
    "fetch.min.bytes fetch.queue.backoff.ms fetch.wait.max.ms group.id group.instance.id heartbeat.interval.ms "
    "isolation.level linger.ms log.connection.close log_level max.in.flight.requests.per.connection "
    "max.partition.fetch.bytes max.poll.interval.ms message.max.bytes message.send.max.retries "
    "message.timeout.ms metadata.max.age.ms partition.assignment.strategy partitioner queue.buffering.max.kbytes "
    "queue.buffering.max.messages queue.buffering.max.ms queued.max.messages.kbytes queued.min.messages "
    "receive.message.max.bytes reconnect.backoff.max.ms reconnect.backoff.ms request.required.acks "
    "request.timeout.ms retries retry.backoff.max.ms retry.backoff.ms sasl.mechanism sasl.mechanisms "
    "sasl.password sasl.username security.protocol session.timeout.ms socket.keepalive.enable "
    "socket.nagle.disable socket.receive.buffer.bytes socket.send.buffer.bytes socket.timeout.ms "
    "ssl.ca.location ssl.certificate.location ssl.endpoint.identification.algorithm ssl.key.location "
    "ssl.key.password statistics.interval.ms sticky.partitioning.linger.ms topic.metadata.refresh.interval.ms "
    "transaction.timeout.ms transactional.id"
).split()


def check_client_properties(producer: Mapping[str, Any], consumer: Mapping[str, Any]) -> None:
    """Let librdkafka validate the producer and consumer properties (names and values) by building the
    clients without connecting anywhere, so a misspelt property fails on the driver, not in every Spark
    task. Raises `ClientPropertyError` naming the property, with the closest known names."""
    for kind, settings, make in (("producer_config", producer, Producer), ("consumer_config", consumer, Consumer)):
        conf = {k: v for k, v in settings.items() if k != "bootstrap.servers"}
        conf.update({"log_level": 0})  # no "no bootstrap.servers" warning on stderr
        try:
            client = make(conf)
        except KafkaException as exc:
            raise ClientPropertyError(f"{kind}: {_explain(exc, settings)}") from None
        del client


def _explain(exc: KafkaException, settings: Mapping[str, Any]) -> str:
    err = exc.args[0] if exc.args else exc
    text = err.str() if hasattr(err, "str") else str(err)
    unknown = [k for k in settings if k not in _KNOWN_PROPERTIES and k in text]
    for key in unknown:
        close = difflib.get_close_matches(key, _KNOWN_PROPERTIES, n=3, cutoff=0.6)
        if close:
            return f"{text}. Did you mean {' or '.join(repr(c) for c in close)}?"
    return text
