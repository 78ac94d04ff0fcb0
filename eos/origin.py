"""The lineage header carried from input to output: `eos.origin = "<topic>:<partition>:<offset>:<index>"`.

`index` numbers the outputs of one input record (0, 1, ... for 1-to-n processing). Topic names cannot
contain ':' (Kafka allows [A-Za-z0-9._-]), so the encoding is unambiguous. The auditor proves
exactly-once by finding every origin exactly once in the committed output.
"""

from __future__ import annotations

from typing import NamedTuple

from transactions import Message

__all__ = ["ORIGIN_HEADER", "DERIVED_HEADER", "ORIGIN_FORMAT", "Origin", "origin_prefix", "encode_origin",
           "decode_origin", "origin_of",
           "lineage_origin", "lineage_source"]

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
    """`lineage_origin` with the index a record's outputs start numbering at: 0, or, for a record of a
    repartition topic, the index it carries. A step that writes n records of one input to a repartition
    topic (a table row moving between groups: a subtraction and an addition) gives them indices 0..n-1,
    and the one output the next step makes of each keeps that index, so no two outputs of the original
    input share one."""
    if transitive and msg.topic() in transitive:
        origin = origin_of(msg.headers())
        if origin is not None:
            return origin
    return Origin(msg.topic(), msg.partition(), msg.offset(), 0)
