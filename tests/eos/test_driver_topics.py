"""Kafka Streams' `TestInputTopic` and `TestOutputTopic` over the test driver: a test written for Kafka Streams'
TopologyTestDriver ports line for line (`create_input_topic(...).pipe_input(k, v)`,
`create_output_topic(...).read_key_value()`), on the same records as `pipe` and `read`."""

from __future__ import annotations

from datetime import timedelta

import pytest

from eos import Application
from eos.testing import TestInputTopic, TestOutputTopic, TopologyTestDriver
from eos.windows import TumblingWindows, Windowed


def word_count() -> Application:
    app = Application("words", bootstrap_servers="unused:9092")
    (app.stream("lines", key_serde="string", value_serde="string")
        .flat_map_values(lambda line: line.lower().split()).group_by(lambda k, word: word, name="by_word")
        .count(name="counts").to_stream().to("word-counts"))
    (app.stream("clicks").group_by_key().window(TumblingWindows(60_000)).count(name="per_minute")
        .to_stream().to("clicks-per-minute"))
    return app


def test_input_and_output_topics_read_and_write_as_kafka_streams_test_topics():
    with TopologyTestDriver(word_count()) as driver:
        lines = driver.create_input_topic("lines")
        counts = driver.create_output_topic("word-counts")
        assert isinstance(lines, TestInputTopic) and isinstance(counts, TestOutputTopic)
        assert counts.is_empty() and counts.queue_size() == 0
        lines.pipe_input("l1", "Hello Kafka")
        assert counts.queue_size() == 2 and counts.read_key_value() == ("hello", 1)
        assert counts.read_record().value == 1 and counts.is_empty()  # ("kafka", 1)
        lines.pipe_value_list(["kafka streams", "hello again"])
        assert counts.read_key_values_to_list() == [("kafka", 2), ("streams", 1), ("hello", 2), ("again", 1)]
        lines.pipe_key_value_list([("l4", "hello"), ("l5", "bye")])
        assert counts.read_key_values_to_map() == {"hello": 3, "bye": 1}
        with pytest.raises(LookupError, match=r"TestOutputTopic\('word-counts'\) has no record left to read"):
            counts.read_value()
        assert driver.read("word-counts") == []  # (the same records as read(): each read once)


def test_an_input_topic_s_own_time_starts_and_advances_as_kafka_streams():
    with TopologyTestDriver(word_count()) as driver:
        clicks = driver.create_input_topic("clicks", start_timestamp=0, auto_advance=timedelta(seconds=20))
        per_minute = driver.create_output_topic("clicks-per-minute")
        for _ in range(3):
            clicks.pipe_input("u1", {})                       # at 0, 20 s, 40 s
        clicks.advance_time(timedelta(minutes=1))           # 60 s on: at 120 s
        clicks.pipe_input("u1", {})
        clicks.pipe_input("u2", {}, timestamp=125_000)       # a timestamp given wins
        assert [(r.key, r.value, r.timestamp) for r in per_minute.read_records_to_list()] == [
            (Windowed("u1", 0, 60_000), 1, 0), (Windowed("u1", 0, 60_000), 2, 20_000),
            (Windowed("u1", 0, 60_000), 3, 40_000), (Windowed("u1", 120_000, 180_000), 1, 120_000),
            (Windowed("u2", 120_000, 180_000), 1, 125_000)]
        clicks.pipe_input("u3", {})  # at 140 s: a record given its timestamp does not move the topic's time
        assert per_minute.read_key_value() == (Windowed("u3", 120_000, 180_000), 1)


def test_topics_with_serdes_of_their_own_and_mistakes_say_what_to_write():
    with TopologyTestDriver(word_count()) as driver:
        raw = driver.create_input_topic("lines", key_serde="bytes", value_serde="bytes")
        raw.pipe_input(b"l1", b"one two")
        counts = driver.create_output_topic("word-counts", value_serde="bytes")
        assert counts.read_key_values_to_list() == [("one", (1).to_bytes(8, "big")), ("two", (1).to_bytes(8, "big"))]
        with pytest.raises(KeyError, match="no topic 'nope'"):
            driver.create_output_topic("nope")
        with pytest.raises(ValueError, match="auto_advance moves the topic's own time: give start_timestamp= too"):
            driver.create_input_topic("clicks", auto_advance=1000)
        with pytest.raises(ValueError, match=r"takes the driver's wall clock: advance it with "
                                             r"driver.advance_wall_clock\(\)"):
            driver.create_input_topic("clicks").advance_time(10)
        with pytest.raises(AttributeError, match=r"it is create_input_topic\(\) here"):
            driver.createInputTopic("lines")
        with pytest.raises(AttributeError, match=r"store\(name\) is any store's committed typed view"):
            driver.getKeyValueStore("counts-store")
        with pytest.raises(AttributeError, match=r"advance_wall_clock\(ms or timedelta\)"):
            driver.advanceWallClockTime(timedelta(seconds=1))
