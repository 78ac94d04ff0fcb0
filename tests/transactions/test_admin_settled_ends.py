"""`KafkaAdmin.settled_ends`: last stable offsets once the transactions written by the call are decided (a
broker answers a commit before it writes the markers, which the last stable offset waits for)."""

from __future__ import annotations

import time

from transactions.admin import KafkaAdmin

TP = ("t", 0)


class Offsets:
    """A partition whose high watermark is `written` and whose last stable offsets, one a read, are `stable`
    (the last one repeated)."""

    def __init__(self, written: int, stable: list[int], *, settle_once: bool = False) -> None:
        self.written, self.stable, self.reads = written, stable, 0
        self._waited_out: dict | None = {} if settle_once else None  # (as a `KafkaAdmin(settle_once=)`'s)

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


def test_an_admin_for_one_look_waits_out_an_open_transaction_once():
    offsets = Offsets(written=11, stable=[4], settle_once=True)
    assert KafkaAdmin.settled_ends(offsets, [TP], within=0.1) == {TP: 4}  # type: ignore[arg-type]
    assert offsets.reads > 2  # read again until the wait ran out
    before = offsets.reads
    assert KafkaAdmin.settled_ends(offsets, [TP], within=0.1) == {TP: 4}  # type: ignore[arg-type]
    assert offsets.reads == before + 1  # the same end asked again: read once, not waited for
    assert KafkaAdmin.settled_ends(offsets, [TP], at_least={TP: 9}, within=0.1) == {TP: 4}  # type: ignore[arg-type]
    assert offsets.reads == before + 2  # nor an earlier one


def test_an_admin_for_one_look_waits_again_for_a_partition_written_since():
    offsets = Offsets(written=11, stable=[4], settle_once=True)
    KafkaAdmin.settled_ends(offsets, [TP], within=0.1)  # type: ignore[arg-type]
    offsets.written, offsets.stable, offsets.reads = 15, [4, 4, 15], 0  # a new transaction, decided at the third read
    assert KafkaAdmin.settled_ends(offsets, [TP], within=5.0) == {TP: 15}  # type: ignore[arg-type]
    assert offsets.reads == 3


def test_an_admin_for_one_look_still_waits_for_the_other_partitions():
    other = ("t", 1)

    class Two(Offsets):
        def end_offsets(self, partitions, *, committed=True, timeout=30.0):
            if not committed:
                return {TP: 11, other: 20}
            self.reads += 1
            return {TP: 4, other: 20 if self.reads >= 3 else 18}  # TP stays open; `other` decided at read 3

    offsets = Two(written=0, stable=[], settle_once=True)
    KafkaAdmin.settled_ends(offsets, [TP], within=0.1)  # type: ignore[arg-type]
    offsets.reads = 0
    assert KafkaAdmin.settled_ends(offsets, [TP, other], within=5.0) == {TP: 4, other: 20}  # type: ignore[arg-type]
    assert offsets.reads == 3


def test_an_admin_waits_out_an_open_transaction_at_every_call_by_default():
    offsets = Offsets(written=11, stable=[4])
    KafkaAdmin.settled_ends(offsets, [TP], within=0.1)  # type: ignore[arg-type]
    before = offsets.reads
    KafkaAdmin.settled_ends(offsets, [TP], within=0.1)  # type: ignore[arg-type]
    assert offsets.reads > before + 2  # (a worker's restore asks again later, and must wait again)
