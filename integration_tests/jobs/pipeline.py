"""A job for subprocess tests (`eos run integration_tests/jobs/pipeline.py`), configured by environment:

EOS_TEST_APP_ID, EOS_TEST_INPUT, EOS_TEST_OUTPUT   application id and topics
EOS_TEST_MARK_DIR                                   if set: a marker file exists while a task is between
                                                    producing and committing (MarkWhile at before_commit)
"""

from __future__ import annotations

import os

from eos import Application
from eos.testing import MarkWhile

app = Application(os.environ["EOS_TEST_APP_ID"], max_records_per_batch=int(os.environ.get("EOS_TEST_BATCH", "2000")),
                  trigger_interval=0.0, log_format="json", log_level="WARNING")


@app.process(input=os.environ["EOS_TEST_INPUT"], output=os.environ["EOS_TEST_OUTPUT"], key_serde="string",
             value_serde="json")
def transform(record):
    return record.key, {"id": record.value["id"], "doubled": record.value["n"] * 2}


if os.environ.get("EOS_TEST_MARK_DIR"):
    app.fault_hooks.on("before_commit", MarkWhile(os.environ["EOS_TEST_MARK_DIR"], seconds=0.3))
