"""Serializers/deserializers for keys and values. `None` always maps to `None` (tombstones, null keys).

Errors are `SerdeError`s that say what failed to parse; the task routes the record to the dead-letter
topic with that message.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

import orjson

from eos.errors import FrameworkError, SerdeError

__all__ = ["Serde", "SerdeError", "refused_part", "BytesSerde", "StringSerde", "JsonSerde", "IntegerSerde", "LongSerde",
           "DoubleSerde", "DecimalSerde", "serde_for", "serde_name"]


class Serde:
    """Base class. Subclasses implement `_dumps`/`_loads`; `name` appears in error messages. What they raise
    is the record's fault (a `SerdeError`: a dead letter), except a `FrameworkError`, which fails the attempt
    (a Schema Registry that does not answer)."""

    name = "serde"

    def serialize(self, obj: Any) -> bytes | None:
        if obj is None:
            return None
        try:
            return self._dumps(obj)
        except (SerdeError, FrameworkError):
            raise
        except Exception as exc:
            raise SerdeError(f"cannot serialize {type(obj).__name__} as {self.name}: {exc}") from exc

    def deserialize(self, data: bytes | None) -> Any:
        if data is None:
            return None
        try:
            return self._loads(data)
        except (SerdeError, FrameworkError):
            raise
        except Exception as exc:
            preview = data[:40]
            raise SerdeError(f"cannot deserialize {len(data)} bytes {preview!r}{'...' if len(data) > 40 else ''} "
                             f"as {self.name}: {exc}") from exc

    def _dumps(self, obj: Any) -> bytes:
        raise NotImplementedError

    def _loads(self, data: bytes) -> Any:
        raise NotImplementedError

    def bind(self, topic: str, is_key: bool) -> Serde:
        """This serde for the keys (`is_key`) or values of `topic`; the framework binds every serde where it
        knows the topic (a Schema Registry serde names its subject after it). Most serdes ignore it."""
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class BytesSerde(Serde):
    name = "bytes"

    def serialize(self, obj: Any) -> bytes | None:  # fast path: no copy, no wrapper
        if obj is None or type(obj) is bytes:
            return obj
        return super().serialize(obj)

    def deserialize(self, data: bytes | None) -> Any:
        return data

    def _dumps(self, obj: Any) -> bytes:
        if not isinstance(obj, (bytes, bytearray, memoryview)):
            raise SerdeError(f"BytesSerde expects bytes, got {type(obj).__name__}")
        return bytes(obj)

    def _loads(self, data: bytes) -> bytes:
        return data


class StringSerde(Serde):
    name = "UTF-8 string"

    def serialize(self, obj: Any) -> bytes | None:
        if type(obj) is str:
            return obj.encode("utf-8")
        return super().serialize(obj)

    def deserialize(self, data: bytes | None) -> Any:
        if data is None:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return super().deserialize(data)  # raises a SerdeError that says what failed

    def _dumps(self, obj: Any) -> bytes:
        if not isinstance(obj, str):
            raise SerdeError(f"StringSerde expects str, got {type(obj).__name__}")
        return obj.encode("utf-8")

    def _loads(self, data: bytes) -> str:
        return data.decode("utf-8")


class JsonSerde(Serde):
    """Compact UTF-8 JSON with the standard library's meaning, at orjson's speed (about 5x faster each way,
    and JSON is most of a stateless job's per-record work).

    orjson writes NaN and infinities as `null`, where the standard library writes `NaN`/`Infinity` and reads
    them back: so any orjson output containing `null` is written again by the standard library, and a
    value round-trips (through a changelog, say) exactly as before. Values orjson refuses (integers beyond
    64 bits, non-string dict keys) or would turn into strings (dataclasses, datetimes) go to the standard
    library too, which converts or rejects them as it always has. Reading: orjson, then the standard library
    for what orjson refuses (`NaN` tokens; for invalid JSON it raises the error the user sees)."""

    name = "JSON"
    _OPTIONS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME

    def serialize(self, obj: Any) -> bytes | None:
        if obj is None:
            return None
        try:
            out = orjson.dumps(obj, option=self._OPTIONS)
            if b"null" not in out:
                # orjson (3.12 on) returns its whole 4 KiB write buffer as the bytes object, never trimmed,
                # and a batch keeps every output until its commit: 50,000 outputs held 195 MiB where their
                # bytes are 9 MiB. The copy costs ~60 ns (orjson's call ~190 ns).
                return b"".join((out, b""))
        except orjson.JSONEncodeError:
            pass
        return super().serialize(obj)  # the standard library, its errors wrapped as SerdeErrors

    def deserialize(self, data: bytes | None) -> Any:
        if data is None:
            return None
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            return super().deserialize(data)

    def _dumps(self, obj: Any) -> bytes:  # what orjson refused or would have written differently
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def _loads(self, data: bytes) -> Any:  # what orjson refused (NaN tokens, or invalid JSON)
        return json.loads(data)


class _StructSerde(Serde):
    fmt = ""
    kind: type = int
    _struct = struct.Struct("")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._struct = struct.Struct(cls.fmt)

    def serialize(self, obj: Any) -> bytes | None:  # fast path: exactly the kind (never bool), in range
        if type(obj) is self.kind:
            try:
                return self._struct.pack(obj)
            except struct.error:
                pass
        return super().serialize(obj)

    def deserialize(self, data: bytes | None) -> Any:
        if data is not None and len(data) == self._struct.size:
            return self._struct.unpack(data)[0]
        return super().deserialize(data)

    def _dumps(self, obj: Any) -> bytes:
        if isinstance(obj, bool) or not isinstance(obj, self.kind):
            raise SerdeError(f"{type(self).__name__} expects {self.kind.__name__}, got {type(obj).__name__}")
        return struct.pack(self.fmt, obj)

    def _loads(self, data: bytes) -> Any:
        if len(data) != struct.calcsize(self.fmt):
            raise SerdeError(f"expected {struct.calcsize(self.fmt)} bytes, got {len(data)}")
        return struct.unpack(self.fmt, data)[0]


class IntegerSerde(_StructSerde):
    """4-byte big-endian int, as Kafka's IntegerSerializer."""

    name, fmt = "32-bit integer", ">i"


class LongSerde(_StructSerde):
    """8-byte big-endian long, as Kafka's LongSerializer."""

    name, fmt = "64-bit integer", ">q"


class DoubleSerde(_StructSerde):
    name, fmt, kind = "double", ">d", float

    def _dumps(self, obj: Any) -> bytes:
        if isinstance(obj, int) and not isinstance(obj, bool):
            obj = float(obj)
        return super()._dumps(obj)


class DecimalSerde(Serde):
    """A `decimal.Decimal` as its text in UTF-8 ("12.30"): exact sums of money, which JSON (floats) cannot
    hold. An int is taken as it is; a float is refused, since it is not the number it looks like (give
    `Decimal(str(x))` for the one it prints as)."""

    name = "decimal"

    def _dumps(self, obj: Any) -> bytes:
        if isinstance(obj, bool) or not isinstance(obj, Decimal | int):
            hint = "; a float is not exact: Decimal(str(x)) is the number it prints as" if isinstance(
                obj, float) else ""
            raise SerdeError(f"DecimalSerde expects Decimal or int, got {type(obj).__name__}{hint}")
        if isinstance(obj, Decimal) and not obj.is_finite():
            raise SerdeError(f"DecimalSerde takes finite numbers, got {obj}")
        return str(obj).encode("ascii")

    def _loads(self, data: bytes) -> Decimal:
        try:
            value = Decimal(data.decode("ascii"))
        except InvalidOperation:
            raise ValueError("not a decimal number") from None
        if not value.is_finite():
            raise ValueError(f"not a finite number: {value}")
        return value


_BY_NAME: dict[str, type[Serde]] = {"bytes": BytesSerde, "string": StringSerde, "str": StringSerde,
                                    "json": JsonSerde, "int": IntegerSerde, "long": LongSerde,
                                    "double": DoubleSerde, "decimal": DecimalSerde}


def refused_part(serialize_key: Callable[[Any], Any], key: Any) -> str:
    """Which part of a record its serdes refused, "key" or "value": the key is asked of its serializer again
    (for an error that says what to change)."""
    try:
        if key is not None:
            serialize_key(key)
    except SerdeError:
        return "key"
    return "value"


def serde_name(serde: Serde) -> str | None:
    """The name `serde_for` makes `serde` of ("bytes", "string", ...), if it is a plain one of them."""
    return next((name for name, kind in _BY_NAME.items() if type(serde) is kind), None)


def serde_for(spec: Serde | str | None, default: Serde | None = None) -> Serde:
    """A serde from an instance, a name ("bytes", "string", "json", "int", "long", "double", "decimal") or
    None."""
    if spec is None:
        return default or BytesSerde()
    if isinstance(spec, Serde):
        return spec
    try:
        return _BY_NAME[spec.lower()]()
    except (KeyError, AttributeError):
        registry = (f"; {spec} in the Schema Registry's wire format is app.{spec.lower()}(schema) (with "
                    "Application(..., schema_registry_url=...))"
                    if isinstance(spec, str) and spec.lower() in ("avro", "protobuf", "json_schema") else "")
        raise ValueError(f"unknown serde {spec!r}; use one of {sorted(_BY_NAME)} or a Serde instance"
                         f"{registry}") from None
