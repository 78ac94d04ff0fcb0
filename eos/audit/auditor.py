"""The auditor: one call (or `eos audit`) that proves or disproves exactly-once for a job's committed output.

Checks, each with counts and samples:

* lineage (default) or aggregate: see `eos.audit.lineage` and `eos.audit.aggregate`;
* transactions: no transaction left open on any output, dead-letter or changelog partition (last stable
  offset = high watermark), and no record of an aborted or open transaction read as output (found by
  comparing with a read_committed pass, whatever isolation the audit was asked to use);
* input offsets: the job's committed group offsets per input partition against the last stable offset.

The verdict is FAIL if any check finds a violation.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from eos.audit.aggregate import AggregateKind, AggregateResult, audit_aggregate
from eos.audit.executors import Executor
from eos.audit.joins import JoinAuditResult, audit_join, join_outputs
from eos.audit.ledger import add_starts, read_ledger
from eos.audit.lineage import LineageResult, audit_lineage
from eos.audit.scan import before_reset, since_reset
from eos.audit.windows import WindowAuditResult, audit_windows
from eos.ledger import ledger_topic
from eos.topology import SubTopology, offset_groups, topic_groups
from transactions import Isolation, KafkaAdmin, admin_for

if TYPE_CHECKING:
    from eos.app import Application

__all__ = ["AuditReport", "TransactionCheck", "OffsetCheck", "audit", "audit_application", "audit_windowed",
           "audit_joins", "AggregateSpec"]


@dataclass
class TransactionCheck:
    partitions_checked: int = 0
    open_transactions: int = 0
    samples: list[dict[str, Any]] = field(default_factory=list)

    @property
    def violations(self) -> int:
        return self.open_transactions


@dataclass
class OffsetCheck:
    partitions: int = 0
    committed: int = 0  # partitions with a committed offset
    lag: int = 0  # offsets between committed positions and last stable offsets
    beyond_end: int = 0  # committed offsets past the high watermark: impossible for a correct job
    per_partition: dict[str, dict[str, int | None]] = field(default_factory=dict)

    @property
    def violations(self) -> int:
        return self.beyond_end


@dataclass(frozen=True)
class AggregateSpec:
    kind: AggregateKind
    input_value: Callable[[bytes | None], Any]
    output_value: Callable[[bytes | None], Any]
    #: Input records the job aggregates (e.g. not those it dead-letters); default: all.
    accept: Callable[[bytes | None], bool] | None = None
    #: The job ran with a record cache (`cache_max_bytes` > 0): it committed some of the running values
    cached: bool = False


@dataclass
class AuditReport:
    mode: str
    bootstrap_servers: str
    inputs: list[str]
    outputs: list[str]
    dead_letter_topic: str | None
    group: str | None
    isolation: str
    verdict: Literal["PASS", "FAIL"] = "PASS"
    duration_s: float = 0.0
    lineage: LineageResult | None = None
    aggregate: AggregateResult | None = None
    window: WindowAuditResult | None = None
    join: JoinAuditResult | None = None
    #: why this mode's check could not run (e.g. the input a window audit replays was purged); None: it ran
    skipped: str | None = None
    transactions: TransactionCheck = field(default_factory=TransactionCheck)
    offsets: OffsetCheck = field(default_factory=OffsetCheck)
    #: offsets of the outputs (and dead letters) written before the job's last `eos reset`, left out
    before_reset: int = 0

    @property
    def violations(self) -> int:
        return sum(c.violations for c in (self.lineage, self.aggregate, self.window, self.join, self.transactions,
                                                self.offsets)
                   if c is not None)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["violations"] = self.violations
        for name in ("lineage", "aggregate", "window", "join", "transactions", "offsets"):
            check = getattr(self, name)
            if check is not None:
                data[name]["violations"] = check.violations
        return data


def check_open_transactions(admin: KafkaAdmin, topics: Iterable[str], max_samples: int = 10) -> TransactionCheck:
    check = TransactionCheck()
    for topic in topics:
        if admin.partition_counts([topic])[topic] is None:
            continue
        tps = admin.topic_partitions(topic)
        admin.settled_ends(tps)  # a transaction whose markers are being written is not left open
        for (t, p), offsets in admin.partition_offsets(tps).items():
            check.partitions_checked += 1
            if offsets.open_transaction:
                check.open_transactions += 1
                if len(check.samples) < max_samples:
                    check.samples.append({"topic": t, "partition": p, "last_stable_offset": offsets.last_stable,
                                          "high_watermark": offsets.high_watermark})
    return check


def check_offsets(admin: KafkaAdmin, inputs: Iterable[str], group: str | None,
                  groups: Mapping[str, str] | None = None) -> OffsetCheck:
    check = OffsetCheck()
    if group is None:
        return check
    for topic in inputs:
        tps = admin.topic_partitions(topic)
        offsets = admin.partition_offsets(tps)
        committed = admin.group_offsets((groups or {}).get(topic, group), tps, stable=True)
        for tp in tps:
            c, o = committed.get(tp), offsets[tp]
            check.partitions += 1
            check.committed += c is not None
            check.lag += max(0, o.last_stable - (c or o.earliest))
            check.beyond_end += c is not None and c > o.high_watermark
            check.per_partition[f"{tp[0]}:{tp[1]}"] = {"committed": c, "last_stable_offset": o.last_stable,
                                                       "high_watermark": o.high_watermark}
    return check


def audit(bootstrap_servers: str, *, inputs: list[str], outputs: list[str], dead_letter_topic: str | None = None,
          group: str | None = None, aggregate: AggregateSpec | None = None, extra_topics: Iterable[str] = (),
          isolation: Isolation = "read_committed", executor: Executor | None = None, max_samples: int = 10,
          progress: Callable[[int], None] | None = None, ledger_topic: str | None = None,
          through: Iterable[str] = (), subtopologies: frozenset[str] | None = None,
          groups: Mapping[str, str] | None = None, ordered: bool = True,
          numbered: bool | None = None, admin: KafkaAdmin | None = None,
          read_by_job: Iterable[str] = (), other_steps: Iterable[str] = ()) -> AuditReport:
    """Audit `outputs` (+ dead letters) against `inputs`. `extra_topics` (e.g. changelogs) are checked for
    open transactions too. `aggregate` switches from lineage mode to aggregate mode. The lineage ledger
    (`<group>-ledger` unless `ledger_topic` names another) accounts for filtered records. `subtopologies` and
    `groups` (input topic -> the group holding its progress) audit sub-topologies that share an input;
    `ordered=False` leaves out the input-order check, `numbered=False` that of each record's run of output
    indices (`audit_lineage`). `admin`: one shared with other audits of the same look (`audit_application`),
    so that a transaction left open is waited out once. `read_by_job`: the topics the job's other steps read
    (records others wrote to such an output are input, not output: `audit_lineage`). `other_steps`: the inputs of
    the job's other steps that write these outputs too (their records there are theirs: `audit_lineage`)."""
    started = time.monotonic()
    admin = admin or admin_for(bootstrap_servers, settle_once=True)
    ledger = ledger_topic or (f"{group}-ledger" if group else None)
    with since_reset(bootstrap_servers, ledger, admin) if ledger else contextlib.nullcontext():
        return _audit(bootstrap_servers, inputs, outputs, dead_letter_topic, group, aggregate, extra_topics,
                      isolation, executor, max_samples, progress, ledger_topic, through, subtopologies, groups,
                      ordered, numbered, admin, read_by_job, other_steps, started)


