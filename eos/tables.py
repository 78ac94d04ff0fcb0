"""Tables and joins (the stream-table duality, as in Kafka Streams).

A **table** is the latest value per key of a topic: each record is an update, a record with a null value
(a tombstone) deletes its key. `app.table(topic)` declares one (a DSL table, `eos.dsl.tables.Table`, with
filter, map_values, joins and group_by); it is materialized, in a changelog-backed key-value store, by
each join that reads it, so a table joined twice is kept twice.
A **global table** (`app.global_table(topic)`) is a full copy of all partitions on every task, read up to
offsets the driver pins for each batch: a retried batch sees the same table.

Join kinds (`stream.join(table)`, `table.join(table)`, ..., or one step per call with `app.join(left, right,
output, joiner=..., how=...)`), with Kafka Streams' semantics:

========================  ====================  ============================================  ================
left x right              how                   result per input                              timestamp
========================  ====================  ============================================  ================
stream x table            inner, left           each stream record joined with the table's    the stream
                                                current value for its key                     record's
stream x global table     inner, left           the same, the table key from `key(record)`    the stream
                                                                                              record's
stream x stream           inner, left, outer    every pair of same-key records at most        the larger of
(`windows=JoinWindows`)                         `before`/`after` apart; with left/outer,      the two
                                                records without a partner once their window
                                                closed (after the grace period), joined with
                                                None, exactly once
table x table             inner, left, outer    the joined table's new value for the key      the larger of
                                                whenever either side changes (a tombstone     the two
                                                when the key leaves the joined table)
========================  ====================  ============================================  ================

A **versioned table** (`app.table(topic, versioned=history retention)`) keeps each key's rows by timestamp
(`recovery.versioned`): a stream record joins the row at its own timestamp (None before the history bound),
and an update older than its key's latest goes into the history without changing the current row, so
table-table joins, foreign-key joins and table aggregations make nothing of it (Kafka Streams' KIP-914).

Both sides of a join (but a global table) must be co-partitioned: the same number of partitions, keyed
alike; the planner checks the partition counts at start-up. Re-key a side first (`app.repartition`) when
its key is another. The joiner gets `(left value, right value)`; a side without a value is None.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from eos.serde import Serde
from eos.windows import ms

__all__ = ["TableSource", "GlobalTable", "JoinWindows", "JoinKind", "JoinSpec", "JoinType", "history_retention",
           "join_grace"]

JoinKind = Literal["inner", "left", "outer"]
JoinType = Literal["stream-table", "stream-global", "stream-stream", "table-table", "foreign-key"]


@dataclass(frozen=True)
class TableSource:
    """Where a table is read from: `topic`, its serdes and timestamps (what `app.table` declares; the
    table's methods are the DSL's, `eos.dsl.tables.Table`)."""

    topic: str
    name: str
    key_serde: Serde
    value_serde: Serde
    timestamp: Callable[[Any], int] | None = None
    persistent: bool = True
    #: a versioned table (`versioned=` of `app.table`): the history retention (ms) of the versioned stores
    #: that keep it (None: plain key-value stores, the latest value by offset)
    history_retention_ms: int | None = None
    #: where its source starts a partition nothing was committed for (`eos.offset_reset`; None: the
    #: application's auto_offset_reset)
    offset_reset: str | None = None


def history_retention(versioned: int | timedelta | None, what: str) -> int | None:
    """A versioned table's (or store's) history retention in ms from `versioned=` (None: not versioned),
    checked; `what` names it in the error."""
    if versioned is None:
        return None
    if isinstance(versioned, bool) or not isinstance(versioned, int | float | timedelta) or ms(versioned) < 0:
        raise ValueError(f"{what}: versioned= is the history retention, a duration >= 0 (ms or a timedelta: how "
                         f"long old versions of a row are kept for lookups), got {versioned!r}")
    return ms(versioned)


def join_grace(grace: int | timedelta | None, table: TableSource | None, join: str) -> int | None:
    """A stream-table join's grace period in ms (None: none), checked against the table it joins: Kafka
    Streams' rules, a versioned table whose history retention is at least the grace period."""
    if grace is None:
        return None
    if table is None:
        raise ValueError(f"join {join!r}: grace= holds a stream back for a table's late updates (a stream-table "
                         "join with a versioned table); a stream-stream join takes JoinWindows(..., grace=...)")
    if isinstance(grace, bool) or not isinstance(grace, int | float | timedelta) or ms(grace) < 0:
        raise ValueError(f"join {join!r}: grace= is a duration >= 0 (ms or a timedelta), got {grace!r}")
    if table.history_retention_ms is None:
        raise ValueError(f"join {join!r}: a grace period needs a versioned table, since the stream's records are "
                         f"joined later as of their timestamps: read {table.topic!r} with "
                         f"app.table(..., versioned=<history retention >= the grace period>)")
    if ms(grace) > table.history_retention_ms:
        raise ValueError(f"join {join!r}: the grace period ({ms(grace)} ms) is longer than the history retention of "
                         f"table {table.topic!r} ({table.history_retention_ms} ms): a record held that long would "
                         "find its row gone; make versioned= at least the grace period")
    return ms(grace)


