from __future__ import annotations

import dataclasses
import json
import random

import pytest
from typer.testing import CliRunner

from chaos import cli as chaos_cli
from chaos.faults import KINDS
from chaos.load import _encoded, user_load
from chaos.matrix import FAULT_SETTINGS, matrix_scenarios
from chaos.scenario import FaultSpec, Scenario, builtin_scenarios, load_scenario, schedule


def test_same_seed_same_schedule_other_seed_other_schedule():
    s = Scenario("s", faults=(FaultSpec("driver_kill", 3), FaultSpec("worker_pause", 2, 5)))
    assert schedule(s) == schedule(s)
    assert schedule(s) != schedule(s.with_overrides(seed=2))
    times = [f.at for f in schedule(s)]
    assert times == sorted(times) and len(times) == 5
    assert all(0 < t <= s.load_seconds for t in times)


def test_builtin_scenarios_load_and_cover_every_fault_for_both_jobs():
    scenarios = builtin_scenarios()
    assert {"smoke-stateful-driver-kill", "smoke-broken-driver-kill", "example-three-brokers"} <= set(scenarios)
    matrix = matrix_scenarios()
    assert set(FAULT_SETTINGS) == set(KINDS)
    for job in ("stateless", "stateful"):
        assert {f"matrix-{job}-{kind}" for kind in KINDS} <= set(matrix)
    assert load_scenario("smoke-stateless-net-reset").needs_proxies
    assert matrix["matrix-stateful-executor_kill"].master.startswith("local-cluster")


def test_invalid_scenarios_are_refused_with_a_reason(tmp_path):
    with pytest.raises(ValueError, match="needs brokers = 3"):
        Scenario("x", faults=(FaultSpec("broker_pause"),))
    with pytest.raises(ValueError, match="local-cluster"):
        Scenario("x", faults=(FaultSpec("executor_kill"),))
    with pytest.raises(ValueError, match="unknown fault kind"):
        Scenario("x", faults=(FaultSpec("meteor"),))
    path = tmp_path / "mine.toml"
    path.write_text('name = "mine"\njob = "stateful"\nseed = 3\n[[faults]]\nkind = "poison"\ncount = 2\nratio = 0.5\n')
    mine = load_scenario(path)
    assert mine.faults == (FaultSpec("poison", 2, 0.0, {"ratio": 0.5}),) and mine.seed == 3


def test_a_job_of_your_own_needs_its_load_and_both_are_found_next_to_the_scenario(tmp_path):
    with pytest.raises(ValueError, match=r"a job of your own \('job.py'\) needs load = \"load.py:record\""):
        Scenario("x", job="job.py")
    with pytest.raises(ValueError, match="job must be stateless, stateful, windowed or broken, or a job of your own"):
        Scenario("x", job="statefull")
    with pytest.raises(ValueError, match="load is for a job of your own"):
        Scenario("x", job="stateful", load="load.py:record")
    (tmp_path / "load.py").write_text("def record(i, rng):\n    return 'in', f'k{i}', {'i': i, 'r': rng.random()}\n")
    (tmp_path / "mine.toml").write_text('name = "mine"\njob = "job.py:app"\nload = "load.py:record"\n')
    mine = load_scenario(tmp_path / "mine.toml")
    assert mine.own_job and (mine.job, mine.load) == (f"{tmp_path}/job.py:app", f"{tmp_path}/load.py:record")
    make = user_load(mine.load)
    assert make(3, random.Random(1)) == make(3, random.Random(1)) and make(3, random.Random(1))[:2] == ("in", "k3")
    for wrong, says in (("load.py", "give load.py:function"), (f"{tmp_path}/load.py:nope", "has no function 'nope'"),
                        (f"{tmp_path}/none.py:record", "none.py does not exist")):
        with pytest.raises(ValueError, match=says):
            user_load(wrong)
    assert [_encoded(p) for p in (None, b"b", "s", {"a": 1})] == [None, b"b", b"s", b'{"a": 1}']


