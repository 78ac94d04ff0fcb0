"""Schema Registry codecs on confluent-kafka's serializers (the only layer that imports confluent-kafka):
the registry's wire format (a zero magic byte, the 4-byte schema id, the payload) for Avro, Protobuf and
JSON Schema, one registry client per configuration and process. `eos.schema_registry` wraps them as serdes.
"""

from __future__ import annotations

import functools
import importlib
import threading
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["RegistryCodec", "RecordSchemaError", "RegistryUnavailableError", "registry_client", "registry_problems",
           "missing_extra", "FORMATS"]

FORMATS = ("avro", "protobuf", "json_schema")
_CLIENTS: dict[tuple[tuple[str, str], ...], Any] = {}
_LOCK = threading.Lock()


class RecordSchemaError(ValueError):
    """A record's fault: not in the wire format, an unknown schema id, or not fitting its schema."""


class RegistryUnavailableError(RuntimeError):
    """Not the record's fault: the registry did not answer (refused, reset, timed out, after the client's own
    retries) or answered with an error of its own (5xx, authentication). The attempt fails and is run again,
    as when a broker does not answer; the record is not a bad record."""


@functools.cache
def _transport_errors() -> tuple[type[BaseException], ...]:
    """What confluent-kafka's registry client raises when a request gets no answer: its HTTP library's errors
    (httpx2, else httpx, as the client picks), sockets' OSErrors, and a failed OAuth token fetch."""
    from confluent_kafka.schema_registry.error import OAuthTokenError

    errors: list[type[BaseException]] = [OSError, OAuthTokenError]
    for library in ("httpx2", "httpx"):
        try:
            errors.append(importlib.import_module(library).HTTPError)
        except (ImportError, AttributeError):
            continue
    return tuple(errors)


def registry_client(conf: Mapping[str, str]) -> Any:
    """One client per registry configuration and process (a `mock://` URL: confluent-kafka's in-memory
    registry, shared by everything in this process)."""
    key = tuple(sorted(conf.items()))
    with _LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            from confluent_kafka.schema_registry import SchemaRegistryClient

            client = _CLIENTS[key] = SchemaRegistryClient.new_client(dict(conf))
        return client


class RegistryCodec:
    """Serialize and deserialize one format with one registry (see `eos.schema_registry` for the options)."""

    def __init__(self, format: str, schema: Any, registry: Mapping[str, str], *, subject_strategy: str = "topic",
                 auto_register: bool = True, use_latest_version: bool = False,
                 to_dict: Callable[[Any], Any] | None = None, from_dict: Callable[[Any], Any] | None = None) -> None:
        """`registry`: the registry's client settings, read where they are used: a dict given is kept, not
        copied, so whoever owns it (the `Application` that made the serde) can point every serde at another
        registry by changing it (`Application.configure(schema_registry_url=...)`)."""
        self.format, self.schema = format, schema
        self.registry: dict[str, str] = registry if isinstance(registry, dict) else dict(registry)
        self.subject_strategy, self.auto_register, self.use_latest_version = (subject_strategy, auto_register,
                                                                              use_latest_version)
        self.to_dict, self.from_dict = to_dict, from_dict
        self._serializer: Any = None
        self._deserializer: Any = None
        self._made_for: dict[str, str] = {}  # the settings they were made for (made again when those change)

    def __getstate__(self) -> dict[str, Any]:  # clients and (de)serializers are made again where used
        return {**self.__dict__, "_serializer": None, "_deserializer": None}

    def _current(self) -> None:
        if self._made_for != self.registry:
            self._serializer = self._deserializer = None
            self._made_for = dict(self.registry)

    def serialize(self, obj: Any, topic: str, is_key: bool, name: str) -> bytes:
        self._current()
        if self._serializer is None:
            self._serializer = self._make_serializer()
        return _call(self._serializer, obj, _context(topic, is_key), "serialize", name)

    def deserialize(self, data: bytes, topic: str | None, is_key: bool, name: str) -> Any:
        self._current()
        if self._deserializer is None:
            self._deserializer = self._make_deserializer()
        if data[:1] != b"\x00":
            raise RecordSchemaError(f"not in the Schema Registry wire format (the first byte is {data[:1]!r}, not "
                                    f"0): {name}")
        return _call(self._deserializer, data, None if topic is None else _context(topic, is_key), "deserialize",
                     name)

    def _conf(self) -> dict[str, Any]:
        from confluent_kafka.schema_registry import (
            record_subject_name_strategy,
            topic_record_subject_name_strategy,
            topic_subject_name_strategy,
        )

        strategy = {"topic": topic_subject_name_strategy, "record": record_subject_name_strategy,
                    "topic_record": topic_record_subject_name_strategy}[self.subject_strategy]
        conf: dict[str, Any] = {"auto.register.schemas": self.auto_register,
                                "use.latest.version": self.use_latest_version or not self.auto_register,
                                "subject.name.strategy": strategy}
        if self.format == "protobuf":
            conf["use.deprecated.format"] = False
        return conf

    def _make_serializer(self) -> Any:
        client = registry_client(self.registry)
        to_dict = (lambda obj, ctx: self.to_dict(obj)) if self.to_dict else None  # type: ignore[misc]
        if self.format == "avro":
            from confluent_kafka.schema_registry.avro import AvroSerializer

            return AvroSerializer(client, self.schema, to_dict=to_dict, conf=self._conf())
        if self.format == "protobuf":
            from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

            return ProtobufSerializer(self.schema, client, conf=self._conf())
        from confluent_kafka.schema_registry.json_schema import JSONSerializer

        return JSONSerializer(self.schema, client, to_dict=to_dict, conf=self._conf())

    def _make_deserializer(self) -> Any:
        client = registry_client(self.registry)
        from_dict = (lambda data, ctx: self.from_dict(data)) if self.from_dict else None  # type: ignore[misc]
        if self.format == "avro":
            from confluent_kafka.schema_registry.avro import AvroDeserializer

            return AvroDeserializer(client, self.schema, from_dict=from_dict)
        if self.format == "protobuf":
            from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer

            return ProtobufDeserializer(self.schema, {"use.deprecated.format": False}, schema_registry_client=client)
        from confluent_kafka.schema_registry.json_schema import JSONDeserializer

        return JSONDeserializer(self.schema, from_dict=from_dict, schema_registry_client=client)


