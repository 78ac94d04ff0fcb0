"""The lineage audit's accounting with the ledger (pure logic: partial scan results built by hand)."""

from __future__ import annotations

import random
from dataclasses import replace

from pyroaring import BitMap64

from eos.audit.ledger import PartitionLedger
from eos.audit.lineage import merge
from eos.audit.partials import InputPartial, OutputPartial
from eos.ledger import LedgerEntry, LedgerInput
from eos.origin import HELD_TOP, output_indices, top_level


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
    hop = LedgerEntry("by-city-0", 2, (LedgerInput("app-by-city-repartition", 0, "Rp0", 0, 9),),
                      {("in", 3): bm(101, 140)}, {("in", 3): bm(140)}, {("in", 3): bm(101, 140)})
    assert LedgerEntry.decode(hop.encode()) == hop and hop.paths is None  # (written before paths were kept)
    paths = replace(hop, paths={("in", 3): {0: bm(101), 1 + (1 << 32): bm(140)}})
    assert LedgerEntry.decode(paths.encode()) == paths
    none_ended = replace(hop, filtered={}, through={}, paths={})  # (a task reading a repartition topic, none ended)
    assert LedgerEntry.decode(none_ended.encode()).paths == {}
    grace = LedgerEntry("priced-0", 4, (LedgerInput("orders", 0, "Or0", 0, 9),), {("orders", 0): bm(2, 3, 5)},
                        held={("orders", 0): bm(2, 5)})
    assert LedgerEntry.decode(grace.encode()) == grace
    assert LedgerEntry.decode(b"not a ledger entry") is None and LedgerEntry.decode(b'{"v": 99}') is None


def paths(rng: random.Random, index: int, depth: int) -> list[int]:
    """The indices of the final outputs of a record carrying `index` (depth 0: an input record itself), as
    the tasks number them: each output a final one or a record of a repartition topic that a later task
    makes 0-3 outputs of, down to four hops."""
    base, shift = (0, 0) if depth == 0 else output_indices(index)
    out = []
    for n in range(rng.randrange(0 if depth else 1, 4)):
        made = base + (n << shift)
        out += paths(rng, made, depth + 1) if depth < 4 and rng.random() < 0.5 else [made]
    return out


def test_every_output_of_every_path_of_an_input_has_an_index_of_its_own():
    """A record written to two repartition topics, a row moving between groups (two records on one), a
    flat_map after a hop: however the paths branch, no two outputs of one input share an index; outputs
    behind a hop never take an input's own indices 0, 1, ... (eos.origin.output_indices)."""
    rng = random.Random(7)
    for _ in range(3_000):
        indices = paths(rng, 0, 0)
        assert len(indices) == len(set(indices)), indices
    assert output_indices(0) == (1 << 32, 32) and output_indices(5) == (5 + (1 << 32), 32)
    assert output_indices(1 << 32) == ((1 << 32) + (1 << 64), 64)  # a second hop: one level more


