from __future__ import annotations

from decimal import Decimal

import pytest

from eos import ConfigError, DecimalSerde, EosConfig, IntegerSerde, JsonSerde, LongSerde, SerdeError, StringSerde
from eos.origin import decode_origin, encode_origin, origin_of
from eos.serde import serde_for
from eos.worker.progress import CommitMetadata


def test_serdes_round_trip_and_none():
    for serde, value in [(StringSerde(), "héllo"), (JsonSerde(), {"a": [1, 2.5, None]}), (IntegerSerde(), -7),
                         (LongSerde(), 2**40), (DecimalSerde(), Decimal("-12.30")), (DecimalSerde(), 10**30)]:
        assert serde.deserialize(serde.serialize(value)) == value
        assert serde.serialize(None) is None and serde.deserialize(None) is None
    assert IntegerSerde().serialize(1) == b"\x00\x00\x00\x01"  # Kafka's IntegerSerializer layout


def test_json_serde_means_what_the_standard_library_means():
    """The fast encoder must not change a value's meaning: NaN and infinities round-trip (orjson alone
    would write null), non-string keys and huge integers convert as the standard library converts them,
    and what the standard library refuses stays refused."""
    import dataclasses
    import datetime
    import json
    import math

    serde = JsonSerde()
    for value in [{"id": 7, "price": 45.67, "note": "x" * 20, "é": "\u2028"}, [1e16, 1e-7, -0.0, True, None],
                  "null", {"nested": {"a": [None, {"b": 2**63 - 1}]}}]:
        assert json.loads(serde.serialize(value)) == value
        assert serde.deserialize(serde.serialize(value)) == value
    nan = serde.deserialize(serde.serialize({"x": math.nan, "y": math.inf, "z": -math.inf}))
    assert math.isnan(nan["x"]) and nan["y"] == math.inf and nan["z"] == -math.inf
    assert math.isnan(serde.deserialize(b'{"x": NaN}')["x"])  # outputs written before read as before
    assert serde.serialize({1: "a", 2**70: [2**80]}) == json.dumps({"1": "a", str(2**70): [2**80]},
                                                                   separators=(",", ":")).encode()

    @dataclasses.dataclass
    class Point:
        x: int

    for refused in (Point(1), datetime.datetime(2026, 1, 1), {1, 2}):
        with pytest.raises(SerdeError, match="as JSON"):
            serde.serialize(refused)


def test_json_outputs_occupy_about_their_size():
    """A batch holds its outputs until the commit: a serialized value must not keep the encoder's buffer
    (orjson's is 4 KiB whatever the value)."""
    import tracemalloc

    serde = JsonSerde()
    value = {"id": 12345, "customer": "k1234", "qty": 3, "price": 51.5, "note": "x" * 20}
    tracemalloc.start()
    try:
        held = [serde.serialize(value) for _ in range(1000)]
        allocated, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert allocated / len(held) < len(held[0]) + 200, f"{allocated / len(held):.0f} B per {len(held[0])}-byte value"


def test_serde_errors_say_what_failed():
    with pytest.raises(SerdeError, match="as JSON"):
        JsonSerde().deserialize(b"{nope")
    with pytest.raises(SerdeError, match="UTF-8"):
        StringSerde().deserialize(b"\xff\xfe")
    with pytest.raises(SerdeError, match="expected 4 bytes"):
        IntegerSerde().deserialize(b"\x00")
    with pytest.raises(SerdeError, match="expects str"):
        StringSerde().serialize(3)
    with pytest.raises(ValueError, match="unknown serde"):
        serde_for("avro")


def test_the_decimal_serde_keeps_numbers_exact_and_refuses_floats():
    serde = serde_for("decimal")
    assert serde.serialize(Decimal("0.1") + Decimal("0.2")) == b"0.3"  # as floats it would be 0.30000000000000004
    assert serde.deserialize(b"12.30") == Decimal("12.30") and serde.serialize(Decimal("1E+3")) == b"1E+3"
    with pytest.raises(SerdeError, match=r"expects Decimal or int, got float; a float is not exact: Decimal\(str"):
        serde.serialize(0.1)
    for refused in (True, "1.5"):
        with pytest.raises(SerdeError, match="expects Decimal or int"):
            serde.serialize(refused)
    with pytest.raises(SerdeError, match="finite"):
        serde.serialize(Decimal("NaN"))
    for malformed, why in ((b"12,5", "not a decimal number"), (b"Infinity", "not a finite number"),
                           (b"\xff", "codec can't decode")):
        with pytest.raises(SerdeError, match=f"as decimal: .*{why}"):
            serde.deserialize(malformed)


def test_origin_header_round_trip_and_malformed():
    raw = encode_origin("orders.v2-x", 3, 12345, 2)
    assert decode_origin(raw) == ("orders.v2-x", 3, 12345, 2)
    assert origin_of([("other", b"x"), ("eos.origin", raw)]).offset == 12345
    for bad in (None, b"", b"topic:1:2", b"t:a:b:c", b":1:2:3", b"\xff"):
        assert decode_origin(bad) is None


def test_commit_metadata_round_trip():
    full = CommitMetadata(1700, "abc", "Xk3", {0: 1_795_000_000_000, 2: 5000})
    assert CommitMetadata.decode(full.encode()) == full
    assert CommitMetadata.decode(CommitMetadata(1700, "abc").encode()) == CommitMetadata(1700, "abc")
    assert CommitMetadata.decode(None) == CommitMetadata() == CommitMetadata.decode("someone else's metadata")
    assert CommitMetadata.decode("eos1;st=x;pu=1:2,bad,3:-4").punctuation == {1: 2, 3: -4}


def test_config_fails_fast_with_what_to_change():
    with pytest.raises(ConfigError, match="application_id"):
        EosConfig("bad id!", "b:9092")
    with pytest.raises(ConfigError, match="Raise transaction_timeout_ms to at least 30000"):
        EosConfig("app", "b:9092", batch_timeout=30, transaction_timeout_ms=10_000)
    with pytest.raises(ConfigError, match=r"enable\.idempotence"):
        EosConfig("app", "b:9092", producer_config={"enable.idempotence": False})
    with pytest.raises(ConfigError, match="on_bad_record"):
        EosConfig("app", "b:9092", on_bad_record="drop")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="bootstrap_servers is empty"):
        EosConfig("app", "").require_bootstrap()
    cfg = EosConfig("app", "b:9092")
    assert cfg.dlq_topic == "app-dlq" and cfg.group_id == "app"
    assert cfg.with_overrides(trigger_interval=None, max_records_per_batch=5).max_records_per_batch == 5
