"""A class-data sharing (CDS) archive of the broker's JVM, so that a local broker starts faster.

A broker loads about 6,000 classes from Kafka's jars at every start (and the storage tool that formats a new
node's directory most of them again): read from the jars, parsed and verified each time. `eos kafka archive`
starts a broker once with `-XX:ArchiveClassesAtExit`, runs transactions, a read_committed read and a group's
offset commit through it, and stops it cleanly; its JVM writes the classes it loaded to an archive as it exits.
Later brokers and formats map the archive (`-XX:SharedArchiveFile`). Measured here: a one-broker `eos cluster
up` 7.9-9.6 s -> 6.8-7.5 s, the broker's CPU to ready 7.8-9.9 -> 5.8-7.6 s, a format 1.5 -> 0.9 s
(docs/measurements.md).

The archive fits one Java build and one set of jars: its name is a digest of the `java` that runs the broker
and of the jars (names, sizes, times), so that another Java or Kafka release finds none and starts as before.
It is not used when `$EOS_KAFKA_JVM_OPTIONS` holds class-data options of its own (`-Xshare:off` turns it off).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

from localkafka.jars import KafkaJars, cache_root, check_java, ensure_kafka_jars

__all__ = ["ArchiveError", "archive_path", "archive_options", "build_archive"]

#: Changes when the way archives are made changes, so that older ones are not used
_FORMAT = "1"
#: Options a user may give that decide class-data sharing themselves: the archive is left out then
_OWN_SETTINGS = ("SharedArchiveFile", "ArchiveClassesAtExit", "-Xshare")
#: Map with checksums (a damaged archive is not used) and without the JVM's notes about archives (one that does
#: not fit is simply not used)
_USE = ("-XX:+VerifySharedSpaces", "-Xlog:cds=off", "-Xlog:cds+dynamic=off")


class ArchiveError(RuntimeError):
    """The archive could not be made; the message says why (brokers start without one, as before)."""


def archive_path(jars: KafkaJars, java: str) -> Path:
    """Where the archive for this `java` and these jars is, or would be."""
    digest = hashlib.sha256(_FORMAT.encode())
    real = os.path.realpath(java)
    stat = os.stat(real)
    digest.update(f"{real}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    for entry in sorted(os.scandir(jars.libs), key=lambda e: e.name):
        s = entry.stat()
        digest.update(f"{entry.name}\0{s.st_size}\0{s.st_mtime_ns}\n".encode())
    return cache_root() / jars.version / f"broker-{digest.hexdigest()[:20]}.jsa"


def _recorded_size(path: Path) -> int | None:
    try:
        size = json.loads(path.with_suffix(".json").read_text()).get("size")
    except (OSError, ValueError, AttributeError):
        return None
    return size if isinstance(size, int) else None


def _complete(path: Path) -> bool:
    """Whether the archive has the size it was written with: the JVM checks its contents (checksums) but dies
    on an archive cut short (SIGBUS when it maps past the end)."""
    try:
        return path.stat().st_size == _recorded_size(path)
    except OSError:
        return False


def archive_options(jars: KafkaJars, java: str, user_options: str = "") -> list[str]:
    """The JVM options that map the archive, for a broker or storage tool of `java` on `jars`; none when there
    is no complete archive for them or `user_options` decide class-data sharing themselves."""
    if any(setting in user_options for setting in _OWN_SETTINGS):
        return []
    try:
        path = archive_path(jars, java)
    except OSError:  # (the jars or java moved under us: start as before)
        return []
    return [f"-XX:SharedArchiveFile={path}", *_USE] if _complete(path) else []


def build_archive(*, force: bool = False, timeout: float = 180.0) -> Path:
    """Make the archive for this Java and these jars unless it exists (idempotent; ~15 s): one broker started to
    archive its classes at exit, exercised, and stopped cleanly. Returns its path; raises ArchiveError."""
    from localkafka.cluster import JVM_OPTIONS_ENV, ClusterError, LocalCluster

    if any(setting in os.environ.get(JVM_OPTIONS_ENV, "") for setting in _OWN_SETTINGS):
        raise ArchiveError(f"${JVM_OPTIONS_ENV} holds class-data options of its own "
                           f"({os.environ[JVM_OPTIONS_ENV].strip()}): brokers started with them would not map an "
                           "archive, so none is made")
    jars, java = ensure_kafka_jars(), check_java()
    path = archive_path(jars, java)
    if _complete(path) and not force:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    target = path.with_name(f"{path.stem}.{os.getpid()}.tmp")  # (the JVM writes it; moved into place when whole)
    target.unlink(missing_ok=True)
    try:
        with tempfile.TemporaryDirectory(prefix="eos-broker-archive-") as work:
            cluster = LocalCluster(Path(work) / "cluster", archive_to=target)
            try:
                cluster.up(timeout=timeout)
                _exercise(cluster.bootstrap_servers, timeout)
            except ClusterError as exc:
                raise ArchiveError(f"the broker that makes the archive did not start: {exc}") from None
            finally:
                cluster.down(timeout=timeout)  # a clean stop: the JVM writes the archive as it exits
        if not target.is_file() or target.stat().st_size == 0:
            raise ArchiveError("the broker's JVM wrote no class-data archive as it stopped (a Java without its own "
                               "default class-data archive cannot make one); brokers start without one")
        path.with_suffix(".json").write_text(json.dumps({"size": target.stat().st_size}))
        os.replace(target, path)
    finally:
        target.unlink(missing_ok=True)
    for old in path.parent.glob("broker-*.jsa"):  # earlier archives of these jars: they can no longer fit
        if old != path:
            old.unlink(missing_ok=True)
            old.with_suffix(".json").unlink(missing_ok=True)
    return path


def _exercise(bootstrap: str, timeout: float) -> None:
    """What the framework and its tests ask of a broker, so that the classes serving it are archived: topics
    made, transactions committed and aborted with offsets, a read_committed read and a group's offset commit."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = "class-data"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # (kept: a client dropped fails its futures)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "class-data", "linger.ms": 5})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "class-data", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    try:
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout)
        producer.init_transactions(timeout)
        for commit in (True, False, True):
            producer.begin_transaction()
            for i in range(100):
                producer.produce(topic, key=b"%d" % (i % 10), value=b"x" * 100)
            producer.send_offsets_to_transaction([TopicPartition(topic, 0, 1)], consumer.consumer_group_metadata(),
                                                 timeout)
            (producer.commit_transaction if commit else producer.abort_transaction)(timeout)
        consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
        got, deadline = 0, time.monotonic() + timeout
        while got < 200:  # (the committed transactions' records)
            if time.monotonic() > deadline:
                raise ArchiveError(f"the broker that makes the archive returned {got} of 200 records")
            message = consumer.poll(1.0)
            got += message is not None and message.error() is None
        consumer.commit(asynchronous=False)
    except KafkaException as exc:
        raise ArchiveError(f"the broker that makes the archive failed a request: {exc}") from None
    finally:
        consumer.close()
