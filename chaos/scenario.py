"""Chaos scenarios: a job under load, a schedule of faults, a seed.

Scenarios are TOML files (the built-in ones are in `chaos/scenarios/`) or `Scenario` objects:

    name = "stateful-driver-kill"
    job = "stateful"            # or "stateless", "windowed"; "broken" = at-least-once, which chaos must catch;
                                # or a job of your own: "job.py" (or "job.py:app", "module:app"), with
    # load = "load.py:record"   # record(i, rng) -> (topic, key, value): the i-th input record
    records = 200000            # input records produced by the load generator
    keys = 1000
    rate = 8000                 # input records per second
    brokers = 1                 # 3 for broker faults
    master = "local[2,4]"       # local-cluster[2,1,1024] for executor faults
    seed = 7

    [[faults]]
    kind = "driver_kill"        # see chaos.faults.KINDS
    count = 3                   # injected at seeded random times inside the load window
    duration = 0                # seconds a fault lasts (pauses, partitions, latency)

The same seed gives the same schedule (fault times and targets).
"""

from __future__ import annotations

import random
import re
import tomllib
from dataclasses import asdict, dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["FaultSpec", "Scenario", "ScheduledFault", "load_scenario", "builtin_scenarios", "schedule"]


#: seconds after the load starts: the first fault's earliest time, and the latest end of the window the faults
#: are spread over (or the load's end, if later)
FAULT_WINDOW = (6.0, 12.0)


@dataclass(frozen=True)
class FaultSpec:
    kind: str
    count: int = 1
    duration: float = 0.0
    params: dict[str, Any] = field(default_factory=dict)


#: the jobs the harness ships (chaos.jobs), each with its own load and audits
BUILT_IN_JOBS = ("stateless", "stateful", "windowed", "broken")


@dataclass(frozen=True)
class ScheduledFault:
    at: float  # seconds after the load starts
    kind: str
    duration: float
    choice: float  # a seeded number in [0, 1) that picks the target (broker, executor, worker)
    params: dict[str, Any]


