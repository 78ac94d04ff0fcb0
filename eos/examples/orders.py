"""Example job: enrich orders, then keep running totals per customer, in one task per partition.

    eos run eos.examples.orders:app --until-caught-up     # with EOS_BOOTSTRAP_SERVERS set

`orders` -> `enrich` -> `orders-enriched`, and -> `totals` -> `customer-totals`: one sub-topology, one
transaction per task and batch for both outputs and the store. Keys are customer ids (strings), values
{"id", "customer", "qty", "price", "country"}; `enrich` adds "total" and upper-cases "country" (a record
that is not JSON, or lacks qty/price, goes to the dead-letter topic `orders-enricher-dlq`); `totals` keeps
the running number of orders and revenue per customer in RocksDB, one update per order.
"""

from __future__ import annotations

import json
import random
from typing import Any

from eos import Application


def total_of(order: dict[str, Any]) -> float:
    return round(float(order["qty"]) * float(order["price"]), 2)  # KeyError/TypeError -> dead letter


def enrich(order: dict[str, Any]) -> dict[str, Any]:
    return {**order, "country": str(order.get("country", "")).upper(), "total": total_of(order)}


def add_order(customer: str, order: dict[str, Any], totals: dict[str, Any]) -> dict[str, Any]:
    return {"orders": totals["orders"] + 1, "revenue": totals["revenue"] + order["total"]}


def build(application_id: str = "orders-enricher", *, input_topic: str = "orders",
          output_topic: str = "orders-enriched", totals_topic: str | None = "customer-totals",
          bootstrap_servers: str | None = None, **settings: Any) -> Application:
    app = Application(application_id, bootstrap_servers, **settings)
    enriched = app.stream(input_topic).map_values(enrich, name="enrich")
    enriched.to(output_topic)
    if totals_topic:
        enriched.group_by_key().aggregate(lambda: {"orders": 0, "revenue": 0.0}, add_order, name="totals") \
            .to_stream().to(totals_topic)
    return app


def generate(n: int, *, bad_every: int = 0, seed: int = 7) -> list[tuple[bytes, bytes]]:
    """`n` order records (key, value); every `bad_every`-th one is malformed (not JSON, or no price)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        key = f"customer-{rng.randrange(1000)}".encode()
        if bad_every and i % bad_every == bad_every - 1:
            out.append((key, b"{not json" if (i // bad_every) % 2 else json.dumps({"id": i, "qty": 1}).encode()))
            continue
        order = {"id": i, "customer": key.decode(), "qty": rng.randrange(1, 10),
                 "price": round(rng.uniform(1, 100), 2), "country": rng.choice(["de", "fr", "us", "jp"])}
        out.append((key, json.dumps(order, separators=(",", ":")).encode()))
    return out


app = build()
