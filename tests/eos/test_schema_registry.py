"""Schema Registry serdes through the test driver, with confluent-kafka's in-memory registry (`mock://`,
one per process: the driver's workers run in this process): Avro, Protobuf and JSON Schema jobs (a map, a
windowed aggregation whose store changelog is Avro, a stream-table join) read back with confluent-kafka's
own deserializers; subjects per topic, record and topic-record; bad records are dead letters with the
registry's reason."""

from __future__ import annotations

import json
import struct

import pytest
from confluent_kafka.schema_registry import Schema
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from eos import Application
from eos.errors import ConfigError
from eos.schema_registry import registry_client
from eos.testing import TopologyTestDriver
from eos.windows import TumblingWindows

BASE = 1_800_000_000_000
ORDER = json.dumps({"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "int"}, {"name": "qty", "type": "int"}, {"name": "price", "type": "double"}]})
TOTAL = json.dumps({"type": "record", "name": "Total", "namespace": "shop", "fields": [
    {"name": "id", "type": "int"}, {"name": "total", "type": "double"}]})
CUSTOMER = json.dumps({"type": "record", "name": "Customer", "namespace": "shop", "fields": [
    {"name": "tier", "type": "string"}]})


def app_(name: str) -> Application:
    return Application("sr", bootstrap_servers="unused:9092", schema_registry_url=f"mock://{name}")


def confluent_read(app: Application, topic: str, data: bytes) -> object:
    """What a consumer using confluent-kafka's own Avro deserializer reads."""
    client = registry_client({"url": app.config.schema_registry_url})
    return AvroDeserializer(client)(data, SerializationContext(topic, MessageField.VALUE))


def test_an_avro_map_a_windowed_aggregation_and_a_join_write_the_registry_wire_format():
    app = app_("jobs")
    orders = app.stream("orders", value_serde=app.avro(ORDER))
    orders.map_values(lambda o: {"id": o["id"], "total": o["qty"] * o["price"]}, name="total") \
        .to("totals", value_serde=app.avro(TOTAL))
    orders.group_by_key().window(TumblingWindows(60_000)).aggregate(
        lambda: {"id": 0, "total": 0.0}, lambda k, o, t: {"id": o["id"], "total": t["total"] + o["qty"] * o["price"]},
        name="spent", aggregate_serde=app.avro(TOTAL)).to_stream().to("spent")
    customers = app.table("customers", value_serde=app.avro(CUSTOMER))
    orders.join(customers, lambda o, c: {"id": o["id"], "total": float(len(c["tier"]))}, name="tiered",
                value_serde=app.avro(TOTAL)).to("tiered")
    driver = TopologyTestDriver(app)
    driver.pipe("customers", "ann", {"tier": "gold"}, timestamp=BASE)
    driver.pipe_many("orders", [("ann", {"id": 1, "qty": 2, "price": 1.5}, BASE + 1),
                                ("ann", {"id": 2, "qty": 1, "price": 4.0}, BASE + 2)])
    assert [r.value for r in driver.read("totals")] == [{"id": 1, "total": 3.0}, {"id": 2, "total": 4.0}]
    assert [r.value["total"] for r in driver.read("spent")] == [3.0, 7.0]
    assert [r.value for r in driver.read("tiered")] == [{"id": 1, "total": 4.0}, {"id": 2, "total": 4.0}]
    client = registry_client({"url": "mock://jobs"})
    subjects = set(client.get_subjects())
    assert {"orders-value", "totals-value", "customers-value", "spent-value", "tiered-value",
            "sr-spent-store-changelog-value", "sr-tiered-customers-changelog-value"} <= subjects, subjects
    committed = [m.value() for m in driver.cluster.records("totals")]
    assert len(committed) == 2
    for data in committed:
        assert data[:1] == b"\x00" and struct.unpack(">i", data[1:5])[0] > 0  # magic byte, schema id
    assert [confluent_read(app, "totals", data)["id"] for data in committed] == [1, 2]


def test_avro_keys_through_a_windowed_aggregation_keep_their_subject_in_both_windowed_key_layouts():
    """A windowed result's key wraps the input's key serde, bound to the output topic like any other."""
    app = app_("windowed-keys")
    key = app.avro('"string"')
    orders = app.stream("orders", key_serde=key, value_serde=app.avro(ORDER))
    for layout in ("binary", "json"):
        orders.group_by_key().window(TumblingWindows(60_000), windowed_key=layout).count(name=f"n-{layout}") \
            .to_stream().to(f"counts-{layout}")
    driver = TopologyTestDriver(app)
    driver.pipe("orders", "ann", {"id": 1, "qty": 1, "price": 1.0}, timestamp=BASE)
    driver.pipe("orders", "ann", {"id": 2, "qty": 1, "price": 1.0}, timestamp=BASE + 1)
    assert [(r.key.key, r.key.start, r.value) for r in driver.read("counts-binary")] == [("ann", BASE, 1),
                                                                                        ("ann", BASE, 2)]
    (raw, *_), client = [m.key() for m in driver.cluster.records("counts-binary")], registry_client(
        {"url": "mock://windowed-keys"})
    ctx = SerializationContext("counts-binary", MessageField.KEY)
    assert AvroDeserializer(client)(raw[:-16], ctx) == "ann" and int.from_bytes(raw[-8:], "big") == BASE
    assert json.loads(driver.cluster.records("counts-json")[0].key())["key"] == "ann"
    assert {"orders-key", "counts-binary-key"} <= set(client.get_subjects())


def test_subject_strategies_name_subjects_by_topic_record_or_both():
    app = app_("subjects")
    app.stream("a", value_serde=app.avro(ORDER, subject_strategy="record")).to(
        "b", value_serde=app.avro(ORDER, subject_strategy="topic_record"))
    driver = TopologyTestDriver(app)
    driver.pipe("a", "k", {"id": 1, "qty": 1, "price": 1.0}, timestamp=BASE)
    assert [r.value["id"] for r in driver.read("b")] == [1]
    assert set(registry_client({"url": "mock://subjects"}).get_subjects()) == {"shop.Order", "b-shop.Order"}


def test_protobuf_and_json_schema_jobs():
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    proto = descriptor_pb2.FileDescriptorProto(name="tests/order.proto", package="tests", syntax="proto3")
    message = proto.message_type.add(name="Order")
    message.field.add(name="id", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
                      label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    message.field.add(name="note", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                      label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    order_type = message_factory.GetMessageClass(pool.FindMessageTypeByName("tests.Order"))
    schema = json.dumps({"type": "object", "properties": {"id": {"type": "integer"}, "note": {"type": "string"}},
                         "required": ["id", "note"]})

    app = app_("formats")
    app.stream("pb-in", value_serde=app.protobuf(order_type)) \
        .map_values(lambda o: {"id": o.id, "note": o.note.upper()}, name="to_json") \
        .to("json-out", value_serde=app.json_schema(schema))
    driver = TopologyTestDriver(app)
    driver.pipe("pb-in", "k", order_type(id=7, note="hi"), timestamp=BASE)
    driver.pipe("pb-in", "k", order_type(id=8, note=""), timestamp=BASE + 1)
    assert [r.value for r in driver.read("json-out")] == [{"id": 7, "note": "HI"}, {"id": 8, "note": ""}]
    assert {"pb-in-value", "json-out-value"} <= set(registry_client({"url": "mock://formats"}).get_subjects())


def test_bad_records_are_dead_letters_with_the_registrys_reason():
    app = app_("bad")
    app.stream("orders", value_serde=app.avro(ORDER)).map_values(
        lambda o: {"id": o["id"]} if o["id"] == 3 else {"id": o["id"], "total": 1.0}, name="m") \
        .to("totals", value_serde=app.avro(TOTAL))
    driver = TopologyTestDriver(app)
    driver.pipe("orders", "k", {"id": 1, "qty": 1, "price": 1.0}, timestamp=BASE)
    driver.pipe("orders", b"k", b'{"id": 2}', timestamp=BASE + 1, serialized=True)  # plain JSON: no magic byte
    driver.pipe("orders", b"k", b"\x00" + struct.pack(">i", 999) + b"\x02", timestamp=BASE + 2, serialized=True)
    driver.pipe("orders", "k", {"id": 3, "qty": 1, "price": 1.0}, timestamp=BASE + 3)  # its output lacks "total"
    assert [r.value["id"] for r in driver.read("totals")] == [1]
    reasons = [d.error for d in driver.dead_letters()]
    assert len(reasons) == 3, reasons
    assert "not in the Schema Registry wire format" in reasons[0]
    assert "the registry says" in reasons[1] and "404" in reasons[1]
    assert "cannot serialize" in reasons[2] and "total" in reasons[2]


def test_registry_serdes_need_the_registry_and_a_schema():
    with pytest.raises(ConfigError, match="schema_registry_url="):
        Application("sr", bootstrap_servers="unused:9092").avro(ORDER)
    app = app_("conf")
    with pytest.raises(ConfigError, match="needs its schema"):
        app.json_schema(None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="subject_strategy must be"):
        app.avro(ORDER, subject_strategy="by-topic")
    assert AvroSerializer  # (confluent's serializer is what the serde uses: imported here for the reader side)


def test_the_readme_schema_registry_example_runs_with_the_in_memory_registry(monkeypatch):
    from tests.eos.test_readme_testing import readme_app

    monkeypatch.setenv("SCHEMA_REGISTRY_URL", "mock://readme")
    app = readme_app("Schema Registry")
    driver = TopologyTestDriver(app)
    driver.pipe_many("payments", [("ann", {"amount": 2.5, "currency": "EUR"}, BASE),
                                  ("ann", {"amount": 9.0, "currency": "USD"}, BASE + 1),
                                  ("ann", {"amount": 1.5, "currency": "EUR"}, BASE + 2)])
    assert [r.value for r in driver.read("eur-per-minute")] == [{"payments": 1, "amount": 2.5},
                                                                {"payments": 2, "amount": 4.0}]
    assert "payments-per_minute-store-changelog-value" in registry_client({"url": "mock://readme"}).get_subjects()


def test_start_up_checks_that_the_registry_answers_and_that_unregistered_writers_have_a_subject():
    import time

    from eos.schema_registry import check_registries

    app = app_("startup")
    app.stream("orders", value_serde=app.avro(ORDER)).to("totals", value_serde=app.avro(ORDER, auto_register=False))
    with pytest.raises(ConfigError, match=r"subject 'totals-value' has no schema .*\(auto_register=False\)"):
        check_registries(app.subtopologies, "sr")
    registry_client({"url": "mock://startup"}).register_schema("totals-value", Schema(ORDER, "AVRO"))
    check_registries(app.subtopologies, "sr")  # now it has one

    away = Application("sr", bootstrap_servers="unused:9092", schema_registry_url="http://127.0.0.1:9")
    away.stream("orders", value_serde=away.avro(ORDER)).to("out")
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"the Schema Registry at http://127.0.0.1:9 does not answer"):
        check_registries(away.subtopologies, "sr")
    assert time.monotonic() - started < 30


def test_a_registry_configured_after_the_serdes_were_made_is_the_one_they_use():
    """`app.configure(schema_registry_url=...)` after the job is built (as `eos chaos` points a job file at its
    run's registry) holds for every serde of the job, those bound to topics and those made already."""
    app = app_("configured-before")
    app.stream("orders", value_serde=app.avro(ORDER)).map_values(
        lambda o: {"id": o["id"], "total": o["price"]}, name="total").to("totals", value_serde=app.avro(TOTAL))
    _, orders = app.input_serdes("orders")
    orders.serialize({"id": 1, "qty": 1, "price": 1.0})  # (a serializer made for the first registry)
    app.configure(schema_registry_url="mock://configured-after")
    orders.serialize({"id": 2, "qty": 1, "price": 1.0})  # (its serializer made again, for the registry now set)
    assert registry_client({"url": "mock://configured-after"}).get_subjects() == ["orders-value"]
    with TopologyTestDriver(app) as driver:
        driver.pipe("orders", "ann", {"id": 3, "qty": 1, "price": 2.5})
        assert [r.value for r in driver.read("totals")] == [{"id": 3, "total": 2.5}]
    assert set(registry_client({"url": "mock://configured-after"}).get_subjects()) == {"orders-value", "totals-value"}
    assert registry_client({"url": "mock://configured-before"}).get_subjects() == ["orders-value"]


def _outage(client, method: str, failures: int, error: Exception) -> list[int]:
    """`client.<method>` fails its next `failures` calls with `error` (a registry that does not answer), then
    answers again; returns the calls made (a list of one count)."""
    real, calls = getattr(client, method), [0]

    def flaky(*args, **kwargs):
        calls[0] += 1
        if calls[0] <= failures:
            raise error
        return real(*args, **kwargs)

    setattr(client, method, flaky)
    return calls


def _transport_error() -> Exception:
    from transactions.schema_registry import _transport_errors

    http = next(e for e in _transport_errors() if e.__module__.startswith("httpx"))
    return http("connection refused")  # (httpx's HTTPError, as the client raises once its own retries are done)



@pytest.mark.parametrize("failure", ["refused", "HTTP 500"])
def test_a_registry_that_does_not_answer_fails_the_attempt_which_runs_again_and_no_record_is_a_dead_letter(failure):
    """Not the record's fault: the batch attempt is aborted and run again (`max_batch_attempts`), as when a
    broker does not answer; once the registry answers, every record is processed once, none a dead letter. An
    outage longer than the attempts fails the batch (Spark runs the task again), still with no dead letter."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    from eos.errors import BatchFailedError

    error = _transport_error() if failure == "refused" else SchemaRegistryError(500, 50001, "Internal Server Error")
    app = app_(f"outage-{failure.replace(' ', '')}")
    app.stream("orders", value_serde=app.avro(ORDER)).map_values(
        lambda o: {"id": o["id"], "total": o["qty"] * o["price"]}, name="total"
    ).to("totals", value_serde=app.avro(TOTAL))
    client = registry_client({"url": app.config.schema_registry_url})
    with TopologyTestDriver(app) as driver:
        driver.pipe("orders", "k", {"id": 1, "qty": 1, "price": 1.0})
        calls = _outage(client, "get_schema", 2, error)  # (the reader's look-up of the record's schema id)
        driver.pipe("orders", "k", {"id": 2, "qty": 2, "price": 1.5})
        assert calls[0] == 3  # two attempts failed, the third read it
        assert [r.value["id"] for r in driver.read("totals")] == [1, 2] and driver.dead_letters() == []
        answering = client.get_schema
        _outage(client, "get_schema", 1_000, error)
        with pytest.raises(BatchFailedError, match=r"failed after 5 attempts: cannot deserialize as avro \(value of "
                                                   r"orders\) now: the Schema Registry"):
            driver.pipe("orders", "k", {"id": 3, "qty": 1, "price": 1.0})
        client.get_schema = answering
        assert driver.read("totals") == [] and driver.dead_letters() == []  # (nothing new: no commit)


def test_what_the_registry_client_raises_is_the_record_s_fault_only_when_the_registry_says_so():
    """`_call`'s line: 404/409/422 (unknown schema or subject, incompatible, invalid) and a payload that does not
    fit are the record's (a dead letter); no answer, 5xx and authentication failures are the attempt's."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    from transactions.schema_registry import RecordSchemaError, RegistryUnavailableError, _call

    def raising(exc):
        def fn(data, ctx):
            raise exc
        return fn

    for exc in (SchemaRegistryError(404, 40403, "Schema not found"), SchemaRegistryError(422, 42201, "Invalid"),
                ValueError("no value and no default for amount")):
        with pytest.raises(RecordSchemaError):
            _call(raising(exc), b"", None, "deserialize", "avro")
    for exc in (_transport_error(), SchemaRegistryError(500, 50001, "Internal"), SchemaRegistryError(401, 401, "No"),
                ConnectionRefusedError("refused"), TimeoutError("timed out")):
        with pytest.raises(RegistryUnavailableError, match="the Schema Registry"):
            _call(raising(exc), b"", None, "serialize", "avro")


def test_a_store_whose_registry_does_not_answer_raises_that_not_a_refusal_of_the_value():
    """The store's serde error says which store and parameter to change only when the serde refused the object;
    a registry outage stays the attempt's error, unannotated (the advice would be wrong) and never a dead letter."""
    from eos.errors import ServiceUnavailableError
    from recovery import KeyValueStore, StoreSpec
    from transactions.schema_registry import RegistryUnavailableError

    def failing(error: Exception):
        def serialize(*args):
            raise error
        return serialize

    app = app_("store-outage")
    serde = app.avro(TOTAL).bind("sr-totals-store-changelog", False)
    view = KeyValueStore(StoreSpec("totals-store", app.avro('"string"'), serde, serdes_from=(None, "aggregate_serde=")))
    serde.codec.serialize = failing(RegistryUnavailableError("the registry is down"))
    with pytest.raises(ServiceUnavailableError) as caught:
        view._encode({"id": 1, "total": 1.0}, 0)
    assert str(caught.value) == "the registry is down"
    serde.codec.serialize = failing(ValueError("no value and no default for total"))
    with pytest.raises(ValueError, match=r"store 'totals-store' cannot take the value \{'id': 1\} \(dict\): .*no value "
                                         r"and no default for total; give aggregate_serde= a serde that takes it"):
        view._encode({"id": 1}, 0)
