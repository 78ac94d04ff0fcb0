from __future__ import annotations

import pytest

from transactions import UnsafeClientSetting, consumer_settings, producer_settings


def test_producer_defaults_are_eos_safe():
    s = producer_settings("b:9092", "app-sub-0", 60_000)
    assert s["enable.idempotence"] is True and s["acks"] == "all"
    assert s["transactional.id"] == "app-sub-0" and s["transaction.timeout.ms"] == 60_000
    assert s["message.timeout.ms"] <= s["transaction.timeout.ms"]
    assert s["retry.backoff.ms"] < 100  # paces transaction RPCs; librdkafka's default adds latency


@pytest.mark.parametrize("key,value", [("enable.idempotence", False), ("acks", "1"), ("transactional.id", "x")])
def test_passthrough_cannot_weaken_the_producer(key, value):
    with pytest.raises(UnsafeClientSetting, match=key):
        producer_settings("b:9092", "t", 60_000, {key: value})


@pytest.mark.parametrize("key,value", [("isolation.level", "read_uncommitted"), ("enable.auto.commit", True),
                                       ("group.id", "other")])
def test_passthrough_cannot_weaken_the_consumer(key, value):
    with pytest.raises(UnsafeClientSetting, match=key):
        consumer_settings("b:9092", "g", {key: value})


def test_safe_passthrough_is_applied():
    assert producer_settings("b", "t", 60_000, {"linger.ms": 50, "acks": "all"})["linger.ms"] == 50
    assert producer_settings("b", "t", 10_000, {"message.timeout.ms": 99_000})["message.timeout.ms"] == 10_000
    assert consumer_settings("b", "g", {"fetch.max.bytes": 1})["fetch.max.bytes"] == 1