@dataclass(frozen=True)
class Scenario:
    name: str
    job: str = "stateless"
    records: int = 200_000
    keys: int = 1000
    rate: int = 8000
    partitions: int = 4
    brokers: int = 1
    master: str = "local[2,4]"
    seed: int = 1
    proxied: bool = False
    max_records_per_batch: int = 5000
    standbys: int = 0  # num_standby_replicas of the job (stateful/windowed jobs on local-cluster masters)
    transaction_timeout_ms: int = 15_000
    drain_timeout: float = 300.0
    description: str = ""
    faults: tuple[FaultSpec, ...] = ()
    #: a job of the user's (`job` = "job.py[:app]" or "module:app"): where its input comes from,
    #: "load.py:record" or "module:record", `record(i, rng) -> (topic, key, value)` for i in range(records)
    load: str = ""

    def __post_init__(self) -> None:
        from chaos.faults import KINDS

        if self.own_job:
            if not self.load:
                raise ValueError(f"{self.name}: a job of your own ({self.job!r}) needs load = \"load.py:record\": "
                                 "a function record(i, rng) -> (topic, key, value) that makes its i-th input record")
        elif self.job not in BUILT_IN_JOBS:
            raise ValueError(f"{self.name}: job must be stateless, stateful, windowed or broken, or a job of your "
                             f"own (job.py, job.py:app or module:app), got {self.job!r}")
        elif self.load:
            raise ValueError(f"{self.name}: load is for a job of your own; the {self.job} job has its own load")
        if self.standbys and not ((self.own_job or self.job in ("stateful", "windowed"))
                                  and self.master.startswith("local-cluster")):
            raise ValueError(f"{self.name}: standbys need a job with state on a local-cluster[...] master")
        late = [f.at for f in schedule(self) if f.kind == "poison" and f.at >= self.load_seconds]
        if late:  # (it would make no record malformed)
            raise ValueError(f"{self.name} (seed {self.seed}): its poison fault at {late[0]:g} s comes after its load "
                             f"ends ({self.records:,} records at {self.rate:,}/s last {self.load_seconds:g} s); faults "
                             f"fall {FAULT_WINDOW[0]:g}-{FAULT_WINDOW[1]:g} s after the load starts at the least: "
                             f"give it at least {int(FAULT_WINDOW[1] * self.rate):,} records")
        for f in self.faults:
            if f.kind not in KINDS:
                raise ValueError(f"{self.name}: unknown fault kind {f.kind!r}; kinds: {sorted(KINDS)}")
            if KINDS[f.kind].brokers and self.brokers < 3:
                raise ValueError(f"{self.name}: fault {f.kind} needs brokers = 3")
            if KINDS[f.kind].cluster_mode and not self.master.startswith("local-cluster"):
                raise ValueError(f"{self.name}: fault {f.kind} needs a local-cluster[...] master")

    @property
    def own_job(self) -> bool:
        """The job is the user's (a file or a module), not one of the built-in ones."""
        return self.job not in BUILT_IN_JOBS and (self.job.endswith(".py") or ":" in self.job or "." in self.job)

    @property
    def load_seconds(self) -> float:
        return self.records / self.rate

    @property
    def needs_proxies(self) -> bool:
        from chaos.faults import KINDS

        return self.proxied or any(KINDS[f.kind].network for f in self.faults)

    def with_overrides(self, **changes: Any) -> Scenario:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def schedule(scenario: Scenario) -> list[ScheduledFault]:
    """Fault times spread over the load window: each fault's count slots, jittered by the seed, at least
    `duration + 8 s` apart so a fault ends and the job recovers before the next one starts."""
    rng = random.Random(scenario.seed)
    window_start, window_end = FAULT_WINDOW[0], max(FAULT_WINDOW[1], scenario.load_seconds)
    planned: list[ScheduledFault] = []
    specs = [(spec, i) for spec in scenario.faults for i in range(spec.count)]
    slot = (window_end - window_start) / max(1, len(specs))
    order = list(range(len(specs)))
    rng.shuffle(order)
    for position, index in enumerate(order):
        spec, _ = specs[index]
        at = window_start + slot * position + rng.uniform(0, max(0.0, slot - spec.duration - 8) * 0.5)
        planned.append(ScheduledFault(round(at, 2), spec.kind, spec.duration, rng.random(), dict(spec.params)))
    return sorted(planned, key=lambda f: f.at)


def _from_dict(data: dict[str, Any]) -> Scenario:
    faults = tuple(FaultSpec(f["kind"], int(f.get("count", 1)), float(f.get("duration", 0.0)),
                             {k: v for k, v in f.items() if k not in ("kind", "count", "duration")})
                   for f in data.get("faults", []))
    return Scenario(**{k: v for k, v in data.items() if k != "faults"}, faults=faults)


def load_scenario(source: str | Path) -> Scenario:
    """A built-in scenario by name, or a TOML file by path (a job and a load of the user's named by paths are
    found next to the file)."""
    path = Path(source)
    if path.suffix == ".toml" and path.is_file():
        data = tomllib.loads(path.read_text())
        for key in ("job", "load"):
            named = re.fullmatch(r"(.+\.py)(:\w+)?", data.get(key) or "") if isinstance(data.get(key), str) else None
            if named:
                data[key] = str((path.parent / named[1]).resolve()) + (named[2] or "")
        return _from_dict(data)
    builtins = builtin_scenarios()
    if str(source) in builtins:
        return builtins[str(source)]
    raise ValueError(f"no scenario {source!r}: give a .toml file or one of {sorted(builtins)}")


def builtin_scenarios() -> dict[str, Scenario]:
    """The TOML scenarios shipped in chaos/scenarios/ and the generated failover matrix."""
    from chaos.matrix import matrix_scenarios

    folder = resources.files("chaos") / "scenarios"
    out = dict(matrix_scenarios())
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            scenario = _from_dict(tomllib.loads(entry.read_text()))
            out[scenario.name] = scenario
    return out
