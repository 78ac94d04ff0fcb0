"""What a task keeps with its committed offsets (the offset-commit metadata), and reads back first thing in
every batch: the committed offsets are the only record of progress, and this is the progress beyond them.

    eos1;st=<stream time>;p=<producer token>;g=<tasks per transaction>;t=<topic id>;pu=<index>:<due>,...;c=<clocks>;i=1

* stream time: the largest record timestamp the task has seen (Kafka Streams keeps partition time there
  too), so that windows and stream-time punctuation continue where they were after a restart;
* the token of the producer instance that committed (to tell that another worker committed since);
* how many tasks shared the committing transaction (`tasks_per_transaction`, when more than one), which
  names the transactional id that committed (a task that commits under another grouping first fences it);
* the id of the topic the offset belongs to (a topic deleted and created again has a new one);
* the punctuation schedule: when each of the processor's schedules is next due, so that a punctuation
  committed once is not run again by a retried or moved task;
* the clocks of the sources of its clocked inputs (`eos.streamtime.EventClock.encode`);
* whether the task, a writer of clocked topics, last told their readers that it is idle.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from transactions import OutputProducer, issued_after

__all__ = ["CommitMetadata", "fenced_since"]

_VERSION = "eos1"


@dataclass(frozen=True)
class CommitMetadata:
    stream_time: int = -1
    producer: str | None = None
    topic_id: str | None = None
    punctuation: dict[int, int] = field(default_factory=dict)
    clocks: str = ""
    idle: bool = False
    grouping: int = 1
    #: an offset set at start-up where auto_offset_reset says (the end, or a time): the records from this one to
    #: it are not the job's input (the first batch records so in the ledger)
    not_read_from: int | None = None

    def encode(self) -> str:
        text = f"{_VERSION};st={self.stream_time};p={self.producer or ''}"
        if self.not_read_from is not None:
            text += f";nr={self.not_read_from}"
        if self.grouping > 1:
            text += f";g={self.grouping}"
        if self.topic_id:
            text += f";t={self.topic_id}"
        if self.punctuation:
            text += ";pu=" + ",".join(f"{i}:{t}" for i, t in sorted(self.punctuation.items()))
        if self.clocks:
            text += f";c={self.clocks}"
        if self.idle:
            text += ";i=1"
        return text

    @classmethod
    def decode(cls, metadata: str | None) -> CommitMetadata:
        """Tolerant of metadata written by others (and of none): anything unreadable is left out."""
        if not metadata or not metadata.startswith(_VERSION):
            return cls()
        fields = dict(part.split("=", 1) for part in metadata.split(";")[1:] if "=" in part)
        try:
            stream_time = int(fields.get("st", "-1"))
        except ValueError:
            stream_time = -1
        punctuation = {}
        for item in filter(None, fields.get("pu", "").split(",")):
            index, _, due = item.partition(":")
            if index.isdigit() and due.lstrip("-").isdigit():
                punctuation[int(index)] = int(due)
        grouping, not_read = fields.get("g", "1"), fields.get("nr", "")
        return cls(stream_time, fields.get("p") or None, fields.get("t") or None, punctuation,
                   fields.get("c", ""), fields.get("i") == "1", int(grouping) if grouping.isdigit() else 1,
                   int(not_read) if not_read.isdigit() else None)


def fenced_since(producer: OutputProducer, committers: Iterable[str | None]) -> bool:
    """Whether a producer of the same transactional id made after `producer` has committed (`committers`: the
    tokens the last commits name), so that `producer` is fenced. A producer that has not committed cannot tell.
    A task of a unit (`tasks_per_transaction`) that had no input for a while names an earlier producer of the
    unit: that one is not newer, and says nothing."""
    return bool(producer.commits) and any(issued_after(token, producer.token) for token in committers)