def _audit(bootstrap_servers: str, inputs: list[str], outputs: list[str], dead_letter_topic: str | None,
           group: str | None, aggregate: AggregateSpec | None, extra_topics: Iterable[str], isolation: Isolation,
           executor: Executor | None, max_samples: int, progress: Callable[[int], None] | None,
           ledger_topic: str | None, through: Iterable[str], subtopologies: frozenset[str] | None,
           groups: Mapping[str, str] | None, ordered: bool, numbered: bool | None, admin: KafkaAdmin,
           read_by_job: Iterable[str], other_steps: Iterable[str], started: float) -> AuditReport:
    report = AuditReport("aggregate" if aggregate else "lineage", bootstrap_servers, list(inputs), list(outputs),
                         dead_letter_topic, group, isolation)
    report.before_reset = before_reset(admin, [*outputs, *([dead_letter_topic] if dead_letter_topic else [])])
    if aggregate is None:
        report.lineage = audit_lineage(bootstrap_servers, inputs, outputs, dead_letter_topic=dead_letter_topic,
                                       group=group, admin=admin, isolation=isolation, max_samples=max_samples,
                                       executor=executor, progress=progress, ledger_topic=ledger_topic,
                                       through=through, subtopologies=subtopologies, groups=groups,
                                       ordered=ordered, numbered=numbered, read_by_job=read_by_job,
                                       other_steps=other_steps)
    else:
        report.aggregate = audit_aggregate(bootstrap_servers, inputs, outputs, kind=aggregate.kind,
                                           input_value=aggregate.input_value, output_value=aggregate.output_value,
                                           accept=aggregate.accept, group=group, admin=admin, max_samples=max_samples,
                                           progress=progress, cached=aggregate.cached)
    topics = [*outputs, *([dead_letter_topic] if dead_letter_topic else []), *extra_topics]
    report.transactions = check_open_transactions(admin, topics, max_samples)
    report.offsets = check_offsets(admin, inputs, group, groups)
    report.verdict = "PASS" if report.violations == 0 else "FAIL"
    report.duration_s = round(time.monotonic() - started, 3)
    return report