@dataclass(frozen=True)
class GlobalTable:
    """A table every task holds whole (declared with `app.global_table`)."""

    topic: str
    name: str
    key_serde: Serde
    value_serde: Serde
    #: a versioned global table (`versioned=`): the history retention (ms) of each copy (None: the latest row)
    history_retention_ms: int | None = None


@dataclass(frozen=True)
class JoinWindows:
    """How far apart in event time two records of a stream-stream join may be: a right record joins a left
    one when `left.ts - before <= right.ts <= left.ts + after` (`JoinWindows(10_000)`: 10 s either way).

    A record is late, and dropped, when stream time has passed its timestamp by more than
    `before + after + grace`; a record of a left or outer join that found no partner is emitted with None
    once no on-time record can join it any more (stream time past its timestamp plus the window on the
    other side plus `before + after + grace`)."""

    before: int
    after: int
    grace: int = 0

    def __init__(self, before: int | timedelta, after: int | timedelta | None = None, *,
                 grace: int | timedelta = 0) -> None:
        object.__setattr__(self, "before", ms(before, "JoinWindows' before"))
        object.__setattr__(self, "after", ms(before if after is None else after, "JoinWindows' after"))
        object.__setattr__(self, "grace", ms(grace, "JoinWindows' grace"))
        if self.before < 0 or self.after < 0 or self.grace < 0:
            raise ValueError(f"JoinWindows needs before, after and grace >= 0, got {self}")

    @property
    def span(self) -> int:
        """How long a record stays joinable past stream time: before + after + grace."""
        return self.before + self.after + self.grace


@dataclass(frozen=True)
class JoinSpec:
    """A join sub-topology's definition (for the auditor and for queries)."""

    kind: JoinType
    how: JoinKind
    left: str
    right: str
    joiner: Callable[[Any, Any], Any]
    windows: JoinWindows | None = None
    key: Callable[[Any], Any] | None = None
    left_store: str | None = None
    right_store: str | None = None
    #: foreign-key joins: the sub-topology that reads the right table (its progress in it is the audit's end)
    right_reader: str | None = None
    #: a stream-table join with a grace period (ms): stream records are held back for it (KIP-923)
    grace_ms: int | None = None
    #: the join's node (set when the graph is cut): the lineage ledger names the records it dropped as late by it
    step: str | None = None
    #: such a join's (slot, slots) among the steps of its sub-topology that may hold records back
    #: (`eos.graph.nodes.hold_slots`): the places its own held records reserve (set when the graph is cut)
    hold_slot: tuple[int, int] = (0, 1)
    #: the topic its results go to (set when the graph is cut)
    output: str | None = None
    #: the stateless operators (eos.graph.operators) between each side's topic and the join, in order: the
    #: join audit passes each record of the side through them, as the task did (set when the graph is cut)
    left_prefix: tuple[Any, ...] = ()
    right_prefix: tuple[Any, ...] = ()
    #: a join of a stream: the stateless operators between the join and its results' topic, which the join
    #: audit applies to each result it expects
    suffix: tuple[Any, ...] = ()
    #: a join of a stream whose results `to(fn, topics=[...])` routes among topics (`eos.graph.operators.Route`,
    #: after `suffix`; `output` is None then): the join audit reads every one of them and checks that each result
    #: is in the topic the route chooses for it
    route: Any = None

    @property
    def outputs(self) -> tuple[str, ...]:
        """The topics the join's results go to (none known before the graph is cut)."""
        return tuple(self.route.topics) if self.route is not None else (self.output,) if self.output else ()
