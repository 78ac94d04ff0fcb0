"""A Schema Registry for tests, demos and benchmarks, shared by every process of a job.

In this order (as `localkafka.provision` picks a Kafka cluster):

1. an existing registry named by `EOS_SCHEMA_REGISTRY_URL` (Confluent's, Apicurio's `/apis/ccompat/v7`,
   Karapace, Redpanda's);
2. an Apicurio Registry container (its Confluent-compatible API), when a Docker daemon answers a ping;
3. a small in-memory registry served over HTTP on loopback by a process of its own:
   `python -m localkafka.registry [--port N]`.

Why (3): no registry installs from the package registries the suite's machines reach (Confluent's is not on
Maven Central, Karapace not on PyPI, Apicurio's server only as partial library jars there), and confluent-kafka's
`mock://` registry lives in one process, while a job on Spark serializes in its Python workers, other processes
that must agree on schema ids. This one speaks the part of the Confluent REST API that confluent-kafka's real
client calls for serializing, deserializing and start-up checks (`POST /subjects/{s}/versions`,
`POST /subjects/{s}`, `GET /subjects/{s}/versions/{v}`, `GET /schemas/ids/{id}`, `GET /subjects`), with
Confluent's ids (one per distinct schema, shared by the subjects that register it) and errors (HTTP 404 with
`{"error_code": 40403, "message": "Schema not found"}`, 40401 for a subject, 40402 for a version). What it
leaves out: compatibility checks, validating a schema at registration, soft deletes, contexts, auth.

For outage tests, `POST /eos/outage {"seconds": N}` makes it answer every other request with HTTP 503 for N
seconds, its schemas kept (a registry restarted would have lost them).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = ["RegistryEndpoint", "provide_registry", "local_registry", "serve", "registry_answers", "ENV_REGISTRY"]

ENV_REGISTRY = "EOS_SCHEMA_REGISTRY_URL"
APICURIO_IMAGE = os.environ.get("EOS_TESTCONTAINERS_REGISTRY_IMAGE", "apicurio/apicurio-registry:3.0.9")


@dataclass(frozen=True)
class RegistryEndpoint:
    url: str
    source: Literal["environment", "testcontainers", "local"]


@contextmanager
def provide_registry() -> Iterator[RegistryEndpoint]:
    if env := os.environ.get(ENV_REGISTRY):
        yield RegistryEndpoint(env, "environment")
        return
    from localkafka.provision import docker_wanted

    if docker_wanted():
        with _apicurio_container() as url:
            yield RegistryEndpoint(url, "testcontainers")
        return
    with local_registry() as url:
        yield RegistryEndpoint(url, "local")


@contextmanager
def local_registry(timeout: float = 30.0) -> Iterator[str]:
    """Start `python -m localkafka.registry` on a free loopback port; its URL until the block ends."""
    process = subprocess.Popen([sys.executable, "-m", "localkafka.registry", "--port", "0"],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()  # "listening on http://127.0.0.1:PORT"
        if not line.startswith("listening on "):
            raise RuntimeError(f"the local schema registry did not start (exit code {process.poll()}): {line!r}")
        url = line.removeprefix("listening on ")
        _wait_answers(url, timeout)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()


@contextmanager
def _apicurio_container() -> Iterator[str]:
    from testcontainers.core.container import DockerContainer

    with DockerContainer(APICURIO_IMAGE).with_exposed_ports(8080) as container:
        url = (f"http://{container.get_container_host_ip()}:{container.get_exposed_port(8080)}"
               "/apis/ccompat/v7")
        _wait_answers(url, 180)
        yield url


def registry_answers(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/subjects", timeout=timeout) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def _wait_answers(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not registry_answers(url):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the schema registry at {url} did not answer in {timeout:.0f} s")
        time.sleep(0.2)


class _Store:
    """Subjects and schemas as Confluent's registry keeps them: one id per distinct schema (type, text and
    references), shared by every subject that registers it; versions per subject from 1."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.schemas: list[dict[str, Any]] = []  # id - 1 -> {"schema", "schemaType", "references"}
        self.subjects: dict[str, list[int]] = {}  # subject -> ids by version - 1

    @staticmethod
    def _canonical(body: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
            raise _Error(422, 42201, "the request has no schema")
        return {"schema": body["schema"], "schemaType": body.get("schemaType") or "AVRO",
                "references": body.get("references") or []}

    def register(self, subject: str, body: dict[str, Any]) -> dict[str, Any]:
        schema = self._canonical(body)
        with self.lock:
            if schema not in self.schemas:
                self.schemas.append(schema)
            schema_id = self.schemas.index(schema) + 1
            versions = self.subjects.setdefault(subject, [])
            if schema_id not in versions:
                versions.append(schema_id)
            return {"id": schema_id}

    def lookup(self, subject: str, body: dict[str, Any]) -> dict[str, Any]:
        schema = self._canonical(body)
        with self.lock:
            for version, schema_id in enumerate(self._versions(subject), start=1):
                if self.schemas[schema_id - 1] == schema:
                    return self._registered(subject, version, schema_id)
        raise _Error(404, 40403, "Schema not found")

    def version(self, subject: str, version: str) -> dict[str, Any]:
        with self.lock:
            versions = self._versions(subject)
            number = len(versions) if version in ("latest", "-1") else int(version)
            if not 1 <= number <= len(versions):
                raise _Error(404, 40402, f"Version {version} not found.")
            return self._registered(subject, number, versions[number - 1])

    def schema(self, schema_id: int) -> dict[str, Any]:
        with self.lock:
            if not 1 <= schema_id <= len(self.schemas):
                raise _Error(404, 40403, "Schema not found")
            return dict(self.schemas[schema_id - 1])

    def subject_names(self, prefix: str = "") -> list[str]:
        with self.lock:
            return [s for s in self.subjects if s.startswith(prefix)]

    def versions(self, subject: str) -> list[int]:
        with self.lock:
            return list(range(1, len(self._versions(subject)) + 1))

    def delete(self, subject: str) -> list[int]:
        with self.lock:
            return list(range(1, len(self.subjects.pop(subject, [])) + 1))

    def _versions(self, subject: str) -> list[int]:
        if subject not in self.subjects:
            raise _Error(404, 40401, f"Subject '{subject}' not found.")
        return self.subjects[subject]

    def _registered(self, subject: str, version: int, schema_id: int) -> dict[str, Any]:
        return {"subject": subject, "version": version, "id": schema_id, **self.schemas[schema_id - 1]}


class _Routes:
    """The part of the Confluent REST API that serializers, deserializers and start-up checks call."""

    def __init__(self) -> None:
        self.store = _Store()
        self.down_until = 0.0  # (monotonic) an outage's end: every request but the outage's own answers 503

    def handle(self, method: str, parts: list[str], query: dict[str, str], body: Any) -> Any:
        store = self.store
        if (method, parts) == ("POST", ["eos", "outage"]):
            self.down_until = time.monotonic() + float((body or {}).get("seconds", 0))
            return {"down_for_s": max(0.0, self.down_until - time.monotonic())}
        if time.monotonic() < self.down_until:
            raise _Error(503, 50301, "Service Unavailable (an outage of the test registry)")
        match method, parts:
            case "GET", ["subjects"]:
                return store.subject_names(query.get("subjectPrefix", ""))
            case "GET", ["subjects", subject, "versions"]:
                return store.versions(subject)
            case "GET", ["subjects", subject, "versions", version]:
                return store.version(subject, version)
            case "POST", ["subjects", subject, "versions"]:
                return store.register(subject, body)
            case "POST", ["subjects", subject]:
                return store.lookup(subject, body)
            case "DELETE", ["subjects", subject]:
                return store.delete(subject)
            case "GET", ["schemas", "ids", schema_id]:
                return store.schema(int(schema_id))
            case "GET", ["schemas", "types"]:
                return ["AVRO", "PROTOBUF", "JSON"]
            case "GET", ["config", *_]:
                return {"compatibilityLevel": "NONE"}
            case "PUT", ["config", *_]:
                return {"compatibility": (body or {}).get("compatibility", "NONE")}
        raise _Error(404, 404, f"no route {method} /{'/'.join(parts)}")


class _Error(Exception):
    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _handler(routes: _Routes) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self, method: str) -> None:
            split = urlsplit(self.path)
            parts = [unquote(p) for p in split.path.strip("/").split("/") if p]
            query = {k: v[-1] for k, v in parse_qs(split.query).items()}
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length)) if length else None
                self._reply(200, routes.handle(method, parts, query, body))
            except _Error as exc:
                self._reply(exc.status, {"error_code": exc.code, "message": exc.message})
            except (ValueError, TypeError, KeyError) as exc:  # a body or path the routes cannot read
                self._reply(422, {"error_code": 42201, "message": f"{type(exc).__name__}: {exc}"})

        def _reply(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_PUT(self) -> None:
            self._serve("PUT")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

        def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read stdout for the URL
            pass

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client killed mid-request: nothing to say
            super().handle_error(request, client_address)


def serve(host: str = "127.0.0.1", port: int = 0, ready: Callable[[str], None] | None = None) -> None:
    """Serve an empty in-memory registry until the process ends; `ready(url)` once it listens."""
    server = _Server((host, port), _handler(_Routes()))
    url = f"http://{host}:{server.server_address[1]}"
    if ready is not None:
        ready(url)
    server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m localkafka.registry", description=(
        "Serve an in-memory Schema Registry (the Confluent REST API its clients use) on loopback, for tests and "
        "for trying jobs out: schemas live until the process ends."))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081, help="0 picks a free port (default 8081)")
    args = parser.parse_args(argv)

    def ready(url: str) -> None:  # the first line: `local_registry` and scripts read the URL from it
        sys.stdout.write(f"listening on {url}\n")
        sys.stdout.flush()

    try:
        serve(args.host, args.port, ready=ready)
    except OSError as exc:  # the port is taken, the host is not this machine's
        parser.exit(2, f"cannot listen on {args.host}:{args.port}: {exc.strerror}; pick another with --port "
                       "(0: any free port)\n")
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