#: Why a job run with `lineage=False` has no lineage or join audit
_UNTRACED = ("the job runs with lineage=False: its outputs carry no eos.origin header and it writes no ledger, "
             "which this audit reads (lineage=True, the default, keeps them)")


def match_patterns(app: Application, admin: KafkaAdmin) -> None:
    """Have the job's topic patterns read what they match on the cluster now, as the job does (each topic from
    where its partitions started, `started_at`): the audits hold every one of them to the outputs."""
    if app.graph.patterns:
        app.match_patterns(admin.topic_names())


def audit_application(app: Application, *, bootstrap_servers: str | None = None, max_samples: int = 10,
                      progress: Callable[[int], None] | None = None) -> list[AuditReport]:
    """Everything a framework job commits, each by the audit that can prove it: a lineage audit of every
    sub-topology (derived outputs, such as punctuations' and final window results, each once), then the
    window audit of every windowed aggregation and the join audit of every join. A window or join audit that
    cannot run (an input it replays was purged or deleted, the aggregation is fused with another source, a
    join's side comes from several topics or through a stateful step) is reported as skipped, with the reason;
    so are the lineage and join audits of a job run with `lineage=False`, which read what it leaves out."""
    bootstrap = bootstrap_servers or app.config.bootstrap_servers
    admin = admin_for(bootstrap, settle_once=True)  # (one for every audit: an open transaction is waited out once)
    match_patterns(app, admin)
    with since_reset(bootstrap, ledger_topic(app.config.application_id), admin):
        return _audit_application(app, bootstrap, bootstrap_servers, max_samples, progress, admin)


def _audit_application(app: Application, bootstrap: str, bootstrap_servers: str | None, max_samples: int,
                       progress: Callable[[int], None] | None, admin: KafkaAdmin) -> list[AuditReport]:
    reports = (_lineage_reports(app, bootstrap_servers, max_samples, progress, admin) if app.config.lineage else
               [_not_checked(app, bootstrap, sub, "lineage", _UNTRACED, lineage=LineageResult())
                for sub in app.subtopologies.values()])
    for name, sub in app.subtopologies.items():
        for w in sub.windowings:
            try:
                reports += audit_windowed(app, bootstrap_servers=bootstrap, subtopologies=[name],
                                          max_samples=max_samples, progress=progress, only=w, admin=admin)
            except ValueError as exc:
                reports.append(AuditReport("window", bootstrap, list(sub.inputs), window_outputs(sub, w),
                                           app.config.dlq_topic, app.config.group_id, "read_committed",
                                           window=WindowAuditResult(), skipped=str(exc)))
        for window, why in sub.unreplayed_windows:
            reports.append(_not_checked(app, bootstrap, sub, "window", f"{window}: {why}", window=WindowAuditResult()))
    if any(sub.joins for sub in app.subtopologies.values()):
        reports += audit_joins(app, bootstrap_servers=bootstrap, max_samples=max_samples, admin=admin)
    else:
        reports += _unreplayed_joins(app, bootstrap, app.subtopologies)
    return reports


