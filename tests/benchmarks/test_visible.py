"""The latency benchmarks' observer takes what is readable without waiting for a full batch."""

from __future__ import annotations

from benchmarks.visible import visible


class Consumer:
    def __init__(self, ready: list[str]) -> None:
        self.ready, self.waits = ready, []

    def poll(self, timeout):
        self.waits.append(timeout)
        return self.ready.pop(0) if self.ready else None

    def consume(self, n, timeout):
        self.waits.append(timeout)
        taken, self.ready = self.ready[:n], self.ready[n:]
        return taken


def test_a_burst_smaller_than_a_batch_is_taken_at_once():
    consumer = Consumer(["a", "b", "c"])
    assert visible(consumer) == ["a", "b", "c"]
    assert consumer.waits == [0.1, 0]  # waits only for the first; the rest without waiting


def test_nothing_readable_returns_nothing_after_the_wait():
    consumer = Consumer([])
    assert visible(consumer, wait=0.05) == [] and consumer.waits == [0.05]


def test_at_most_the_asked_number():
    consumer = Consumer([str(i) for i in range(5)])
    assert visible(consumer, most=3) == ["0", "1", "2"] and consumer.ready == ["3", "4"]
