"""The lineage ledger: one record per committed batch of a task, written in the batch's transaction to
`<application_id>-ledger`, saying exactly which input it consumed and what became of it.

Per input partition of the batch: the topic id (a topic deleted and created again under the same name has
a new one), the offset range `[start, end)` the transaction commits, and, when reading did not start at the
committed offset, from where and why (records deleted by retention before they were processed; a
committed offset of an earlier topic of the same name). And the origins of the records that produced no
output and no dead letter (`filtered`: legal, e.g. a filter or an aggregation ignoring a tombstone), per
origin partition: a record's origin is itself, or for a record of a repartition topic the origin it
carries, so that filtering after a repartition hop is accounted for against the original input (and named
as such, `through`: one path of an input may produce nothing while another produces outputs; `paths`: the
same by the index each carried, the path it took, so that the auditor knows which of an input's paths ended
there).

Because it commits with the outputs and offsets, the auditor can prove more than "every input appears
once in the output": a filtered record is accounted for instead of lost, an offset covered by two
committed batches is a violation in itself (invariant I1), and outputs whose input is gone (retention,
a recreated topic, a purged repartition topic) are attributed instead of being called unexpected.
Roaring bitmaps keep an entry small (a run of consecutive offsets costs a few bytes).

A batch that reads on just before its commit (a top-up) first writes an **opening** record (`ledger_opening`),
which puts the ledger's partition in its transaction before the top-up rather than in the commit's window.
It says nothing about the input; readers skip it (`LedgerEntry.decode` returns None for it).

`eos reset` deletes the ledger and creates it again with one record (`ledger_reset`): where the job's outputs and
dead letters stood then, so that the audits read the outputs of the runs after it only (those before answer to
the input as it was read before the reset, which the new ledger does not describe).

A batch of a task that reads global tables also says where it read each of them to (`pins`: the ends the
driver pinned for the batch, `eos.worker.global_tables`): every record of the batch was joined with the
global table as it stood there, which the join audit checks.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyroaring import BitMap64

__all__ = ["LedgerInput", "LedgerEntry", "ledger_topic", "ledger_opening", "ledger_reset", "reset_outputs_from",
           "LEDGER_VERSION"]

LEDGER_VERSION = 1


def ledger_topic(application_id: str) -> str:
    return f"{application_id}-ledger"


def ledger_opening(task: str) -> bytes:
    """The value of a task's opening record: no input, no batch; not an entry."""
    return json.dumps({"v": LEDGER_VERSION, "opens": task}, separators=(",", ":")).encode()


def ledger_reset(outputs_from: Mapping[tuple[str, int], int]) -> bytes:
    """The value of the record `eos reset` writes first into the ledger it creates again: where the records the
    job writes from then on start, per partition of its output topics and its dead-letter topic (their ends at
    the reset). Not an entry: the audits read it with `reset_outputs_from`."""
    return json.dumps({"v": LEDGER_VERSION, "reset": [{"topic": t, "partition": p, "from": o}
                                                      for (t, p), o in sorted(outputs_from.items())]},
                      separators=(",", ":")).encode()


def reset_outputs_from(raw: bytes | None) -> dict[tuple[str, int], int] | None:
    """The positions a reset's record (`ledger_reset`) says the job's outputs start at; None for any other."""
    try:
        data = json.loads(raw or b"")
        if data.get("v") != LEDGER_VERSION or "reset" not in data:
            return None
        return {(str(r["topic"]), int(r["partition"])): int(r["from"]) for r in data["reset"]}
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _bitmap(raw: str | None) -> BitMap64:
    return BitMap64.deserialize(base64.b64decode(raw)) if raw else BitMap64()


def _text(bm: BitMap64) -> str:
    return base64.b64encode(bm.serialize()).decode("ascii")


def _rows(sets: dict[tuple[str, int], BitMap64]) -> list[dict[str, Any]]:
    """The non-empty offset sets of `sets` as the entry's JSON keeps them."""
    return [{"topic": t, "partition": p, "offsets": _text(bm)} for (t, p), bm in sets.items() if bm]


@dataclass(frozen=True)
class LedgerInput:
    topic: str
    partition: int
    topic_id: str | None
    start: int
    end: int  # exclusive: the offset the batch's transaction commits
    reset_from: int | None = None  # the committed offset reading did not start at
    reset_reason: str | None = None  # "retention" | "recreated" | "latest"
    #: records `[not_read_from, start)` are not the job's input: it started after them (auto_offset_reset
    #: "latest" or a duration)
    not_read_from: int | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"topic": self.topic, "partition": self.partition, "topic_id": self.topic_id,
                                "start": self.start, "end": self.end}
        if self.reset_from is not None:
            data["reset_from"], data["reset_reason"] = self.reset_from, self.reset_reason
        if self.not_read_from is not None:
            data["not_read_from"] = self.not_read_from
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LedgerInput:
        return cls(data["topic"], int(data["partition"]), data.get("topic_id"), int(data["start"]), int(data["end"]),
                   data.get("reset_from"), data.get("reset_reason"), data.get("not_read_from"))


