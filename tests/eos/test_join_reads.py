"""The join audit bounds a stream-table join's results by what its task had read of the table (`TableReads`,
from the lineage ledger's batches): each stream record was joined after exactly the table records of earlier
batches and those of its own batch that the task's merge of its inputs put before it. Here the model of that
merge is checked against `heapq.merge` itself and against the engine (the test driver's runs, audited), and
results joined with a value the task had not read yet, or no longer held, are named."""

from __future__ import annotations

import heapq
import json
import random
from datetime import timedelta

import pytest

import eos.audit.joins
import eos.audit.ledger
import eos.audit.windows
from eos import Application
from eos.audit.joins import JoinAuditResult, audit_join, table_reads
from eos.testing import TopologyTestDriver

BASE = 1_800_000_000_000


# ---------------------------------------------------------------- the merge model


def test_a_stream_record_reads_the_table_records_merged_before_it():
    stream = [(0, 10), (1, 30), (2, 20)]  # offset, timestamp (the third out of order)
    table = [(0, 5), (1, 25), (2, 40)]
    reads = table_reads([((0, 3), (0, 3))], stream, table)
    # offset 0 (10): after the table's 5, before 25; offsets 1 and 2 (running largest 30): after 25, before 40
    assert reads == {0: (1, 1), 1: (2, 2), 2: (2, 2)}


def test_on_a_tie_either_input_may_come_first():
    reads = table_reads([((0, 1), (0, 2))], [(0, 10)], [(0, 10), (1, 10)])
    assert reads == {0: (0, 2)}


def test_a_batch_that_read_none_of_the_table_reads_what_the_batches_before_it_had():
    batches = [((0, 1), (0, 2)), ((1, 2), None), (None, (2, 3)), ((2, 3), (3, 3))]
    stream = [(0, 50), (1, 1), (2, 1)]
    table = [(0, 10), (1, 20), (2, 99)]
    assert table_reads(batches, stream, table) == {0: (2, 2), 1: (2, 2), 2: (3, 3)}


def test_a_record_the_task_could_not_read_moves_no_other_record():
    # (-1: a record that failed to deserialize; it is taken first wherever it stands, and changes nothing)
    assert table_reads([((0, 2), (0, 2))], [(0, 10), (1, -1)], [(0, -1), (1, 20)]) == {0: (1, 1), 1: (1, 1)}


def test_a_batch_without_a_table_offset_known_is_left_unbounded():
    assert table_reads([((0, 2), None)], [(0, 1), (1, 2)], []) == {}


@pytest.mark.parametrize("seed", range(30))
def test_the_model_holds_every_order_heapq_merge_can_take(seed):
    """Random batches of two partitions, timestamps with ties, disorder and unreadable records: merged as the
    task merges them (`heapq.merge` by timestamp, either partition first on a tie), each stream record's table
    records before it fall within what `table_reads` says, and both ends of each range are taken."""
    rnd = random.Random(seed)
    n_stream, n_table = rnd.randint(1, 40), rnd.randint(0, 40)
    stream = [(o, rnd.choice([-1, *range(8)])) for o in range(n_stream)]
    table = [(o, rnd.choice([-1, *range(8)])) for o in range(n_table)]
    batches, s, t = [], 0, 0
    while s < n_stream or t < n_table:
        s2, t2 = min(n_stream, s + rnd.randint(0, 6)), min(n_table, t + rnd.randint(0, 6))
        batches.append(((s, s2) if s2 > s or rnd.random() < 0.5 else None, (t, t2) if t2 > t or rnd.random() < 0.5
                        else None))
        s, t = s2, t2
    reads = table_reads(batches, stream, table)
    seen: dict[int, set[int]] = {}
    for table_first in (True, False):
        t_at = None
        for sr, tr in batches:
            if tr is not None:
                t_at = tr[0]
            srecs = [("s", o, ts) for o, ts in stream[slice(*sr)]] if sr else []
            trecs = [("t", o, ts) for o, ts in table[slice(*tr)]] if tr else []
            parts = [trecs, srecs] if table_first else [srecs, trecs]
            for kind, offset, _ in heapq.merge(*parts, key=lambda e: e[2]):
                if kind == "t":
                    t_at = offset + 1
                elif t_at is not None:
                    seen.setdefault(offset, set()).add(t_at)
            if tr is not None:
                t_at = tr[1]
    assert set(reads) == set(seen)
    for offset, ats in seen.items():
        assert {min(ats), max(ats)} == set(reads[offset]), offset


