"""Chaos: faults under load, judged by the auditor.

The default suite runs a short smoke subset (about a minute each) and proves the harness catches a real
bug. `--chaos-full` runs the whole failover matrix (every fault kind x stateless and stateful jobs,
`--chaos-repeats` runs each, 200k records per run)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from chaos.harness import run_scenario, scratch_environment
from chaos.matrix import FAULT_SETTINGS, matrix_scenarios
from chaos.scenario import load_scenario

# With --soak also: the built-in windowed job's kills and poison (the job of your own below is a windowed count
# under the same three faults, judged by the same window audit), the stateful driver-kill smoke (that job
# kills a stateful job's driver inside a transaction too, and test_kill_restart a stateful job's driver), and
# connection resets (the full matrix runs them with every job kind).
SMOKE = ["smoke-stateless-zombie",
         pytest.param("smoke-windowed-kills", marks=pytest.mark.soak),
         pytest.param("smoke-stateless-net-reset", marks=pytest.mark.soak),
         pytest.param("smoke-stateful-driver-kill", marks=pytest.mark.soak)]


def faults_started(result) -> set[str]:
    return {e["kind"] for e in result.timeline if e["phase"] == "start"}


@pytest.mark.parametrize("name", SMOKE)
def test_smoke_scenario_is_exactly_once(name, tmp_path):
    scenario = load_scenario(name)
    result = run_scenario(scenario, tmp_path / name)
    assert result.verdict == "PASS", (result.reasons, result.workdir)
    expected_faults = sum(f.count for f in scenario.faults)
    assert result.faults_injected == expected_faults  # every fault really happened
    assert {f.kind for f in scenario.faults} <= faults_started(result)
    assert result.violations == 0 and result.drained
    produced = result.load["produced"] - result.load["failed_deliveries"]
    if scenario.job == "windowed":  # every input record either aggregated or dead-lettered (the poison)
        window = result.audits[0]["window"]
        assert window["input_records"] + window["dead_letters"] == produced and window["windows_expected"] > 100
        assert window["dead_letters"] == result.load["poison"] > 0
    else:
        assert result.audits[0]["lineage"]["expected"] == produced
    assert all(r["recovery_s"] is not None for r in result.recovery)  # the job committed again after each
    assert (tmp_path / name / "report.json").is_file() and (tmp_path / name / "timeline.png").is_file()


@pytest.mark.soak  # (the default suite runs the same proof with a job of your own, below)
def test_the_harness_catches_a_job_that_commits_offsets_outside_the_transaction(tmp_path):
    """The at-least-once variant of the job, killed inside its produce -> commit window, duplicates output:
    the same harness that passes the exactly-once job must fail this one."""
    result = run_scenario(load_scenario("smoke-broken-driver-kill"), tmp_path / "broken")
    assert result.faults_injected == 1
    assert result.verdict == "FAIL", (result.reasons, result.workdir)
    assert result.audits[0]["lineage"]["duplicates"] > 0


# Its views are Avro in the Schema Registry's wire format: the harness gives the run a registry of its own
# (`localkafka.registry`, as the suite's Schema Registry tests), points the job at it and writes the load's
# records with the job's serde; the poison's malformed records carry a schema id the registry does not know.
OWN_JOB = """
import os

from eos import Application
from eos.windows import TumblingWindows

VIEW = ('{"type": "record", "name": "View", "fields": [{"name": "page", "type": "string"}, '
        '{"name": "i", "type": "long"}]}')
# repartition_purge_interval=0: the window audit replays the repartition topic its step reads
app = Application("chaos-views", trigger_interval=0.5, schema_registry_url=os.environ.get("SCHEMA_REGISTRY_URL",
                  "http://localhost:8081"), repartition_purge_interval=0)
views = app.stream("views", value_serde=app.avro(VIEW))
valid = views.filter(lambda k, v: v["page"] != "", name="valid")
valid.map_values(lambda v: {**v, "seen": True}, name="mark").to("marked", value_serde="json")
(valid.group_by(lambda k, v: v["page"], name="by_page").window(TumblingWindows(1_000, grace=500), emit="final")
      .count(name="per_page").to_stream().to("page-counts", value_serde="long"))
"""

OWN_LOAD = """
PAGES = ["home", "cart", "pay", ""]


def record(i, rng):
    return "views", f"u{i % 50}", {"page": PAGES[i % 4], "i": i}
"""

OWN_SCENARIO = """
name = "own-job-kills"
job = "job.py"
load = "load.py:record"
records = 24000
rate = 2000
max_records_per_batch = 1500
seed = 7  # (the poison first: a fault waits for the one before it, a kill for the job to be back)

[[faults]]
kind = "driver_kill"
count = 1
in_transaction = true

[[faults]]
kind = "worker_kill"
count = 1

