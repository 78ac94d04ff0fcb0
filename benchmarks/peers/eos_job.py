"""The peers benchmark's jobs on this framework (run by `eos run`; settings from the environment)."""

import json
import os

from eos import Application

# INFO: the run's start and each batch, with its phases' times (the benchmark keeps the log of a slow start-up)
app = Application(os.environ["PEER_APP"], log_format="json", log_level="INFO",
                  state_dir=os.environ["PEER_STATE"], trigger_interval=1.0,
                  # settings to try (python -m benchmarks.peers --eos-settings JSON; benchmarks.startup)
                  **json.loads(os.environ.get("PEER_SETTINGS") or "{}"))

if os.environ["PEER_JOB"] == "stateless":
    @app.process(input=os.environ["PEER_INPUT"], output=os.environ["PEER_OUTPUT"], key_serde="string",
                 value_serde="json")
    def enrich(record):
        order = record.value
        return record.key, {**order, "total": order["qty"] * order["price"]}
elif os.environ["PEER_JOB"] == "pipeline":
    # four operators fused in one sub-topology: one task and one transaction per partition, no topic between
    (app.stream(os.environ["PEER_INPUT"], key_serde="string", value_serde="json")
        .filter(lambda key, order: order["qty"] >= 2, name="big")
        .map_values(lambda order: {**order, "total": order["qty"] * order["price"]}, name="priced")
        .group_by_key()
        .sum(lambda order: order["total"], name="revenue")
        .to_stream().to(os.environ["PEER_OUTPUT"]))
else:
    app.count(os.environ["PEER_INPUT"], os.environ["PEER_OUTPUT"], name="counts")