def test_behind_repartition_topics_each_path_of_an_input_is_accounted_for_and_a_copy_on_any_path_is_a_duplicate():
    """Input 0 took two paths (written to two repartition topics as its outputs 0 and 1): the first made two
    outputs of topic "a", the second one of topic "b". Input 1 was filtered on its second path and made an
    output on the first; input 2 was filtered where it was read; input 3 was filtered on both paths."""
    first, second = output_indices(0), output_indices(1)
    a = OutputPartial("a", 0, records=3, origins={("in", 0, first[0]): bm(0, 1).serialize(),
                                                  ("in", 0, first[0] + (1 << first[1])): bm(0).serialize()})
    b = OutputPartial("b", 0, records=1, origins={("in", 0, second[0]): bm(0).serialize()})
    ledger = {("in", 0): PartitionLedger(now=span(0, 4), filtered=bm(1, 2, 3), through=bm(1, 3))}
    result = merge(inputs(0, 1, 2, 3), [a, b], [], ledger=ledger, ordered=False)
    assert (result.violations, result.lost, result.filtered, result.duplicates) == (0, 0, 2, 0), result
    assert result.unique_origins == 4
    # input 2, filtered where it was read, has an output after all: a contradiction, whatever its index
    a.origins[("in", 0, first[0])] = bm(0, 1, 2).serialize()
    assert merge(inputs(0, 1, 2, 3), [a, b], [], ledger=ledger, ordered=False).filtered_but_output == 1
    # a second copy of input 0's output on the second path
    b.origins[("in", 0, second[0])], b.duplicates = bm(0).serialize(), 1
    b.duplicate_origins = {("in", 0, second[0]): bm(0).serialize()}
    assert merge(inputs(0, 1, 2, 3), [a, b], [], ledger=ledger, ordered=False).duplicates == 1
    # without the ledger's word on inputs 1 and 3, input 3 (no output on any path) is lost, input 1 (an output
    # on its first path) is not
    lost = merge(inputs(0, 1, 2, 3), [a, b], [], ledger={("in", 0): PartitionLedger(now=span(0, 4))}, ordered=False)
    assert lost.lost == 1 and lost.samples["lost"] == [{"origin": "in:0:3"}]


def test_records_held_back_have_their_outputs_later_out_of_order_with_an_index_of_their_own():
    """A stream-table join with a grace period holds records back (`TaskContext.hold`): the ledger counts them
    as filtered and held in their batch, their outputs come later, named after them with an index one level
    up (`output_indices` of the index they reserved), after outputs of records read after them."""
    held_index = output_indices(0)[0]
    part = OutputPartial("out", 0, records=4, origins={("in", 0, 0): bm(0, 3).serialize(),
                                                       ("in", 0, held_index): bm(1, 2).serialize()})
    ledger = {("in", 0): PartitionLedger(now=span(0, 5), filtered=bm(1, 2, 4), held=bm(1, 2, 4))}
    result = merge(inputs(0, 1, 2, 3, 4), [part], [], ledger=ledger)
    # 4 is still held: accounted for as filtered; 1 and 2 were let go (no contradiction, no index gap)
    assert (result.violations, result.filtered, result.held, result.lost, result.index_gaps) == (0, 1, 1, 0, 0)
    # without the ledger's word that they were held, outputs of records that made nothing contradict it
    ledger[("in", 0)].held = BitMap64()
    assert merge(inputs(0, 1, 2, 3, 4), [part], [], ledger=ledger).filtered_but_output == 2


def scopes(rng: random.Random, index: int, depth: int) -> list[list[tuple[int, str]]]:
    """What the scopes of a record carrying `index` (depth 0: an input record) gave, scope by scope, in order:
    each index an output ("out"), or a record of a repartition topic that a later task made 0-3 things of in a
    scope of its own ("hop") or that ended there, making nothing ("ended", which the ledger's `paths` name).
    A step may write both outputs and repartition topics."""
    base, shift = (0, 0) if depth == 0 else output_indices(index)
    mine: list[tuple[int, str]] = []
    below: list[list[tuple[int, str]]] = []
    for n in range(rng.randrange(0 if depth else 1, 4)):
        made = base + (n << shift)
        if depth < 3 and rng.random() < 0.4:
            under = scopes(rng, made, depth + 1)
            mine.append((made, "hop" if under else "ended"))
            below += under
        else:
            mine.append((made, "out"))
    return ([mine] if mine else []) + below


def partial(indices: list[int]) -> OutputPartial:
    """Outputs of input 0 with these indices."""
    return OutputPartial("out", 0, records=len(indices), origins={("in", 0, i): bm(0).serialize() for i in indices})


def path_ledger(ended: list[int]) -> dict[tuple[str, int], PartitionLedger]:
    return {("in", 0): PartitionLedger(now=span(0, 1), through=bm(0) if ended else bm(),
                                       paths={i: bm(0) for i in ended})}


