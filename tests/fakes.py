"""Fakes for unit tests of pure logic (never used by integration tests)."""

from __future__ import annotations


class FakeMessage:
    """Quacks like confluent_kafka.Message for the processing code."""

    def __init__(self, topic: str, partition: int, offset: int, value: bytes | None, key: bytes | None = None,
                 timestamp: int = 1000, headers: list[tuple[str, bytes]] | None = None) -> None:
        self._t, self._p, self._o, self._v, self._k, self._ts, self._h = (topic, partition, offset, value, key,
                                                                           timestamp, headers)

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def value(self) -> bytes | None:
        return self._v

    def key(self) -> bytes | None:
        return self._k

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self._h

    def timestamp(self) -> tuple[int, int]:
        return (1, self._ts)

    def error(self) -> None:
        return None
