"""The peers benchmark's jobs on this framework (run by `eos run`; settings from the environment)."""

import json
import os

from benchmarks.peers.jobs import define
from eos import Application

# INFO: the run's start and each batch, with its phases' times (the benchmark keeps the log of a slow start-up)
# settings to try (python -m benchmarks.peers --eos-settings JSON; benchmarks.startup) replace the defaults
settings = {"trigger_interval": 1.0, **json.loads(os.environ.get("PEER_SETTINGS") or "{}")}
app = Application(os.environ["PEER_APP"], log_format="json", log_level="INFO", state_dir=os.environ["PEER_STATE"],
                  **settings)
define(app, os.environ["PEER_JOB"], os.environ["PEER_INPUT"], os.environ["PEER_OUTPUT"])
