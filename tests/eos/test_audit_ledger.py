"""The lineage audit's accounting with the ledger (pure logic: partial scan results built by hand)."""

from __future__ import annotations

from pyroaring import BitMap64

from eos.audit.ledger import PartitionLedger
from eos.audit.lineage import merge
from eos.audit.partials import InputPartial, OutputPartial
from eos.ledger import LedgerEntry, LedgerInput


def bm(*offsets: int) -> BitMap64:
    return BitMap64(offsets)


def inputs(*offsets: int, low: int = 0) -> list[InputPartial]:
    return [InputPartial("in", 0, bm(*offsets).serialize(), low)]


def outputs(*offsets: int, twice: tuple[int, ...] = ()) -> list[OutputPartial]:
    part = OutputPartial("out", 0, records=len(offsets) + len(twice), origins={("in", 0, 0): bm(*offsets).serialize()})
    if twice:
        part.duplicates = len(twice)
        part.duplicate_origins = {("in", 0, 0): bm(*twice).serialize()}
    return [part]


def span(a: int, b: int) -> BitMap64:
    r = BitMap64()
    r.add_range(a, b)
    return r


def test_filtered_records_are_accounted_for_only_with_a_ledger():
    without = merge(inputs(0, 1, 2, 3), outputs(0, 2), [])
    assert without.lost == 2 and not without.ledger
    ledger = {("in", 0): PartitionLedger(now=span(0, 4), filtered=bm(1, 3))}
    result = merge(inputs(0, 1, 2, 3), outputs(0, 2), [], ledger=ledger)
    assert (result.lost, result.filtered, result.violations) == (0, 2, 0)


def test_a_filtered_record_with_an_output_and_overlapping_batches_are_violations():
    ledger = {("in", 0): PartitionLedger(now=span(0, 4), filtered=bm(1, 2), overlaps=bm(3))}
    result = merge(inputs(0, 1, 2, 3), outputs(0, 2, 3), [], ledger=ledger)
    assert result.filtered_but_output == 1 and result.overlapping_batches == 1 and result.lost == 0
    assert result.violations == 2


def test_outputs_of_input_deleted_by_retention_after_processing_are_attributed():
    ledger = {("in", 0): PartitionLedger(now=span(0, 10))}
    result = merge(inputs(5, 6, 7, low=5), outputs(2, 3, 5, 6, 7), [], ledger=ledger)
    assert result.unexpected == 0 and result.input_deleted == 2 and result.violations == 0
    assert merge(inputs(5, 6, 7, low=5), outputs(2, 3, 5, 6, 7), []).unexpected == 2  # without the ledger


def test_a_recreated_topic_explains_outputs_and_second_copies_of_its_earlier_incarnation():
    ledger = {("in", 0): PartitionLedger(now=span(0, 3), earlier=span(0, 8))}
    # the earlier topic had offsets 0-7, all processed; the new one has 0-2, processed again
    result = merge(inputs(0, 1, 2), outputs(0, 1, 2, 3, 4, 5, 6, 7, twice=(0, 1, 2)), [], ledger=ledger)
    assert (result.duplicates, result.unexpected, result.violations) == (0, 0, 0)
    assert result.earlier_topic == 5 + 3
    real_copy = merge(inputs(0, 1, 2, 5), outputs(0, 1, 2, 5, twice=(5,)), [],
                      ledger={("in", 0): PartitionLedger(now=span(0, 6), earlier=span(0, 3))})
    assert real_copy.duplicates == 1  # offset 5 existed only in the current topic: a real duplicate


def test_ledger_entries_survive_encoding():
    entry = LedgerEntry("enrich-3", 7, (LedgerInput("in", 3, "Xk3", 100, 250, 40, "retention"),
                                        LedgerInput("in2", 3, None, 0, 0)), {("in", 3): bm(101, 140)})
    assert LedgerEntry.decode(entry.encode()) == entry
    assert LedgerEntry.decode(b"not a ledger entry") is None and LedgerEntry.decode(b'{"v": 99}') is None
