"""A stream-table join with a grace period (`join(..., grace=)`, Kafka Streams' KIP-923), through the test
driver: stream records held back until the stream's time has passed them by the grace period, then joined
with the versioned table as of their timestamps, in timestamp order, their outputs named after them; late
records dropped; the buffer restored after killed batches; a record whose join fails when it is let go
dead-lettered as itself; and the join audit's replay of what was let go."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from eos import Application, store
from eos.audit.joins import JoinAuditResult, _as_released, _canon, _made_of, _versioned_states, explain_stream_table
from eos.graph.nodes import hold_slots
from eos.origin import HELD_TOP, decode_origin, output_indices
from eos.records import Record
from eos.testing import TopologyTestDriver
from transactions.partitioner import partition_for

BASE = 1_800_000_000_000
MIN = 60_000


def app_(**options) -> Application:
    return Application("t", bootstrap_servers="unused:9092", **options)


def interleaved(rnd: random.Random, n: int, step: int, price_jitter: tuple[int, int], order_jitter: tuple[int, int], *,
                share: float = 0.4, deletions: float = 0.0, price_keys: str = "abc", order_keys: str = "abcd",
                order=lambda i, key: f"o{i}", keyed=lambda i, key: key) -> list[tuple]:
    """`n` prices and orders, the i-th at `i * step` ms plus a jitter drawn from its kind's range: a `share` of
    prices (value i, a share `deletions` of them deletions), the rest orders (value `order(i, key)`, keyed
    `keyed(i, key)`)."""
    out = []
    for i in range(n):
        if rnd.random() < share:
            key = rnd.choice(price_keys)
            value = None if deletions and rnd.random() < deletions else i
            out.append(("prices", key, value, BASE + i * step + rnd.randint(*price_jitter)))
        else:
            key = rnd.choice(order_keys)
            out.append(("orders", keyed(i, key), order(i, key), BASE + i * step + rnd.randint(*order_jitter)))
    return out


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
    # each output names the order it was made of (offsets 1, 2, 3), with the index it reserved extended (the
    # first record an order held reserves HELD_TOP, at the top of the level its own outputs count up on)
    assert [decode_origin(r.headers["eos.origin"]) for r in got] == [
        ("orders", 0, offset, output_indices(HELD_TOP)[0]) for offset in (1, 2, 3)]
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
        ("o1", ("orders", 0, 0, output_indices(HELD_TOP)[0]))]
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
    inputs = interleaved(random.Random(7), 80, 300, (-2_000, 500), (-4_000, 500))
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
    inputs = interleaved(rnd, 100, 200, (-5_000, 500), (-3_000, 500), deletions=0.1)
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
    inputs = interleaved(rnd, 120, 200, (-2_500, 300), (-4_000, 300), share=0.45)
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
        joined, mine, _ = _as_released(stream, results, 0, {(0, r.offset): None for r in stream}, spec, result, 10)
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


def _reference(inputs, grace, history, records_of):
    """What a task makes of `inputs` ((topic, key, value, ts) read one at a time in that order) with a grace
    period: `records_of(key, value, ts)` the records that reach the join of each order, let go in (timestamp,
    arrival) order, each joined with the model versioned table as of its timestamp. Returns the results in
    order, (key, order value, price, ts)."""
    from tests.recovery.test_versioned import _Model

    model, observed, held, out = _Model(history), None, [], []
    arrivals = iter(range(10**9))
    for topic, key, value, ts in inputs:
        if topic == "prices":
            model.put(key, value, ts)
            continue
        for k, v, t in records_of(key, value, ts):
            observed = t if observed is None else max(observed, t)
            if t < observed - grace:
                continue
            held.append((t, next(arrivals), k, v))
            for due in sorted(h for h in held if h[0] <= observed - grace):
                held.remove(due)
                out.append((due[2], due[3], model.get(due[2], due[0]), due[0]))
    return out


def test_several_records_of_one_order_are_held_and_let_go_each_with_outputs_of_its_own():
    """A flat map before the join makes two records of each order, a flat map after it two outputs of each
    joined one (one task, no repartition topic): every output is named after its order, with an index of its own (the
    held record's, one level up, then its output's), and the results are the reference's."""
    app = app_()
    prices = app.table("prices", versioned=60_000)
    (app.stream("orders")
        .flat_map_values(lambda v: [{**v, "part": 0}, {**v, "part": 1}])
        .left_join(prices, lambda o, p: [o, p], name="priced", grace=2_000)
        .flat_map_values(lambda pair: [pair, [*pair, "copy"]]).to("out"))
    driver = TopologyTestDriver(app)
    inputs = interleaved(random.Random(3), 60, 300, (-1_500, 0), (-1_000, 0), price_keys="ab", order_keys="abc",
                         order=lambda i, key: {"n": i})
    for record in inputs:
        driver.pipe_records([record])
    got = driver.read("out")
    pairs = [(r.key, r.value[0]["n"], r.value[0]["part"], r.value[1], r.timestamp, len(r.value)) for r in got]
    want = [(k, v["n"], v["part"], price, ts, size)
            for k, v, price, ts in _reference(inputs, 2_000, 60_000, lambda k, v, ts: [(k, {**v, "part": 0}, ts),
                                                                                       (k, {**v, "part": 1}, ts)])
            for size in (2, 3)]
    assert pairs == want
    origins = [decode_origin(r.headers["eos.origin"]) for r in got]
    assert len(set(origins)) == len(origins)  # (every output its own index)
    offset_of = {v["n"]: n for n, v in enumerate(v for t, _, v, _ in inputs if t == "orders")}
    for r, origin in zip(got, origins, strict=True):
        part, copy = r.value[0]["part"], len(r.value) == 3
        held = output_indices(HELD_TOP - part)  # the part-th record of its order held, its outputs one level up
        assert origin == ("orders", 0, offset_of[r.value[0]["n"]], held[0] + (copy << held[1]))