def _lineage_reports(app: Application, bootstrap_servers: str | None, max_samples: int,
                     progress: Callable[[int], None] | None, admin: KafkaAdmin) -> list[AuditReport]:
    """A lineage audit of every sub-topology, each held to its own inputs, with the job's dead-letter topic,
    changelogs and ledger. A repartition step and the step reading its topic are audited as one, from the
    first one's inputs to the second one's outputs: the repartition topic's records are deleted once
    consumed, and lineage reaches through them. Input order is checked where no repartition topic is between
    input and output: behind one, an input partition's records are spread over its partitions and read by as
    many tasks, and an output partition that several of them write gets them in no set order (as in Kafka
    Streams, whose order holds per partition of a repartition topic). A record's outputs are made by the tasks
    of each path it takes, numbered per path; each path's run of indices is checked, with the ledger's word on
    the paths that ended where they were read, or without the ledger where no step of the group writes both a
    repartition topic and an output (`runs_whole`)."""
    cfg = app.config
    bootstrap = bootstrap_servers or cfg.bootstrap_servers
    hops = app.repartition_topics
    groups = offset_groups(app.subtopologies, cfg.group_id)
    shared = {t for t, gs in topic_groups(app.subtopologies, cfg.group_id).items() if len(gs) > 1}
    reports = []
    linked = _linked_by_hops(list(app.subtopologies.values()), hops)
    read_by_job = {t for sub in app.subtopologies.values()
                   for t in (*sub.inputs, *(g.topic for g in sub.global_tables))} - hops
    for members in linked:
        inputs = list(dict.fromkeys(t for sub in members for t in sub.inputs if t not in hops))
        outputs = list(dict.fromkeys(t for sub in members for t in sub.output_topics if t not in hops))
        if why := _alike_outputs(members, linked, inputs, outputs, hops):
            reports += [_not_checked(app, bootstrap, sub, "lineage", why, lineage=LineageResult()) for sub in members]
            continue
        through = list(dict.fromkeys(t for sub in members for t in sub.output_topics if t in hops))
        input_groups = {t: groups[(sub.name, t)] for sub in members for t in sub.inputs if t not in hops}
        # a topic several sub-topologies read: each audit counts only its own ledger entries and dead letters
        only = frozenset(sub.name for sub in members) if shared & set(inputs) else None
        changelogs = [spec.changelog_topic(cfg.application_id) for sub in members for spec in sub.stores
                      if spec.source_topic is None]
        # the steps of other groups that write one of these outputs too: their records there are theirs
        other_steps = {t for others in linked if others is not members and any(
            set(sub.output_topics) & set(outputs) for sub in others) for sub in others for t in sub.inputs}
        reports.append(audit(bootstrap, inputs=inputs, outputs=outputs, dead_letter_topic=cfg.dlq_topic,
                             group=cfg.group_id, extra_topics=[*changelogs, *through], max_samples=max_samples,
                             progress=progress, ledger_topic=ledger_topic(cfg.application_id), through=through,
                             subtopologies=only, groups=input_groups, ordered=not through,
                             numbered=runs_whole(members, hops), admin=admin, read_by_job=read_by_job,
                             other_steps=other_steps - hops))
    return reports


def _alike_outputs(members: list[SubTopology], linked: list[list[SubTopology]], inputs: list[str],
                   outputs: list[str], hops: frozenset[str]) -> str:
    """Why the lineage audit of `members` cannot run, or "": another group of steps reads one of their inputs
    and writes one of their outputs, so that the outputs both make of one input record carry the same origin
    (the input's place and the output's index), and a copy could not be told from the other step's output."""
    for others in linked:
        if others is members:
            continue
        read = [t for t in inputs if any(t in sub.inputs for sub in others)]
        written = [t for t in outputs if any(t in sub.output_topics for sub in others)]
        if read and written:
            names = ", ".join(repr(sub.name) for sub in others)
            return (f"sub-topology {names} too reads {read[0]!r} and writes {written[0]!r}, so the outputs both "
                    "make of one input record carry the same origin, and a copy cannot be told from the other "
                    "step's output; to audit them, read the topic once (one stream, its steps fused) or give "
                    "each step a topic of its own")
    return ""


def runs_whole(members: Iterable[SubTopology], hops: frozenset[str]) -> bool:
    """Whether every output index a scope of these linked steps gives is among their outputs, so that each
    scope's run of indices can be checked without the ledger (`audit_lineage(numbered=)`): not where a step
    writes both a repartition topic and an output."""
    return not any(set(sub.output_topics) & hops and set(sub.output_topics) - hops for sub in members)


def _linked_by_hops(subs: list[SubTopology], hops: frozenset[str]) -> list[list[SubTopology]]:
    """The sub-topologies in groups that repartition topics link (a writer and the step reading what it
    wrote), each group in the order of its first member."""
    group = list(range(len(subs)))

    def find(i: int) -> int:
        while group[i] != i:
            i = group[i]
        return i

    for topic in hops:
        linked = [i for i, sub in enumerate(subs) if topic in sub.inputs or topic in sub.output_topics]
        for i in linked[1:]:
            group[find(i)] = find(linked[0])
    out: dict[int, list[SubTopology]] = {}
    for i, sub in enumerate(subs):
        out.setdefault(find(i), []).append(sub)
    return list(out.values())