[[faults]]
kind = "poison"
count = 1
ratio = 0.05
duration = 3
"""


def test_a_job_of_your_own_killed_inside_a_transaction_passes_its_own_audits(tmp_path):
    """A user's job file and load function in a scenario file: run under the same faults as the built-in jobs,
    drained until every step has caught up, judged by `eos audit app` (every step's lineage, its windows)."""
    for name, text in (("job.py", OWN_JOB), ("load.py", OWN_LOAD), ("scenario.toml", OWN_SCENARIO)):
        (tmp_path / name).write_text(text)
    scenario = load_scenario(tmp_path / "scenario.toml")
    assert scenario.own_job and scenario.job == str(tmp_path / "job.py")
    result = run_scenario(scenario, tmp_path / "run")
    assert result.verdict == "PASS", (result.reasons, result.workdir)
    assert result.faults_injected == 3 and {"driver_kill", "worker_kill", "poison"} <= faults_started(result)
    assert result.drained and result.violations == 0 and result.job["app_id"] == "chaos-views"
    assert [(a["mode"], a["skipped"]) for a in result.audits] == [("lineage", None), ("window", None)]
    produced = result.load["produced"] - result.load["failed_deliveries"]
    lineage, poison = result.audits[0]["lineage"], result.load["poison"]
    assert lineage["expected"] == produced == 24_000
    assert lineage["dead_lettered"] == poison > 0 and not result.notes  # every malformed record a dead letter
    # the windowed count got every valid view (three in four) but those the poison spoiled
    window = result.audits[1]["window"]
    assert 18_000 - poison <= window["input_records"] < 18_000 and window["windows_expected"] > 10


def test_a_job_of_your_own_run_at_least_once_fails_its_audit_under_the_same_kill(tmp_path):
    """The same job at-least-once (offsets committed after the outputs, outside a transaction), killed inside its
    produce -> commit window: the harness that passes it exactly-once must find what it wrote twice."""
    job = OWN_JOB.replace('repartition_purge_interval=0)', 'repartition_purge_interval=0,\n'
                          '                  processing_guarantee="at_least_once")')
    scenario = OWN_SCENARIO.split('[[faults]]\nkind = "worker_kill"')[0].replace("24000", "16000")  # one kill
    for name, text in (("job.py", job), ("load.py", OWN_LOAD), ("scenario.toml", scenario)):
        (tmp_path / name).write_text(text)
    result = run_scenario(load_scenario(tmp_path / "scenario.toml"), tmp_path / "run")
    assert result.faults_injected == 1 and result.verdict == "FAIL", (result.reasons, result.workdir)
    # what was written twice: outputs, or a batch's input committed again (its ledger entries overlap), or a
    # window's final result
    lineage = result.audits[0]["lineage"]
    assert result.audits[0]["verdict"] == "FAIL" and result.violations > 0
    assert lineage["duplicates"] + lineage["overlapping_batches"] + lineage["derived_duplicates"] > 0, lineage


@pytest.mark.chaos_full
@pytest.mark.parametrize("name", sorted(matrix_scenarios()))
def test_failover_matrix(name, tmp_path, request):
    repeats = request.config.getoption("--chaos-repeats")
    scenario = matrix_scenarios()[name]
    failures = []
    for seed in range(1, repeats + 1):
        result = run_scenario(scenario.with_overrides(seed=seed), tmp_path / f"seed{seed}")
        if result.verdict != "PASS":
            failures.append((seed, result.reasons, result.workdir))
    assert not failures


@pytest.mark.chaos_full
@pytest.mark.parametrize("kind", sorted(FAULT_SETTINGS))
def test_a_job_of_your_own_under_every_fault_kind(kind, tmp_path, request):
    """`eos chaos matrix --scenario views.toml`: the job file above under each fault kind in turn, judged by its
    own audits (`--chaos-repeats` runs each)."""
    for name, text in (("job.py", OWN_JOB), ("load.py", OWN_LOAD), ("views.toml", OWN_SCENARIO)):
        (tmp_path / name).write_text(text)
    base = load_scenario(tmp_path / "views.toml")
    # (a load of 20 s: faults fall 6-12 s after it starts, and a poison fault must find records to spoil)
    scenario = matrix_scenarios(records=40_000, base=base, only=kind)[f"matrix-own-job-kills-{kind}"]
    failures = []
    for seed in range(base.seed, base.seed + request.config.getoption("--chaos-repeats")):
        result = run_scenario(scenario.with_overrides(seed=seed), tmp_path / f"seed{seed}")
        if result.verdict != "PASS":
            failures.append((seed, result.reasons, result.workdir))
    assert not failures


def test_a_driver_killed_outright_leaves_its_temporary_files_in_the_scratch():
    # a driver as the harness starts one, its Python task run, then SIGKILLed with its JVM and zygote: nothing
    # of theirs removes what they made, which is all in the scratch the harness removes after the scenario
    with tempfile.TemporaryDirectory(prefix="chaos-cluster-") as directory:  # (as short as the harness's)
        _killed_drivers_files_in(Path(directory) / "tmp")


def _killed_drivers_files_in(scratch: Path) -> None:
    # (the suite's own scratch, which the driver would take instead: a user has neither)
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_LOCAL_DIRS", "SPARK_SUBMIT_OPTS")}
    driver = subprocess.Popen(
        [sys.executable, "-c", "from eos.driver.spark import build_spark_context\n"
         "sc = build_spark_context('local[1]')\n"
         "print(sc.parallelize(range(10)).map(lambda x: x + 1).sum(), flush=True)\n"
         "import time; time.sleep(120)"],
        env=scratch_environment(scratch, env), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        start_new_session=True)
    try:
        assert driver.stdout is not None and driver.stdout.readline().strip() == "55"
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(10)
    left = os.listdir(scratch)
    made = {"lz4's native library": r"liblz4-java-\d+\.so", "Spark's block manager": "blockmgr-.+",
            "a Python worker's fault handler": "faulthandler-.+", "spark-submit's scratch": "spark-.+",
            "a Unix socket of the driver's JVM": r"\..+\.sock"}
    missing = [what for what, pattern in made.items() if not any(re.fullmatch(pattern, name) for name in left)]
    assert not missing, (missing, left)
