"""read_ranges fetches a topic's metadata before a consumer's first assignment of it (see `_know_leaders`)."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from transactions.reader import _know_leaders


class FakeConsumer:
    def __init__(self, remembers: bool = True, fails: bool = False) -> None:
        self.asked: list[str] = []
        self.fails = fails
        if remembers:
            self.known_topics: set[str] = set()

    def list_topics(self, topic: str, timeout: float) -> None:
        self.asked.append(topic)
        if self.fails:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))


def test_each_topic_is_asked_for_once_per_consumer():
    consumer = FakeConsumer()
    _know_leaders(consumer, {"b", "a"}, 60)  # type: ignore[arg-type]
    _know_leaders(consumer, {"a", "c"}, 60)  # type: ignore[arg-type]
    assert consumer.asked == ["a", "b", "c"]


def test_a_consumer_that_cannot_remember_asks_every_time_and_a_failure_is_left_to_the_read():
    plain = FakeConsumer(remembers=False)
    _know_leaders(plain, {"a"}, 60)  # type: ignore[arg-type]
    _know_leaders(plain, {"a"}, 60)  # type: ignore[arg-type]
    assert plain.asked == ["a", "a"]
    failing = FakeConsumer(fails=True)
    _know_leaders(failing, {"a"}, 60)  # type: ignore[arg-type]
    assert failing.known_topics == set()  # asked again at the next read
