"""Which master a job runs on when none is given: spark-submit's, then spark-defaults.conf, then local."""

from __future__ import annotations

import logging
import re
import socket
import struct
import sys
import threading
from types import SimpleNamespace
from typing import Any

import pytest
import structlog
from py4j.clientserver import ClientServer, JavaParameters, PythonParameters
from py4j.java_gateway import GatewayClient, GatewayParameters, JVMView
from py4j.protocol import DEFAULT_JVM_ID, Py4JError, Py4JNetworkError, get_return_value
from structlog.testing import capture_logs

from eos.driver.spark import (
    DEFAULT_MASTER,
    ContextStart,
    _Py4JSendErrors,
    _quiet_accumulator_server,
    check_socket_dir,
    is_local_master,
    resolve_master,
    stop_context,
)
from eos.errors import ConfigError


def test_an_explicit_master_wins_then_spark_defaults_then_the_local_default(tmp_path, monkeypatch):
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    assert resolve_master() == DEFAULT_MASTER
    (tmp_path / "spark-defaults.conf").write_text("# cluster\nspark.executor.memory  2g\nspark.master   spark://m:7077\n")
    assert resolve_master() == "spark://m:7077"
    assert resolve_master("local[4]") == "local[4]"


def test_local_masters_are_the_ones_on_this_machine():
    assert all(map(is_local_master, ["local", "local[2]", "local[2,4]", "local-cluster[2,1,1024]"]))
    assert not any(map(is_local_master, ["spark://h:7077", "yarn", "k8s://https://h:6443", "localhost"]))


def test_a_socket_directory_too_long_for_unix_sockets_fails_fast_and_says_what_to_change(monkeypatch):
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    on = {"spark.python.unix.domain.socket.enabled": "true"}
    check_socket_dir(on)  # the JVM's default java.io.tmpdir, /tmp
    check_socket_dir({**on, "spark.python.unix.domain.socket.dir": "/tmp/eos-sockets"})
    long_dir = "/tmp/" + "d" * 70
    with pytest.raises(ConfigError) as error:
        check_socket_dir({**on, "spark.python.unix.domain.socket.dir": long_dir})
    assert "spark.python.unix.domain.socket.dir" in str(error.value) and "enabled=false" in str(error.value)
    with pytest.raises(ConfigError, match=r"-Djava\.io\.tmpdir"):
        check_socket_dir({**on, "spark.driver.extraJavaOptions": f"-Xmx1g -Djava.io.tmpdir={long_dir}"})
    check_socket_dir({"spark.python.unix.domain.socket.enabled": "false",
                      "spark.python.unix.domain.socket.dir": long_dir})  # loopback TCP: any directory


def test_a_temporary_directory_that_the_environment_gives_every_jvm_is_the_drivers_socket_directory(monkeypatch):
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    for name in ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "SPARK_SUBMIT_OPTS", "_JAVA_OPTIONS"):
        monkeypatch.delenv(name, raising=False)
    on = {"spark.python.unix.domain.socket.enabled": "true"}
    long_dir, short = "/tmp/" + "d" * 70, "-Djava.io.tmpdir=/tmp/s"
    for name in ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "SPARK_SUBMIT_OPTS"):  # before the user's options
        monkeypatch.setenv(name, f"-Xss1m -Djava.io.tmpdir={long_dir}")
        with pytest.raises(ConfigError, match=re.escape(f"-Djava.io.tmpdir in {name}")):
            check_socket_dir(on)
        check_socket_dir({**on, "spark.driver.extraJavaOptions": short})  # the command line's wins
        monkeypatch.delenv(name)
    monkeypatch.setenv("_JAVA_OPTIONS", f"-Djava.io.tmpdir={long_dir}")  # read after the command line
    with pytest.raises(ConfigError, match=re.escape("-Djava.io.tmpdir in _JAVA_OPTIONS")):
        check_socket_dir({**on, "spark.driver.extraJavaOptions": short})
    check_socket_dir({**on, "spark.python.unix.domain.socket.dir": "/tmp/s"})  # (Spark's own setting first)
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", short)
    monkeypatch.setenv("_JAVA_OPTIONS", "-Xss1m")
    check_socket_dir(on)


