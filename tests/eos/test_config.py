"""Settings a user gets wrong: names, types, librdkafka properties, conflicting timeouts."""

from __future__ import annotations

import pytest

from eos import Application, ConfigError, EosConfig


def build(**settings):
    return EosConfig.create(application_id="app", bootstrap_servers="b:9092", **settings)


def test_an_unknown_setting_names_the_closest_ones_and_lists_all():
    with pytest.raises(ConfigError) as err:
        Application("app", bath_timeout=5)
    text = str(err.value)
    assert "unknown setting 'bath_timeout'" in text and "Did you mean 'batch_timeout'?" in text
    assert "max_records_per_batch" in text  # the list of valid names
    with pytest.raises(ConfigError, match="unknown setting 'nonsense'"):
        build().with_overrides(nonsense=1)


def test_a_kafka_streams_setting_says_what_it_is_here():
    for settings, says in (
            ({"commit_interval_ms": 100}, "Kafka Streams' commit.interval.ms: each batch commits once: "
                                          "trigger_interval is the seconds between batches here."),
            ({"commit.interval.ms": 100}, "Kafka Streams' commit.interval.ms: each batch commits once"),
            ({"statestore_cache_max_bytes": 1}, "Kafka Streams' statestore.cache.max.bytes is cache_max_bytes here."),
            ({"num_stream_threads": 4}, "the master's cores (local[N], or the cluster's) set how many run at once"),
            ({"processing_guarantee": "exactly_once_v2"},
             "processing_guarantee must be one of 'exactly_once', 'at_least_once', got 'exactly_once_v2' (Kafka "
             "Streams' exactly_once_v2 is exactly_once here")):
        with pytest.raises(ConfigError) as err:
            Application("app", **settings)
        assert says in str(err.value), str(err.value)


def test_values_given_as_strings_are_converted_or_refused_naming_the_setting():
    cfg = build(batch_timeout="30", max_records_per_batch="1000", lineage="false", num_standby_replicas="2")
    assert (cfg.batch_timeout, cfg.max_records_per_batch, cfg.lineage, cfg.num_standby_replicas) == (30.0, 1000,
                                                                                                     False, 2)
    for name, value, says in (("batch_timeout", "soon", "batch_timeout must be a number"),
                              ("max_records_per_batch", "1.5", "max_records_per_batch must be an integer"),
                              ("lineage", "maybe", "lineage must be true or false"),
                              ("on_bad_record", "drop", "on_bad_record must be one of 'dead_letter', 'fail'"),
                              ("state_dir", 5, "state_dir must be a string"),
                              ("producer_config", "linger.ms=5", "producer_config must be a mapping")):
        with pytest.raises(ConfigError, match=says):
            build(**{name: value})


def test_acks_minus_one_is_all_and_weakening_settings_are_refused():
    assert build(producer_config={"acks": -1}).producer_config == {"acks": -1}
    assert build(producer_config={"acks": "all"})
    with pytest.raises(ConfigError, match="acks=1 is not allowed"):
        build(producer_config={"acks": 1})
    with pytest.raises(ConfigError, match=r"auto\.offset\.reset.*auto_offset_reset instead"):
        build(consumer_config={"auto.offset.reset": "latest"})


def test_a_transaction_timeout_in_the_passthrough_must_agree_with_the_setting():
    assert build(transaction_timeout_ms=90_000, producer_config={"transaction.timeout.ms": 90_000})
    with pytest.raises(ConfigError, match="set transaction_timeout_ms instead"):
        build(producer_config={"transaction.timeout.ms": 1000})


def test_librdkafka_checks_property_names_and_values_and_we_suggest_the_right_name():
    with pytest.raises(ConfigError, match=r"""producer_config: No such configuration property: "linger.msec". """
                                          r"""Did you mean 'linger.ms'\?"""):
        build(producer_config={"linger.msec": 5})
    with pytest.raises(ConfigError, match=r"consumer_config: Invalid value .*fetch\.wait\.max\.ms"):
        build(consumer_config={"fetch.wait.max.ms": "soon"})
    assert build(producer_config={"linger.ms": 5, "compression.type": "lz4"}, consumer_config={"fetch.min.bytes": 1})
