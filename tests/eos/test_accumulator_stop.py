"""A stopped context's accumulator server (`eos.driver.spark.shut_accumulator_server`): PySpark's own shutdown
waits for the server's loop, which sits in the handler of the JVM's open connection until its next
once-a-second poll; the driver's exit does not wait for it, yet nothing of the server is left."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest
from pyspark.accumulators import _start_update_server

from eos.driver.spark import shut_accumulator_server


def connected(server, family: int) -> socket.socket:
    """A connection as the JVM keeps one open (a Unix socket's handler asks for no token), once the server's
    loop is inside its handler (it has answered an update)."""
    conn = socket.socket(family, socket.SOCK_STREAM)
    conn.connect(server.server_address)
    if family == socket.AF_INET:
        conn.sendall(server.auth_token.encode())
    conn.sendall((0).to_bytes(4, "big"))  # an update of no accumulators, answered with a byte by the handler
    assert conn.recv(1) == b"\x01"
    return conn


def loop_ends(server, timeout: float = 10.0) -> bool:
    """Whether the server's loop thread ends within `timeout` (it holds the server in its target)."""
    deadline = time.monotonic() + timeout
    while any(getattr(t, "_target", None) == server.serve_forever for t in threading.enumerate()):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("unix", [True, False], ids=["unix-socket", "tcp"])
def test_the_server_is_shut_in_the_background_and_leaves_nothing(tmp_path, unix):
    path = str(tmp_path / "accumulators.sock")
    server = _start_update_server("token-1234", unix, path if unix else None)
    family = socket.AF_UNIX if unix else socket.AF_INET
    jvm = connected(server, family)
    held, shutdown = threading.Event(), server.shutdown
    server.shutdown = lambda: (held.wait(10), shutdown())  # (the wait for the loop, made as long as the test says)
    try:
        shut_accumulator_server(server)
        # returned while the shutdown waits: nothing waits for it
        assert not held.is_set() and not loop_ends(server, timeout=0.0)
        assert server.server_shutdown  # (what the handler of the open connection polls)
        if unix:
            assert not os.path.exists(path)  # no new connection finds it
        held.set()
        assert loop_ends(server)  # the handler saw the shutdown at its next poll, and the loop ended
        for stopping in [t for t in threading.enumerate() if t.name == "accumulator-server-stop"]:
            stopping.join(10)  # (its shutdown closes the listening socket after the loop ended)
            assert not stopping.is_alive()
        with pytest.raises(OSError), socket.socket(family, socket.SOCK_STREAM) as late:
            late.connect(server.server_address)
    finally:
        jvm.close()
