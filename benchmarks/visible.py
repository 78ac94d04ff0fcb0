"""How the latency benchmarks watch an output topic: each record is stamped when it becomes readable.

`Consumer.consume(n, timeout)` returns only when it has `n` messages or the timeout has passed, so an
observer that asks for 1,000 at a time with a 100 ms timeout stamps a smaller burst of visible records (one
transaction's) up to 100 ms late, and more so the smaller the transactions: a bias between peers that
commit different numbers of transactions. `visible` waits for the first message, then takes whatever else
is there without waiting.
"""

from __future__ import annotations

from confluent_kafka import Consumer, Message

__all__ = ["visible"]


def visible(consumer: Consumer, wait: float = 0.1, most: int = 1000) -> list[Message]:
    """The messages readable now: none if nothing arrives within `wait` seconds."""
    first = consumer.poll(wait)
    if first is None:
        return []
    return [first, *consumer.consume(most - 1, 0)]
