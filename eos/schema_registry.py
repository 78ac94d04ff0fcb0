"""Schema Registry serdes: Avro, Protobuf and JSON Schema in the registry's wire format (a zero magic byte,
the 4-byte schema id, the payload), built on confluent-kafka's own serializers, so whatever reads and
writes Kafka with Confluent's clients reads and writes a job's topics.

    app = Application("orders", schema_registry_url="http://registry:8081")
    orders = app.stream("orders", value_serde=app.avro(ORDER_SCHEMA))
    orders.map_values(total).to("totals", value_serde=app.avro(TOTAL_SCHEMA, auto_register=False))

A serde is bound to a topic where the framework knows it (each source and sink, each store's changelog, a
repartition topic), so the subject follows its strategy: "topic" (`<topic>-value`, `<topic>-key`),
"record" (the record's full name) or "topic_record". Registering a writer's schema is on by default
(`auto_register`); off, the subject's latest version must exist and the record must fit it.

A record that does not fit its schema, or bytes with an unknown schema id or no magic byte, is a bad record
(`SerdeError`: the dead-letter topic, with the registry's reason). A registry that does not answer is not
the record's fault: the batch's attempt fails and is retried like any other transient error.

Extras: `pip install 'eos-spark-kafka[avro]'` (fastavro), `[protobuf]`, `[json-schema]` (jsonschema).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, Literal

from eos.errors import ConfigError, SerdeError
from eos.serde import Serde

__all__ = ["RegistrySerde", "Format", "SubjectStrategy", "registry_client"]

Format = Literal["avro", "protobuf", "json_schema"]
SubjectStrategy = Literal["topic", "record", "topic_record"]
_EXTRA = {"avro": "avro", "protobuf": "protobuf", "json_schema": "json-schema"}
_CLIENTS: dict[tuple[tuple[str, str], ...], Any] = {}
_LOCK = threading.Lock()


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


class RegistrySerde(Serde):
    """A serde of the registry's wire format for one `format` (see the module's docstring). `schema`: Avro or
    JSON Schema text (Avro may be None to read with the writer's schema), or a Protobuf message class."""

    def __init__(self, format: Format, schema: Any, registry: Mapping[str, str], *,
                 subject_strategy: SubjectStrategy = "topic", auto_register: bool = True,
                 use_latest_version: bool = False, to_dict: Callable[[Any], Any] | None = None,
                 from_dict: Callable[[Any], Any] | None = None, topic: str | None = None,
                 is_key: bool = False) -> None:
        if format not in _EXTRA:
            raise ConfigError(f"schema registry format must be avro, protobuf or json_schema, got {format!r}")
        if subject_strategy not in ("topic", "record", "topic_record"):
            raise ConfigError(f"subject_strategy must be topic, record or topic_record, got {subject_strategy!r}")
        if format != "avro" and schema is None:
            raise ConfigError(f"a {format} serde needs its schema (a Protobuf message class, JSON Schema text)")
        if not registry.get("url"):
            raise ConfigError("a Schema Registry serde needs the registry: Application(..., "
                              "schema_registry_url='http://host:8081')")
        self.format, self.schema, self.registry = format, schema, dict(registry)
        self.subject_strategy, self.auto_register, self.use_latest_version = (subject_strategy, auto_register,
                                                                              use_latest_version)
        self.to_dict, self.from_dict = to_dict, from_dict
        self.topic, self.is_key = topic, is_key
        self.name = f"{format} ({'key' if is_key else 'value'} of {topic or 'an unbound topic'})"
        self._serializer: Any = None
        self._deserializer: Any = None
        _check_extra(format)

    def bind(self, topic: str, is_key: bool) -> RegistrySerde:
        if (topic, is_key) == (self.topic, self.is_key):
            return self
        return RegistrySerde(self.format, self.schema, self.registry, subject_strategy=self.subject_strategy,
                             auto_register=self.auto_register, use_latest_version=self.use_latest_version,
                             to_dict=self.to_dict, from_dict=self.from_dict, topic=topic, is_key=is_key)

    def __getstate__(self) -> dict[str, Any]:  # clients and (de)serializers are made again where used
        return {**self.__dict__, "_serializer": None, "_deserializer": None}

    def __repr__(self) -> str:
        return f"RegistrySerde({self.format!r}, topic={self.topic!r}, key={self.is_key})"

    def _context(self) -> Any:
        from confluent_kafka.serialization import MessageField, SerializationContext

        if self.topic is None:
            raise SerdeError(f"the {self.format} serde is not bound to a topic (its subject names it)")
        return SerializationContext(self.topic, MessageField.KEY if self.is_key else MessageField.VALUE)

    def _dumps(self, obj: Any) -> bytes:
        if self._serializer is None:
            self._serializer = self._make_serializer()
        return _call(self._serializer, obj, self._context(), "serialize", self.name)

    def _loads(self, data: bytes) -> Any:
        if self._deserializer is None:
            self._deserializer = self._make_deserializer()
        if data[:1] != b"\x00":
            raise SerdeError(f"not in the Schema Registry wire format (the first byte is {data[:1]!r}, not 0): "
                             f"{self.name}")
        context = self._context() if self.topic is not None else None
        return _call(self._deserializer, data, context, "deserialize", self.name)

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
    """Confluent's (de)serializer, its record-level errors as `SerdeError`s (a dead letter with the reason);
    a registry that does not answer stays an error of the attempt (retried)."""
    from confluent_kafka.error import SerializationError
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    try:
        return fn(data, context)
    except SchemaRegistryError as exc:
        if exc.http_status_code in (404, 409, 422):  # unknown schema or subject; incompatible; invalid
            raise SerdeError(f"cannot {what} as {name}: the registry says {exc.error_message} "
                             f"(HTTP {exc.http_status_code}, code {exc.error_code})") from exc
        raise
    except SerializationError as exc:
        raise SerdeError(f"cannot {what} as {name}: {exc}") from exc
    except (ValueError, TypeError, KeyError, AttributeError) as exc:  # the payload or object does not fit
        raise SerdeError(f"cannot {what} as {name}: {type(exc).__name__}: {exc}") from exc


def _check_extra(format: Format) -> None:
    try:
        if format == "avro":
            import fastavro  # noqa: F401
        elif format == "protobuf":
            import google.protobuf  # noqa: F401
        else:
            import jsonschema  # noqa: F401
        import confluent_kafka.schema_registry  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"the {format} serde needs {exc.name}: pip install "
                          f"'eos-spark-kafka[{_EXTRA[format]}]'") from None