def test_eos_chaos_run_refuses_a_job_or_load_of_your_own_that_cannot_load_in_one_line(tmp_path):
    (tmp_path / "job.py").write_text("from eos import Application\napp = Application('j', bootstrap_servers='x:1')\n"
                                     "app.stream('in').filter(lambda v: v).to('out')\n")
    (tmp_path / "load.py").write_text("def record(i, rng):\n    return 'in', None, str(i)\n")
    (tmp_path / "s.toml").write_text('name = "s"\njob = "job.py"\nload = "load.py:record"\n')
    said = CliRunner().invoke(chaos_cli.app, ["run", str(tmp_path / "s.toml")])
    assert said.exit_code == 2 and "job.py, line 3: TypeError: filter: predicate is called as predicate(key, " \
        "value)" in " ".join(said.output.split()), said.output
    (tmp_path / "job.py").write_text("from eos import Application\napp = Application('j', bootstrap_servers='x:1')\n"
                                     "app.stream('in').to('out')\n")
    (tmp_path / "s.toml").write_text('name = "s"\njob = "job.py"\nload = "load.py:recrd"\n')
    said = CliRunner().invoke(chaos_cli.app, ["run", str(tmp_path / "s.toml")])
    assert said.exit_code == 2 and "load.py has no function 'recrd'" in " ".join(said.output.split()), said.output
    (tmp_path / "job.py").write_text("from eos import Application\napp = Application('j', bootstrap_servers='x:1')\n"
                                     "app.stream('in', value_serde='long').to('out')\n")
    (tmp_path / "s.toml").write_text('name = "s"\njob = "job.py"\nload = "load.py:record"\n')
    said = CliRunner().invoke(chaos_cli.app, ["run", str(tmp_path / "s.toml")])  # its str(i) values are no longs
    assert said.exit_code == 2 and "record 0's value for 'in', '0' (str), is not what the job reads 'in' with" \
        in " ".join(said.output.split()), said.output
    (tmp_path / "job.py").write_text(  # a Schema Registry job: checked against an in-memory registry
        "from eos import Application\napp = Application('j', bootstrap_servers='x:1', schema_registry_url="
        "'http://127.0.0.1:9')\napp.stream('in', value_serde=app.avro('{\"type\": \"record\", \"name\": \"R\", "
        "\"fields\": [{\"name\": \"n\", \"type\": \"long\"}]}')).to('out', value_serde='json')\n")
    said = CliRunner().invoke(chaos_cli.app, ["run", str(tmp_path / "s.toml")])
    assert said.exit_code == 2 and "record 0's value for 'in', '0' (str), is not what the job reads 'in' with " \
        "(SerdeError: cannot serialize as avro (value of in)" in " ".join(said.output.split()), said.output


def test_matrix_resumes_from_reports_of_the_same_runs_only(tmp_path, monkeypatch):
    import chaos.harness
    from chaos.harness import ChaosResult
    from chaos.matrix import matrix_scenarios, run_matrix

    scenario = matrix_scenarios(records=1000, only="stateless-net_reset")["matrix-stateless-net_reset"]
    ran = []

    def fake_run(s, workdir):  # the harness itself is exercised by the integration tests
        ran.append((s.seed, s.records))
        exits = [{"kind": "job", "phase": "exit", "code": code} for code in ((-9, 0) if s.seed != 2 else (-11, 1))]
        result = ChaosResult(scenario=s.to_dict(), verdict="PASS", faults_injected=3,
                             recovery=[{"recovery_s": 2.0 + s.seed}], timeline=exits)
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "report.json").write_text(json.dumps(dataclasses.asdict(result)))
        return result

    monkeypatch.setattr(chaos.harness, "run_scenario", fake_run)
    run_matrix([scenario], 2, tmp_path)
    rows = run_matrix([scenario], 3, tmp_path)  # seeds 1 and 2 are read back; only seed 3 runs
    assert ran == [(1, 1000), (2, 1000), (3, 1000)]
    assert rows[0]["runs"] == 3 and rows[0]["passed"] == 3 and rows[0]["faults_injected"] == 9
    assert rows[0]["median_recovery_s"] == 4.0
    # exits the faults caused (SIGKILL) or a stop (0) are not crashes; an error exit and a SIGSEGV are
    assert rows[0]["driver_crashes"] == [-11, 1]
    assert ("| matrix-stateless-net_reset | 3 | 3 | 1,000 | 9 | 0 | 4.0 | 5.0 | 2 (-11, 1) |"
            in (tmp_path / "matrix.md").read_text())
    run_matrix([scenario.with_overrides(records=2000)], 1, tmp_path / "other")
    run_matrix([scenario.with_overrides(records=2000)], 1, tmp_path)  # other record count: not the same run
    assert ran[-2:] == [(1, 2000), (1, 2000)]