# ---------------------------------------------------------------- the audit of the engine's runs


@pytest.fixture
def on_driver():
    """`audit_join` of a test driver's topics, read from the driver's cluster (by its address)."""
    def audit(driver: TopologyTestDriver) -> JoinAuditResult:
        app = driver.app
        (sub,) = (s for s in app.subtopologies.values() if s.joins)
        return audit_join(driver.cluster.bootstrap_servers, sub, group=app.config.group_id,
                          application_id=app.config.application_id, dead_letters=app.config.dlq_topic,
                          transitive=app.repartition_topics)

    return audit


def _feed(driver: TopologyTestDriver, rnd: random.Random, record, *, most: int = 25) -> None:
    """Three to eight chunks of 1 to `most` random records, `record(step)` giving each one's (topic, key,
    value), its timestamp tying with others' or up to 15 s behind; unreadable ones (bytes) are written as they
    are, then the rest of the chunk piped together."""
    step = 0
    for _ in range(rnd.randint(3, 8)):
        chunk = []
        for _ in range(rnd.randint(1, most)):
            step += 1
            ts = BASE + (step + rnd.randint(-15, 3)) * 1_000
            chunk.append((*record(step), ts))
        for topic, key, value, ts in chunk:
            if isinstance(value, bytes):
                driver.pipe(topic, key, value, timestamp=ts, serialized=True)
        driver.pipe_records([r for r in chunk if not isinstance(r[2], bytes)])


def priced(*, how="left", versioned=None, grace=None, partitions=1, batch=50) -> TopologyTestDriver:
    app = Application("t", bootstrap_servers="unused:9092", max_records_per_batch=batch)
    prices = app.table("prices", versioned=versioned)
    join = app.stream("orders").left_join if how == "left" else app.stream("orders").join
    join(prices, lambda o, p: [o, p], name="priced", grace=grace).to("out")
    return TopologyTestDriver(app, partitions={"orders": partitions, "prices": partitions, "out": partitions})


@pytest.mark.parametrize("seed", range(24))
def test_every_run_of_the_engine_is_explained_within_what_its_batches_read(seed, on_driver, monkeypatch):
    """Random runs: plain, versioned and grace-period joins, inner and left, one or two partitions, batches of
    3 to 50 records, timestamps that tie and go back, unreadable records on both sides. The audit bounded by
    the ledger explains every result, and bounds some record's reads before the table's end."""
    rnd = random.Random(seed)
    kind = ("plain", "versioned", "grace")[seed % 3]
    driver = priced(how=rnd.choice(["left", "inner"]), partitions=rnd.choice([1, 2]), batch=rnd.choice([3, 7, 50]),
                    versioned=None if kind == "plain" else timedelta(minutes=5),
                    grace=timedelta(seconds=10) if kind == "grace" else None)

    def record(step: int) -> tuple:
        key = rnd.choice("abc")
        if rnd.random() < 0.04:
            return rnd.choice(["orders", "prices"]), b"k", b"\xff{"
        if rnd.random() < 0.45:
            return "prices", key, None if rnd.random() < 0.1 else rnd.randint(1, 99)
        return "orders", key, f"o{rnd.randint(0, 999)}"

    _feed(driver, rnd, record)
    made = []
    monkeypatch.setattr(eos.audit.joins, "table_reads", lambda *a: made.append(table_reads(*a)) or made[-1])
    result = on_driver(driver)
    assert result.violations == 0, result.samples
    assert result.output_records > 0
    ends = {p: len(driver.cluster.logs["prices"][p]) for p in range(len(driver.cluster.logs["prices"]))}
    assert any(hi < max(ends.values()) for reads in made for _, hi in reads.values())  # (not all unbounded)