class Conf(dict):
    """A SparkConf's settings (`get` with SparkConf's signature)."""

    def get(self, key, default=None):
        return super().get(key, default)


def test_a_jobs_driver_jvm_gets_the_quick_jit_unless_the_user_chose_jit_options_or_turned_it_off(monkeypatch):
    from eos.driver.spark import QUICK_JIT_KEY, _quick_jit

    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    assert _quick_jit(Conf())
    assert _quick_jit(Conf({"spark.driver.extraJavaOptions": "-Xmx2g"}))
    assert not _quick_jit(Conf({QUICK_JIT_KEY: "false"}))
    assert not _quick_jit(Conf({QUICK_JIT_KEY: "FALSE"}))
    assert not _quick_jit(Conf({"spark.driver.extraJavaOptions": "-XX:-TieredCompilation"}))
    assert not _quick_jit(Conf({"spark.driver.extraJavaOptions": "-XX:CICompilerCount=3"}))  # (not overridden)
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--driver-java-options -XX:TieredStopAtLevel=4 pyspark-shell")
    assert not _quick_jit(Conf())
    for args in ("--conf spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=4 pyspark-shell",
                 "-c 'spark.driver.extraJavaOptions=-Dx=y -XX:-TieredCompilation' pyspark-shell",
                 "--driver-java-options=-XX:TieredStopAtLevel=4 pyspark-shell",
                 "--driver-java-options '-XX:TieredStopAtLevel=4"):  # (unbalanced: all of it taken as the driver's)
        monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", args)
        assert not _quick_jit(Conf()), args
    # options of the executors' JVMs are not the driver's
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--conf spark.executor.extraJavaOptions=-XX:TieredStopAtLevel=4 "
                                              "--driver-memory 2g pyspark-shell")
    assert _quick_jit(Conf())


def test_a_jobs_driver_jvm_gets_the_serial_collector_unless_the_user_chose_gc_or_heap_options_or_turned_it_off(
        monkeypatch):
    from eos.driver.spark import SERIAL_GC_KEY, _serial_gc

    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    assert _serial_gc(Conf())
    assert _serial_gc(Conf({"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=4 -Dx=y"}))
    assert not _serial_gc(Conf({SERIAL_GC_KEY: "False"}))
    for option in ("-XX:+UseG1GC", "-XX:+UseZGC", "-XX:MaxGCPauseMillis=50", "-Xms1g", "-Xmn64m",
                   "-XX:InitialHeapSize=1g", "-XX:MaxNewSize=64m", "-XX:NewRatio=2"):
        assert not _serial_gc(Conf({"spark.driver.extraJavaOptions": f"-Dx=y {option}"})), option
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--driver-java-options -XX:+UseParallelGC pyspark-shell")
    assert not _serial_gc(Conf())
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--conf spark.executor.extraJavaOptions=-XX:+UseParallelGC pyspark-shell")
    assert _serial_gc(Conf())


@pytest.mark.parametrize("master", ["local", "local[1]", "local[*]", "local[2,4]", "local[*, 3]",
                                    "local-cluster[2,1,1024]", "spark://10.0.0.1:7077", "yarn",
                                    "k8s://https://k8s.example:6443"])
def test_the_masters_spark_accepts_pass_the_check(master):
    assert resolve_master(master) == master


@pytest.mark.parametrize("master", ["probe", "local[two]", "locl[2]", "local-cluster[2,1]", "spark://",
                                    "10.0.0.1:7077"])
def test_a_master_spark_would_refuse_fails_before_a_jvm_starts_and_lists_the_forms(master):
    with pytest.raises(ConfigError, match=r"is not one Spark accepts: use local\[N\]"):
        resolve_master(master)


