"""The chaos proxy against a local echo server (pure networking, no Kafka)."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from chaos.proxy import ProxyGroup, Route
from localkafka.config import free_port


@pytest.fixture
def echo_port():
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def echo(conn):
        try:
            for data in iter(lambda: conn.recv(4096), b""):
                conn.sendall(data)
        except OSError:  # the proxy resets connections on purpose
            pass

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=echo, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield port
    server.close()


@pytest.fixture
def proxy(echo_port):
    group = ProxyGroup([Route(1, free_port(), echo_port)])
    yield group
    group.close()


def roundtrip(port, payload=b"ping", timeout=5.0):
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        t0 = time.monotonic()
        s.sendall(payload)
        data = s.recv(100)
        return data, time.monotonic() - t0


def test_forwards_and_adds_latency(proxy):
    port = proxy.routes[0].listen_port
    assert roundtrip(port)[0] == b"ping"
    # A latency large enough that a loaded machine's own delays (a CI run measured 0.38 s for a
    # healed round trip) cannot be taken for it, nor hide its removal.
    proxy.latency(1000)
    data, elapsed = roundtrip(port)
    assert data == b"ping" and elapsed >= 1.9  # 1 s each way
    proxy.heal()
    assert roundtrip(port)[1] < 1.0  # no added delay left in either direction


def test_blackhole_times_out_and_heals(proxy):
    port = proxy.routes[0].listen_port
    proxy.blackhole()
    with pytest.raises(socket.timeout):
        roundtrip(port, timeout=1.0)
    proxy.heal()
    assert roundtrip(port)[0] == b"ping"


def test_reset_closes_open_connections(proxy):
    port = proxy.routes[0].listen_port
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"a")
        assert s.recv(10) == b"a"
        proxy.reset()
        time.sleep(0.2)
        with pytest.raises((ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
            s.sendall(b"b")
            if not s.recv(10):
                raise ConnectionResetError("closed")
    assert roundtrip(port)[0] == b"ping"  # new connections work