@pytest.mark.no_audit  # (it forges committed records)
def test_a_result_joined_with_a_price_its_batch_read_after_it_is_named(on_driver):
    """An order and a later price in one batch: the order was joined before the price was read. A result
    joined with the later price (what a store restored past its committed offset joins) moved forward through
    the table's history, so the audit without the ledger's batches took it; with them it is named, with the
    reason."""
    driver = priced()
    driver.pipe("prices", "a", 1, timestamp=BASE)
    driver.pipe_records([("orders", "a", "o1", BASE + 10), ("prices", "a", 2, BASE + 20)])
    assert [r.value for r in driver.read("out")] == [["o1", 1]]
    assert on_driver(driver).violations == 0
    _forge(driver, ["o1", 2], of=lambda old: old[0] == "o1")
    result = on_driver(driver)
    assert result.wrong_values == 1
    assert "had not read" in result.samples["wrong_values"][0]["reason"]


@pytest.mark.no_audit  # (it forges committed records)
def test_a_result_joined_with_a_price_overwritten_before_its_batch_is_named(on_driver):
    """A store restored from a stale changelog joins a price that an earlier committed batch had replaced."""
    driver = priced()
    driver.pipe("prices", "a", 1, timestamp=BASE)
    driver.pipe("orders", "a", "o1", timestamp=BASE + 10)
    driver.pipe("prices", "a", 2, timestamp=BASE + 20)
    driver.pipe("orders", "a", "o2", timestamp=BASE + 30)
    assert [r.value for r in driver.read("out")] == [["o1", 1], ["o2", 2]]
    _forge(driver, ["o2", 1], of=lambda old: old[0] == "o2")
    result = on_driver(driver)
    assert result.wrong_values == 1 and "no longer held" in result.samples["wrong_values"][0]["reason"]


@pytest.mark.no_audit  # (it forges committed records)
def test_a_grace_period_s_record_is_bounded_by_the_batch_that_let_it_go(on_driver):
    """Held back, an order is joined when a later order lets it go: with the prices read by then, not with
    those read after."""
    driver = priced(versioned=timedelta(minutes=5), grace=timedelta(seconds=10))
    driver.pipe("prices", "a", 1, timestamp=BASE)
    driver.pipe("orders", "a", "o1", timestamp=BASE + 1_000)
    driver.pipe("prices", "a", 2, timestamp=BASE + 500)  # read while o1 is held: o1 joins it
    # one batch: o2 lets o1 go; the task merges it before both prices (their running largest timestamp is 30 s)
    driver.pipe_records([("orders", "b", "o2", BASE + 20_000), ("prices", "a", 9, BASE + 30_000),
                         ("prices", "a", 3, BASE + 800)])
    assert [r.value for r in driver.read("out")] == [["o1", 2]]
    assert on_driver(driver).violations == 0
    # the price as of o1's time once the batch had read on
    _forge(driver, ["o1", 3], of=lambda old: old[0] == "o1")
    assert on_driver(driver).wrong_values == 1


def _forge(driver: TopologyTestDriver, value, of=lambda old: True) -> None:
    """Replace the value of the first committed output record whose value `of` picks."""
    serde = next(sub for sub in driver.app.subtopologies.values() if sub.joins).output_value_serde
    for log in driver.cluster.logs["out"]:
        for entry in log:
            if not entry.marker and entry.value() is not None and of(serde.deserialize(entry.value())):
                entry._value = serde.serialize(value)
                return
    raise AssertionError(f"no output to replace with {value}")