def test_a_run_whose_faults_were_not_all_injected_fails(tmp_path):
    from chaos.harness import ChaosResult
    from chaos.report import finish_result
    from chaos.timeline import Timeline

    timeline = Timeline()
    timeline.skip("worker_pause", "no Python worker found")
    result = ChaosResult(scenario={}, schedule=[{"kind": "worker_pause"}, {"kind": "worker_pause"}], faults_injected=1,
                         audits=[{"mode": "lineage", "verdict": "PASS", "violations": 0}])
    result.timeline = timeline.events
    finish_result(result, tmp_path, timeline)
    assert result.verdict == "FAIL"
    assert result.reasons[0] == "only 1 of 2 scheduled faults were injected (no Python worker found)"


def test_a_fault_without_a_recovery_time_says_why(tmp_path):
    """A recovery time is from a fault until a batch that started after it commits; where none did, the report
    says whether the load had sent everything before the fault (nothing left to commit) or the run ended."""
    from chaos.harness import ChaosResult
    from chaos.report import finish_result
    from chaos.timeline import Timeline

    timeline = Timeline()
    timeline.started = 100.0
    for i, kind in enumerate(("executor_kill", "broker_kill", "driver_kill")):  # 101-102, 103-104, 105-106
        timeline.events += [{"wall": 101.0 + 2 * i, "kind": kind, "phase": "start", "target": "x"},
                            {"wall": 102.0 + 2 * i, "kind": kind, "phase": "end", "target": "x"}]
    timeline.events.append({"wall": 107.0, "kind": "load", "phase": "end", "target": "", "sent_all": 104.5})
    batches = [{"started": 101.5, "ended": 102.5, "committed": True, "records_in": 10},
               {"started": 102.8, "ended": 103.5, "committed": True, "records_in": 5}]
    (tmp_path / "batches.jsonl").write_text("".join(json.dumps(b) + "\n" for b in batches))
    result = ChaosResult(scenario={}, schedule=[{}] * 3, faults_injected=3,
                         audits=[{"mode": "lineage", "verdict": "PASS", "violations": 0}])
    finish_result(result, tmp_path, timeline)
    assert [r["recovery_s"] for r in result.recovery] == [1.5, None, None]
    assert result.verdict == "PASS" and result.notes == [
        'broker_kill at 3.0 s: no recovery time ("-"), as no batch that started after it committed before the run '
        'ended',
        'driver_kill at 5.0 s: no recovery time ("-"), as no batch that started after it committed: the load had '
        'sent its last record at 4.5 s, before it, so the job had no input left to commit (the drain and the '
        'audits still judge the run)']


def test_a_scenario_that_stops_says_why_in_its_report(tmp_path, monkeypatch):
    """A cluster that does not start (a broker's port taken) fails the scenario with that reason in its
    report, not only with what the run did not get to."""
    import chaos.harness
    from localkafka.cluster import ClusterError

    def refuse(self, timeout=180.0):
        raise ClusterError("broker 3 exited while starting (status 1); the end of broker-3.log:\n...")

    monkeypatch.setattr(chaos.harness.LocalCluster, "up", refuse)
    with pytest.raises(ClusterError):
        chaos.harness.run_scenario(load_scenario("smoke-stateful-driver-kill"), tmp_path / "run")
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["verdict"] == "FAIL"
    assert report["reasons"][0] == "the scenario stopped: ClusterError: broker 3 exited while starting (status 1); " \
                                   "the end of broker-3.log:"


