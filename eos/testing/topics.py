"""Kafka Streams' `TestInputTopic` and `TestOutputTopic` over the test driver, for tests ported from Kafka
Streams (`driver.create_input_topic("orders")`, `.pipe_input(key, value)`; `driver.create_output_topic(...)`,
`.read_key_value()`): the same records the driver's `pipe` writes and `read` returns, nothing of their own.

    orders = driver.create_input_topic("orders", start_timestamp=0, auto_advance=timedelta(seconds=1))
    totals = driver.create_output_topic("customer-totals")
    orders.pipe_input("alice", {"qty": 2, "price": 3.5})
    assert totals.read_key_value() == ("alice", {"orders": 1, "revenue": 7.0})
    assert totals.is_empty()
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from eos.serde import Serde, serde_for
from eos.windows import ms

if TYPE_CHECKING:
    from eos.testing.driver import TestRecord, TopologyTestDriver

__all__ = ["TestInputTopic", "TestOutputTopic"]

Headers = Iterable[tuple[str, bytes]] | Mapping[str, bytes] | None


class TestInputTopic:
    """Records written to one input topic of the driver, each processed as `driver.pipe` processes it. Keys and
    values are serialized with `key_serde` and `value_serde` when given, else with the serdes of the step that
    reads the topic. A record without a timestamp gets the topic's time, `start_timestamp` at first and
    `auto_advance` later for each record (Kafka Streams' `createInputTopic(topic, ..., startTimestamp,
    autoAdvance)`); without `start_timestamp`, the driver's wall clock."""

    __test__ = False  # not a pytest test class

    def __init__(self, driver: TopologyTestDriver, topic: str, key_serde: Serde | str | None = None,
                 value_serde: Serde | str | None = None, *, start_timestamp: int | None = None,
                 auto_advance: int | timedelta = 0) -> None:
        driver._known(topic)
        if start_timestamp is None and ms(auto_advance, "auto_advance"):
            raise ValueError(f"create_input_topic({topic!r}): auto_advance moves the topic's own time: give "
                             "start_timestamp= too (without it, records take the driver's wall clock)")
        self.driver, self.topic = driver, topic
        read = driver.app.input_serdes(topic)
        self.serdes = None if key_serde is None and value_serde is None else (
            serde_for(key_serde, read[0]), serde_for(value_serde, read[1]))
        self.time, self.advance = start_timestamp, ms(auto_advance)

    def __repr__(self) -> str:
        return f"TestInputTopic({self.topic!r})"

    def pipe_input(self, key: Any = None, value: Any = None, *, timestamp: int | None = None,
                   headers: Headers = None) -> None:
        """Write one record and process what it leads to (Kafka Streams' `pipeInput(key, value)`; a value alone
        is `pipe_input(value=v)`)."""
        self._write([(key, value, timestamp, headers)])

    def pipe_value_list(self, values: Iterable[Any]) -> None:
        """Records of these values without keys, then processed (`pipeValueList`)."""
        self._write([(None, value, None, None) for value in values])

    def pipe_key_value_list(self, pairs: Iterable[tuple[Any, Any]]) -> None:
        """Records of these (key, value) pairs, then processed (`pipeKeyValueList`)."""
        self._write([(key, value, None, None) for key, value in pairs])

    def advance_time(self, step: int | timedelta) -> None:
        """Move the topic's time on (`advanceTime`): the next record without a timestamp takes it."""
        if self.time is None:
            raise ValueError(f"{self!r} takes the driver's wall clock: advance it with driver.advance_wall_clock(), "
                             "or create the topic with start_timestamp=")
        if ms(step) < 0:
            raise ValueError(f"advance_time({step!r}): the topic's time only moves on")
        self.time += ms(step)

    def _write(self, records: list[tuple[Any, Any, int | None, Headers]]) -> None:
        rows = []
        for key, value, timestamp, headers in records:
            if timestamp is None and self.time is not None:
                timestamp, self.time = self.time, self.time + self.advance
            if self.serdes is not None:
                key = None if key is None else self.serdes[0].serialize(key)
                value = None if value is None else self.serdes[1].serialize(value)
            rows.append((self.topic, key, value, timestamp, None, headers))
        self.driver.pipe_records(rows, serialized=self.serdes is not None)


class TestOutputTopic:
    """The committed records of one topic, read once each (the driver's `read`, one at a time if wanted), keys
    and values deserialized with `key_serde` and `value_serde` when given, else with the serdes of the step that
    writes the topic. Reading from an empty topic is a `LookupError` (Kafka Streams' NoSuchElementException)."""

    __test__ = False  # not a pytest test class

    def __init__(self, driver: TopologyTestDriver, topic: str, key_serde: Serde | str | None = None,
                 value_serde: Serde | str | None = None) -> None:
        driver._known(topic)
        self.driver, self.topic = driver, topic
        written = driver._output_serdes(topic)
        self.serdes = (serde_for(key_serde, written[0]), serde_for(value_serde, written[1]))

    def __repr__(self) -> str:
        return f"TestOutputTopic({self.topic!r})"

    def read_record(self) -> TestRecord:
        """The next record (`readRecord`)."""
        found = self.driver._read(self.topic, self.serdes, limit=1)
        if not found:
            raise LookupError(f"{self!r} has no record left to read (is_empty() says so first)")
        return found[0]

    def read_value(self) -> Any:
        return self.read_record().value

    def read_key_value(self) -> tuple[Any, Any]:
        record = self.read_record()
        return record.key, record.value

    def read_records_to_list(self) -> list[TestRecord]:
        return self.driver._read(self.topic, self.serdes)

    def read_values_to_list(self) -> list[Any]:
        return [r.value for r in self.read_records_to_list()]

    def read_key_values_to_list(self) -> list[tuple[Any, Any]]:
        return [(r.key, r.value) for r in self.read_records_to_list()]

    def read_key_values_to_map(self) -> dict[Any, Any]:
        """Each key's last value (a None value kept as None, as Kafka Streams' `readKeyValuesToMap`); a record
        without a key is a ValueError."""
        out = {}
        for record in self.read_records_to_list():
            if record.key is None:
                raise ValueError(f"{self!r}: a record without a key at offset {record.offset} of partition "
                                 f"{record.partition}; read_key_values_to_list() takes those")
            out[record.key] = record.value
        return out

    def queue_size(self) -> int:
        """How many records are left to read (`getQueueSize`)."""
        return len(self.driver._read(self.topic, self.serdes, peek=True))

    def is_empty(self) -> bool:
        return self.queue_size() == 0