class _GoneContext:
    """A SparkContext whose JVM was killed: stopping it fails in Py4J as it did after a SIGTERM to the group."""

    server_address = ("localhost", 0)  # (its accumulator server's)

    def __init__(self, error: BaseException) -> None:
        self.error, self.stops = error, 0
        self.server_stopped = threading.Event()
        self._accumulatorServer = self

    def shutdown(self) -> None:  # (its accumulator server's)
        self.server_stopped.set()

    def stop(self) -> None:
        self.stops += 1
        raise self.error


@pytest.mark.parametrize("error", [ConnectionRefusedError(111, "Connection refused"),
                                   Py4JNetworkError("Answer from Java side is empty")])
def test_stopping_a_context_whose_jvm_is_gone_is_not_an_error(error, monkeypatch):
    from pyspark import SparkContext

    sc = _GoneContext(error)
    monkeypatch.setattr(SparkContext, "_active_spark_context", sc)
    stop_context(sc)  # type: ignore[arg-type]
    assert sc.stops == 1 and SparkContext._active_spark_context is None  # a new context may start
    assert sc._accumulatorServer is None and sc.server_stopped.wait(10)  # its accumulator thread does not linger


def test_the_java_objects_a_driver_still_holds_send_nothing_to_a_jvm_found_gone(capfd, caplog, monkeypatch):
    """After the stop found the JVM gone, the finalizer of a Java object the driver still held (collected after
    the run, or at exit) sent its release command all the same, and Py4J logged the reset connection's
    traceback through the root logger, after the run had ended cleanly."""
    from pyspark import SparkContext

    jvm = _ResettingJvm()  # (what the JVM's socket does as the JVM dies: it resets the connection)
    sc = _GoneContext(ConnectionRefusedError(111, "Connection refused"))
    sc._gateway = SimpleNamespace(_gateway_client=GatewayClient(gateway_parameters=GatewayParameters(port=jvm.port)))
    monkeypatch.setattr(SparkContext, "_active_spark_context", sc)
    stop_context(sc)  # type: ignore[arg-type]
    sc._gateway._gateway_client.garbage_collect_object("o42")  # (what a JavaObject's finalizer calls)
    stderr = capfd.readouterr().err
    assert "Traceback" not in stderr and "Exception while sending command" not in stderr, stderr
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not sc._gateway._gateway_client.is_connected
    assert jvm._thread.is_alive()  # nothing connected to it


