"""Foreign-key joins and table aggregations (pure logic): the two sub-topologies of each on in-memory stores,
their internal topics delivered in random interleavings (a response overtaken by a newer left value, an R
update racing a subscription), checked against the references of the join audit and a recomputation."""

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
from eos.worker.context import TaskContext
from eos.worker.dead_letters import DeadLetterPolicy
from eos.worker.processing import run_processor
from eos.worker.stores import view_of
from recovery import MemoryBackend, WriteBuffer
from tests.fakes import FakeMessage

DLQ = DeadLetterPolicy("dlq", 0, "t-0", fail=False)


class Task:
    """One task (partition 0) of a sub-topology, over in-memory stores kept across batches."""

    def __init__(self, app: Application, name: str) -> None:
        self.sub = sub = app.subtopologies[name]
        self.buffers = {s.name: WriteBuffer(MemoryBackend()) for s in sub.stores}
        views = {}
        for spec in sub.stores:
            views[spec.name] = view_of(spec)
            views[spec.name].attach(self.buffers[spec.name])
        self.ctx = TaskContext(application_id=app.config.application_id, subtopology=name, partition=0,
                               output_topic=sub.output, key_serde=sub.output_key_serde,
                               value_serde=sub.output_value_serde, lineage=True, stores=views,
                               raw_topics=sub.raw_outputs)
        self.processor = sub.processor_factory()
        self.processor.init(self.ctx)
        self.offsets: dict[str, int] = defaultdict(int)

    def feed(self, topic: str, key: bytes | None, value: bytes | None, ts: int = 0) -> list:
        """One raw record in; its outputs out (ProducerRecords, serialized)."""
        msg = FakeMessage(topic, 0, self.offsets[topic], value, key, timestamp=ts)
        self.offsets[topic] += 1
        per_topic = {t: (ks, vs, ex or (lambda r: r.timestamp)) for t, (ks, vs, ex) in self.sub.per_topic.items()}
        outcome = run_processor(self.processor, self.ctx, [msg], key_serde=self.sub.key_serde,
                                value_serde=self.sub.value_serde, dlq=DLQ, scoped=list(self.buffers.values()),
                                per_topic=per_topic)
        assert not outcome.dead_letters, outcome.dead_letters
        return outcome.outputs


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
    app = Application("t", "b:1")
    app.join(app.table("orders"), app.table("customers"), "out", name="fk", how=how,
             foreign_key=lambda order: order["c"], joiner=lambda o, c: {"o": o, "c": c})
    return app


@pytest.mark.parametrize("how", ["inner", "left"])
@pytest.mark.parametrize("seed", range(6))
def test_random_foreign_key_joins_end_at_the_join_of_the_final_tables(how, seed):
    rng = random.Random(seed)
    app = fk_app(how)
    left, right = Task(app, "fk"), Task(app, "fk.right")
    subscriptions, responses = "t-fk-subscription", "t-fk-response"
    assert left.sub.inputs == ("orders", responses) and right.sub.inputs == (subscriptions, "customers")
    pending = {subscriptions: [], responses: []}  # each internal topic in order, delivered at random times
    history = {"orders": defaultdict(list), "customers": defaultdict(list)}
    outputs: dict[str, list] = defaultdict(list)

    def route(records):
        for r in records:
            if r.topic == "out":
                outputs[r.key.decode()].append(None if r.value is None else json.loads(r.value))
            else:
                pending[r.topic].append(r)

    updates = []
    for i in range(300):
        if rng.random() < 0.3:
            updates.append(("customers", f"c{rng.randrange(6)}", None if rng.random() < 0.2 else {"n": i}))
        else:
            value = None if rng.random() < 0.1 else {"c": None if rng.random() < 0.05 else f"c{rng.randrange(8)}",
                                                     "i": i}
            updates.append(("orders", f"o{rng.randrange(15)}", value))
    while updates or any(pending.values()):
        choice = rng.random()
        if updates and choice < 0.5:
            topic, key, value = updates.pop(0)
            history[topic][key].append(value)
            task = left if topic == "orders" else right
            route(task.feed(topic, key.encode(), j(value)))
        elif pending[subscriptions] and (choice < 0.75 or not pending[responses]):
            r = pending[subscriptions].pop(0)
            route(right.feed(subscriptions, r.key, r.value))
        elif pending[responses]:
            r = pending[responses].pop(0)
            assert r.partition == 0  # sent straight to the subscriber's partition
            route(left.feed(responses, r.key, r.value))
    problems = check_foreign_key({k: [None, *v] for k, v in history["orders"].items()},
                                 {k: [None, *v] for k, v in history["customers"].items()}, outputs,
                                 lambda o, c: {"o": o, "c": c}, how, lambda order: order["c"])
    assert problems == []
    assert sum(len(v) for v in outputs.values()) > 20


def test_a_response_to_an_older_left_value_is_dropped():
    app = fk_app("left")
    left, right = Task(app, "fk"), Task(app, "fk.right")
    first = left.feed("orders", b"o1", j({"c": "c1", "i": 1}))
    second = left.feed("orders", b"o1", j({"c": "c1", "i": 2}))  # before the first subscription is answered
    right.feed("customers", b"c1", j({"n": "Ann"}))
    stale = right.feed("t-fk-subscription", first[0].key, first[0].value)
    fresh = right.feed("t-fk-subscription", second[0].key, second[0].value)
    assert left.feed("t-fk-response", stale[0].key, stale[0].value) == []
    out = left.feed("t-fk-response", fresh[0].key, fresh[0].value)
    assert [(o.key, json.loads(o.value)) for o in out] == [(b"o1", {"o": {"c": "c1", "i": 2}, "c": {"n": "Ann"}})]


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
    app = Application("t", "b:1")
    table = app.table("accounts")
    app.sum_table(table, "balances", name="sums", group_by=lambda k, v: v["region"], value=lambda v: v["amount"])
    app.count_table(table, "counts", name="counts", group_by=lambda k, v: v["region"])
    tasks = {name: (Task(app, f"{name}.repartition"), Task(app, name)) for name in ("sums", "counts")}
    final: dict[str, dict] = {}
    last: dict[str, dict] = {"sums": {}, "counts": {}}
    for i in range(400):
        key = f"a{rng.randrange(25)}"
        value = None if rng.random() < 0.15 else {"region": f"r{rng.randrange(5)}", "amount": rng.randrange(100)}
        if value is None:
            final.pop(key, None)
        else:
            final[key] = value
        for name, (regroup, aggregate) in tasks.items():
            moved = regroup.feed("accounts", key.encode(), j(value))
            assert len(moved) <= 2
            for r in moved:  # through the repartition topic, with the origin the original row gave it
                for out in aggregate.feed(r.topic, r.key, r.value, ts=i):
                    last[name][out.key.decode()] = out.value
    sums, counts = defaultdict(int), defaultdict(int)
    for v in final.values():
        sums[v["region"]] += v["amount"]
        counts[v["region"]] += 1
    assert {k: json.loads(v) for k, v in last["sums"].items() if json.loads(v)} == {k: v for k, v in sums.items() if v}
    assert {k: int.from_bytes(v, "big") for k, v in last["counts"].items()
            if int.from_bytes(v, "big")} == dict(counts)


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
