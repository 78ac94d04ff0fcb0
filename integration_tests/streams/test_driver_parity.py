"""The test driver runs the same code as the cluster: one job with every window kind in both emit modes, every
join kind (stream-table, stream-global-table, windowed stream-stream, table-table, foreign-key), a table
aggregation, a re-keyed aggregation, stream-time punctuation and dead letters, run on the broker and Spark and
in `TopologyTestDriver` on the same input, commits the same records to every output topic."""

from __future__ import annotations

import json
import random
import time
from collections import Counter

from eos import Application, Processor, store
from eos.tables import JoinWindows
from eos.testing import TopologyTestDriver
from eos.windows import HoppingWindows, SessionWindows, SlidingWindows, TumblingWindows
from integration_tests.helpers import produce
from integration_tests.streams.test_time_and_rekey import committed_records
from transactions.memory import partition_for

BASE = (int(time.time()) // 3600 - 3) * 3_600_000
PARTITIONS = 2


class Silence(Processor):
    """Each minute of stream time, the devices not heard from for two minutes."""

    def init(self, context):
        super().init(context)
        self.last = context.store("last")
        context.schedule(60_000, self.check, type="stream")

    def process(self, record):
        self.last.put(record.key, record.timestamp)

    def check(self, now):
        for device, seen in list(self.last.all()):
            if now - seen > 120_000:
                self.context.forward(device, {"silent_since": seen})
                self.last.delete(device)


def build(app_id: str, topics: dict[str, str], bootstrap: str | None = None) -> Application:
    t = topics
    app = Application(app_id, bootstrap, timestamp="field:at", log_level="ERROR", max_records_per_batch=300,
                      repartition_purge_interval=0)
    app.count(t["views"], t["tumbling"], name="tumbling", value_serde="json", windows=TumblingWindows(60_000),
              emit="final")
    app.count(t["views"], t["hopping"], name="hopping", value_serde="json",
              windows=HoppingWindows(60_000, 20_000, grace=10_000))
    app.sum(t["views"], t["sessions"], name="sessions", value=lambda v: v["n"], windows=SessionWindows(30_000))
    app.count(t["views"], t["sliding"], name="sliding", value_serde="json", windows=SlidingWindows(30_000),
              emit="final")
    app.count(t["views"], t["tumbling_updates"], name="tumbling_updates", value_serde="json",
              windows=TumblingWindows(60_000, grace=30_000))
    app.count(t["views"], t["hopping_final"], name="hopping_final", value_serde="json",
              windows=HoppingWindows(60_000, 30_000), emit="final")
    app.count(t["views"], t["sessions_final"], name="sessions_final", value_serde="json",
              windows=SessionWindows(20_000, grace=5_000), emit="final")
    app.count(t["views"], t["sliding_updates"], name="sliding_updates", value_serde="json",
              windows=SlidingWindows(20_000, grace=10_000))
    app.count(t["views"], t["per_page"], name="per_page", value_serde="json", group_by=lambda r: r.value["page"])

    @app.process(input=t["views"], output=t["checked"], key_serde="string", value_serde="json", name="checked")
    def checked(record):
        return record.key, {"n": 10 // record.value["n"]}  # n == 0: a dead letter

    customers = app.table(t["customers"])
    app.join(t["orders"], customers, t["with_customer"], name="with_customer", how="left",
             joiner=lambda order, customer: {**order, "tier": customer["tier"] if customer else None})
    app.join(t["orders"], t["payments"], t["paid"], name="paid", windows=JoinWindows(0, 60_000),
             joiner=lambda order, payment: {"order": order["order"], "amount": payment["amount"]})
    app.join(customers, app.table(t["addresses"]), t["profiles"], name="profiles", how="outer",
             joiner=lambda customer, address: {"customer": customer, "address": address})
    app.join(app.table(t["subscriptions"]), customers, t["subscribers"], name="subscriber", how="left",
             foreign_key=lambda s: s["customer"],
             joiner=lambda s, customer: {**s, "tier": customer["tier"] if customer else None})
    app.count_table(customers, t["tiers"], name="tiers", group_by=lambda key, customer: customer["tier"])
    app.join(t["orders"], app.global_table(t["addresses"]), t["shipped_to"], name="shipped_to", how="left",
             key=lambda r: r.key, joiner=lambda order, address: {**order, "city": address["city"] if address else None})
    app.stream(t["pings"]).process(Silence, name="silence",
                                   stores=[store("last", key_serde="string", value_serde="long")]).to(t["silent"])
    return app


def inputs() -> list[tuple[str, str, dict, int]]:
    """(topic role, key, value, partition): each record on its key's murmur2 partition, as the Java client and
    the framework's producers put it (a foreign-key join's right table must be)."""
    rng = random.Random(17)
    out = []
    t = BASE
    for _ in range(400):
        t += rng.randrange(0, 4_000)
        at = t - rng.choice([0, 0, 0, 2_000, 25_000])
        out.append(("views", f"u{rng.randrange(6)}", {"page": f"p{rng.randrange(3)}", "n": rng.randrange(5), "at": at}))
    for i in range(40):
        tier = rng.choice(["gold", "basic"])
        out.append(("customers", f"c{i % 8}", {"tier": tier, "at": BASE + i * 30_000}))
        out.append(("orders", f"c{rng.randrange(10)}", {"order": i, "at": BASE + i * 30_000 + 5_000}))
        out.append(("payments", f"c{rng.randrange(10)}", {"amount": i, "at": BASE + i * 30_000 + 20_000}))
        out.append(("addresses", f"c{rng.randrange(10)}", {"city": f"x{i}", "at": BASE + i * 30_000 + 9_000}))
        out.append(("subscriptions", f"s{i % 12}", {"customer": f"c{rng.randrange(10)}", "at": BASE + i * 30_000}))
        out.append(("pings", f"d{rng.randrange(4)}", {"at": BASE + i * 30_000}))
    return [(role, key, value, partition_for(key.encode(), PARTITIONS)) for role, key, value in out]


OUTPUTS = ["tumbling", "hopping", "sessions", "sliding", "tumbling_updates", "hopping_final", "sessions_final",
           "sliding_updates", "per_page", "checked", "with_customer", "paid", "profiles", "subscribers", "tiers",
           "shipped_to", "silent"]
#: Steps behind a topic several tasks write (repartition, subscription and response topics): the order in
#: which the writers' batches land there is the order their tasks commit in, which on a cluster is a race,
#: so their running values may come in another order; what they end with must be the same.
LAST_VALUES = {"per_page", "tiers", "subscribers"}


def test_the_driver_commits_what_the_cluster_commits(kafka, spark, topic_factory, unique_name):
    roles = ["views", "customers", "orders", "payments", "addresses", "subscriptions", "pings", *OUTPUTS]
    topics = {role: topic_factory(role.replace("_", "-"), partitions=PARTITIONS) for role in roles}
    records = inputs()
    for role in {r[0] for r in records}:
        mine = [(k, v, p) for r, k, v, p in records if r == role]
        produce(kafka.bootstrap_servers, topics[role], [(k.encode(), json.dumps(v).encode()) for k, v, _ in mine],
                partition_of=lambda n, key, mine=mine: mine[n][2],
                timestamp_of=lambda n, key, mine=mine: mine[n][1]["at"])
    app = build(unique_name("app"), topics, kafka.bootstrap_servers)
    summary = app.run(spark, until_caught_up=True)
    assert summary.dead_letters > 0 and summary.dropped.get("late", 0) > 0  # both paths are exercised

    driver = TopologyTestDriver(build(app.config.application_id, topics), partitions=PARTITIONS)
    driver.pipe_records([(topics[role], key, value, value["at"], partition) for role, key, value, partition in records])
    assert driver.dropped and len(driver.dead_letters()) == summary.dead_letters

    for role in OUTPUTS:
        cluster_records = [(k, v, ts) for k, v, ts in committed_records(kafka.bootstrap_servers, topics[role])]
        driver_records = [(m.key(), m.value(), m.timestamp()[1]) for m in driver.cluster.records(topics[role])]
        assert cluster_records, role
        if role in LAST_VALUES:
            assert {k: v for k, v, _ in driver_records} == {k: v for k, v, _ in cluster_records}, role
            continue
        on_cluster, in_driver = Counter(cluster_records), Counter(driver_records)
        assert in_driver == on_cluster, (role, sum(in_driver.values()), sum(on_cluster.values()),
                                         list((in_driver - on_cluster).items())[:3],
                                         list((on_cluster - in_driver).items())[:3])