def started_at(app: Application, sub: SubTopology, bootstrap_servers: str,
               admin: KafkaAdmin) -> dict[tuple[str, int], int]:
    """Where `sub`'s tasks started reading each input partition whose earlier records are not their input: past
    its first records, as a source's auto_offset_reset ("latest", a duration) or `eos reset` placed it, whatever
    the policy now. The offset committed then says so until a batch commits (`CommitMetadata.not_read_from`), and
    that batch's ledger entry after (`LedgerInput.not_read_from`)."""
    ledger = read_ledger(bootstrap_servers, ledger_topic(app.config.application_id), sub.inputs, admin=admin,
                         subtopologies={sub.name}) or {}
    groups = offset_groups(app.subtopologies, app.config.group_id)
    add_starts(ledger, admin, sub.inputs, app.config.group_id, {t: groups[(sub.name, t)] for t in sub.inputs})
    return {tp: account.not_read.max() + 1 for tp, account in ledger.items() if account.not_read}


def window_outputs(sub: SubTopology, w: Any) -> list[str]:
    """The topics a windowed aggregation's results go to: its own, those it is routed among, or its step's."""
    return list(w.route.topics) if w.route is not None else [w.topic or sub.output or ""]


def audit_windowed(app: Application, *, bootstrap_servers: str | None = None, subtopologies: Iterable[str] = (),
                   max_samples: int = 10, progress: Callable[[int], None] | None = None,
                   only: Any = None, admin: KafkaAdmin | None = None) -> list[AuditReport]:
    """`eos audit window`: every windowed aggregation of a job (or those of the sub-topologies named, or
    `only` that one) against the reference recomputed from its committed input, plus the transaction and
    offset checks."""
    def check(report: AuditReport, sub: SubTopology, w: Any, admin: KafkaAdmin, groups: dict[str, str]) -> None:
        report.window = audit_windows(report.bootstrap_servers, sub, group=groups[sub.inputs[0]], admin=admin,
                                      dead_letters=app.config.dlq_topic, max_samples=max_samples,
                                      progress=progress, clocked=frozenset(sub.inputs) & app.clocked_topics,
                                      window=w, cached=app.config.cache_max_bytes > 0,
                                      since=started_at(app, sub, report.bootstrap_servers, admin))

    return _audit_each(app, "window", "windowed aggregation",
                       lambda s: [w for w in s.windowings if only is None or w is only],
                       window_outputs, check, bootstrap_servers, subtopologies, max_samples,
                       unreplayed=lambda s: s.unreplayed_windows, admin=admin)


def audit_joins(app: Application, *, bootstrap_servers: str | None = None, subtopologies: Iterable[str] = (),
                max_samples: int = 10, admin: KafkaAdmin | None = None) -> list[AuditReport]:
    """`eos audit join`: every join of a job (or those of the sub-topologies named) checked by replaying its
    committed inputs (`eos.audit.joins`), plus the transaction and offset checks; a join it cannot replay (or any,
    of a job run with lineage=False) is reported as not checked, saying why."""
    def check(report: AuditReport, sub: SubTopology, join: Any, admin: KafkaAdmin, groups: dict[str, str]) -> None:
        right_table = None
        if join.right_reader is not None:  # a foreign-key join: the right table's reader and its progress
            right_table = app.subtopologies[join.right_reader]
            groups = {**groups, join.right: offset_groups(app.subtopologies, app.config.group_id)[
                (right_table.name, join.right)]}
        since = started_at(app, sub, report.bootstrap_servers, admin)
        if right_table is not None:  # (a foreign key's table is read by another sub-topology's tasks)
            since.update(started_at(app, right_table, report.bootstrap_servers, admin))
        try:
            report.join = audit_join(report.bootstrap_servers, sub, group=app.config.group_id,
                                     application_id=app.config.application_id, dead_letters=app.config.dlq_topic,
                                     admin=admin, max_samples=max_samples, groups=groups, right_table=right_table,
                                     join=join, transitive=app.repartition_topics, since=since)
        except ValueError as exc:  # (an input it replays was purged)
            report.join, report.skipped = JoinAuditResult(join.kind, join.how), str(exc)

    subtopologies = list(subtopologies)
    if not app.config.lineage:
        bootstrap = bootstrap_servers or app.config.bootstrap_servers
        return [_not_checked(app, bootstrap, sub, "join", _UNTRACED, join=JoinAuditResult(join.kind, join.how))
                for sub in map(app.subtopologies.__getitem__, subtopologies or app.subtopologies)
                for join in sub.joins] + _unreplayed_joins(app, bootstrap, subtopologies or app.subtopologies)
    reports = _audit_each(app, "join", "join", lambda s: list(s.joins), join_outputs, check,
                          bootstrap_servers, subtopologies, max_samples,
                          unreplayed=lambda s: [(name, why) for name, _, why in s.unreplayed_joins], admin=admin)
    return reports + _unreplayed_joins(app, bootstrap_servers or app.config.bootstrap_servers,
                                       subtopologies or app.subtopologies)