def test_an_output_or_a_path_lost_behind_repartition_topics_is_an_index_gap():
    """Each scope (an input record's, a repartition record's on one path, a held record's when let go) gives its
    indices in one transaction, numbered 1, 2, ... on their level (0, 1, ... for an input's own): to an
    output, or to a record of a repartition topic, which makes outputs whose indices extend it, or ends there
    (the ledger's `paths`). An index given without the one before it is a lost output, or a lost path; the last
    of a scope has no later one to show it missing, as without repartition topics."""
    rng = random.Random(11)
    checked = 0
    for _ in range(400):
        made = scopes(rng, 0, 0)
        outs = [i for scope in made for i, kind in scope if kind == "out"]
        ended = [i for scope in made for i, kind in scope if kind == "ended"]
        if not outs:
            continue
        whole = merge(inputs(0), [partial(outs)], [], ledger=path_ledger(ended), ordered=False)
        assert (whole.violations, whole.index_gaps, whole.lost, whole.runs_checked) == (0, 0, 0, True), made
        for scope in made:
            for n, (lost, kind) in enumerate(scope):
                if kind == "hop" or len(scope) == 1:
                    continue  # (a leaf only, whose scope still gives its parent's index)
                result = merge(inputs(0), [partial([i for i in outs if i != lost])], [],
                               ledger=path_ledger([i for i in ended if i != lost]), ordered=False)
                assert result.index_gaps == (1 if n < len(scope) - 1 else 0), (made, lost)
                checked += n < len(scope) - 1
    assert checked > 300
    # without the ledger, where a step writes both a repartition topic and an output, the runs are not checked
    # (a record of a repartition topic that ended leaves a gap no loss made); where no step does, they are
    first, shift = output_indices(1)  # the second path's first output, then its third: the second lost
    blind = merge(inputs(0), [partial([first, first + (2 << shift)])], [], ordered=False)
    assert (blind.runs_checked, blind.index_gaps) == (False, 0)
    gap = merge(inputs(0), [partial([first, first + (2 << shift)])], [], ordered=False, numbered=True)
    assert gap.samples["index_gaps"] == [{"origin": f"in:0:0:{first + (2 << shift)}"}]
    # a level holds 2**32 indices: an input's last possible output is on level 0, a path's first on level 1
    assert [top_level(i) for i in (0, 1, (1 << 32) - 1, 1 << 32, (1 << 64) - 1, 1 << 64)] == [0, 0, 0, 32, 32, 64]


def test_a_ledger_written_before_paths_were_kept_asks_no_run_of_the_records_it_names_without_them():
    """Path 0 of input 0 ended without an output, path 1 made one: an entry that names the first by its path
    accounts for index 0; one written before paths were kept (`paths_unknown`) only by its origin."""
    first = output_indices(1)[0]  # path 1's first output
    ledger = {("in", 0): PartitionLedger(now=span(0, 1), through=bm(0), paths={0: bm(0)})}
    assert merge(inputs(0), [partial([first])], [], ledger=ledger, ordered=False).index_gaps == 0
    ledger[("in", 0)].paths = {}
    assert merge(inputs(0), [partial([first])], [], ledger=ledger, ordered=False).index_gaps == 1
    ledger[("in", 0)].paths_unknown = bm(0)
    assert merge(inputs(0), [partial([first])], [], ledger=ledger, ordered=False).index_gaps == 0
    # path 0 dead-lettered where it was read (its dead letter carries its index): accounted for too
    ledger[("in", 0)].paths_unknown = bm()
    dead = OutputPartial("dlq", 0, records=1, origins={("in", 0, 0): bm(0).serialize()})
    result = merge(inputs(0), [partial([first])], [dead], ledger=ledger, ordered=False)
    assert (result.index_gaps, result.violations) == (0, 0)