class _ResettingJvm:
    """A loopback server that reads one Py4J command and resets the connection instead of answering: what Py4J
    meets when Spark's JVM is killed while the driver waits for an answer."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self._thread = threading.Thread(target=self._reset_one, daemon=True)
        self._thread.start()

    def _reset_one(self) -> None:
        connection, _ = self.server.accept()
        connection.recv(4096)
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        connection.close()  # an RST, not an orderly end
        self.server.close()


class _ResetContext:
    """A context whose `_jsc.stop()` is a real Py4J call to a JVM that resets mid-answer, stopped by PySpark's own
    `SparkContext.stop`."""

    from pyspark import SparkContext

    stop = SparkContext.stop

    def __init__(self, port: int) -> None:
        client = GatewayClient(gateway_parameters=GatewayParameters(port=port))

        class Jsc:
            def stop(self) -> Any:
                return get_return_value(client.send_command("c\no0\nstop\ne\n"), client, "o0", "stop")

        self._jsc, self._accumulatorServer = Jsc(), None
        self._gateway = SimpleNamespace(_gateway_client=client)


def test_stopping_a_context_whose_jvm_reset_mid_answer_prints_no_traceback_and_says_so_in_one_line(capfd, caplog,
                                                                                                   recwarn):
    sc = _ResetContext(_ResettingJvm().port)
    root = logging.getLogger()
    handlers = list(root.handlers)
    saved = structlog.get_config()  # (another test may have left info lines filtered out)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    try:
        with capture_logs() as logs:
            stop_context(sc)  # type: ignore[arg-type]
    finally:
        structlog.configure(**saved)
    stderr = capfd.readouterr().err
    assert "Traceback" not in stderr and "Exception while sending command" not in stderr, stderr
    assert not caplog.records  # Py4J's traceback reached no handler of the root logger (stderr's, outside pytest)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]  # PySpark's "Unable to cleanly ..."
    [said] = [e for e in logs if e["event"] == "Spark's JVM had already exited"]
    assert "ConnectionResetError" in said["error"] or "Py4J" in said["error"], said
    assert sc._jsc is None
    assert not sc._gateway._gateway_client.is_connected  # (the proxies it still holds send nothing more)
    assert _Py4JSendErrors not in {type(f) for f in root.filters}  # the filter was only for the stop
    assert root.handlers == handlers


class _GonePoolsContext:
    """A context whose JVM is gone when the first batch's `settle()` bounds the block-manager pools: what a
    SIGTERM to the process group during that batch left. `jvm` answers the Py4J calls: a JVM that resets the
    first call mid-answer (`_ResettingJvm`), or none at all (a port nothing listens on, reached as PySpark's
    gateway is, through a `ClientServer`: a new connection is refused). `conf_error`: what reading the
    context's settings raises, if anything."""

    def __init__(self, jvm: str, conf_error: BaseException | None = None) -> None:
        self.conf_error = conf_error
        self._conf = self
        self.gateway: ClientServer | None = None
        if jvm == "resets":
            self._jvm = JVMView(GatewayClient(gateway_parameters=GatewayParameters(port=_ResettingJvm().port)),
                                "default", id=DEFAULT_JVM_ID)
        else:
            closed = socket.create_server(("127.0.0.1", 0))
            port = closed.getsockname()[1]
            closed.close()
            self.gateway = ClientServer(JavaParameters(port=port), PythonParameters(port=0))
            self._jvm = self.gateway.jvm

    def getAll(self) -> list[tuple[str, str]]:  # (the context's settings)
        if self.conf_error is not None:
            raise self.conf_error
        return []  # (the framework's default threads: the pools are bounded)


@pytest.mark.parametrize("jvm, conf_error, said", [
    ("resets", None, "Py4J"),
    ("refuses", None, "ConnectionRefusedError"),
    ("refuses", ConnectionRefusedError(111, "Connection refused"), None),
    ("refuses", Py4JNetworkError("Answer from Java side is empty"), None),
])
def test_settling_a_context_whose_jvm_is_gone_prints_no_traceback_and_raises_nothing(jvm, conf_error, said, capfd,
                                                                                       caplog, monkeypatch):
    sc = _GonePoolsContext(jvm, conf_error)
    monkeypatch.setattr("eos.driver.spark.build_spark_context", lambda *args, **kwargs: sc)
    start = ContextStart("local[1]")
    assert start.context() is sc
    root = logging.getLogger()
    handlers = list(root.handlers)
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    try:
        with capture_logs() as logs:
            start.settle()
            start.settle()  # (once only: no second call into the JVM)
    finally:
        structlog.configure(**saved)
        if sc.gateway is not None:
            sc.gateway.shutdown()
    stderr = capfd.readouterr().err
    assert "Traceback" not in stderr and "Exception while sending command" not in stderr, stderr
    assert not caplog.records
    kept = [e for e in logs if e["event"] == "the driver's block-manager pools keep Spark's sizes"]
    if said is None:  # the settings could not be read: nothing more was asked of the JVM
        assert not kept
    else:
        [kept_sizes] = kept
        assert kept_sizes["error"].startswith(said), kept_sizes
    assert _Py4JSendErrors not in {type(f) for f in root.filters} and root.handlers == handlers