def test_a_rekeyed_stream_is_held_and_its_outputs_name_the_original_order():
    """Orders re-keyed by product go through a repartition topic before the grace join: the records held are
    the topic's, and what they make is named after the order they came from, one level above the index the
    repartition record carries."""
    app = app_()
    prices = app.table("prices", versioned=60_000)
    (app.stream("orders").select_key(lambda k, v: v["product"])
        .left_join(prices, lambda o, p: [o["n"], p], name="priced", grace=1_000).to("out"))
    driver = TopologyTestDriver(app)
    driver.pipe_many("prices", [("a", 1, BASE), ("b", 2, BASE)])
    driver.pipe_many("orders", [("c1", {"product": "a", "n": 0}, BASE + 100),
                                ("c2", {"product": "b", "n": 1}, BASE + 200),
                                ("c1", {"product": "a", "n": 2}, BASE + 5_000)])
    got = driver.read("out")
    assert [(r.key, r.value) for r in got] == [("a", [0, 1]), ("b", [1, 2])]
    base, shift = output_indices(0)  # the repartition record carries index 0; its outputs count up from base,
    reserved = base + (HELD_TOP << shift)  # and the record it held reserved the top of that level
    assert [decode_origin(r.headers["eos.origin"]) for r in got] == [
        ("orders", 0, 0, output_indices(reserved)[0]), ("orders", 0, 1, output_indices(reserved)[0])]
    [late] = [e for e in driver.ledger() if e.held]
    assert set(late.held) == {("orders", 0)}  # (the ledger names the original input, as for filtered records)


def _audit(driver: TopologyTestDriver, join: str, tamper=lambda outputs: outputs) -> JoinAuditResult:
    """The join audit of `join` (`audit_join`'s stream-table path) over what the driver committed: each side's
    records, what reached the join of them, the places their outputs name, and the committed results."""
    from eos.audit.joins import _audit_stream_table, _carried, _reaching
    from eos.audit.windows import replay_prefix

    app = driver.app
    sub, spec = next((s, j) for s in app.subtopologies.values() for j in s.joins
                     if (j.right_store or "").startswith(f"{join}-"))
    transitive = frozenset(app.repartition_topics)
    inputs = {t: [Record(r.key, r.value, t, r.partition, r.offset, r.timestamp, list(r.headers.items()))
                  for r in driver.records(t)] for t in (spec.left, spec.right)}
    origins = {t: [_carried(r, transitive) for r in rs] for t, rs in inputs.items()}
    reached = {t: [r for r, _ in _reaching(inputs[t], origins[t], prefix, stand_in=t == spec.left)]
               for t, prefix in ((spec.left, spec.left_prefix), (spec.right, spec.right_prefix))}
    outputs = tamper([(r.key, r.value, r.timestamp, decode_origin(r.headers.get("eos.origin")))
                      for r in driver.records(spec.output)])
    result = JoinAuditResult(spec.kind, spec.how)
    after = replay_prefix(spec.suffix, stand_in=False) if spec.suffix else None
    _audit_stream_table(spec, sub, inputs[spec.left], origins[spec.left], reached, outputs, result, 10,
                        "", None, after)  # type: ignore[arg-type]
    return result


