"""A local Apache Kafka (KRaft) cluster of 1 or 3 nodes, started from the Maven-resolved jars.

The cluster lives in one directory: `cluster.json` (ports, pids, cluster id), `bootstrap.env`,
`node-<id>/` (config and data) and `logs/broker-<id>.log`. Any process can reopen it from that directory
(the CLI does), so `eos cluster up`, `status` and `down` can run as separate commands.

Per-broker controls for chaos tests: `kill` (SIGKILL), `stop` (clean, SIGTERM), `pause`/`resume`
(SIGSTOP/SIGCONT), `start` and `restart`.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from localkafka.classdata import archive_options
from localkafka.config import ClusterSettings, NodeSpec, free_port, render_node_properties
from localkafka.jars import LOG4J_CONFIG, KafkaJars, check_java, ensure_kafka_jars
from localkafka.process import ProcState, proc_state, send, wait_dead
from localkafka.readiness import live_broker_ids, node_answers, wait_ready

__all__ = ["LocalCluster", "BrokerStatus", "ClusterError", "check_features", "parse_feature", "format_features"]

STATE_FILE = "cluster.json"
ENV_FILE = "bootstrap.env"
#: A Kafka feature's name (`transaction.version`, `group.version`, `metadata.version`)
_FEATURE_NAME = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+")


class ClusterError(RuntimeError):
    pass


@dataclass(frozen=True)
class BrokerStatus:
    node_id: int
    state: str  # running | paused | dead
    pid: int | None
    bootstrap: str
    answers: bool  # the broker answers metadata requests on its own listener
    in_metadata: bool  # the broker is registered in the cluster metadata (lags a SIGKILL by its session timeout)


class LocalCluster:
    def __init__(self, root: str | Path, brokers: int = 1, *, heap: str = "512m",
                 extra_config: dict[str, str] | None = None, proxied: bool = False,
                 archive_to: Path | None = None, features: dict[str, int] | None = None) -> None:
        """`proxied`: advertise CLIENT and INTERNAL on separate ports for a TCP proxy per broker (start the
        proxies from `proxy_routes()` before `up()`), and add an unproxied DIRECT listener. `archive_to`: the
        brokers write the classes they loaded there as they exit (`localkafka.classdata` makes its archive so);
        otherwise they map that archive when there is one. `features`: the levels the storage is formatted
        with (`StorageTool format --feature NAME=LEVEL`), e.g. `{"transaction.version": 1}` for the
        transactions of a Kafka before 4.0; the release's defaults otherwise."""
        if brokers not in (1, 3):
            raise ClusterError(f"brokers must be 1 or 3, got {brokers}")
        self.features = check_features(features or {})
        self.root = Path(root).expanduser().resolve()
        self.settings = ClusterSettings(brokers, dict(extra_config or {}))
        self.heap = heap
        self.proxied = proxied
        self.cluster_id = _new_cluster_id()
        self.nodes: list[NodeSpec] = []
        self.archive_to = archive_to
        self._jars: KafkaJars | None = None
        self._java_bin: str | None = None
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._starting: set[int] = set()  # started by this process and not yet seen ready

    # ----------------------------------------------------------------- persistence
    @classmethod
    def open(cls, root: str | Path) -> LocalCluster:
        """Reopen a cluster created earlier in `root` (by this or another process)."""
        path = Path(root).expanduser().resolve() / STATE_FILE
        if not path.is_file():
            raise ClusterError(f"no cluster in {path.parent} (run `eos cluster up` first)")
        data = json.loads(path.read_text())
        cluster = cls(path.parent, data["brokers"], heap=data.get("heap", "512m"), extra_config=data.get("extra", {}),
                      proxied=data.get("proxied", False), features=data.get("features", {}))
        cluster.cluster_id = data["cluster_id"]
        cluster.nodes = [NodeSpec(**n) for n in data["nodes"]]
        return cluster

    @classmethod
    def exists(cls, root: str | Path) -> bool:
        return (Path(root).expanduser() / STATE_FILE).is_file()

    def _save(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        data = {"brokers": self.settings.brokers, "heap": self.heap, "extra": self.settings.extra,
                "proxied": self.proxied, "features": self.features,
                "cluster_id": self.cluster_id, "nodes": [asdict(n) for n in self.nodes]}
        tmp = self.root / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(self.root / STATE_FILE)
        (self.root / ENV_FILE).write_text(f"EOS_BOOTSTRAP_SERVERS={self.bootstrap_servers}\n")

    # ----------------------------------------------------------------- addresses
    @property
    def bootstrap_servers(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    @property
    def direct_bootstrap_servers(self) -> str:
        """Bootstrap addresses that bypass the proxies (same as `bootstrap_servers` when not proxied)."""
        return ",".join(n.direct_bootstrap for n in self.nodes)

    def proxy_routes(self) -> list[tuple[int, int, int]]:
        """(node id, proxy port, broker port) for every proxied listener: client and inter-broker traffic."""
        if not self.nodes:
            self._allocate_nodes()
        return [(n.node_id, adv, real) for n in self.nodes
                for adv, real in ((n.advertised_client_port, n.client_port),
                                  (n.advertised_internal_port, n.internal_port)) if adv]

    def node(self, node_id: int) -> NodeSpec:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise ClusterError(f"no broker with node id {node_id}; nodes are {[n.node_id for n in self.nodes]}")

    def _node_dir(self, node: NodeSpec) -> Path:
        return self.root / f"node-{node.node_id}"

    def _config_path(self, node: NodeSpec) -> Path:
        return self._node_dir(node) / "server.properties"

    def log_path(self, node_id: int) -> Path:
        return self.root / "logs" / f"broker-{node_id}.log"

    def _marker(self, node: NodeSpec) -> str:
        return str(self._config_path(node))

    # ----------------------------------------------------------------- lifecycle
    def is_running(self) -> bool:
        return any(self.state(n.node_id) != ProcState.DEAD for n in self.nodes)

    def up(self, timeout: float = 180.0) -> LocalCluster:
        """Format storage (first time), start every node and wait until transactions work."""
        if self.nodes and self.is_running():
            raise ClusterError(f"a cluster is already running in {self.root} at {self.bootstrap_servers}")
        self._jars, self._java_bin = ensure_kafka_jars(), check_java()
        if not self.nodes:
            self._allocate_nodes()
        for node in self.nodes:
            self._write_config(node)
        self._save()
        with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
            list(pool.map(self._format, self.nodes))
        for node in self.nodes:
            self._spawn(node)
        self._save()
        self.wait_ready(timeout=timeout)
        return self

    def wait_ready(self, timeout: float = 120.0, brokers: int | None = None) -> None:
        """Block until `brokers` (default: all running nodes) are in metadata and a transactional
        producer can initialise."""
        expected = brokers if brokers is not None else sum(
            self.state(n.node_id) == ProcState.RUNNING for n in self.nodes)
        try:
            wait_ready(self.direct_bootstrap_servers, expected, timeout, self._check_started)
        except TimeoutError as exc:
            raise ClusterError(f"{exc}; broker logs are in {self.root / 'logs'}") from None
        self._check_started()  # (ready, and the brokers that answered are these)
        self._starting.clear()

    def _check_started(self) -> None:
        """Raise when a broker this process is starting has exited: waiting out the timeout would only hide why."""
        for node_id in self._starting:
            child = self._children[node_id]
            if child.poll() is not None:
                log = self.log_path(node_id)
                try:
                    tail = "\n".join(log.read_text(errors="replace").splitlines()[-12:])
                except OSError:
                    tail = "(no log)"
                raise ClusterError(f"broker {node_id} exited while starting (status {child.returncode}); the end of "
                                   f"{log}:\n{tail}")

    def down(self, *, keep_data: bool = False, timeout: float = 30.0) -> None:
        """Stop every node (SIGTERM, then SIGKILL after `timeout`) and, unless `keep_data`, delete the data."""
        self._starting.clear()
        alive = [n for n in self.nodes if self.state(n.node_id) != ProcState.DEAD]
        for node in alive:
            send(node.pid, signal.SIGCONT)  # a paused JVM cannot handle SIGTERM
            send(node.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for node in alive:
            if not wait_dead(node.pid, self._marker(node), max(0.0, deadline - time.monotonic())):
                send(node.pid, signal.SIGKILL)
                wait_dead(node.pid, self._marker(node), 10)
        for node in self.nodes:
            node.pid = None
        if keep_data:
            self._save()
        elif self.root.exists():
            shutil.rmtree(self.root)

    # ----------------------------------------------------------------- per-broker faults
    def state(self, node_id: int) -> str:
        node = self.node(node_id)
        return proc_state(node.pid, self._marker(node))

    def kill(self, node_id: int) -> None:
        """SIGKILL: no controlled shutdown, no flush."""
        node = self.node(node_id)
        self._starting.discard(node_id)
        if self.state(node_id) != ProcState.DEAD:
            send(node.pid, signal.SIGKILL)
            wait_dead(node.pid, self._marker(node), 10)

    def stop(self, node_id: int, timeout: float = 60.0) -> None:
        """Clean stop: SIGTERM and wait for the controlled shutdown (SIGKILL after `timeout`)."""
        node = self.node(node_id)
        self._starting.discard(node_id)
        if self.state(node_id) == ProcState.DEAD:
            return
        send(node.pid, signal.SIGCONT)
        send(node.pid, signal.SIGTERM)
        if not wait_dead(node.pid, self._marker(node), timeout):
            send(node.pid, signal.SIGKILL)
            wait_dead(node.pid, self._marker(node), 10)

    def pause(self, node_id: int) -> None:
        node = self.node(node_id)
        if self.state(node_id) == ProcState.RUNNING:
            send(node.pid, signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        node = self.node(node_id)
        if self.state(node_id) == ProcState.PAUSED:
            send(node.pid, signal.SIGCONT)

    def start(self, node_id: int, *, wait: bool = True, timeout: float = 120.0) -> None:
        node = self.node(node_id)
        if self.state(node_id) != ProcState.DEAD:
            return
        self._spawn(node)
        self._save()
        if wait:
            self.wait_broker_live(node_id, timeout)

    def restart(self, node_id: int, *, hard: bool = False, timeout: float = 120.0) -> None:
        """Bounce one broker: SIGKILL (`hard`) or clean stop, then start it and wait until it rejoins."""
        (self.kill if hard else self.stop)(node_id)
        self.start(node_id, wait=True, timeout=timeout)

    def wait_broker_live(self, node_id: int, timeout: float = 120.0) -> None:
        """Wait until the broker answers on its own listener and is registered in the cluster metadata."""
        node = self.node(node_id)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if node_answers(node.direct_bootstrap) and node_id in live_broker_ids(self.direct_bootstrap_servers):
                self._starting.discard(node_id)
                return
            self._check_started()
            time.sleep(0.3)
        raise ClusterError(f"broker {node_id} did not rejoin within {timeout:.0f}s; see {self.log_path(node_id)}")

    def status(self) -> list[BrokerStatus]:
        live = live_broker_ids(self.direct_bootstrap_servers, timeout=5.0) if self.is_running() else set()
        return [BrokerStatus(n.node_id, state, n.pid, n.bootstrap,
                             state == ProcState.RUNNING and node_answers(n.direct_bootstrap, timeout=5.0),
                             n.node_id in live)
                for n in self.nodes for state in [self.state(n.node_id)]]

    # ----------------------------------------------------------------- internals
    def _allocate_nodes(self) -> None:
        self.nodes = [NodeSpec(i, free_port(), free_port(), free_port()) for i in range(1, self.settings.brokers + 1)]
        if self.proxied:
            for n in self.nodes:
                n.advertised_client_port, n.advertised_internal_port = free_port(), free_port()
                n.direct_port = free_port()

    def _write_config(self, node: NodeSpec) -> None:
        d = self._node_dir(node)
        (d / "data").mkdir(parents=True, exist_ok=True)
        self._config_path(node).write_text(
            render_node_properties(node, self.nodes, self.settings, str(d / "data")))

    def _java(self, *args: str, archive: bool = False) -> list[str]:
        """A JVM on Kafka's jars: the broker (`archive`: it writes the class-data archive being made) or a tool;
        either maps the class-data archive when there is one and none is being made."""
        if self._jars is None or self._java_bin is None:
            self._jars, self._java_bin = ensure_kafka_jars(), check_java()
        if self.archive_to is None:
            class_data = archive_options(self._jars, self._java_bin, os.environ.get(JVM_OPTIONS_ENV, ""))
        elif archive:
            class_data = [f"-XX:ArchiveClassesAtExit={self.archive_to}", "-XX:+VerifySharedSpaces", "-Xlog:cds=error"]
        else:
            class_data = []
        return [self._java_bin, f"-Dlog4j2.configurationFile={LOG4J_CONFIG}", "-cp", self._jars.classpath,
                *class_data, *args]

    def _format(self, node: NodeSpec) -> None:
        cmd = self._java("kafka.tools.StorageTool", "format", "-t", self.cluster_id,
                         "-c", str(self._config_path(node)), "--ignore-formatted",
                         *(f"--feature={name}={level}" for name, level in self.features.items()))
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            # (the tool logs its whole configuration first: its exception's message leads, e.g. a feature level
            # this Kafka does not have)
            errors = [line.split(": ", 1)[1] for line in f"{out.stdout}\n{out.stderr}".splitlines()
                      if line.startswith("Exception in thread") and ": " in line]
            raise ClusterError(f"formatting storage of node {node.node_id} failed"
                               f"{': ' + errors[-1] if errors else ''}:\n{out.stdout}\n{out.stderr}")

    def _spawn(self, node: NodeSpec) -> None:
        log = self.log_path(node.node_id)
        log.parent.mkdir(parents=True, exist_ok=True)
        cmd = self._java(*broker_jvm_options(self.heap, log.parent), "kafka.Kafka", str(self._config_path(node)),
                         archive=True)
        with open(log, "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, cwd=self._node_dir(node), env=_broker_env())
        self._children[node.node_id] = proc
        self._starting.add(node.node_id)
        node.pid = proc.pid


#: Extra JVM options for the brokers this process starts (the test suite's: C1-only compilation).
JVM_OPTIONS_ENV = "EOS_KAFKA_JVM_OPTIONS"


def check_features(features: dict[str, int]) -> dict[str, int]:
    """`features` as `LocalCluster` formats with them: names of the form `a.b`, whole levels from 0 up."""
    for name, level in features.items():
        if not _FEATURE_NAME.fullmatch(name) or isinstance(level, bool) or not isinstance(level, int) or level < 0:
            raise ClusterError(f"a broker feature is a name and a level from 0 up, such as transaction.version=1; "
                               f"got {name}={level!r}")
    return dict(features)


def parse_feature(text: str) -> tuple[str, int]:
    """`NAME=LEVEL` (a command line's `--broker-feature transaction.version=1`) as (name, level)."""
    name, sep, level = text.partition("=")
    if not sep or not level.strip().isdigit():
        raise ClusterError(f"a broker feature is NAME=LEVEL, such as transaction.version=1; got {text!r}")
    (pair,) = check_features({name.strip(): int(level)}).items()
    return pair


def format_features(features: dict[str, int]) -> str:
    """`features` as a command line gives them, "transaction.version=1, group.version=0" (`parse_feature`'s
    inverse); "the release's defaults" for none."""
    return ", ".join(f"{name}={level}" for name, level in features.items()) or "the release's defaults"


def broker_jvm_options(heap: str, log_dir: Path) -> list[str]:
    """A broker's JVM options: fixed heap, G1, its log directory, then any from $EOS_KAFKA_JVM_OPTIONS."""
    return [f"-Xms{heap}", f"-Xmx{heap}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true",
            f"-Dkafka.logs.dir={log_dir}", *os.environ.get(JVM_OPTIONS_ENV, "").split()]


def _broker_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("KAFKA_OPTS", None)
    env.pop("JAVA_TOOL_OPTIONS", None)
    return env


def _new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding (as `StorageTool random-uuid`)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid
