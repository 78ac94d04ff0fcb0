"""The suite's local Schema Registry (`python -m localkafka.registry`), through confluent-kafka's own client:
schema ids as Confluent's registry gives them (one per distinct schema, shared across subjects), versions
per subject, its error codes, and a registry that another process registered in."""

from __future__ import annotations

import json
import struct
import subprocess
import sys

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from localkafka.registry import local_registry, registry_answers

V1 = json.dumps({"type": "record", "name": "T", "fields": [{"name": "a", "type": "int"}]})
V2 = json.dumps({"type": "record", "name": "T", "fields": [{"name": "a", "type": "int"},
                                                          {"name": "b", "type": "string", "default": ""}]})


@pytest.fixture(scope="module")
def url():
    with local_registry() as url:
        yield url


def test_ids_are_per_schema_and_versions_per_subject(url):
    client = SchemaRegistryClient({"url": url})
    first = client.register_schema("ids-a-value", Schema(V1, "AVRO"))
    assert client.register_schema("ids-b-value", Schema(V1, "AVRO")) == first  # the same schema, the same id
    second = client.register_schema("ids-a-value", Schema(V2, "AVRO"))
    assert second != first
    assert client.register_schema("ids-a-value", Schema(V2, "AVRO")) == second  # registered again: no new version
    assert client.get_versions("ids-a-value") == [1, 2]
    latest = client.get_latest_version("ids-a-value")
    assert (latest.version, latest.schema_id, latest.schema.schema_str) == (2, second, V2)
    assert client.get_version("ids-a-value", 1).schema_id == first
    assert client.lookup_schema("ids-b-value", Schema(V1, "AVRO")).version == 1
    assert {"ids-a-value", "ids-b-value"} <= set(client.get_subjects())


def test_errors_carry_confluents_codes(url):
    client = SchemaRegistryClient({"url": url})
    client.register_schema("errors-value", Schema(V1, "AVRO"))
    for call, code in ((lambda: client.get_schema(999_999), 40403), (lambda: client.get_latest_version("nope"), 40401),
                       (lambda: client.get_version("errors-value", 9), 40402),
                       (lambda: client.lookup_schema("errors-value", Schema(V2, "AVRO")), 40403)):
        with pytest.raises(SchemaRegistryError) as caught:
            call()
        assert (caught.value.http_status_code, caught.value.error_code) == (404, code)


def test_processes_share_it_through_confluents_serializers(url):
    """What one process registers and writes, another reads by id (a `mock://` registry cannot do this)."""
    writer = (f"from confluent_kafka.schema_registry import SchemaRegistryClient as C\n"
              f"from confluent_kafka.schema_registry.avro import AvroSerializer as S\n"
              f"from confluent_kafka.serialization import SerializationContext as X, MessageField as F\n"
              f"import sys; sys.stdout.buffer.write(S(C({{'url': {url!r}}}), {V2!r})({{'a': 7, 'b': 'x'}}, "
              f"X('shared', F.VALUE)))")
    data = subprocess.run([sys.executable, "-c", writer], capture_output=True, check=True, timeout=60).stdout
    assert data[:1] == b"\x00"
    ctx = SerializationContext("shared", MessageField.VALUE)
    assert AvroDeserializer(SchemaRegistryClient({"url": url}))(data, ctx) == {"a": 7, "b": "x"}
    unknown = b"\x00" + struct.pack(">i", 999_999) + b"\x02"
    with pytest.raises(SchemaRegistryError):
        AvroDeserializer(SchemaRegistryClient({"url": url}))(unknown, ctx)
    assert AvroSerializer(SchemaRegistryClient({"url": url}), V2, conf={"auto.register.schemas": False,
                                                                     "use.latest.version": True})(
        {"a": 1, "b": ""}, ctx)[1:5] == data[1:5]


def test_it_ends_with_its_block():
    with local_registry() as url:
        assert registry_answers(url)
    assert not registry_answers(url)


def test_a_taken_port_is_refused_saying_what_to_do(url):
    port = url.rsplit(":", 1)[1]
    done = subprocess.run([sys.executable, "-m", "localkafka.registry", "--port", port], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "pick another with --port" in done.stderr, done.stderr


def test_an_outage_answers_503_for_its_seconds_and_keeps_the_schemas(url):
    """`POST /eos/outage`: what the outage tests of registry jobs stop it with (a restarted in-memory registry
    would have lost every schema id)."""
    import time
    import urllib.request

    client = SchemaRegistryClient({"url": url, "max.retries": 0})
    schema_id = client.register_schema("outage-value", Schema(V1, "AVRO"))
    request = urllib.request.Request(f"{url}/eos/outage", data=json.dumps({"seconds": 1.0}).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as answer:
        assert 0 < json.loads(answer.read())["down_for_s"] <= 1.0
    with pytest.raises(SchemaRegistryError) as caught:
        SchemaRegistryClient({"url": url, "max.retries": 0}).get_schema(schema_id)  # (a client with no cache)
    assert (caught.value.http_status_code, caught.value.error_code) == (503, 50301)
    time.sleep(1.1)
    assert SchemaRegistryClient({"url": url}).get_schema(schema_id).schema_str == V1