def _own_files(tmp_path, job: str) -> None:
    (tmp_path / "job.py").write_text(job)
    (tmp_path / "load.py").write_text("def record(i, rng):\n    return 'in', f'k{i % 7}', {'i': i}\n")
    (tmp_path / "s.toml").write_text('name = "mine"\njob = "job.py"\nload = "load.py:record"\nrecords = 60000\n'
                                      'rate = 4000\nseed = 4\nmax_records_per_batch = 700\n'
                                      '[[faults]]\nkind = "driver_kill"\n')


COUNTING_JOB = ("from eos import Application\napp = Application('mine', bootstrap_servers='x:1')\n"
                "app.stream('in', value_serde='json').group_by_key().count(name='n').to_stream().to('out')\n")


def test_a_matrix_of_your_own_job_puts_it_under_every_fault_kind_with_its_own_settings(tmp_path):
    _own_files(tmp_path, COUNTING_JOB)
    base = load_scenario(tmp_path / "s.toml")
    matrix = matrix_scenarios(base=base)
    assert set(matrix) == {f"matrix-mine-{kind}" for kind in KINDS}
    for kind, s in matrix.items():
        assert (s.job, s.load, s.seed, s.max_records_per_batch) == (base.job, base.load, 4, 700)
        assert s.records == 60_000 and [f.kind for f in s.faults] == [kind.removeprefix("matrix-mine-")]
    # a fault kind's settings on top of the scenario's: a cluster for executor faults, with a standby (the job
    # counts), three brokers for broker faults, at most 3,000 records/s while a process stops for long
    kill, executor, pause = (matrix[f"matrix-mine-{k}"] for k in ("driver_kill", "executor_kill", "executor_pause"))
    assert (kill.master, kill.standbys, kill.brokers, kill.rate) == ("local[2,4]", 0, 1, 4000)
    assert executor.master.startswith("local-cluster") and executor.standbys == 1 and executor.rate == 4000
    assert pause.rate == 3000 and matrix["matrix-mine-broker_pause"].brokers == 3
    assert matrix["matrix-mine-poison"].description == "job.py job, 2 x poison"
    slower = matrix_scenarios(records=500, rate=1000, base=base, only="executor_pause")
    assert [(s.records, s.rate) for s in slower.values()] == [(500, 1000)]
    # a load that ends before the faults do: a poison fault after it would make no record malformed
    with pytest.raises(ValueError, match=r"matrix-mine-poison \(seed 4\): its poison fault at [\d.]+ s comes after its "
                                         r"load ends \(500 records at 1,000/s last 0.5 s\); .* give it at least 12,000 "
                                         "records"):
        matrix_scenarios(records=500, rate=1000, base=base)
    # a job without stores gets no standby (and the built-in matrix is as it was)
    _own_files(tmp_path, COUNTING_JOB.replace(".group_by_key().count(name='n').to_stream()", ""))
    assert matrix_scenarios(base=load_scenario(tmp_path / "s.toml"))["matrix-mine-executor_kill"].standbys == 0
    builtin = matrix_scenarios()
    assert len(builtin) == 3 * len(KINDS) and builtin["matrix-windowed-executor_kill"].standbys == 1
    assert (builtin["matrix-stateless-zombie"].rate, builtin["matrix-stateless-zombie"].records) == (3000, 200_000)


