"""The peers benchmark's jobs on this framework (run by `eos run`; settings from the environment)."""

import os

from eos import Application

# INFO: the run's start and each batch, with its phases' times (the benchmark keeps the log of a slow start-up)
app = Application(os.environ["PEER_APP"], log_format="json", log_level="INFO",
                  state_dir=os.environ["PEER_STATE"], trigger_interval=1.0,
                  # benchmarks.startup turns the small first batch off with it
                  **({"first_batch_max_records": int(os.environ["PEER_FIRST_BATCH"])}
                     if os.environ.get("PEER_FIRST_BATCH") else {}))

if os.environ["PEER_JOB"] == "stateless":
    @app.process(input=os.environ["PEER_INPUT"], output=os.environ["PEER_OUTPUT"], key_serde="string",
                 value_serde="json")
    def enrich(record):
        order = record.value
        return record.key, {**order, "total": order["qty"] * order["price"]}
else:
    app.count(os.environ["PEER_INPUT"], os.environ["PEER_OUTPUT"], name="counts")
