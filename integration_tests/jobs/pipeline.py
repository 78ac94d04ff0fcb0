"""A job for subprocess tests (`eos run integration_tests/jobs/pipeline.py`), configured by environment:

EOS_TEST_APP_ID, EOS_TEST_INPUT, EOS_TEST_OUTPUT   application id and topics of the stateless `transform`
EOS_TEST_TOTALS                                     if set: output topic of the stateful `totals`, which
                                                    reads `transform`'s output (a chained pipeline) and keeps
                                                    a running count and sum of `n` per key in RocksDB
EOS_TEST_STATE_DIR                                  state directory
EOS_TEST_MARK_DIR                                   if set: a marker file exists while a task is between
                                                    producing and committing (MarkWhile at before_commit)
EOS_TEST_BATCH                                      max records per partition and batch
"""

from __future__ import annotations

import os

from eos import Application
from eos.testing import MarkWhile

app = Application(os.environ["EOS_TEST_APP_ID"], max_records_per_batch=int(os.environ.get("EOS_TEST_BATCH", "2000")),
                  trigger_interval=0.0, log_format="json", log_level="WARNING",
                  state_dir=os.environ.get("EOS_TEST_STATE_DIR", "~/.eos/state"))


@app.process(input=os.environ["EOS_TEST_INPUT"], output=os.environ["EOS_TEST_OUTPUT"], key_serde="string",
             value_serde="json")
def transform(record):
    return record.key, {"id": record.value["id"], "n": record.value["n"] * 2}


def add(key, value, totals):
    return {"count": totals["count"] + 1, "sum": totals["sum"] + value["n"]}


if os.environ.get("EOS_TEST_TOTALS"):
    app.aggregate(os.environ["EOS_TEST_OUTPUT"], os.environ["EOS_TEST_TOTALS"], name="totals",
                  initializer=lambda: {"count": 0, "sum": 0}, aggregator=add)

if os.environ.get("EOS_TEST_MARK_DIR"):
    app.fault_hooks.on("before_commit", MarkWhile(os.environ["EOS_TEST_MARK_DIR"], seconds=0.3))