@dataclass(frozen=True)
class LedgerEntry:
    task: str
    batch: int
    inputs: tuple[LedgerInput, ...]
    #: origin (topic, partition) -> offsets of the origins of the batch's records that produced nothing
    filtered: dict[tuple[str, int], BitMap64] = field(default_factory=dict)
    #: the records a windowed operator dropped as late (the join audit leaves them out), each by its own place:
    #: a record of a repartition topic by its offset there, not by its origin (one input keyed anew two ways
    #: reaches two tasks, and may be late in one only)
    late: dict[tuple[str, int], BitMap64] = field(default_factory=dict)
    #: of the filtered, the ones read from a repartition topic: one path of their input produced nothing here, and
    #: another may have produced outputs (a stream keyed anew two ways)
    through: dict[tuple[str, int], BitMap64] = field(default_factory=dict)
    #: of the filtered, the ones an operator held back (a stream-table join's grace period): their outputs come
    #: when they are let go, in a later transaction of the task, named after them
    held: dict[tuple[str, int], BitMap64] = field(default_factory=dict)
    #: global table topic -> partition -> the offset the batch had read it to (exclusive)
    pins: dict[str, dict[int, int]] = field(default_factory=dict)
    #: an entry written before `late` named records by their own place: its late records by their origins
    late_origins: dict[tuple[str, int], BitMap64] = field(default_factory=dict)
    #: `through` by the index each record carried (its path: `eos.origin.output_indices`), for a task that reads a
    #: repartition topic; None in an entry of a task that reads none, or written before paths were kept
    paths: dict[tuple[str, int], dict[int, BitMap64]] | None = None
    #: per step of the record loop (a node's name), the records it dropped as late, whatever else they made,
    #: each by its own place (a join's audit leaves out the records its own step dropped, not another's); None
    #: in an entry written before it was kept, whose `late` stands for every step
    late_by: dict[str, dict[tuple[str, int], BitMap64]] | None = None

    def encode(self) -> bytes:
        return json.dumps({"v": LEDGER_VERSION, "task": self.task, "batch": self.batch,
                           "inputs": [i.to_json() for i in self.inputs],
                           "filtered": _rows(self.filtered),
                           **{kind: rows for kind, sets in (("late_at", self.late), ("late", self.late_origins),
                                                            ("through", self.through), ("held", self.held))
                              if (rows := _rows(sets))},
                           **({"pins": {t: sorted(ends.items()) for t, ends in self.pins.items()}}
                              if self.pins else {}),
                           **({"paths": [{"topic": t, "partition": p, "index": i, "offsets": _text(bm)}
                                         for (t, p), by_index in self.paths.items() for i, bm in by_index.items()
                                         if bm]} if self.paths is not None else {}),
                           # (written where anything was late, so that an entry with `late_at` and without it is
                           # one written before steps were named)
                           **({"late_by": [{"step": step, **row} for step, sets in self.late_by.items()
                                           for row in _rows(sets)]}
                              if self.late_by is not None and (self.late or any(self.late_by.values())) else {})},
                          separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes | None) -> LedgerEntry | None:
        """None for a record that is not a ledger entry of a version this code reads (an opening among them)."""
        try:
            data = json.loads(raw or b"")
            if data.get("v") != LEDGER_VERSION or "opens" in data or "reset" in data:
                return None
            filtered = {(f["topic"], int(f["partition"])): _bitmap(f["offsets"]) for f in data.get("filtered", [])}
            late, through, held, late_origins = ({(f["topic"], int(f["partition"])): _bitmap(f["offsets"])
                                                   for f in data.get(kind, [])}
                                                  for kind in ("late_at", "through", "held", "late"))
            pins = {str(t): {int(p): int(end) for p, end in ends} for t, ends in data.get("pins", {}).items()}
            paths: dict[tuple[str, int], dict[int, BitMap64]] | None = None
            if "paths" in data:
                paths = {}
                for f in data["paths"]:
                    paths.setdefault((f["topic"], int(f["partition"])), {})[int(f["index"])] = _bitmap(f["offsets"])
            late_by: dict[str, dict[tuple[str, int], BitMap64]] | None = None
            if "late_by" in data:
                late_by = {}
                for f in data["late_by"]:
                    late_by.setdefault(str(f["step"]), {})[(f["topic"], int(f["partition"]))] = _bitmap(f["offsets"])
            return cls(str(data["task"]), int(data["batch"]), tuple(LedgerInput.from_json(i) for i in data["inputs"]),
                       filtered, late, through, held, pins, late_origins, paths, late_by)
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