def test_a_held_record_let_go_makes_its_outputs_in_a_run_of_their_own():
    """A record held back (a stream-table join's grace) has its outputs named one level above the index it
    reserved: their run is checked as an input's own is, also where no repartition topic is between."""
    held = output_indices(HELD_TOP)[0]  # the first held record of input 0 reserved HELD_TOP; its outputs 1, 2, ...
    ledger = {("in", 0): PartitionLedger(now=span(0, 1), filtered=bm(0), held=bm(0))}
    whole = merge(inputs(0), [partial([held, held + (1 << 32), held + (2 << 32)])], [], ledger=ledger)
    assert (whole.violations, whole.index_gaps) == (0, 0)
    lost = merge(inputs(0), [partial([held, held + (2 << 32)])], [], ledger=ledger)
    assert (lost.violations, lost.index_gaps) == (1, 1)
    # held by two operators (reserving HELD_TOP and HELD_TOP - 1), let go by the second only so far: its outputs
    # extend HELD_TOP - 1, HELD_TOP is still held; no gap, as in the record's own outputs
    second = output_indices(HELD_TOP - 1)[0]
    twice = merge(inputs(0), [partial([second, second + (1 << 32)])], [], ledger=ledger, ordered=False)
    assert (twice.violations, twice.index_gaps) == (0, 0)


def test_a_job_whose_steps_write_a_repartition_topic_and_an_output_both_has_its_runs_left_unchecked():
    """`eos audit app` checks each scope's run behind repartition topics only where every index a scope gives
    is among the audited outputs: not where one step writes both a repartition topic and an output."""
    from eos import Application
    from eos.audit.auditor import _linked_by_hops, runs_whole

    def verdicts(build) -> list[bool]:
        app = Application("t", bootstrap_servers="unused:9092")
        build(app)
        hops = app.repartition_topics
        return [runs_whole(group, hops) for group in _linked_by_hops(list(app.subtopologies.values()), hops)]

    def through_one_hop(app) -> None:
        (app.stream("in").select_key(lambda k, v: v, name="rekey").repartition(name="by_value")
            .flat_map_values(lambda v: [v, v], name="twice").to("out"))

    def also_straight_out(app) -> None:
        stream = app.stream("in")
        stream.to("copies")
        stream.group_by(lambda k, v: v, name="by_value").count(name="counts").to_stream().to("out")

    def a_count_then_a_copy(app) -> None:
        app.stream("in").group_by(lambda k, v: v, name="by_value").count(name="counts").to_stream().to("out")
        app.stream("other").to("copies")

    assert verdicts(through_one_hop) == [True]
    assert verdicts(also_straight_out) == [False]
    assert sorted(verdicts(a_count_then_a_copy)) == [True, True]


def test_the_report_says_which_lineage_checks_it_left_out_and_why():
    """Behind a repartition topic the order check is left out, and where a step writes both a repartition topic
    and an output, without the ledger, the runs' check too: the report says "not checked" with the reason, not a
    count of 0."""
    from rich.console import Console

    from eos.audit.auditor import AuditReport
    from eos.audit.report import render

    def shown(ledger: bool = True, **flags: bool) -> str:
        result = merge(inputs(0), [partial([0])], [], ledger={("in", 0): PartitionLedger(now=span(0, 1))}
                       if ledger else None, **flags)
        console = Console(record=True, width=250)
        render(AuditReport("lineage", "unused", ["in"], ["out"], "dlq", "g", "read_committed", lineage=result),
               console)
        return console.export_text()

    def row(text: str, label: str) -> list[str]:
        (line,) = [line for line in text.splitlines() if line.startswith(f"│ {label} ")]
        return [cell.strip() for cell in line.split("│")[2:-1]]

    checked = shown()
    assert row(checked, "1-to-n index gaps") == row(checked, "out of input order") == ["0", "ok"]
    assert "not checked" not in checked
    behind = shown(ordered=False, numbered=True)
    assert row(behind, "out of input order") == ["-", "not checked"] and row(behind, "1-to-n index gaps") == ["0", "ok"]
    assert "not checked: out of input order: behind a repartition topic" in behind
    assert row(shown(ordered=False), "1-to-n index gaps") == ["0", "ok"]  # (the ledger's paths: a step may write both)
    mixed = shown(ledger=False, ordered=False)
    assert row(mixed, "1-to-n index gaps") == ["-", "not checked"]
    assert ("not checked: 1-to-n index gaps: a step writes both a repartition topic and an output, and the job's "
            "ledger was not found") in mixed