@pytest.mark.parametrize("rekeyed", [False, True])
def test_the_join_audit_replays_held_records_of_flat_maps_and_repartition_topics(rekeyed):
    """The join audit's replay of a grace period behind a flat map (several records of one input held), with
    steps after the join (several outputs of one record let go), and behind a repartition topic (the held
    records carry their input's origin): every result explained, nothing missing; a result dropped is
    missing, a result's value changed is wrong."""
    app = app_()
    prices = app.table("prices", versioned=60_000)
    orders = app.stream("orders")
    if rekeyed:
        orders = orders.select_key(lambda k, v: v["product"])
    (orders.flat_map_values(lambda v: [{**v, "part": 0}, {**v, "part": 1}])
        .left_join(prices, lambda o, p: [o, p], name="priced", grace=2_000)
        .flat_map_values(lambda pair: [pair, [*pair, "copy"]]).to("out"))
    driver = TopologyTestDriver(app, partitions=2)
    inputs = interleaved(random.Random(11), 80, 300, (-1_500, 0), (-1_000, 0), order_keys="abc",
                         order=lambda i, key: {"n": i, "product": key},
                         keyed=lambda i, key: f"c{i % 5}" if rekeyed else key)
    for n in range(0, len(inputs), 8):
        driver.pipe_records(inputs[n:n + 8])
    result = _audit(driver, "priced")
    assert (result.violations, result.unexpected, result.missing) == (0, 0, 0), result.samples
    assert result.expected > 50
    dropped = _audit(driver, "priced", lambda outputs: outputs[:7] + outputs[8:])
    assert dropped.violations == 1 and dropped.missing + dropped.wrong_values == 1
    changed = _audit(driver, "priced", lambda outputs: [*outputs[:7], (*outputs[7][:1], [{"n": -1}, None],
                                                                       *outputs[7][2:]), *outputs[8:]])
    assert changed.wrong_values == 1 and changed.missing == 0  # (and its other output left over: unexpected)



def test_a_processor_after_the_join_sees_the_record_let_go_as_the_one_it_processes():
    """A Processor API step after the join is given, with each result, the held record's place and headers
    (not those of the record whose arrival let it go)."""
    from eos.processor import Processor

    class Where(Processor):
        def process(self, record):
            meta = self.context.record_metadata()
            self.context.forward(record.key, {"order": record.value[0], "offset": record.offset,
                                              "meta": meta.offset, "trace": dict(record.headers or {})["t"].decode()})

    app = app_()
    prices = app.table("prices", versioned=10_000)
    (app.stream("orders").left_join(prices, lambda o, p: [o, p], name="priced", grace=1_000)
        .process(Where, name="where").to("out"))
    driver = TopologyTestDriver(app)
    driver.pipe("orders", "a", "o1", timestamp=BASE, headers=[("t", b"first")])
    driver.pipe("orders", "a", "o2", timestamp=BASE + 5_000, headers=[("t", b"second")])
    [result] = [r.value for r in driver.read("out")]
    assert result == {"order": "o1", "offset": 0, "meta": 0, "trace": "first"}


