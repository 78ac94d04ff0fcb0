"""Reprocess from scratch (`eos reset`, Kafka Streams' application reset tool and more).

A reset, with no driver of the application running:

1. clears the application's consumer groups (the committed offsets of every input, internal ones too, and
   the stream time and clocks stored with them) and commits, per input topic, the position to start from:
   earliest, latest, or the first record at or after a time; an input that a step of the job writes (an
   intermediate topic, Kafka Streams' `--intermediate-topics`) goes to its end, since the step writing it
   writes its records again from its own input (read again, they would be processed twice downstream);
2. deletes its internal topics: repartition topics, changelogs, a foreign-key join's subscription and
   response topics, the lineage ledger (the next run creates them again, empty);
3. wipes the state directories of the application this machine can reach. State on other machines needs
   no hand work: a store that recorded a changelog offset beyond its (recreated, empty) changelog is wiped
   and restored from empty when its task starts (`recovery.restore`).

Output topics and the dead-letter topic are the user's and are left alone: a run after a reset to earliest
writes the same results again after the ones already there. The reset writes where each of them ends into the
new ledger (`eos.ledger.ledger_reset`): the audits hold the job to what it writes from there on.
"""

from __future__ import annotations

import glob
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from eos.driver.checks import ledger_spec, match_topic_patterns
from eos.driver.lease import lease_topic
from eos.errors import ConfigError
from eos.ledger import ledger_reset, ledger_topic
from eos.time import parse_time
from eos.topology import offset_groups
from eos.worker.progress import CommitMetadata
from recovery import locked_task_directories
from transactions import KafkaAdmin, TopicSpec

if TYPE_CHECKING:
    from eos.app import Application

__all__ = ["ResetPlan", "plan_reset", "apply_reset", "check_not_running"]

TP = tuple[str, int]


@dataclass
class ResetPlan:
    application_id: str
    #: input topic -> where it starts again ("earliest", "latest" or a time as given)
    starts: dict[str, str]
    #: consumer group -> the offsets committed for it after the reset
    offsets: dict[str, dict[TP, int]]
    #: groups cleared first (every group the application commits under)
    groups: list[str]
    #: internal topics deleted (those that exist)
    topics: list[str]
    #: state directories of the application on this machine
    local_state: list[Path]
    state_dir: str
    notes: list[str] = field(default_factory=list)
    #: input partitions started again past their first record: that first offset (the records before the new
    #: position are not the next run's input, which its commit says for the audits: `CommitMetadata.not_read_from`)
    starts_after: dict[TP, int] = field(default_factory=dict)
    #: where the records the job writes after the reset start, per partition of its output topics and its
    #: dead-letter topic (their ends now): written into the new ledger for the audits
    outputs_from: dict[TP, int] = field(default_factory=dict)
    #: the lineage ledger's topic, created again with the reset's record in it
    ledger: TopicSpec | None = None

    def lines(self) -> list[str]:
        """What the reset does, one line each."""
        out = [f"reset application {self.application_id!r}:"]
        for group, offsets in self.offsets.items():
            for topic in sorted({t for t, _ in offsets}):
                positions = ", ".join(f"{p}:{o}" for (t, p), o in sorted(offsets.items()) if t == topic)
                out.append(f"  group {group}: {topic} from {self.starts[topic]} (offsets {positions})")
        out += [f"  clear the committed offsets and stream times of group {g}" for g in self.groups]
        out += [f"  delete internal topic {t}" for t in self.topics]
        if self.ledger is not None:
            outputs = sorted({t for t, _ in self.outputs_from})
            out.append(f"  create the lineage ledger {self.ledger.name} again, with where the job's outputs end now "
                       f"({', '.join(outputs) or 'none yet'}): the audits read what the next runs write after that")
        out += [f"  delete local state directory {p}" for p in self.local_state]
        if not self.local_state:
            out.append(f"  no local state directory of the application under {self.state_dir}")
        out += [f"  note: {n}" for n in self.notes]
        return out


def check_not_running(app: Application, admin: KafkaAdmin) -> None:
    """Refuse while a driver of the application holds its lease: a reset under a running job would fight
    its commits."""
    group = f"{app.config.application_id}.driver"
    members = admin.group_members(group)
    if members:
        raise ConfigError(f"a driver of application {app.config.application_id!r} is running ({', '.join(members)}): "
                          "stop it first; a reset under a running job would race its commits")