def test_the_ledger_reader_keeps_each_path_that_ended_and_names_those_of_older_entries_unknown(monkeypatch):
    """Entries that keep paths give the audit each path's end; an older entry's records filtered behind a
    repartition topic are known by their origin only (`paths_unknown`), and no run is asked of them."""
    import eos.audit.ledger
    from eos.audit.ledger import read_ledger
    from transactions.memory import MemoryMessage

    hop = "app-by-city-repartition"
    older = LedgerEntry("by-city-0", 1, (LedgerInput(hop, 0, None, 0, 4),), {("in", 0): bm(1, 2)},
                        through={("in", 0): bm(1, 2)})
    newer = LedgerEntry("by-city-0", 2, (LedgerInput(hop, 0, None, 4, 9),), {("in", 0): bm(5, 6)},
                        through={("in", 0): bm(5, 6)}, paths={("in", 0): {0: bm(5), 1: bm(5, 6)}})
    third = LedgerEntry("by-city-0", 3, (LedgerInput(hop, 0, None, 9, 12),), {("in", 0): bm(8)},
                        through={("in", 0): bm(8)}, paths={("in", 0): {0: bm(8)}})
    records = [MemoryMessage("ledger", 0, n, None, e.encode(), None, 0) for n, e in enumerate((older, newer, third))]
    monkeypatch.setattr(eos.audit.ledger, "scan_topic", lambda *a, **k: iter([records]))

    class Admin:
        def partition_counts(self, topics):
            return dict.fromkeys(topics, 1)

        def topic_ids(self, topics):
            return dict.fromkeys(topics)

    account = read_ledger("unused", "ledger", ["in"], admin=Admin(), through=[hop])[("in", 0)]
    assert (account.through, account.paths_unknown) == (bm(1, 2, 5, 6, 8), bm(1, 2))
    assert account.paths == {0: bm(5, 8), 1: bm(5, 6)}


def test_a_record_held_back_and_sent_to_a_repartition_topic_by_one_scope_gives_its_outputs_indices_apart():
    """One input fanned out: a branch holds it back (suppress), another sends it through a repartition topic
    (its output index 0 or 1). What each becomes is numbered one level above the index it carries or reserved:
    a hold reserves from the top of the level down (`HELD_TOP`), so the two never share an index (they did when
    the k-th hold reserved the index k, which a repartition record of the same scope carried too)."""
    from eos import Application
    from eos.testing import TopologyTestDriver

    app = Application("fan", bootstrap_servers="unused:9092")
    stream = app.stream("in", key_serde="string")
    stream.group_by_key().count(name="held").suppress(0, name="limited").to_stream().to("counts")
    stream.select_key(lambda k, v: v["to"]).group_by_key().count(name="moved").to_stream().to("moved")
    with TopologyTestDriver(app) as driver:
        driver.pipe_many("in", [("a", {"to": "x"}, 1), ("b", {"to": "y"}, 2), ("a", {"to": "x"}, 3)])
        origins = [r.headers["eos.origin"] for topic in ("counts", "moved") for r in driver.read(topic)]
        assert len(origins) == 6 and len(set(origins)) == 6
        assert all(r.verdict == "PASS" for r in driver.audit())