def test_the_report_says_how_many_records_the_ledger_bounded(on_driver, monkeypatch):
    from rich.console import Console

    from eos.audit.report import AuditReport, render

    driver = priced(partitions=2)
    driver.pipe_many("prices", [("a", 1, BASE), ("b", 2, BASE)])
    driver.pipe_many("orders", [("a", "o1", BASE + 1), ("b", "o2", BASE + 2), ("a", None, BASE + 3)])
    result = on_driver(driver)
    assert (result.bounded, result.violations) == (2, 0)  # (the order without a value reaches no lookup)
    console = Console(record=True, width=200)
    render(AuditReport("join", "unused", ["orders", "prices"], ["out"], "dlq", "g", "read_committed", join=result),
           console)
    assert "records bounded by the table their batch had read │     2" in console.export_text()
    # where the ledger is gone (its topic deleted), the row says 0: the forward-only rule checked the results
    monkeypatch.setattr(eos.audit.joins, "read_ledger", lambda *a, **k: None)
    result = on_driver(driver)
    assert (result.bounded, result.violations) == (0, 0)
    console = Console(record=True, width=200)
    render(AuditReport("join", "unused", ["orders", "prices"], ["out"], "dlq", "g", "read_committed", join=result),
           console)
    assert "records bounded by the table their batch had read │     0" in console.export_text()


# ---------------------------------------------------------------- table-table joins


def joined_tables(*, how="left", versioned=None, partitions=1, batch=50) -> TopologyTestDriver:
    app = Application("t", bootstrap_servers="unused:9092", max_records_per_batch=batch)
    left = app.table("left", versioned=versioned)
    right = app.table("right", versioned=versioned)
    joins = {"inner": left.join, "left": left.left_join, "outer": left.outer_join}
    joins[how](right, lambda a, b: [a, b], name="pair").to_stream().to("out")
    return TopologyTestDriver(app, partitions={"left": partitions, "right": partitions, "out": partitions})


@pytest.mark.parametrize("seed", range(18))
def test_every_table_table_run_is_explained_update_by_update(seed, on_driver):
    """Random table-table runs (inner, left, outer; plain and versioned; one or two partitions; batches of 3 to
    50; ties, disorder, deletions and unreadable records): every update's outcome (a result, a tombstone or
    nothing) is one the other side's row, as the task had read it, explains."""
    rnd = random.Random(seed)
    driver = joined_tables(how=("inner", "left", "outer")[seed % 3], partitions=rnd.choice([1, 2]),
                           versioned=timedelta(minutes=5) if seed % 2 else None, batch=rnd.choice([3, 7, 50]))

    def record(step: int) -> tuple:
        topic, key = rnd.choice(["left", "right"]), rnd.choice("abc")
        if rnd.random() < 0.04:
            return topic, b"k", b"\xff{"
        return topic, key, None if rnd.random() < 0.15 else {"v": rnd.randint(1, 99)}  # (a dict: unhashable)

    _feed(driver, rnd, record)
    result = on_driver(driver)
    assert result.violations == 0, result.samples
    assert result.output_records > 0 and result.bounded > 0


@pytest.mark.no_audit  # (it forges committed records)
def test_a_table_table_result_joined_with_a_row_read_after_it_is_named(on_driver):
    """An update of the left table joined with the right table's later row (a store restored past its committed
    offset): the combination check of both tables' histories took it; the update-by-update check names it."""
    from eos.audit.joins import check_table_table

    driver = joined_tables()
    driver.pipe("right", "a", 1, timestamp=BASE)
    driver.pipe_records([("left", "a", 10, BASE + 10), ("right", "a", 2, BASE + 20)])
    assert [r.value for r in driver.read("out")] == [[10, 1], [10, 2]]
    assert on_driver(driver).violations == 0
    _forge(driver, [10, 2])
    assert check_table_table({"a": [10]}, {"a": [1, 2]}, {"a": [[10, 2], [10, 2]]}, lambda a, b: [a, b], "left") == []
    result = on_driver(driver)
    assert result.wrong_values == 1, result.samples
    assert result.samples["wrong_values"][0]["detail"]["possible"] == ['[10, 1]']


@pytest.mark.no_audit  # (it forges committed records)
def test_a_table_table_result_under_another_key_is_named(on_driver):
    driver = joined_tables(how="outer")
    driver.pipe("left", "a", 1, timestamp=BASE)
    assert on_driver(driver).violations == 0
    entry = next(e for e in driver.cluster.logs["out"][0] if not e.marker)
    entry._key = next(s for s in driver.app.subtopologies.values() if s.joins).output_key_serde.serialize("b")
    assert on_driver(driver).wrong_values == 1


