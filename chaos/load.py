"""The load generator: JSON records {"id", "n"} over `keys` keys at a steady rate, or the records a user's
`record(i, rng) -> (topic, key, value)` makes (`user_load`), serialized as the job reads them (its serdes of the
topic, a Schema Registry's included) unless given as bytes, on the unproxied listener (network faults are
between the job and the brokers, not the load). `poison(ratio)` mixes that share of malformed records into
the stream until it is set back to 0. The producer's own log lines (a broker bounced refuses connections) go
to a file of the run's when one is named, not to the terminal the harness reports on."""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from eos.cli.loader import load_module
from eos.errors import SerdeError
from transactions import plain_producer

__all__ = ["LoadGenerator", "is_poison", "user_load", "Make"]

POISON = b"\x00poison: not json"

#: the i-th input record: (topic, key, value) as bytes, str (UTF-8), None, or anything else as JSON
Make = Callable[[int, random.Random], tuple[str, Any, Any]]
#: the key and value serdes a job reads a topic with (`Application.input_serdes`; a KeyError if it reads none)
Serdes = Callable[[str], tuple[Any, Any]]


def user_load(target: str) -> Make:
    """A user's `record(i, rng)` function from "load.py:record" or "module:record" (loaded as a job is)."""
    spec, sep, attr = target.rpartition(":")
    if not sep or not attr:
        raise ValueError(f"load = {target!r}: give load.py:function or module:function, a function record(i, rng) "
                         "-> (topic, key, value)")
    try:
        module = load_module(spec)
    except ValueError as exc:
        raise ValueError(f"load = {target!r}: {exc}") from None
    make = getattr(module, attr, None)
    if not callable(make):
        raise ValueError(f"load = {target!r}: {spec} has no function {attr!r}")
    return make


def _encoded(part: Any) -> bytes | None:
    if part is None or isinstance(part, bytes):
        return part
    return part.encode() if isinstance(part, str) else json.dumps(part).encode()


class Encoder:
    """A user's record as bytes: a key or value given as bytes (or None) as it is, else by the job's serde of
    its topic; a topic the job does not read as `_encoded` does (UTF-8 text, else JSON). A part the job's serde
    refuses is a ValueError naming the record, the topic and the serde."""

    def __init__(self, serdes: Serdes | None, load: str = "the load") -> None:
        self._serdes, self._load = serdes, load
        self._by_topic: dict[str, tuple[Any, Any] | None] = {}

    def __call__(self, i: int, topic: str, key: Any, value: Any) -> tuple[bytes | None, bytes | None]:
        if topic not in self._by_topic:
            try:
                self._by_topic[topic] = None if self._serdes is None else self._serdes(topic)
            except KeyError:
                self._by_topic[topic] = None
        serdes = self._by_topic[topic]
        if serdes is None:
            return _encoded(key), _encoded(value)
        return self._part(i, topic, "key", key, serdes[0]), self._part(i, topic, "value", value, serdes[1])

    def _part(self, i: int, topic: str, part: str, given: Any, serde: Any) -> bytes | None:
        if given is None or isinstance(given, bytes):
            return given
        try:
            return serde.serialize(given)
        except SerdeError as exc:  # (a registry that does not answer is no fault of the record: it stays what it is)
            raise ValueError(f"{self._load}: record {i}'s {part} for {topic!r}, {given!r:.60} "
                             f"({type(given).__name__}), is not what the job reads {topic!r} with "
                             f"({type(exc).__name__}: {exc}); return one its {part} serde takes, or bytes") from None


def is_poison(raw: bytes | None) -> bool:
    return raw is not None and raw.startswith(b"\x00poison")


class LoadGenerator:
    def __init__(self, bootstrap: str, topic: str, *, records: int, rate: int, keys: int, seed: int,
                 make: Make | None = None, encode: Encoder | None = None, log: str | Path | None = None) -> None:
        """`make`: a user's records, serialized by `encode` (by default as `_encoded` does). A record that cannot be
        made or serialized stops the load: `error` says why, and `finished` is set."""
        self.topic, self.records, self.rate, self.keys = topic, records, rate, keys
        self._rng = random.Random(seed)
        self._make, self._made = make, random.Random(seed)  # (a user's records: their own generator)
        self._encode = encode or Encoder(None)
        self.error: str | None = None
        self._poison = 0.0
        self.produced = self.poisoned = self.failed = 0
        self.poisoned_topics: set[str] = set()
        self.per_second: dict[int, int] = {}
        self._log: logging.FileHandler | None = None
        settings: dict[str, Any] = {"linger.ms": 5, "message.timeout.ms": 120_000}
        if log is not None:  # (a logger of its own, outside logging's registry: one per generator)
            logger, self._log = logging.Logger("eos.chaos.load"), logging.FileHandler(log)
            self._log.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
            logger.addHandler(self._log)
            settings["logger"] = logger
        self._producer = plain_producer(bootstrap, **settings)
        self._thread = threading.Thread(target=self._run, name="chaos-load", daemon=True)
        self._next = 0
        self.started = 0.0
        self.ended: float | None = None  # (wall clock) when the last record was sent and flushed
        self.finished = threading.Event()

    def close(self) -> None:
        """Drop the producer (before the cluster goes away, or librdkafka keeps reconnecting)."""
        self._producer.flush(5)
        self._producer = None  # type: ignore[assignment]
        if self._log is not None:
            self._log.close()

    def poison(self, ratio: float) -> None:
        self._poison = ratio

    def warm_up(self, n: int) -> None:
        """Produce the first `n` records now (so the job can commit a first batch before the timed load)."""
        self._next = self._produce_range(0, n, rate=None)
        self._producer.flush(60)

    def start(self) -> None:
        """The rest of the records at the configured rate, in a background thread."""
        self.started = time.time()
        self._thread.start()

    def _delivered(self, err: object, msg: object) -> None:
        if err is not None:
            self.failed += 1

    def _run(self) -> None:
        try:
            self._produce_range(self._next, self.records, rate=self.rate)
            self._producer.flush(180)
            self.ended = time.time()
        except Exception as exc:  # (a record of the user's that cannot be made or serialized)
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.finished.set()

    def _produce_range(self, first: int, end: int, rate: int | None) -> int:
        t0 = time.monotonic()
        for i in range(first, end):
            ahead = (i - first) / rate - (time.monotonic() - t0) if rate else 0
            if ahead > 0:
                time.sleep(ahead)
            if self._make is not None:
                topic, key_of, value_of = self._make(i, self._made)
                key, value = self._encode(i, topic, key_of, value_of)
            else:
                topic, key = self.topic, f"k{i % self.keys}".encode()
                value = json.dumps({"id": i, "n": i % 97}).encode()
            if self._poison and self._rng.random() < self._poison:
                value, self.poisoned = POISON, self.poisoned + 1
                self.poisoned_topics.add(topic)
            while True:
                try:
                    self._producer.produce(topic, value=value, key=key, on_delivery=self._delivered)
                    break
                except BufferError:
                    self._producer.poll(0.05)
            self.produced += 1
            second = int(time.time())
            self.per_second[second] = self.per_second.get(second, 0) + 1
            if i % 1000 == 0:
                self._producer.poll(0)
        return end