def plan_reset(app: Application, admin: KafkaAdmin, *, to: str = "earliest",
               inputs: Mapping[str, str] | None = None, now_ms: int | None = None) -> ResetPlan:
    """What `apply_reset` would do: every input topic back to `to` ("earliest", "latest", a time: ISO-8601,
    milliseconds or relative such as "-2h"), or to its own position in `inputs` (topic -> the same forms)."""
    cfg = app.config
    internal = set(app.internal_topics)
    match_topic_patterns(app, admin)  # (a topic pattern's inputs are the topics it matches now)
    subs = app.subtopologies
    groups = offset_groups(subs, cfg.group_id)
    user_inputs = list(dict.fromkeys(t for (_, t) in groups if t not in internal))
    unknown = sorted(set(inputs or {}) - set(user_inputs))
    if unknown:
        raise ConfigError(f"{', '.join(unknown)}: not an input topic of application {cfg.application_id!r} (its "
                          f"inputs: {', '.join(user_inputs)})")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    written = {t for sub in subs.values() for t in sub.output_topics} - internal
    starts = {t: (inputs or {}).get(t, "latest" if t in written else to) for t in user_inputs}
    positions: dict[str, dict[TP, int]] = {}
    firsts: dict[TP, int] = {}
    for topic, start in starts.items():
        tps = admin.topic_partitions(topic)
        firsts.update(admin.earliest_offsets(tps))
        if start == "earliest":
            positions[topic] = admin.earliest_offsets(tps)
        elif start == "latest":
            positions[topic] = admin.end_offsets(tps, committed=False)
        else:
            try:
                at = parse_time(start, now)
            except ValueError as exc:
                raise ConfigError(f"--to for {topic}: {exc}; or earliest, latest") from None
            positions[topic] = admin.offsets_for_time(tps, at)
    offsets: dict[str, dict[TP, int]] = {}
    for (_, topic), group in groups.items():
        if topic in positions:
            offsets.setdefault(group, {}).update(positions[topic])
    stores = {spec.changelog_topic(cfg.application_id) for sub in subs.values() for spec in sub.stores
              if spec.source_topic is None}  # (never the table topic a store is restored from: it is an input)
    candidates = sorted(internal | stores | {ledger_topic(cfg.application_id)})
    counts = admin.partition_counts(candidates)
    state_dir = cfg.state_dir
    pattern = str(Path(state_dir.replace("{executor}", "*")).expanduser() / cfg.application_id)
    notes = [f"state of the application on other machines ({state_dir}/{cfg.application_id} there) need not be "
             "removed: a store ahead of its recreated changelog is wiped and restored from empty when its task "
             "starts",
             f"output topics and the dead-letter topic {cfg.dlq_topic} are left as they are; the driver lease "
             f"topic {lease_topic(cfg)} too; the audits hold the next run to what it writes after the reset"]
    intermediate = sorted(t for t in written & set(starts) if t not in (inputs or {}))
    if intermediate:
        notes.append(f"{', '.join(intermediate)}: written by a step of the job and read by another, so read from "
                     "their end: the writing step writes their records again (--input TOPIC=WHERE reads the old ones "
                     "too, which the steps reading them then process twice)")
    outputs = sorted((written | {cfg.dlq_topic}) - {t for t, where in starts.items()
                                                     if t in written and where != "latest"})
    existing = [t for t, n in admin.partition_counts(outputs).items() if n is not None]
    outputs_from = admin.end_offsets([tp for t in existing for tp in admin.topic_partitions(t)], committed=False)
    ledger = ledger_spec(admin, cfg, user_inputs)  # (a job run with lineage=False too: its window audit reads it)
    starts_after = {tp: firsts[tp] for ends in positions.values() for tp, o in ends.items() if o > firsts.get(tp, o)}
    return ResetPlan(cfg.application_id, starts, offsets, sorted(set(groups.values())),
                     [t for t in candidates if counts[t] is not None],
                     [Path(p) for p in sorted(glob.glob(pattern)) if Path(p).is_dir()], state_dir, notes,
                     starts_after, outputs_from, ledger)


def apply_reset(plan: ResetPlan, admin: KafkaAdmin, *, timeout: float = 60.0) -> None:
    """Carry out a plan (see the module's docstring), waiting until the deleted topics are gone."""
    admin.delete_groups(plan.groups)
    for group, offsets in plan.offsets.items():
        after = {tp: CommitMetadata(not_read_from=plan.starts_after[tp]).encode() for tp in offsets
                 if tp in plan.starts_after}
        admin.set_group_offsets(group, offsets, metadata=after)
    if plan.topics:
        admin.delete_topics(plan.topics)
        deadline = time.monotonic() + timeout
        while any(n is not None for n in admin.partition_counts(plan.topics).values()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"topics {plan.topics} were not deleted within {timeout:.0f} s")
            time.sleep(0.5)
    if plan.ledger is not None:  # (the next run finds it: its first record says where the outputs start)
        admin.create_topics([plan.ledger], timeout=timeout)
        admin.append(plan.ledger.name, [(None, ledger_reset(plan.outputs_from))], timeout=timeout)
    for path in plan.local_state:
        # (a Spark worker of a finished run may still hold a task's stores open for a few seconds: asked to let go)
        with locked_task_directories(path):
            shutil.rmtree(path, ignore_errors=True)