# ---------------------------------------------------------------- global tables


def rated(*, how="left", versioned=None, partitions=1, rate_partitions=1, batch=50) -> TopologyTestDriver:
    app = Application("t", bootstrap_servers="unused:9092", max_records_per_batch=batch)
    rates = app.global_table("rates", versioned=versioned)
    join = app.stream("orders").left_join if how == "left" else app.stream("orders").join
    join(rates, lambda o, r: [o["id"], r], key=lambda k, o: o["cur"], name="rated").to("out")
    return TopologyTestDriver(app, partitions={"orders": partitions, "rates": rate_partitions, "out": partitions})


@pytest.mark.parametrize("seed", range(16))
def test_every_global_table_run_is_explained_by_its_batches_pins(seed, on_driver, monkeypatch):
    """Random runs of a stream-global-table join (plain and versioned, inner and left, one or two partitions on
    either side, batches of 3 to 50, disorder, deletions, unreadable records): every result is the join with
    the row its key held where its batch's pins had read the table to, and some batch read short of the end."""
    rnd = random.Random(seed)
    driver = rated(how=rnd.choice(["left", "inner"]), versioned=timedelta(minutes=5) if seed % 2 else None,
                   partitions=rnd.choice([1, 2]), rate_partitions=rnd.choice([1, 2]), batch=rnd.choice([3, 7, 50]))

    def record(step: int) -> tuple:
        cur = rnd.choice(["eur", "usd", "gbp"])
        if rnd.random() < 0.04:
            return rnd.choice(["orders", "rates"]), b"k", b"\xff{"
        if rnd.random() < 0.4:
            return "rates", cur, None if rnd.random() < 0.1 else rnd.randint(1, 99)
        return "orders", f"o{step}", {"id": step, "cur": cur}

    _feed(driver, rnd, record, most=20)
    made, real = [], eos.audit.joins.GlobalReads
    monkeypatch.setattr(eos.audit.joins, "GlobalReads", lambda *a: made.append(real(*a)) or made[-1])
    result = on_driver(driver)
    assert result.violations == 0, result.samples
    assert result.output_records > 0 and result.bounded > 0
    ends = [len(log) for log in driver.cluster.logs["rates"]]
    assert any(any(pins[p] < ends[p] for p in pins) for reads in made for pins in reads.before.values())


@pytest.mark.no_audit  # (it forges committed records)
def test_a_global_result_joined_with_a_rate_read_after_its_batch_is_named(on_driver, monkeypatch):
    """An order joined, then the rate updated: a result with the later rate (what a worker's copy read past its
    batch's pins joins) moves forward through the table's history, so the audit without the pins took it; with
    them it is named, with the reason."""
    driver = rated()
    driver.pipe("rates", "eur", 1, timestamp=BASE)
    driver.pipe("orders", "o1", {"id": 1, "cur": "eur"}, timestamp=BASE + 10)
    driver.pipe("rates", "eur", 2, timestamp=BASE + 20)
    assert [r.value for r in driver.read("out")] == [[1, 1]]
    assert on_driver(driver).violations == 0
    _forge(driver, [1, 2])
    result = on_driver(driver)
    assert (result.wrong_values, result.bounded) == (1, 1), result.samples
    assert "pins" in result.samples["wrong_values"][0]["reason"]
    monkeypatch.setattr(eos.audit.joins, "_global_reads", lambda *a: {})  # (a ledger without pins: unbounded)
    assert on_driver(driver).violations == 0