def two_grace_joins(app: Application, *, held_by_a_processor: bool = False) -> Application:
    """One input feeding two grace periods in one task: a flat map's two records of each order into a left join
    (`out0`) and, beside it, the big orders into an inner join (`out1`), or, with `held_by_a_processor`, a
    Processor API step that holds every order and lets it go at once (`out1`)."""
    from tests.eos.test_release_in_punctuation import Delay

    prices = app.table("prices", versioned=60_000)
    orders = app.stream("orders")
    (orders.flat_map_values(lambda v: [{**v, "part": 0}, {**v, "part": 1}])
        .left_join(prices, lambda o, p: [o, p], name="parts", grace=2_000).to("out0"))
    if held_by_a_processor:
        orders.process(Delay, name="delay", stores=[store("held", value_serde="bytes")]).to("out1")
    else:
        (orders.filter(lambda k, v: v["n"] % 3 != 0)
            .join(prices, lambda o, p: [o, p], name="big", grace=1_000).to("out1"))
    return app


@pytest.mark.parametrize("held_by_a_processor", [False, True])
def test_two_steps_holding_records_of_one_input_reserve_places_apart(held_by_a_processor):
    """Every step of a sub-topology that may hold records back has a slot (`hold_slots`): the k-th record one of
    them holds of an input reserves the place k * slots + slot, so two joins holding records of the same order
    give their outputs indices apart, and each join's audit finds its own (before, the places were counted
    across the task's steps, and the second join's audit took the first one's places for its own: 37 results
    of 74 missing and unexpected in a random topology of this shape, all of them right). So for a grace join
    beside a Processor API step that holds the same records."""
    app = two_grace_joins(app_(), held_by_a_processor=held_by_a_processor)
    assert {n: s for s in app.subtopologies.values() for n, s in hold_slots(s.graph.processors).items()} == (
        {"parts": (0, 2), "delay": (1, 2)} if held_by_a_processor else {"parts": (0, 2), "big": (1, 2)})
    driver = TopologyTestDriver(app, partitions=2)
    inputs = interleaved(random.Random(5), 90, 300, (-1_500, 0), (-800, 0), price_keys="ab", order_keys="abc",
                         order=lambda i, key: {"n": i})
    for record in inputs:  # (one at a time: the order the reference reads them in)
        driver.pipe_records([record])
    parts = [(r.key, r.value[0]["n"], r.value[0]["part"], r.value[1], r.timestamp) for r in driver.read("out0")]
    orders = [r for r in inputs if r[0] == "orders"]
    for p in (0, 1):  # the reference per partition: a task's stream time is its own
        mine = [r for r in inputs if partition_for(r[1].encode(), 2) == p]
        want = [(k, v["n"], v["part"], price, ts) for k, v, price, ts in _reference(
            mine, 2_000, 60_000, lambda k, v, ts: [(k, {**v, "part": 0}, ts), (k, {**v, "part": 1}, ts)])]
        assert [x for x in parts if partition_for(x[0].encode(), 2) == p] == want
    out1 = driver.read("out1")
    assert len(out1) > 10 and len(parts) > 2 * len(orders) - 20
    origins = [decode_origin(r.headers["eos.origin"]) for r in driver.records("out0") + driver.records("out1")]
    assert len(set(origins)) == len(origins)  # (no two outputs of one order share an index)
    reports = driver.audit()
    assert [r.verdict for r in reports] == ["PASS"] * len(reports) and any(r.join for r in reports)
    for report in reports:
        if report.join is not None:
            assert report.join.expected > 20 and report.join.missing == report.join.unexpected == 0


@pytest.mark.parametrize("held_by_a_processor", [False, True])
def test_two_steps_holding_records_of_one_input_commit_the_same_through_killed_batches(held_by_a_processor):
    app = two_grace_joins(app_(max_records_per_batch=6), held_by_a_processor=held_by_a_processor)
    inputs = interleaved(random.Random(9), 70, 300, (-1_500, 0), (-800, 0), price_keys="ab", order_keys="abc",
                         order=lambda i, key: {"n": i})
    report = TopologyTestDriver(app, partitions=2).check_exactly_once(inputs, crashes=8, seed=2)
    assert report.ok and len(report.crashes) >= 4
    driver = TopologyTestDriver(app, partitions=2)
    for batch, step in enumerate(("before_commit", "after_produce", "after_read", "before_commit"), start=2):
        driver.crash_at(step, batch=batch * 2)
    for n in range(0, len(inputs), 5):
        driver.pipe_records(inputs[n:n + 5])
    assert len(driver.crashes) == 4
    assert all(r.verdict == "PASS" for r in driver.audit())