def test_eos_chaos_matrix_runs_your_own_job_from_its_scenario_and_refuses_what_cannot_run(tmp_path, monkeypatch):
    import chaos.harness
    from chaos.harness import ChaosResult

    _own_files(tmp_path, COUNTING_JOB)
    ran = []

    def fake_run(s, workdir):  # the harness with a job of the user's: integration_tests/chaos/test_chaos.py
        ran.append((s.name, s.seed, s.records, workdir.parent.name))
        return ChaosResult(scenario=s.to_dict(), verdict="PASS", faults_injected=s.faults[0].count)

    monkeypatch.setattr(chaos.harness, "run_scenario", fake_run)
    monkeypatch.chdir(tmp_path)
    said = CliRunner().invoke(chaos_cli.app, ["matrix", "--scenario", "s.toml", "--only", "kill", "--repeats", "2"])
    assert said.exit_code == 0, said.output
    assert "mine: its own faults are replaced by each fault kind in turn" in said.output
    kills = sorted({name for name, *_ in ran})
    assert kills == ["matrix-mine-driver_kill", "matrix-mine-executor_kill", "matrix-mine-worker_kill"]
    assert {(seed, records, folder) for _, seed, records, folder in ran} == {(4, 60_000, "matrix-mine"),
                                                                             (5, 60_000, "matrix-mine")}
    for args, says in ((["--only", "meteor"], "no scenario of the matrix has 'meteor' in its name"),
                       (["--scenario", "none.toml"], "no scenario 'none.toml'"),
                       (["--records", "2000"], "give it at least 48,000 records")):
        said = CliRunner().invoke(chaos_cli.app, ["matrix", *args] + ([] if "--scenario" in args else
                                                                      ["--scenario", "s.toml"]))
        assert said.exit_code == 2 and says in " ".join(said.output.split()), said.output
    _own_files(tmp_path, COUNTING_JOB.replace("group_by_key()", "groupByKey()"))
    said = CliRunner().invoke(chaos_cli.app, ["matrix", "--scenario", "s.toml"])
    assert said.exit_code == 2 and "groupByKey" in said.output and len(ran) == 6, said.output


def test_a_job_of_your_own_that_takes_the_poison_as_records_gets_a_note_not_a_failure():
    from chaos.harness import _poison_taken
    from chaos.matrix import matrix_markdown

    def lineage(inputs, dead_lettered):
        return {"mode": "lineage", "inputs": inputs, "lineage": {"dead_lettered": dead_lettered}}

    read_as_json = [lineage(["views"], 40), lineage(["marked"], 0), {"mode": "window", "inputs": ["views"]}]
    assert _poison_taken(read_as_json, {"views"}, 40) == []
    read_as_text = [lineage(["views"], 0), lineage(["marked"], 3)]
    (note,) = _poison_taken(read_as_text, {"views"}, 40)
    assert note == ("the job took at least 40 of the 40 malformed records the poison fault wrote to views as records "
                    "(its input serde accepts them): the fault did not try its dead-letter path")
    row = {"scenario": "matrix-mine-poison", "runs": 1, "passed": 1, "records_per_run": 10, "faults_injected": 2,
           "violations": 0, "median_recovery_s": 1.0, "max_recovery_s": 1.0, "notes": [note]}
    assert matrix_markdown([row]).endswith(f"| 0 |\n\n* matrix-mine-poison: {note}\n")


def test_a_poison_fault_after_the_load_has_ended_is_not_counted_as_injected():
    from types import SimpleNamespace

    from chaos.faults import poison
    from chaos.scenario import ScheduledFault
    from chaos.timeline import Timeline

    class Load:  # the load generator's side of the fault: records made malformed only while the load runs
        def __init__(self, running):
            self.running, self.poisoned = running, 0

        def poison(self, ratio):
            self.poisoned += 7 if ratio and self.running else 0

    fault = ScheduledFault(0.0, "poison", 0.01, 0.0, {"ratio": 0.5})
    assert poison(SimpleNamespace(load=Load(True), timeline=Timeline()), fault) == "poison"
    timeline = Timeline()
    said = poison(SimpleNamespace(load=Load(False), timeline=timeline), fault)
    assert said.startswith("skipped: no input record was made malformed: the load had ended")
    assert [e["phase"] for e in timeline.events] == ["start", "end", "skipped"]