@pytest.mark.no_audit  # (it forges committed records)
def test_a_global_result_joined_with_a_rate_overwritten_before_its_batch_is_named(on_driver):
    """A copy behind its batch's pins (a stale copy kept by a worker) joins a rate the table had replaced."""
    driver = rated(versioned=timedelta(minutes=5))
    driver.pipe("rates", "eur", 1, timestamp=BASE)
    driver.pipe("orders", "o1", {"id": 1, "cur": "eur"}, timestamp=BASE + 10)
    driver.pipe("rates", "eur", 2, timestamp=BASE + 20)
    driver.pipe("orders", "o2", {"id": 2, "cur": "eur"}, timestamp=BASE + 30)
    assert [r.value for r in driver.read("out")] == [[1, 1], [2, 2]]
    _forge(driver, [2, 1], of=lambda old: old[0] == 2)
    result = on_driver(driver)
    assert result.wrong_values == 1 and "pins" in result.samples["wrong_values"][0]["reason"]


@pytest.mark.no_audit  # (it forges committed records)
def test_a_key_updated_in_two_partitions_of_a_global_table_is_left_unbounded(on_driver):
    """Which of two partitions' rows a copy holds last depends on the order it read them in: such a key's
    results are checked by the forward-only rule alone, the other keys' by the pins."""
    driver = rated(rate_partitions=2)
    driver.pipe("rates", "eur", 1, timestamp=BASE, partition=0)
    driver.pipe("rates", "eur", 2, timestamp=BASE + 1, partition=1)
    driver.pipe("rates", "usd", 3, timestamp=BASE + 2)
    driver.pipe_many("orders", [("o1", {"id": 1, "cur": "eur"}, BASE + 10), ("o2", {"id": 2, "cur": "usd"}, BASE + 11)])
    assert [r.value for r in driver.read("out")] == [[1, 2], [2, 3]]
    result = on_driver(driver)
    assert (result.violations, result.bounded) == (0, 2)
    _forge(driver, [1, 1], of=lambda old: old[0] == 1)
    assert on_driver(driver).violations == 0
    _forge(driver, [2, None], of=lambda old: old[0] == 2)
    assert on_driver(driver).wrong_values == 1


def test_a_ledger_entry_keeps_its_batch_s_pins_and_an_entry_without_them_reads_as_none():
    from eos.ledger import LedgerEntry, LedgerInput

    entry = LedgerEntry("s-0", 3, (LedgerInput("orders", 0, None, 5, 9),), pins={"rates": {0: 7, 1: 12}})
    assert LedgerEntry.decode(entry.encode()) == entry
    old = LedgerEntry("s-0", 3, (LedgerInput("orders", 0, None, 5, 9),))
    assert b"pins" not in old.encode() and LedgerEntry.decode(old.encode()).pins == {}


def test_the_report_shows_a_global_join_s_bounded_row_even_at_zero(on_driver, monkeypatch):
    from rich.console import Console

    from eos.audit.report import AuditReport, render

    driver = rated()
    driver.pipe("rates", "eur", 1, timestamp=BASE)
    driver.pipe("orders", "o1", {"id": 1, "cur": "eur"}, timestamp=BASE + 10)
    monkeypatch.setattr(eos.audit.joins, "read_ledger", lambda *a, **k: None)
    result = on_driver(driver)
    assert (result.bounded, result.violations) == (0, 0)
    console = Console(record=True, width=200)
    render(AuditReport("join", "unused", ["orders"], ["out"], "dlq", "g", "read_committed", join=result), console)
    assert "records bounded by the table their batch had read │     0" in console.export_text()


# ---------------------------------------------------------------- late records behind a repartition topic


