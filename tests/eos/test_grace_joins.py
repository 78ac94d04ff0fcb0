"""A stream-table join with a grace period (`join(..., grace=)`, Kafka Streams' KIP-923), through the test
driver: stream records held back until the stream's time has passed them by the grace period, then joined
with the versioned table as of their timestamps, in timestamp order, their outputs named after them; late
records dropped; the buffer restored after killed batches; a record whose join fails when it is let go
dead-lettered as itself; and the join audit's replay of what was let go."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from eos import Application
from eos.audit.joins import JoinAuditResult, _as_released, _canon, _made_of, _versioned_states, explain_stream_table
from eos.origin import decode_origin, output_indices
from eos.records import Record
from eos.testing import TopologyTestDriver

BASE = 1_800_000_000_000
MIN = 60_000


def app_(**options) -> Application:
    return Application("t", bootstrap_servers="unused:9092", **options)


def priced(app: Application, grace=timedelta(minutes=15), history=timedelta(hours=1), how="left"):
    prices = app.table("prices", versioned=history)
    join = app.stream("orders").left_join if how == "left" else app.stream("orders").join
    join(prices, lambda o, p: [o, p], name="priced", grace=grace).to("out")
    return app


def _out(driver):
    return [(r.key, *r.value, r.timestamp) for r in driver.read("out")]


def test_an_order_waits_for_a_price_written_after_it():
    """The README's case: the -30 min price is written after the -20 min order was read. Without a grace
    period the order joins the -50 min price; held back 15 minutes, it joins the -30 min one."""
    inputs = [("prices", "apple", 50, BASE - 50 * MIN), ("prices", "apple", 10, BASE - 10 * MIN),
              ("orders", "apple", "o20", BASE - 20 * MIN), ("prices", "apple", 30, BASE - 30 * MIN)]
    results = {}
    for grace in (None, timedelta(minutes=15)):
        driver = TopologyTestDriver(priced(app_(), grace=grace))
        for record in inputs:
            driver.pipe_records([record])
        if grace is not None:
            assert _out(driver) == []  # held: the stream's time has not passed -20 min + 15 min
            driver.pipe("orders", "pear", "o0", timestamp=BASE)  # the stream's time moves on: o20 is let go
        results[grace] = _out(driver)
    assert results[None] == [("apple", "o20", 50, BASE - 20 * MIN)]
    assert results[timedelta(minutes=15)] == [("apple", "o20", 30, BASE - 20 * MIN)]


def test_records_are_let_go_in_timestamp_order_named_after_themselves():
    driver = TopologyTestDriver(priced(app_(), grace=10_000))
    driver.pipe_many("prices", [("a", 1, BASE), ("b", 2, BASE)])
    driver.pipe_many("orders", [("a", "o1", BASE + 5_000), ("b", "o2", BASE + 1_000), ("a", "o3", BASE + 3_000),
                                ("b", "o4", BASE + 3_000)])
    assert _out(driver) == []
    driver.pipe("orders", "a", "o5", timestamp=BASE + 13_000)  # deadline 3 s: o2, then o3 and o4 (in arrival order)
    got = driver.read("out")
    assert [(r.value[0], r.timestamp) for r in got] == [("o2", BASE + 1_000), ("o3", BASE + 3_000),
                                                        ("o4", BASE + 3_000)]
    # each output names the order it was made of (offsets 1, 2, 3), with the index it reserved extended
    assert [decode_origin(r.headers["eos.origin"]) for r in got] == [
        ("orders", 0, offset, output_indices(0)[0]) for offset in (1, 2, 3)]
    driver.pipe("orders", "b", "o6", timestamp=BASE + 30_000)
    assert [r.value[0] for r in driver.read("out")] == ["o1", "o5"]
    # what is still held is in the buffer, in the order it will be let go
    assert [h.value for h in driver.store("priced-buffer").view.all()] == ["o6"]


def test_a_stream_joined_at_once_and_with_a_grace_period_numbers_its_outputs_apart():
    """One order, two joins: the one without a grace period makes the order's output 0 at once; the held one's
    output comes later, one index level up (the lineage audit checks that a record's own outputs run 0, 1,
    ... without gaps, and the held one is not among them)."""
    app = app_()
    prices = app.table("prices", versioned=10_000)
    orders = app.stream("orders")
    orders.left_join(prices, lambda o, p: [o, p], name="waited", grace=1_000).to("out")
    orders.left_join(prices, lambda o, p: [o, p], name="at_once").to("now")
    driver = TopologyTestDriver(app)
    driver.pipe_many("orders", [("a", "o1", BASE), ("a", "o2", BASE + 5_000)])
    assert [decode_origin(r.headers["eos.origin"]).index for r in driver.read("now")] == [0, 0]
    assert [(r.value[0], decode_origin(r.headers["eos.origin"])) for r in driver.read("out")] == [
        ("o1", ("orders", 0, 0, output_indices(0)[0]))]
    assert not any(e.held for e in driver.ledger())  # (each order made an output at once: not filtered)


def test_a_record_older_than_the_grace_period_is_dropped_as_late():
    driver = TopologyTestDriver(priced(app_(), grace=2_000))
    driver.pipe_many("orders", [("a", "o1", BASE + 10_000), ("a", "late", BASE + 7_999), ("a", "o2", BASE + 8_000)])
    driver.pipe("orders", "a", "o3", timestamp=BASE + 20_000)
    assert [r.value[0] for r in driver.read("out")] == ["o2", "o1"]
    assert driver.dropped == {"priced": {"late": 1}}
    entries = driver.ledger()
    assert [o for e in entries for bm in e.late.values() for o in bm] == [1]
    # held records made nothing in their batch: filtered, and held (their outputs came later)
    assert sorted(o for e in entries for bm in e.held.values() for o in bm) == [0, 2, 3]


def test_an_inner_join_lets_go_of_a_record_without_a_row_with_nothing():
    driver = TopologyTestDriver(priced(app_(), grace=1_000, how="inner"))
    driver.pipe_many("prices", [("a", 1, BASE + 500)])
    driver.pipe_many("orders", [("a", "o1", BASE), ("a", "o2", BASE + 600), ("b", "o3", BASE + 700)])
    driver.pipe("orders", "a", "o4", timestamp=BASE + 5_000)
    assert [(r.value[0], r.value[1]) for r in driver.read("out")] == [("o2", 1)]


def test_a_grace_period_is_refused_where_it_cannot_hold():
    app = app_()
    plain = app.table("prices")
    with pytest.raises(ValueError, match="needs a versioned table"):
        app.stream("orders").join(plain, lambda o, p: p, name="j1", grace=1_000)
    versioned = app.table("rates", versioned=5_000)
    with pytest.raises(ValueError, match="longer than the history retention"):
        app.stream("orders").join(versioned, lambda o, p: p, name="j2", grace=timedelta(seconds=6))
    with pytest.raises(ValueError, match="a duration >= 0"):
        app.stream("orders").join(versioned, lambda o, p: p, name="j3", grace=-1)
    from eos.tables import JoinWindows
    with pytest.raises(ValueError, match="JoinWindows"):
        app.stream("orders").join(app.stream("other"), lambda a, b: a, name="j4",
                                  windows=JoinWindows(1_000), grace=1_000)
    with pytest.raises(ValueError, match="needs a versioned table"):  # the one-step API says the same
        app.join("orders", app.table("fx"), "out", name="j5", joiner=lambda o, p: p, grace=1_000)


def test_describe_names_the_buffer_and_its_grace_period():
    text = str(priced(app_()).describe())
    assert "priced-buffer (stream records held back, grace 900000 ms)" in text
    assert "priced-prices (versioned, history 3600000 ms)" in text


def test_a_record_whose_join_fails_when_let_go_goes_to_the_dead_letter_topic_as_itself():
    app = app_()
    prices = app.table("prices", versioned=10_000)

    def joiner(order, price):
        if order == "bad":
            raise ValueError("cannot price this order")
        return [order, price]
    app.stream("orders").left_join(prices, joiner, name="priced", grace=1_000).to("out")
    driver = TopologyTestDriver(app)
    driver.pipe_many("orders", [("a", "bad", BASE), ("a", "o1", BASE + 100)])
    driver.pipe("orders", "a", "o2", timestamp=BASE + 5_000)  # lets go of both: bad fails, o1 is joined
    assert [r.value[0] for r in driver.read("out")] == ["o1"]
    [letter] = driver.dead_letters()
    assert (letter.offset, letter.error_type, b"bad" in letter.value) == (0, "ValueError", True)
    driver.pipe("orders", "a", "o3", timestamp=BASE + 10_000)  # nothing of it is held any more
    assert [r.value[0] for r in driver.read("out")] == ["o2"] and len(driver.dead_letters()) == 1


@pytest.mark.parametrize("rocksdb", [False, True])
def test_killed_batches_restore_the_buffer_and_commit_the_same_results(rocksdb, tmp_path):
    app = app_(max_records_per_batch=5)
    priced(app, grace=3_000, history=10_000)
    driver = TopologyTestDriver(app, state_dir=tmp_path if rocksdb else None)
    rnd = random.Random(7)
    inputs = []
    for i in range(80):
        if rnd.random() < 0.4:
            inputs.append(("prices", rnd.choice("abc"), i, BASE + i * 300 + rnd.randint(-2_000, 500)))
        else:
            inputs.append(("orders", rnd.choice("abcd"), f"o{i}", BASE + i * 300 + rnd.randint(-4_000, 500)))
    report = driver.check_exactly_once(inputs, crashes=8, seed=5)
    assert report.ok and len(report.crashes) >= 4 and report.records >= 80


@pytest.mark.parametrize("seed", range(4))
def test_joins_match_a_reference_through_killed_batches(seed):
    """Prices and orders interleaved, with batches killed at random steps: the outputs are what a reference
    makes of the same input, record by record in the order the task read it (its versioned table, its
    buffer), each exactly once."""
    from tests.recovery.test_versioned import _Model

    rnd = random.Random(seed)
    grace, history = rnd.choice([0, 2_000, 6_000]), 20_000
    app = app_(max_records_per_batch=rnd.choice([3, 9]))
    priced(app, grace=grace, history=history)
    driver = TopologyTestDriver(app)
    inputs = []
    for i in range(100):
        if rnd.random() < 0.4:
            inputs.append(("prices", rnd.choice("abc"), None if rnd.random() < 0.1 else i,
                           BASE + i * 200 + rnd.randint(-5_000, 500)))
        else:
            inputs.append(("orders", rnd.choice("abcd"), f"o{i}", BASE + i * 200 + rnd.randint(-3_000, 500)))
    for step in ("after_read", "after_produce", "before_commit", "after_commit"):
        driver.crash_at(step, batch=rnd.randint(1, 12))
    # the reference reads one input at a time (a batch merges its partitions by timestamp: one at a time
    # keeps the order the records were written in)
    for record in inputs:
        driver.pipe_records([record])
    model, observed, held, expected = _Model(history), None, [], []
    for topic, key, value, ts in inputs:
        if topic == "prices":
            model.put(key, value, ts)
            continue
        observed = ts if observed is None else max(observed, ts)
        if ts < observed - grace:
            continue
        held.append((ts, len(expected) + len(held), key, value))
        for due in sorted(h for h in held if h[0] <= observed - grace):
            held.remove(due)
            expected.append((due[2], due[3], model.get(due[2], due[0]), due[0]))
    assert _out(driver) == expected


def _wrong(r, table, states):
    """A value `r`'s key held in `table`, but at no time a lookup at r's timestamp could have found it."""
    possible = {_canon(v) for state in states.get(r.key, []) for v in state.values_at(r.timestamp)}
    return next((t.value for t in table if t.key == r.key and _canon(t.value) not in possible), None)


@pytest.mark.parametrize("seed", range(6))
def test_the_join_audit_replays_what_was_let_go(seed):
    """The audit's replay (`_as_released`, then `explain_stream_table`) explains every committed result of a
    job with a grace period, and names a result joined when its record arrived rather than when it was let
    go."""
    rnd = random.Random(seed)
    app = app_(max_records_per_batch=rnd.choice([4, 50]))
    priced(app, grace=3_000, history=20_000)
    driver = TopologyTestDriver(app)
    inputs = []
    for i in range(120):
        if rnd.random() < 0.45:
            inputs.append(("prices", rnd.choice("abc"), i, BASE + i * 200 + rnd.randint(-2_500, 300)))
        else:
            inputs.append(("orders", rnd.choice("abcd"), f"o{i}", BASE + i * 200 + rnd.randint(-4_000, 300)))
    for n in range(0, len(inputs), 10):
        driver.pipe_records(inputs[n:n + 10])
    table = [Record(k, v, "prices", 0, n, ts)
             for n, (k, v, ts) in enumerate((k, v, ts) for t, k, v, ts in inputs if t == "prices")]
    stream = [Record(k, v, "orders", 0, n, ts)
              for n, (k, v, ts) in enumerate((k, v, ts) for t, k, v, ts in inputs if t == "orders")]
    spec = driver.app.subtopologies["priced"].joins[0]
    assert spec.grace_ms == 3_000
    made_of = {("orders", 0, r.offset, None): (0, r.offset) for r in stream}

    def audit(outputs):
        results: dict = {}
        for value, origin in outputs:
            left = _made_of(origin, made_of)
            results.setdefault(left, {})[origin.index] = value
        result = JoinAuditResult(spec.kind, spec.how)
        joined, mine = _as_released(stream, results, 0, {(0, r.offset): None for r in stream}, spec, result, 10)
        problems = explain_stream_table(joined, mine, _versioned_states(table, 20_000), spec.joiner, spec.how)
        return [p for p, _, _ in problems], result

    outputs = [(r.value, decode_origin(r.headers["eos.origin"])) for r in driver.read("out")]
    problems, result = audit(outputs)
    assert problems == [] and result.unexpected == 0 and result.late_records == driver.dropped["priced"]["late"]
    # a result joined with a row its key held, but at no time the replay could have looked it up at
    states = _versioned_states(table, 20_000)
    orders = {r.value: r for r in stream}
    n, wrong = next((n, wrong) for n, (value, _) in enumerate(outputs)
                    if (wrong := _wrong(orders[value[0]], table, states)) is not None)
    value, origin = outputs[n]
    assert audit([*outputs[:n], ([value[0], wrong], origin), *outputs[n + 1:]])[0] == ["wrong_values"]
    # a result left out is missing; one made twice (a second index of its record) unexpected
    assert audit(outputs[:n] + outputs[n + 1:])[0] == ["missing"]
    twice = (value, origin._replace(index=origin.index + (1 << 32)))
    assert audit([*outputs, twice])[0] == ["unexpected"]
    # an output of a record the join still holds is unexpected
    held = driver.store("priced-buffer").view.all()
    assert held
    first = held[0].message
    extra = (["x", None], decode_origin(b"orders:0:%d:%d" % (first[2], output_indices(first[7])[0])))
    assert audit([*outputs, extra])[1].unexpected == 1
