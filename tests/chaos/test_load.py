"""The chaos harness's load generator (a real librdkafka producer, no broker needed here)."""

from __future__ import annotations

import socket
import time

from chaos.load import LoadGenerator


def test_the_load_producer_s_log_lines_go_to_the_run_s_file_not_to_the_terminal(tmp_path, capfd):
    """A broker bounced refuses the load's connections; librdkafka says so at every attempt, and those lines
    would drown the harness's own report on the terminal."""
    with socket.socket() as s:  # a port nothing listens on: every connection refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "load.log"
    load = LoadGenerator(f"127.0.0.1:{port}", "t", records=1, rate=1, keys=1, seed=0, log=log)
    deadline = time.monotonic() + 20
    while "Connection refused" not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
        load._producer.poll(0.2)  # (what its produce loop does: the client's logs are served by its poll)
    load.close()
    assert "Connection refused" in log.read_text()
    assert "Connection refused" not in capfd.readouterr().err


def test_a_user_s_records_are_serialized_as_the_job_reads_each_topic():
    import pytest

    from chaos.load import Encoder
    from eos import Application

    app = Application("loaded", bootstrap_servers="unused:9092")
    app.stream("views", value_serde="json").to("out")
    app.stream("counts", key_serde="string", value_serde="long").to("out2")
    encode = Encoder(app.input_serdes, "load = 'load.py:record'")
    assert encode(0, "views", "u1", {"page": "home"}) == (b"u1", b'{"page":"home"}')
    assert encode(1, "counts", "u1", 7) == (b"u1", (7).to_bytes(8, "big"))  # (the job's long, not JSON text)
    assert encode(2, "counts", b"raw", b"\x00poison") == (b"raw", b"\x00poison")  # bytes as given
    assert encode(3, "elsewhere", "k", {"a": 1}) == (b"k", b'{"a": 1}')  # a topic the job does not read
    with pytest.raises(ValueError, match=r"load = 'load.py:record': record 4's value for 'counts', 'seven' \(str\), "
                                         r"is not what the job reads 'counts' with \(SerdeError: .*\); return one "
                                         r"its value serde takes, or bytes"):
        encode(4, "counts", "u1", "seven")