def test_a_record_late_on_one_partition_of_a_repartition_topic_is_late_there_only(on_driver):
    """A view made into two records keyed anew (a flat map before a stream-stream join) reaches two tasks: the
    one whose stream time is an hour on drops its record as late, the other joins its record with a click.
    The ledger names the late record by its own place on the repartition topic, so the join audit leaves out
    that one and expects the other's result (named by the view it came from, it once left out both, and
    called the result unexpected)."""
    from eos.tables import JoinWindows
    from transactions.memory import partition_for

    app = Application("t", bootstrap_servers="unused:9092", repartition_purge_interval=0, source_idle_timeout=5)
    views = app.stream("views").flat_map(lambda k, v: [(f"a{v['u']}", v), (f"g{v['u']}", v)])
    views.join(app.stream("clicks"), lambda v, c: [v["u"], c], windows=JoinWindows(1_000, 1_000), name="seen").to(
        "out")
    driver = TopologyTestDriver(app, partitions={"views": 2, "clicks": 2, "out": 2})
    task_of = {key: partition_for(key.encode(), 2) for key in ("a1", "g1", "a2", "g2", "v1", "v2")}
    assert task_of["a1"] == task_of["a2"] == task_of["g2"] == task_of["v1"] != task_of["g1"] == task_of["v2"]
    driver.pipe("clicks", "g1", "click", timestamp=BASE)
    driver.pipe("clicks", "a1", "later", timestamp=BASE + 3_600_000)
    driver.pipe("views", "v2", {"u": 2}, timestamp=BASE + 3_600_000)  # (the task of a1 an hour on)
    driver.advance_wall_clock(10_000)  # (the views task of v1, which had none, idle: it holds no clock back)
    driver.pipe("views", "v1", {"u": 1}, timestamp=BASE + 10)
    assert [r.value for r in driver.read("out")] == [[1, "click"]]
    assert [n for by in driver.dropped.values() for n in by.values()] == [1]
    result = on_driver(driver)
    assert (result.late_records, result.expected, result.violations) == (1, 1, 0), result.samples


def _late_view_rewritten(on_driver, rewrite) -> None:
    """A view an hour behind stream time, late for a stream-stream join; each ledger entry naming late records
    rewritten as an earlier version wrote it (`rewrite(entry, its JSON)` changes the JSON and checks the entry it
    decodes to); the join audit then still leaves the record out, and nothing else."""
    from eos.ledger import LedgerEntry, ledger_topic
    from eos.tables import JoinWindows

    app = Application("t", bootstrap_servers="unused:9092")
    app.stream("views").join(app.stream("clicks"), lambda v, c: [v, c], windows=JoinWindows(1_000), name="seen").to(
        "out")
    driver = TopologyTestDriver(app)
    driver.pipe("clicks", "k", "c", timestamp=BASE + 3_600_000)
    driver.pipe("views", "k", "late", timestamp=BASE)
    driver.pipe("clicks", "k", "c2", timestamp=BASE + 3_600_000)
    assert on_driver(driver).late_records == 1
    rewritten = 0
    for log in driver.cluster.logs[ledger_topic(app.config.application_id)]:
        for message in log:
            entry = LedgerEntry.decode(message.value())
            if entry is not None and entry.late:
                assert entry.late_by == {"seen": entry.late}
                assert LedgerEntry.decode(entry.encode()) == entry
                old = json.loads(entry.encode())
                del old["late_by"]  # (neither earlier version named steps)
                message._value = json.dumps(rewrite(entry, old)).encode()
                rewritten += 1
    assert rewritten == 1
    result = on_driver(driver)
    assert (result.late_records, result.violations) == (1, 0), result.samples


def test_a_ledger_written_before_late_records_were_named_by_place_is_still_read(on_driver):
    """Entries written before kept late records by origin under "late": read as `late_origins`, and the join
    audit leaves those records out as it did."""
    from eos.ledger import LedgerEntry

    def by_origin(entry, old):
        old["late"] = old.pop("late_at")  # (its records are their own origins: read directly)
        decoded = LedgerEntry.decode(json.dumps(old).encode())
        assert decoded.late == {} and decoded.late_origins == entry.late and decoded.late_by is None
        assert b'"late"' in decoded.encode() and b"late_at" not in decoded.encode()
        return old
    _late_view_rewritten(on_driver, by_origin)


def test_an_entry_written_before_late_records_were_named_by_step_counts_them_late_for_every_step(on_driver):
    """Entries written before `late_by`: their late records (`late_at`) are late for every step, as they were
    read then, and the join audit leaves them out; an entry with `late_by` encodes and decodes it whole."""
    from eos.ledger import LedgerEntry

    def by_place(entry, old):
        decoded = LedgerEntry.decode(json.dumps(old).encode())
        assert decoded.late_by is None and decoded.late == entry.late
        return old
    _late_view_rewritten(on_driver, by_place)
