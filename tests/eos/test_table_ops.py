"""Foreign-key joins and table aggregations, run by the test driver: the two sub-topologies of each run one
batch at a time in random orders (a response overtaken by a newer left value, a right update racing a
subscription), checked against the references of the join audit and a recomputation."""

from __future__ import annotations

import json
import random
from collections import defaultdict

import pytest

from eos import Application
from eos.audit.joins import check_foreign_key
from eos.operators.tables import (
    Change,
    Subscription,
    decode_change,
    decode_response,
    decode_subscription,
    encode_change,
    encode_response,
    encode_subscription,
)
from eos.testing import TopologyTestDriver


def j(value) -> bytes | None:
    return None if value is None else json.dumps(value).encode()


def test_internal_records_round_trip():
    s = Subscription(True, 3, bytes(range(16)), b"left-key")
    assert decode_subscription(encode_subscription(s)) == s
    assert decode_response(encode_response(bytes(16), b"v")) == (bytes(16), b"v")
    assert decode_response(encode_response(bytes(16), None)) == (bytes(16), None)
    for change in (Change(b"o", b"n"), Change(None, b"n"), Change(b"o", None), Change(b"", b"")):
        assert decode_change(encode_change(change)) == change


def fk_app(how: str) -> Application:
    app = Application("t")
    app.join(app.table("orders"), app.table("customers"), "out", name="fk", how=how,
             foreign_key=lambda order: order["c"], joiner=lambda o, c: {"o": o, "c": c})
    return app


@pytest.mark.parametrize("how", ["inner", "left"])
@pytest.mark.parametrize("seed", range(6))
def test_random_foreign_key_joins_end_at_the_join_of_the_final_tables(how, seed):
    """The two sub-topologies run by the test driver one batch at a time in a random order, so that updates,
    subscriptions and responses race (a response overtaken by a newer left value, a right update racing a
    subscription); the outputs must be explained by the tables' histories and end at their join."""
    rng = random.Random(seed)
    driver = TopologyTestDriver(fk_app(how), wall_clock_ms=0)
    assert driver.app.subtopologies["fk"].inputs == ("orders", "t-fk-response")
    history = {"orders": defaultdict(list), "customers": defaultdict(list)}
    for i in range(300):
        if rng.random() < 0.3:
            topic, key, value = "customers", f"c{rng.randrange(6)}", None if rng.random() < 0.2 else {"n": i}
        else:
            topic, key = "orders", f"o{rng.randrange(15)}"
            value = None if rng.random() < 0.1 else {"c": None if rng.random() < 0.05 else f"c{rng.randrange(8)}",
                                                     "i": i}
        history[topic][key].append(value)
        driver.pipe_records([(topic, key, value, i)], process=False)
        for _ in range(rng.randrange(3)):
            driver.run_batch(rng.choice(["fk-0", "fk.right-0"]))
    while driver.run_batch():
        pass
    outputs: dict[str, list] = defaultdict(list)
    for r in driver.records("out"):
        outputs[r.key].append(r.value)
    problems = check_foreign_key({k: [None, *v] for k, v in history["orders"].items()},
                                 {k: [None, *v] for k, v in history["customers"].items()}, outputs,
                                 lambda o, c: {"o": o, "c": c}, how, lambda order: order["c"])
    assert problems == [] and driver.dead_letters() == []
    assert sum(len(v) for v in outputs.values()) > 20


def test_a_response_to_an_older_left_value_is_dropped():
    driver = TopologyTestDriver(fk_app("left"), wall_clock_ms=0)
    driver.pipe_records([("orders", "o1", {"c": "c1", "i": 1}, 10)], process=False)
    driver.run_batch("fk-0")  # subscribes for i=1
    driver.pipe_records([("orders", "o1", {"c": "c1", "i": 2}, 11), ("customers", "c1", {"n": "Ann"}, 5)],
                        process=False)
    driver.run_batch("fk-0")  # subscribes again for i=2, before the first subscription is answered
    driver.run_batch("fk.right-0")  # answers both: the first answer is for a value o1 no longer has
    driver.run_batch("fk-0")
    assert [(r.key, r.value) for r in driver.read("out")] == [("o1", {"o": {"c": "c1", "i": 2}, "c": {"n": "Ann"}})]


def test_foreign_key_join_definitions_are_checked():
    app = Application("t", "b:1")
    with pytest.raises(ValueError, match="foreign_key= joins two tables"):
        app.join("stream", app.table("customers"), "out", name="x", joiner=print, foreign_key=len)
    with pytest.raises(ValueError, match="inner or left"):
        app.join(app.table("a"), app.table("b"), "out", name="y", joiner=print, how="outer", foreign_key=len)
    with pytest.raises(TypeError, match=r"aggregates an app\.table"):
        app.aggregate_table("topic", "out", name="z", group_by=print, initializer=int, adder=print,
                            subtractor=print)


@pytest.mark.parametrize("seed", range(4))
def test_random_table_aggregations_equal_the_aggregation_of_the_final_table(seed):
    rng = random.Random(seed)
    app = Application("t")
    table = app.table("accounts")
    app.sum_table(table, "balances", name="sums", group_by=lambda k, v: v["region"], value=lambda v: v["amount"])
    app.count_table(table, "counts", name="counts", group_by=lambda k, v: v["region"])
    driver = TopologyTestDriver(app, wall_clock_ms=0)
    final: dict[str, dict] = {}
    for chunk in range(0, 400, 23):  # batches of a few rows, some moving between groups twice in one batch
        rows = []
        for i in range(chunk, min(400, chunk + 23)):
            key = f"a{rng.randrange(25)}"
            value = None if rng.random() < 0.15 else {"region": f"r{rng.randrange(5)}", "amount": rng.randrange(100)}
            if value is None:
                final.pop(key, None)
            else:
                final[key] = value
            rows.append(("accounts", key, value, i))
        driver.pipe_records(rows)
    sums, counts = defaultdict(int), defaultdict(int)
    for v in final.values():
        sums[v["region"]] += v["amount"]
        counts[v["region"]] += 1
    last = {topic: {r.key: r.value for r in driver.records(topic)} for topic in ("balances", "counts")}
    assert {k: v for k, v in last["balances"].items() if v} == {k: v for k, v in sums.items() if v}
    assert {k: v for k, v in last["counts"].items() if v} == dict(counts)


def test_the_foreign_key_audit_replays_a_joiner_that_raised_for_a_row_the_job_dead_lettered():
    """The job dead-lettered s2 (its customer has no tier); replaying the same joiner on that pair must not
    crash the audit (it ended in `error: 'tier'`, exit 2), and the rows that did join are still checked."""
    left = {"s1": [{"customer": "bob"}], "s2": [{"customer": "cy"}]}
    right = {"bob": [{"tier": "basic"}], "cy": [{"name": "no tier"}]}
    joiner = lambda s, c: {**s, "tier": c["tier"] if c else None}
    outputs = {"s1": [{"customer": "bob", "tier": "basic"}]}
    assert check_foreign_key(left, right, outputs, joiner, "left", lambda v: v["customer"]) == []
    wrong = {"s1": [{"customer": "bob", "tier": "gold"}]}
    problems = check_foreign_key(left, right, wrong, joiner, "left", lambda v: v["customer"])
    assert [p[:2] for p in problems] == [("wrong_values", "s1"), ("missing", "s1")]