def _quieted_context() -> tuple[Any, list[type[BaseException] | None]]:
    """A context whose accumulator server records the errors its handler lets through, once quieted."""
    printed: list[type[BaseException] | None] = []

    class Server:
        def handle_error(self, request, client_address):
            printed.append(sys.exc_info()[0])

    sc = type("Context", (), {"_accumulatorServer": Server()})()
    _quiet_accumulator_server(sc)  # type: ignore[arg-type]
    return sc, printed


def test_the_accumulator_server_keeps_quiet_about_a_closed_connection_only():
    sc, printed = _quieted_context()
    _quiet_accumulator_server(sc)  # (once only)
    for error in (EOFError(), ConnectionResetError(), ValueError("a real error")):
        try:
            raise error
        except Exception:
            sc._accumulatorServer.handle_error(None, ("127.0.0.1", 1))
    assert printed == [ValueError]


def test_a_token_cut_off_by_a_dying_jvm_is_quiet_and_a_wrong_one_on_an_open_connection_is_not():
    """The JVM interrupted while writing its token leaves a short token and a closed connection: PySpark's
    handler raises that the token is not correct."""
    sc, printed = _quieted_context()
    wrong_token = ValueError("The value of the provided token to the AccumulatorServer is not correct.")
    for closed in (True, False):
        server_end, jvm_end = socket.socketpair()
        with server_end, jvm_end:
            jvm_end.sendall(b"abc")
            server_end.recv(3)  # (what the handler read of the token)
            if closed:
                jvm_end.close()
            try:
                raise wrong_token
            except ValueError:
                sc._accumulatorServer.handle_error(server_end, ("127.0.0.1", 1))
    assert printed == [ValueError]  # the open connection's only


@pytest.mark.parametrize("home", ["", "/nonexistent/spark"])
def test_a_spark_home_without_spark_submit_fails_before_a_jvm_starts(home, monkeypatch):
    from eos.driver.spark import build_spark_context

    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    monkeypatch.setenv("SPARK_HOME", home)
    with pytest.raises(ConfigError, match=r"holds no bin/spark-submit.*or unset it"):
        build_spark_context("local[1]", "x", for_job=True)


class _BatchOnResettingJvm:
    """The batch's Spark job, its `collect()` a real Py4J call to a JVM that resets mid-answer: what a SIGTERM to
    the driver's process group does to a batch in flight."""

    def __init__(self, port: int) -> None:
        self.client = GatewayClient(gateway_parameters=GatewayParameters(port=port))

    def mapPartitions(self, fn: Any) -> _BatchOnResettingJvm:
        return self

    def collect(self) -> Any:
        return get_return_value(self.client.send_command("c\no0\ncollect\ne\n"), self.client, "o0", "collect")


def test_a_batch_whose_jvm_resets_mid_job_raises_without_a_py4j_traceback(capfd, caplog, monkeypatch):
    from eos.config import EosConfig
    from eos.driver import runner as runner_module
    from eos.driver.runner import Runner

    batch = _BatchOnResettingJvm(_ResettingJvm().port)
    monkeypatch.setattr(runner_module, "task_slots", lambda sc: {None: 2})
    monkeypatch.setattr(runner_module, "task_rdd", lambda sc, items, locations: batch)

    class Context:
        def setJobGroup(self, *args: Any) -> None:
            pass

    run = Runner.__new__(Runner)
    run._sc, run.config, run.placer = Context(), EosConfig(application_id="gone", bootstrap_servers="127.0.0.1:1"), None
    root = logging.getLogger()
    handlers = list(root.handlers)
    with pytest.raises(Py4JError):  # (raised as before: the run says what became of the batch)
        run._execute(lambda rows: rows, [], 3)  # type: ignore[arg-type]
    stderr = capfd.readouterr().err
    assert "Traceback" not in stderr and "Exception while sending command" not in stderr, stderr
    assert not caplog.records
    assert _Py4JSendErrors not in {type(f) for f in root.filters} and root.handlers == handlers