def _unreplayed_joins(app: Application, bootstrap: str, subtopologies: Iterable[str]) -> list[AuditReport]:
    """A "not checked" report, saying why, for each join of these sub-topologies the join audit cannot replay
    (the lineage audit alone proves its results)."""
    return [_not_checked(app, bootstrap, sub, "join", f"{name}: {why}", join=JoinAuditResult(join.kind, join.how))
            for sub in map(app.subtopologies.__getitem__, subtopologies) for name, join, why in sub.unreplayed_joins]


def _not_checked(app: Application, bootstrap: str, sub: SubTopology, mode: str, why: str,
                 **result: Any) -> AuditReport:
    """The report of a `mode` check of `sub` that was not run, saying why (`result`: its empty result)."""
    return AuditReport(mode, bootstrap, list(sub.inputs), list(sub.output_topics), app.config.dlq_topic,
                       app.config.group_id, "read_committed", skipped=why, **result)


def _audit_each(app: Application, mode: str, what: str, items: Callable[[SubTopology], list[Any]],
                outputs: Callable[[SubTopology, Any], list[Any]],
                check: Callable[[AuditReport, SubTopology, Any, KafkaAdmin, dict[str, str]], None],
                bootstrap_servers: str | None, subtopologies: Iterable[str], max_samples: int, *,
                unreplayed: Callable[[SubTopology], Any], admin: KafkaAdmin | None = None) -> list[AuditReport]:
    """One report per item (a windowed aggregation, a join) of each sub-topology that has any (or of each
    one named): `check` fills in its mode's result, then the transaction and offset checks, each input held
    to the group its progress is committed under. `unreplayed(sub)`: its items the audit cannot replay, each
    (name, why), named in the error when there is nothing to replay."""
    cfg = app.config
    bootstrap = bootstrap_servers or cfg.bootstrap_servers
    admin = admin or admin_for(bootstrap, settle_once=True)
    match_patterns(app, admin)

    def none_replayable(where: str, subs: list[str]) -> ValueError:
        others = [(n, item, why) for n in subs for item, why in unreplayed(app.subtopologies[n])]
        if not others:
            return ValueError(f"{where} has no {what}")
        listed = ", ".join(f"{item!r} (sub-topology {n!r})" for n, item, _ in others)
        return ValueError(f"{where} has no {what} the audit can replay: {listed}: {others[0][2]}")

    names = list(subtopologies) or [n for n, s in app.subtopologies.items() if items(s)]
    if not names:
        raise none_replayable(f"application {cfg.application_id!r}", list(app.subtopologies))
    for name in names:
        if not items(app.subtopologies[name]):
            raise none_replayable(f"sub-topology {name!r}", [name])
    groups = offset_groups(app.subtopologies, cfg.group_id)
    reports = []
    with since_reset(bootstrap, ledger_topic(cfg.application_id), admin):
        for name in names:
            sub = app.subtopologies[name]
            input_groups = {t: groups[(name, t)] for t in sub.inputs}
            for item in items(sub):
                started = time.monotonic()
                report = AuditReport(mode, bootstrap, list(sub.inputs), outputs(sub, item), cfg.dlq_topic,
                                     cfg.group_id, "read_committed")
                report.before_reset = before_reset(admin, [*report.outputs, cfg.dlq_topic])
                check(report, sub, item, admin, input_groups)
                changelogs = [spec.changelog_topic(cfg.application_id) for spec in sub.stores
                              if spec.source_topic is None]
                report.transactions = check_open_transactions(admin, [*sub.output_topics, *changelogs], max_samples)
                report.offsets = check_offsets(admin, sub.inputs, cfg.group_id, input_groups)
                report.verdict = "PASS" if report.violations == 0 else "FAIL"
                report.duration_s = round(time.monotonic() - started, 3)
                reports.append(report)
    return reports
