"""The lineage header carried from input to output: `eos.origin = "<topic>:<partition>:<offset>:<index>"`.

`index` numbers the outputs of one input record (0, 1, ... for 1-to-n processing). Topic names cannot
contain ':' (Kafka allows [A-Za-z0-9._-]), so the encoding is unambiguous. The auditor proves
exactly-once by finding every origin exactly once in the committed output.

Through a repartition topic, lineage reaches back to the original input: a record of the topic carries its
origin and index, and the outputs a later task makes of it extend that index by one level
(`output_indices`), so that the outputs of every path an input takes (a stream keyed anew two ways, a row
moving between groups) have indices of their own, wherever they are made.
"""

from __future__ import annotations

from typing import NamedTuple

from transactions import Message

__all__ = ["ORIGIN_HEADER", "DERIVED_HEADER", "ORIGIN_FORMAT", "Origin", "origin_prefix", "encode_origin",
           "decode_origin", "origin_of",
           "lineage_origin", "lineage_source", "output_indices", "top_level", "INDEX_LEVEL_BITS",
           "HELD_TOP", "held_place", "reserved_from_top"]

ORIGIN_HEADER = "eos.origin"
#: Carried instead of an origin by records no single input record produced (punctuation, window results
#: emitted when a window closes): the task that derived them. The lineage audit counts them apart.
DERIVED_HEADER = "eos.derived"


class Origin(NamedTuple):
    topic: str
    partition: int
    offset: int
    index: int = 0  # type: ignore[assignment]  # (shadows tuple.index: the field name is the public API)


#: An origin's header value, from its `origin_prefix`, offset and index (the record path formats it per output)
ORIGIN_FORMAT = b"%b%d:%d"
#: the bits of one level of an index: a record makes fewer than 2**32 outputs
INDEX_LEVEL_BITS = 32
#: the value on its level of the index the first record a scope holds back reserves (`hold`); the k-th reserves
#: `HELD_TOP - k`: from the top of the level down, apart from the scope's own outputs (0, 1, ... up), so that a
#: held record's outputs never share an index with those of a record the same scope sent to a repartition topic
HELD_TOP = (1 << INDEX_LEVEL_BITS) - 2


def origin_prefix(topic: str, partition: int) -> bytes:
    """What every origin in partition `partition` of `topic` begins with."""
    return f"{topic}:{partition}:".encode("ascii")


def encode_origin(topic: str, partition: int, offset: int, index: int = 0) -> bytes:
    return ORIGIN_FORMAT % (origin_prefix(topic, partition), offset, index)


def decode_origin(raw: bytes | str | None) -> Origin | None:
    """Parse a header value; None when it is missing or malformed (the auditor counts those)."""
    if raw is None:
        return None
    try:
        text = raw.decode("ascii") if isinstance(raw, (bytes, bytearray)) else raw
        topic, partition, offset, index = text.rsplit(":", 3)
        if not topic:
            return None
        return Origin(topic, int(partition), int(offset), int(index))
    except (ValueError, UnicodeDecodeError):
        return None


def origin_of(headers: list[tuple[str, bytes]] | None) -> Origin | None:
    """The origin in a record's headers (the last `eos.origin` header wins)."""
    found = None
    for key, value in headers or ():
        if key == ORIGIN_HEADER:
            found = value
    return decode_origin(found)


def lineage_origin(msg: Message, transitive: frozenset[str] = frozenset()) -> tuple[str, int, int]:
    """The origin a record's outputs name: the record itself, or, for a record of one of the application's
    repartition topics (`transitive`), the origin it carries. Lineage then reaches through the
    repartition hop, whose records are deleted once consumed, from the original input to the final output."""
    if not transitive or msg.topic() not in transitive:
        return msg.topic(), msg.partition(), msg.offset()  # (the common case, without an Origin per record)
    origin = lineage_source(msg, transitive)
    return origin.topic, origin.partition, origin.offset


def lineage_source(msg: Message, transitive: frozenset[str] = frozenset()) -> Origin:
    """`lineage_origin` with the index a record carries: 0, or, for a record of a repartition topic, the
    index it was written with (its outputs' indices extend it: `output_indices`)."""
    if transitive and msg.topic() in transitive:
        origin = origin_of(msg.headers())
        if origin is not None:
            return origin
    return Origin(msg.topic(), msg.partition(), msg.offset(), 0)


def output_indices(carried: int) -> tuple[int, int]:
    """(base, shift) of the outputs of a record of a repartition topic that carries the index `carried`: the
    n-th has the index `base + (n << shift)`, `carried` with one more level above its own, `n + 1` (never 0).
    Indices are thus paths (the n-th output of the m-th output of ...), one per output of an input record
    through any number of repartition topics and tasks: a step that writes two records of one input to two
    repartition topics, and a later step that makes two outputs of one of them, never give two outputs one
    index. An input's own outputs are numbered 0, 1, ... (shift 0)."""
    levels = max(1, -(-carried.bit_length() // INDEX_LEVEL_BITS))
    shift = INDEX_LEVEL_BITS * levels
    return carried + (1 << shift), shift


def held_place(value: int) -> int:
    """Which record a scope held back (0 for its first, 1, ...) reserved the index whose value on its level is
    `value` (`HELD_TOP - place`; an index in the level's lower half was reserved before holds counted from the
    top: `place` itself)."""
    return HELD_TOP - value if reserved_from_top(value) else value


def reserved_from_top(value: int) -> bool:
    """Whether an index whose value on its level is `value` is one a held record reserved (`HELD_TOP`): the
    level's upper half, which no scope's own outputs reach."""
    return value >= 1 << (INDEX_LEVEL_BITS - 1)


def top_level(index: int) -> int:
    """The shift of an output index's top level: 0 for an input record's own outputs (0, 1, ...), else that of
    the level `output_indices` added last, whose value (`index >> shift`) is 1 for the first output there."""
    return max(0, index.bit_length() - 1) // INDEX_LEVEL_BITS * INDEX_LEVEL_BITS
