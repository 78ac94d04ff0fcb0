"""A windowed result goes to its inner key's partition, as Kafka Streams' `WindowedStreamPartitioner` puts it
(murmur2 of the inner key's bytes): every window of a key lands in one partition, the key's own, in the order
the task made them, whether the windows are folded, cached, sessions or sliding, and whatever the windowed
key's format. Other keys keep the producer's partitioner (murmur2 of the whole serialized key)."""

from __future__ import annotations

from collections import defaultdict

import pytest

from eos import Application
from eos.testing import TopologyTestDriver
from eos.windows import HoppingWindows, SessionWindows, SlidingWindows, TumblingWindows, Windowed
from transactions.partitioner import partition_for

PARTITIONS = 4
WINDOWS = {
    "tumbling": TumblingWindows(1_000, grace=0),
    "hopping": HoppingWindows(1_000, 500, grace=0),
    "session": SessionWindows(500, grace=0),
    "sliding": SlidingWindows(500, grace=0),
}


def _inputs(n: int = 600, keys: int = 12) -> list[tuple[bytes, bytes, int]]:
    # each key's records 12 x 37 = 444 ms apart: sessions of a 500 ms gap extend, windows of 1 s take two or three
    return [(f"user-{i % keys}".encode(), b"{}", 1_000_000 + i * 37) for i in range(n)]


def _run(windows: str, key_format: str, cache_max_bytes: int = 0) -> list:
    app = Application(f"windowed-partitions-{windows}", max_records_per_batch=100, cache_max_bytes=cache_max_bytes)
    (app.stream("clicks", key_serde="string", value_serde="bytes").group_by_key()
        .window(WINDOWS[windows], windowed_key=key_format).count(name="clicks").to_stream().to("counts"))
    driver = TopologyTestDriver(app, partitions=PARTITIONS)
    driver.pipe_many("clicks", _inputs(), serialized=True)
    return driver.create_output_topic("counts").read_records_to_list()


@pytest.mark.parametrize("key_format", ["binary", "json"])
@pytest.mark.parametrize("cache", [0, 4096], ids=["uncached", "cached"])
@pytest.mark.parametrize("windows", sorted(WINDOWS))
def test_every_window_of_a_key_goes_to_the_key_s_own_partition(windows, cache, key_format):
    outputs = _run(windows, key_format, cache)
    assert outputs
    partitions_of = defaultdict(set)
    for record in outputs:
        assert isinstance(record.key, Windowed)
        partitions_of[record.key.key].add(record.partition)
    assert len(partitions_of) == 12
    for key, partitions in partitions_of.items():
        assert partitions == {partition_for(key.encode(), PARTITIONS)}, key  # the input key's partition
    assert len({p for ps in partitions_of.values() for p in ps}) > 1  # (the keys themselves spread)


def test_a_key_s_sessions_come_in_the_order_they_were_made():
    # each record extends its key's session: a tombstone for the shorter one, then the longer one's count
    by_key = defaultdict(list)
    for record in _run("session", "binary"):
        by_key[record.key.key].append((record.key.start, record.key.end, record.value))
    for key, updates in by_key.items():
        counts = [count for _start, _end, count in updates if count is not None]
        assert counts == list(range(1, len(counts) + 1)), key  # one session, growing record by record
        ends = [end for _start, end, count in updates if count is not None]
        tombstoned = [end for _start, end, count in updates if count is None]
        assert tombstoned == ends[:-1], key  # each shorter session ended right after its successor came


def test_keys_that_are_not_windowed_keep_the_partition_of_their_whole_serialized_key():
    app = Application("plain-partitions", max_records_per_batch=100)
    app.stream("clicks", key_serde="string", value_serde="bytes").group_by_key().count(name="clicks") \
        .to_stream().map(lambda key, n: (f"{key}/{n}", n)).to("counts", key_serde="string", value_serde="long")
    driver = TopologyTestDriver(app, partitions=PARTITIONS)
    driver.pipe_many("clicks", _inputs(120), serialized=True)
    outputs = driver.create_output_topic("counts", "string", "long").read_records_to_list()
    assert len(outputs) == 120
    assert all(r.partition == partition_for(r.key.encode(), PARTITIONS) for r in outputs)
