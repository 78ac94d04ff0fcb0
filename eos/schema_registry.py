"""Schema Registry serdes: Avro, Protobuf and JSON Schema in the registry's wire format (a zero magic byte,
the 4-byte schema id, the payload), built on confluent-kafka's own serializers (`transactions.schema_registry`),
so whatever reads and writes Kafka with Confluent's clients reads and writes a job's topics.

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

import copy
from collections.abc import Callable, Mapping
from typing import Any, Literal

from eos.errors import ConfigError, SerdeError, ServiceUnavailableError
from eos.serde import Serde
from transactions.schema_registry import (
    FORMATS,
    RecordSchemaError,
    RegistryCodec,
    RegistryUnavailableError,
    missing_extra,
    registry_client,
    registry_problems,
)

__all__ = ["RegistrySerde", "Format", "SubjectStrategy", "registry_client", "check_registries"]

Format = Literal["avro", "protobuf", "json_schema"]
SubjectStrategy = Literal["topic", "record", "topic_record"]
_EXTRA = {"avro": "avro", "protobuf": "protobuf", "json_schema": "json-schema"}


class RegistrySerde(Serde):
    """A serde of the registry's wire format for one `format` (see the module's docstring). `schema`: Avro or
    JSON Schema text (Avro may be None to read with the writer's schema), or a Protobuf message class."""

    def __init__(self, format: Format, schema: Any, registry: Mapping[str, str], *,
                 subject_strategy: SubjectStrategy = "topic", auto_register: bool = True,
                 use_latest_version: bool = False, to_dict: Callable[[Any], Any] | None = None,
                 from_dict: Callable[[Any], Any] | None = None) -> None:
        if format not in FORMATS:
            raise ConfigError(f"schema registry format must be avro, protobuf or json_schema, got {format!r}")
        if subject_strategy not in ("topic", "record", "topic_record"):
            raise ConfigError(f"subject_strategy must be topic, record or topic_record, got {subject_strategy!r}")
        if format != "avro" and schema is None:
            raise ConfigError(f"a {format} serde needs its schema (a Protobuf message class, JSON Schema text)")
        if not registry.get("url"):
            raise ConfigError("a Schema Registry serde needs the registry: Application(..., "
                              "schema_registry_url='http://host:8081')")
        missing = missing_extra(format)
        if missing is not None:
            raise ConfigError(f"the {format} serde needs {missing}: pip install 'eos-spark-kafka[{_EXTRA[format]}]'")
        self.format = format
        self.topic: str | None = None  # bound by `bind`
        self.is_key = False
        self.codec = RegistryCodec(format, schema, registry, subject_strategy=subject_strategy,
                                   auto_register=auto_register, use_latest_version=use_latest_version,
                                   to_dict=to_dict, from_dict=from_dict)
        self.name = f"{format} (not bound to a topic yet)"

    def bind(self, topic: str, is_key: bool) -> RegistrySerde:
        if (topic, is_key) == (self.topic, self.is_key):
            return self
        bound = copy.copy(self)  # a codec of its own: confluent's serializers keep per-subject state
        bound.topic, bound.is_key, bound.codec = topic, is_key, copy.copy(self.codec)
        bound.name = f"{self.format} ({'key' if is_key else 'value'} of {topic})"
        return bound

    def __repr__(self) -> str:
        return f"RegistrySerde({self.format!r}, topic={self.topic!r}, key={self.is_key})"

    def _dumps(self, obj: Any) -> bytes:
        if self.topic is None:
            raise SerdeError(f"the {self.format} serde is not bound to a topic (its subject names it)")
        try:
            return self.codec.serialize(obj, self.topic, self.is_key, self.name)
        except RecordSchemaError as exc:
            raise SerdeError(str(exc)) from exc
        except RegistryUnavailableError as exc:  # the attempt's error, not the record's: run again, no dead letter
            raise ServiceUnavailableError(str(exc)) from exc

    def _loads(self, data: bytes) -> Any:
        try:
            return self.codec.deserialize(data, self.topic, self.is_key, self.name)
        except RecordSchemaError as exc:
            raise SerdeError(str(exc)) from exc
        except RegistryUnavailableError as exc:
            raise ServiceUnavailableError(str(exc)) from exc


def check_registries(subtopologies: Mapping[str, Any], application_id: str) -> None:
    """At start-up: every registry the job's serdes use answers, and every subject a sink writes without
    auto-registration (topic strategy) has a schema; raises `ConfigError` saying what to change."""
    writers: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for sub in subtopologies.values():
        read = [(t, k, v) for t, (k, v, _) in sub.per_topic.items()] + [(t, sub.key_serde, sub.value_serde)
                                                                        for t in sub.inputs]
        written = [(t, k, v) for t, (k, v) in sub.output_serdes.items()]
        stores = [(s.changelog_topic(application_id), s.key_serde, s.value_serde) for s in sub.stores
                  if s.source_topic is None]  # (one restored from its table's topic reads it as the task does)
        for topic, key, value in read + written + stores:
            for serde, is_key in ((key, True), (value, False)):
                if not isinstance(serde, RegistrySerde):
                    continue
                codec = serde.codec
                subjects = writers.setdefault(tuple(sorted(codec.registry.items())), [])
                if (topic, key, value) in written and not codec.auto_register and codec.subject_strategy == "topic":
                    subjects.append(f"{topic}-{'key' if is_key else 'value'}")
    problems = [p for conf, subjects in writers.items() for p in registry_problems(dict(conf), subjects)]
    if problems:
        raise ConfigError("; ".join(dict.fromkeys(problems)))