class SlotsContext:
    """What `total_task_slots` asks of a SparkContext: its master, settings, executors so far (through Py4J's
    objects), parallelism."""

    def __init__(self, master: str, conf: dict[str, str], executor_cores: list[int], parallelism: int = 2) -> None:
        self.master, self.defaultParallelism = master, parallelism
        self._conf = self
        self._settings = conf
        self._executors = [Executor(str(i), cores) for i, cores in enumerate(executor_cores)]
        self._jsc = self

    def getAll(self) -> list[tuple[str, str]]:  # SparkConf
        return list(self._settings.items())

    def sc(self) -> SlotsContext:  # JavaSparkContext
        return self

    def statusStore(self) -> SlotsContext:  # SparkContext
        return self

    def executorList(self, active: bool) -> Any:  # AppStatusStore: a java.util.List
        rest = list(self._executors)

        class Iterator:
            def hasNext(self) -> bool:
                return bool(rest)

            def next(self) -> Executor:
                return rest.pop(0)

        return type("List", (), {"iterator": lambda _: Iterator()})()


class Executor:
    def __init__(self, executor_id: str, cores: int) -> None:
        self._id, self._cores = executor_id, cores

    def id(self) -> str:
        return self._id

    def hostPort(self) -> str:
        return "host:1"

    def totalCores(self) -> int:
        return self._cores


@pytest.mark.parametrize(("master", "conf", "executors", "slots"), [
    ("local[4]", {}, [], 4),
    ("spark://m:7077", {"spark.cores.max": "8"}, [4], 8),  # one of two executors registered so far
    ("spark://m:7077", {"spark.cores.max": "8", "spark.task.cpus": "2"}, [], 4),
    ("yarn", {"spark.executor.instances": "3", "spark.executor.cores": "2"}, [2], 6),
    ("local-cluster[2,2,1024]", {}, [2], 4),
    ("spark://m:7077", {}, [4, 4, 4], 12),  # nothing asked: the executors there are
    ("spark://m:7077", {"spark.cores.max": "many"}, [], 2),  # nothing that says: Spark's default parallelism
])
def test_the_task_slots_auto_units_go_by_count_what_the_cluster_asks_for_as_well_as_what_registered(
        master, conf, executors, slots):
    """Executors register a moment after the context, and an application's first run sizes its "auto"
    units for good: a count of the executors registered so far alone would make units too large."""
    from eos.driver.spark import total_task_slots

    sc = SlotsContext(master, conf, executors, parallelism=4 if master == "local[4]" else 2)
    assert total_task_slots(sc) == slots


def test_from_a_stop_signal_on_a_reset_from_the_dying_jvm_prints_no_traceback(capfd, caplog):
    """A SIGTERM to the driver's process group ends Spark's JVM while the batch in flight finishes: a Py4J call
    of the batch's that the dying JVM resets logged Py4J's traceback through the root logger, though the run
    then ended cleanly (`make test`, once). From the signal on it is held back, and said in one line."""
    import os
    import signal

    from eos.driver.runner import Runner

    stub = SimpleNamespace(stops=0)
    stub.request_stop = lambda: setattr(stub, "stops", stub.stops + 1)
    client = GatewayClient(gateway_parameters=GatewayParameters(port=_ResettingJvm().port))
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    try:
        with capture_logs() as logs, Runner._signals(stub, True):  # type: ignore[arg-type]
            os.kill(os.getpid(), signal.SIGTERM)
            with pytest.raises(Py4JError):  # (a call answered by a reset)
                get_return_value(client.send_command("c\no0\nstop\ne\n"), client, "o0", "stop")
    finally:
        structlog.configure(**saved)
    assert stub.stops == 1
    stderr = capfd.readouterr().err
    assert "Traceback" not in stderr and "Exception while sending command" not in stderr, stderr
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    said = [e for e in logs if e["event"] == "Spark's JVM exited after the stop signal"]
    assert len(said) == 1 and "Error" in said[0]["error"], logs