def _call(fn: Any, data: Any, context: Any, what: str, name: str) -> Any:
    """Confluent's (de)serializer, its record-level errors as `RecordSchemaError`s, a registry that does not
    answer (or fails) as `RegistryUnavailableError` (an error of the attempt, never of the record)."""
    from confluent_kafka.error import SerializationError
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    try:
        return fn(data, context)
    except SchemaRegistryError as exc:
        if exc.http_status_code in (404, 409, 422):  # unknown schema or subject; incompatible; invalid
            raise RecordSchemaError(f"cannot {what} as {name}: the registry says {exc.error_message} "
                             f"(HTTP {exc.http_status_code}, code {exc.error_code})") from exc
        raise RegistryUnavailableError(f"cannot {what} as {name} now: the Schema Registry answered HTTP "
                                       f"{exc.http_status_code} ({exc.error_message})") from exc
    except _transport_errors() as exc:
        raise RegistryUnavailableError(f"cannot {what} as {name} now: the Schema Registry did not answer "
                                       f"({type(exc).__name__}: {exc})") from exc
    except SerializationError as exc:
        raise RecordSchemaError(f"cannot {what} as {name}: {exc}") from exc
    except (ValueError, TypeError, KeyError, AttributeError) as exc:  # the payload or object does not fit
        raise RecordSchemaError(f"cannot {what} as {name}: {type(exc).__name__}: {exc}") from exc


def _context(topic: str, is_key: bool) -> Any:
    from confluent_kafka.serialization import MessageField, SerializationContext

    return SerializationContext(topic, MessageField.KEY if is_key else MessageField.VALUE)


def missing_extra(format: str) -> str | None:
    """The module a format needs that is not installed, or None."""
    try:
        if format == "avro":
            import fastavro  # noqa: F401
        elif format == "protobuf":
            import google.protobuf  # noqa: F401
        else:
            import jsonschema  # noqa: F401
        import confluent_kafka.schema_registry  # noqa: F401
    except ImportError as exc:
        return exc.name or "confluent_kafka.schema_registry"
    return None


def registry_problems(conf: Mapping[str, str], subjects: list[str]) -> list[str]:
    """What stops a job from using the registry at start-up: it does not answer, or a subject a writer
    without auto-registration needs has no schema."""
    try:
        known = set(registry_client(conf).get_subjects())
    except Exception as exc:  # any failure to answer: the job cannot write or read its records
        return [f"the Schema Registry at {conf.get('url')} does not answer: {type(exc).__name__}: {exc}"]
    return [f"subject {s!r} has no schema in the registry at {conf.get('url')}, and its writer does not register "
            "one (auto_register=False): register it first, or let the serde register it" for s in subjects
            if s not in known]
