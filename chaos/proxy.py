"""A TCP proxy per broker listener, for network faults between clients and brokers.

The proxies run in a child process (asyncio), one listening port per route, controlled through a pipe:

* `latency(ms)`: every chunk is delivered `ms` later in each direction (a timestamped queue per
  direction, so latency does not become a bandwidth cap);
* `blackhole()`: nothing is forwarded and new connections hang before reaching the broker, so requests
  time out (data already sent is held, and delivered late when healed, as after a network stall);
* `reset()`: every open connection is closed with a TCP RST; new connections work;
* `heal()`: back to normal.

Each command applies to all routes or to the routes of the given broker node ids.
"""

from __future__ import annotations

import asyncio
import functools
import multiprocessing
import socket
import struct
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ProxyGroup", "Route"]

HOST = "127.0.0.1"


@dataclass(frozen=True)
class Route:
    node_id: int
    listen_port: int
    target_port: int


@dataclass
class _State:
    route: Route
    latency: float = 0.0
    open: asyncio.Event = field(default_factory=asyncio.Event)
    writers: set[asyncio.StreamWriter] = field(default_factory=set)


async def _pump(state: _State, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def read() -> None:
        while True:
            data = await reader.read(65536)
            await queue.put((time.monotonic() + state.latency, data))
            if not data:
                return

    async def write() -> None:
        while True:
            due, data = await queue.get()
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await state.open.wait()
            if not data:
                writer.close()
                return
            writer.write(data)
            await writer.drain()

    reading = asyncio.ensure_future(read())
    try:
        await write()
    finally:
        reading.cancel()


async def _handle(state: _State, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
    state.writers.add(client_writer)
    try:
        await state.open.wait()  # blackholed: the connection hangs here
        try:
            up_reader, up_writer = await asyncio.open_connection(HOST, state.route.target_port)
        except OSError:
            return
        state.writers.add(up_writer)
        try:
            await asyncio.gather(_pump(state, client_reader, up_writer), _pump(state, up_reader, client_writer))
        except (ConnectionError, OSError):
            pass
        finally:
            state.writers.discard(up_writer)
            _abort(up_writer)
    finally:
        state.writers.discard(client_writer)
        _abort(client_writer)


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST (SO_LINGER 0), not a polite FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


def _serve(routes: list[Route], conn: Any) -> None:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    states = {r.listen_port: _State(r) for r in routes}
    servers = []
    for state in states.values():
        state.open.set()
        servers.append(loop.run_until_complete(asyncio.start_server(
            functools.partial(_handle, state), HOST, state.route.listen_port, reuse_address=True)))

    def apply(command: dict[str, Any]) -> None:
        nodes = command.get("nodes")
        for state in states.values():
            if nodes is not None and state.route.node_id not in nodes:
                continue
            op = command["op"]
            if op == "latency":
                state.latency = command["ms"] / 1000
            elif op == "blackhole":
                state.open.clear()
            elif op == "heal":
                state.latency = 0.0
                state.open.set()
            elif op == "reset":
                for writer in list(state.writers):
                    _abort(writer)

    def control() -> None:
        while True:
            command = conn.recv()
            if command["op"] == "stop":
                loop.call_soon_threadsafe(loop.stop)
                return
            done = threading.Event()
            loop.call_soon_threadsafe(_apply_then_set, apply, command, done)
            done.wait(10)
            conn.send("ok")

    threading.Thread(target=control, daemon=True).start()
    conn.send("ready")
    loop.run_forever()


class ProxyGroup:
    """Proxies for a set of routes, in a child process."""

    def __init__(self, routes: Iterable[Route]) -> None:
        self.routes = list(routes)
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=_serve, args=(self.routes, child), daemon=True, name="chaos-proxies")
        self._process.start()
        if not self._conn.poll(30) or self._conn.recv() != "ready":
            raise RuntimeError("proxies did not start")

    def _send(self, op: str, nodes: Iterable[int] | None = None, **params: Any) -> None:
        self._conn.send({"op": op, "nodes": None if nodes is None else list(nodes), **params})
        if not self._conn.poll(15) or self._conn.recv() != "ok":
            raise RuntimeError(f"proxy command {op} was not acknowledged")

    def latency(self, ms: float, nodes: Iterable[int] | None = None) -> None:
        self._send("latency", nodes, ms=ms)

    def blackhole(self, nodes: Iterable[int] | None = None) -> None:
        self._send("blackhole", nodes)

    def reset(self, nodes: Iterable[int] | None = None) -> None:
        self._send("reset", nodes)

    def heal(self, nodes: Iterable[int] | None = None) -> None:
        self._send("heal", nodes)

    def close(self) -> None:
        if self._process.is_alive():
            self._conn.send({"op": "stop"})
            self._process.join(5)
            if self._process.is_alive():
                self._process.kill()


def _apply_then_set(apply: Any, command: dict[str, Any], done: threading.Event) -> None:
    apply(command)
    done.set()
