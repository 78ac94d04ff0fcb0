"""Exactly-once under retries, checked in the test driver: the same inputs run once straight and once with
batches killed at random steps of the protocol; the committed outputs, dead letters and stores must be the
same. The framework guarantees that for processing that is a function of its input and state; a processor
that reads the wall clock or a random number, or keeps state outside its stores, fails the check, which
names the first output that differs and the input record it came from."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, get_args

from eos.origin import ORIGIN_HEADER
from recovery.windows import reproducible

if TYPE_CHECKING:
    from eos.testing.driver import CrashPoint, TopologyTestDriver

__all__ = ["ExactlyOnceReport", "check_exactly_once", "Input"]

#: (topic, key, value) or (topic, key, value, timestamp)
Input = tuple[Any, ...]
#: one committed record as compared: (key, value, timestamp, headers other than the framework's)
Seen = tuple[bytes | None, bytes | None, int, tuple[tuple[str, bytes], ...]]


@dataclass
class ExactlyOnceReport:
    """What the check compared: topics and records, the crashes injected (and where they struck), and
    the differences found (empty: the runs agree)."""

    topics: list[str] = field(default_factory=list)
    records: int = 0
    crashes: list[tuple[CrashPoint, Any]] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences


def check_exactly_once(new_driver: Callable[[], TopologyTestDriver], inputs: Sequence[Input], *, crashes: int = 8,
                       seed: int = 0, chunk: int = 7) -> ExactlyOnceReport:
    """Run `inputs` (in order, `chunk` records at a time) on one new driver straight and on another with
    up to `crashes` batches killed at random steps; compare everything committed. Raises AssertionError
    naming the first difference."""
    chunks = [list(inputs[i:i + chunk]) for i in range(0, len(inputs), chunk)]
    straight = new_driver()
    _feed(straight, chunks, lambda: None)
    crashed = new_driver()
    rng = random.Random(seed)
    from eos.testing.driver import Step

    # the steps the straight run reached: a crash armed at a step no batch reaches would never fire
    steps: list[Step] = [s for s in get_args(Step) if s in straight.steps_reached]
    tasks = sorted({str(r.task) for r in straight.results})
    planned = iter(sorted(rng.sample(range(len(chunks)), min(crashes, len(chunks)))))
    next_at = next(planned, None)
    position = [0]

    def arm() -> None:
        nonlocal next_at
        while next_at is not None and next_at == position[0]:
            crashed.crash_at(rng.choice(steps), task=rng.choice(tasks) if tasks and rng.random() < 0.5 else None)
            next_at = next(planned, None)
        position[0] += 1

    _feed(crashed, chunks, arm)
    report = ExactlyOnceReport(crashes=list(crashed.crashes))
    _compare(straight, crashed, report)
    straight.close()
    crashed.close()
    if report.differences:
        where = ", ".join(f"{c.step} of {p.task} in batch {p.batch}" for c, p in report.crashes) or "none fired"
        raise AssertionError(f"the committed results differ between a straight run and one with crashes ({where}):\n"
                             + "\n".join(report.differences[:5]))
    return report


def _feed(driver: TopologyTestDriver, chunks: list[list[Input]], before: Callable[[], None]) -> None:
    for records in chunks:
        before()
        driver.pipe_records(records)


def _outputs(driver: TopologyTestDriver) -> list[str]:
    internal = set(driver.app.internal_topics)
    topics = {t for sub in driver.app.subtopologies.values() for t in sub.output_topics if t not in internal}
    return sorted(topics | {driver.config.dlq_topic}) + sorted(_changelogs(driver))


def _changelogs(driver: TopologyTestDriver) -> dict[str, str]:
    """The job's own changelogs, each with its store's kind."""
    return {spec.changelog_topic(driver.config.application_id): spec.kind
            for sub in driver.app.subtopologies.values() for spec in sub.stores if spec.source_topic is None}


def _moving(driver: TopologyTestDriver) -> set[str]:
    """The topics compared by the state they describe, each key's last value, rather than record by record:
    what a step that reads a topic the job writes itself writes where its records depend on where its batches
    begin and end, which a crash upstream moves (the records of an aborted batch become visible only when it
    runs again). Its changelogs: what a batch makes and drops itself (a window that closes within it) never
    reaches them. With a record cache, its outputs too: the cache forwards each key's latest value per
    commit."""
    subs = driver.app.subtopologies.values()
    written = set(driver.app.internal_topics) | {t for sub in subs for t in sub.output_topics}
    moving: set[str] = set()
    for sub in subs:
        if set(sub.inputs) & written and sub.stores:
            moving.update(spec.changelog_topic(driver.config.application_id) for spec in sub.stores
                          if spec.source_topic is None)
            if driver.config.cache_max_bytes:
                moving.update(sub.output_topics)
    return moving


def _seen(driver: TopologyTestDriver, topic: str) -> dict[int, list[tuple[Seen, str]]]:
    out: dict[int, list[tuple[Seen, str]]] = {}
    dlq = topic == driver.config.dlq_topic
    kind = _changelogs(driver).get(topic, "")
    written = set(driver.app.internal_topics) | {t for sub in driver.app.subtopologies.values()
                                                 for t in sub.output_topics}
    for msg in driver.cluster.records(topic):
        headers = msg.headers() or []
        own = tuple((k, v) for k, v in headers if not k.startswith("eos.") or (dlq and _stable_dlq_header(k)))
        origin = next((v.decode() for k, v in headers if k in (ORIGIN_HEADER, "eos.dlq.topic")), "")
        value = reproducible(kind, msg.key() or b"", msg.value(), written)  # (a held record: not where it was read)
        out.setdefault(msg.partition(), []).append(((msg.key(), value, msg.timestamp()[1], own), origin))
    return out


def _stable_dlq_header(key: str) -> bool:
    """Dead-letter headers that a retry reproduces (offsets of internal topics may move: aborted records
    take offsets)."""
    return key in ("eos.dlq.error", "eos.dlq.error.type", "eos.dlq.stage", "eos.dlq.subtopology")


def _compare(straight: TopologyTestDriver, crashed: TopologyTestDriver, report: ExactlyOnceReport) -> None:
    moving = _moving(straight)
    for topic in _outputs(straight):
        report.topics.append(topic)
        a, b = _seen(straight, topic), _seen(crashed, topic)
        for partition in sorted(set(a) | set(b)):
            left, right = a.get(partition, []), b.get(partition, [])
            report.records += len(left)
            if topic in moving:
                _diff_state(topic, partition, left, right, report)
            else:
                _diff(topic, partition, left, right, report)


def _state(records: Iterable[tuple[Seen, str]]) -> dict[bytes | None, tuple[Seen, str]]:
    """A partition's records as the state they describe (a changelog's, what it restores): each key's last
    value, none where a tombstone."""
    state: dict[bytes | None, tuple[Seen, str]] = {}
    for record in records:
        if record[0][1] is None:
            state.pop(record[0][0], None)
        else:
            state[record[0][0]] = record
    return state


def _diff_state(topic: str, partition: int, left: Iterable[tuple[Seen, str]], right: Iterable[tuple[Seen, str]],
                report: ExactlyOnceReport) -> None:
    a, b = _state(left), _state(right)
    for key in sorted(set(a) | set(b), key=lambda k: k or b""):
        x, y = a.get(key), b.get(key)
        if x is None or y is None or x[0][1] != y[0][1]:
            report.differences.append(
                f"{topic}[{partition}] key={key!r}, each key's last value: straight run "
                f"{'none' if x is None else _show(x[0])}, with crashes {'none' if y is None else _show(y[0])}")
            return


def _diff(topic: str, partition: int, left: Iterable[tuple[Seen, str]], right: Iterable[tuple[Seen, str]],
          report: ExactlyOnceReport) -> None:
    left, right = list(left), list(right)
    for i, (x, y) in enumerate(zip(left, right, strict=False)):
        if x[0] != y[0]:
            report.differences.append(
                f"{topic}[{partition}] record #{i} (from input {x[1] or y[1] or '?'}): straight run "
                f"{_show(x[0])}, with crashes {_show(y[0])}")
            return
    if len(left) != len(right):
        extra, which = (left, "straight run") if len(left) > len(right) else (right, "run with crashes")
        first = extra[min(len(left), len(right))]
        report.differences.append(
            f"{topic}[{partition}]: {len(left)} records in the straight run, {len(right)} with crashes; the first "
            f"only in the {which}: {_show(first[0])} (from input {first[1] or '?'})")


def _show(seen: Seen) -> str:
    key, value, timestamp, headers = seen
    return f"key={key!r} value={value!r} timestamp={timestamp}" + (f" headers={list(headers)}" if headers else "")
