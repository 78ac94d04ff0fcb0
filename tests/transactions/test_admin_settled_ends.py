"""`KafkaAdmin.settled_ends`: last stable offsets once the transactions written by the call are decided (a
broker answers a commit before it writes the markers, which the last stable offset waits for)."""

from __future__ import annotations

import time

from transactions.admin import KafkaAdmin

TP = ("t", 0)


class Offsets:
    """A partition whose high watermark is `written` and whose last stable offsets, one a read, are `stable`
    (the last one repeated)."""

    def __init__(self, written: int, stable: list[int]) -> None:
        self.written, self.stable, self.reads = written, stable, 0

    def end_offsets(self, partitions, *, committed=True, timeout=30.0):
        if not committed:
            return dict.fromkeys(partitions, self.written)
        self.reads += 1
        return dict.fromkeys(partitions, self.stable[min(self.reads, len(self.stable)) - 1])


def test_the_last_stable_offset_is_read_again_until_it_reaches_the_high_watermark():
    offsets = Offsets(written=11, stable=[10, 10, 12])  # the markers written after two reads (and a record more)
    assert KafkaAdmin.settled_ends(offsets, [TP]) == {TP: 12}  # type: ignore[arg-type]
    assert offsets.reads == 3


def test_a_partition_without_a_transaction_being_decided_is_read_once():
    offsets = Offsets(written=11, stable=[11])
    assert KafkaAdmin.settled_ends(offsets, [TP]) == {TP: 11}  # type: ignore[arg-type]
    assert offsets.reads == 1


def test_a_transaction_still_open_is_left_open_after_the_wait():
    offsets = Offsets(written=11, stable=[4])
    t0 = time.monotonic()
    assert KafkaAdmin.settled_ends(offsets, [TP], within=0.1) == {TP: 4}  # type: ignore[arg-type]
    assert 0.1 <= time.monotonic() - t0 < 1.0


def test_a_target_given_is_waited_for_rather_than_the_high_watermark():
    offsets = Offsets(written=30, stable=[10, 20, 25])
    assert KafkaAdmin.settled_ends(offsets, [TP], at_least={TP: 20}) == {TP: 20}  # type: ignore[arg-type]
    assert offsets.reads == 2
