"""Every call into Spark the driver makes: building the SparkContext with exactly-once settings, the
executors Spark has, and RDDs with preferred locations (built on the JVM, since PySpark has no API for it).

The engine needs only a SparkContext (it runs RDD jobs); creating a SparkSession on top costs seconds more,
so the CLI and tests create a context. Users may pass either to `Application.run`.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import socket
import sys
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from eos.driver.classdata import driver_java_options, user_java_options
from eos.logs import logger

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from eos.driver.jvm import LaunchedJvm

__all__ = ["build_spark_context", "ContextStart", "launch_jvm_early", "discard_early", "fork_zygote_early",
           "build_spark_session", "spark_context_of", "DEFAULT_MASTER", "live_executors", "executor_locations",
           "task_slots", "total_task_slots", "located_rdd", "task_rdd", "spark_conf", "is_local", "resolve_master",
           "is_local_master",
           "QUICK_JIT_KEY", "EARLY_JVM_KEY", "BLOCK_MANAGER_THREADS_KEY", "block_manager_threads",
           "bound_block_manager_pools", "check_socket_dir", "unix_sockets_fit", "with_java_tmpdir"]

#: Spark's settings of Unix domain sockets between its JVMs and their Python workers (`check_socket_dir`)
UNIX_SOCKETS_KEY = "spark.python.unix.domain.socket.enabled"
UNIX_SOCKET_DIR_KEY = "spark.python.unix.domain.socket.dir"

# local[N,F]: N worker threads and F attempts per task (plain local[N] never retries a failed task).
DEFAULT_MASTER = "local[2,4]"

_BASE_CONF = {
    "spark.speculation": "false",  # EOS needs one live attempt per task at a time
    "spark.ui.showConsoleProgress": "false",
    "spark.python.worker.reuse": "true",  # lets a worker keep its tasks' producers (docs/design.md, section 4)
    "spark.log.level": "WARN",
    # Wait longer for a task's preferred executor (where its state is) before running it elsewhere: a move
    # costs a restore. Spark ignores preferences for executors it has lost, so failover is not delayed.
    "spark.locality.wait": "10s",
    # A crash in native code (RocksDB, a client call) on a Python worker thread reports its Python stack.
    "spark.python.worker.faulthandler.enabled": "true",
    # The JVM and its Python workers (and the driver's accumulator server) talk over Unix domain sockets, not
    # loopback TCP: a batch's small Spark job ended ~20 ms sooner, a bare two-task job 80 -> 36 ms
    # (docs/measurements.md). Executors and their Python workers always share a machine.
    UNIX_SOCKETS_KEY: "true",
}


#: Spark setting that keeps the HotSpot JIT's optimizing tier in a job's driver JVM
#: (`--spark-conf spark.eos.quickJit=false`)
QUICK_JIT_KEY = "spark.eos.quickJit"
#: The driver JVM a job starts compiles with the JIT's quick tier only (C1). The JVM schedules tasks and
#: carries their small results; records never pass through it (the Python workers read and write Kafka),
#: so the optimizing tier (C2) buys nothing there, while its compilations take CPU from the first batches
#: on a small machine: start-up to the first commit 4.42 -> 3.56 s (docs/measurements.md). One compiler
#: thread, not a second one started while the start's queue is long: the start's serial paths (the gateway,
#: the context, the first job) keep the cores the second took (~0.1 s sooner to the first commit; the JVM
#: takes a count of 1 only with the quick tier alone).
_QUICK_JIT = "-XX:TieredStopAtLevel=1 -XX:CICompilerCount=1"
#: JIT options of the user's that the framework leaves alone
_USER_JIT = ("TieredStopAtLevel", "TieredCompilation", "CompileThreshold", "CICompilerCount")

#: Spark setting that keeps the JVM's own collector and initial heap in a job's driver JVM
#: (`--spark-conf spark.eos.serialGc=false`)
SERIAL_GC_KEY = "spark.eos.serialGc"
#: The driver JVM a job starts collects with the serial collector, from a 16 MiB heap that grows as needed
#: (to spark.driver.memory), with a young generation of 6 MiB. The JVM only schedules tasks and carries their
#: small results: its live heap is ~35 MiB, all of it there from the start. G1, the JVM's choice on a machine
#: of 2 cores or more, starts with 1/64 of the machine's memory and cycles its young generation through all of
#: it, and its own structures take ~50 MiB more: on 24 GiB the driver JVM grew from 105 to 319 MiB (PSS) in a
#: 19-second run and on toward 400, against a steady ~180 MiB with the serial collector. Its young generation
#: grew with the heap to 17 MiB, all of it touched between two collections (one a second); at 6 MiB the JVM
#: holds ~10 MiB less (168-174 against 180-182 MiB) for ~3 ms more of collection a second (docs/measurements.md).
_SERIAL_GC = "-XX:+UseSerialGC -Xms16m -Xmn6m"
#: collector and heap options of the user's that the framework leaves alone
_USER_GC = ("GC", "-Xms", "-Xmn", "HeapSize", "NewSize", "NewRatio")


#: Spark's setting of the module its Python daemon runs, and the framework's for local masters
DAEMON_MODULE_KEY = "spark.python.daemon.module"
LOCAL_DAEMON_MODULE = "eos.worker.daemon"
#: Spark setting: whether a local master's daemon is forked from a zygote started with the JVM
#: (`eos.worker.zygote`; `--spark-conf spark.eos.daemonZygote=false` turns it off)
ZYGOTE_KEY = "spark.eos.daemonZygote"
_ZYGOTES: list[Any] = []  # the zygotes this process started (each lives until this process exits)
_FORKED: list[Any] = []  # a zygote forked from this driver, for the context it starts next (`fork_zygote_early`)
_EARLY: list[LaunchedJvm] = []  # the driver's JVM launched before its context (`launch_jvm_early`)
#: the settings this process launched the driver's JVM with: spark-submit made them the JVM's system
#: properties, which every later context's SparkConf would read as its defaults (`_jvm_defaults`)
_LAUNCHED_WITH: dict[str, str] = {}
#: Spark setting: whether `eos run` launches the driver's JVM before loading the job (`launch_jvm_early`;
#: `--spark-conf spark.eos.earlyJvm=false` launches it when the context is created, after the job's checks)
EARLY_JVM_KEY = "spark.eos.earlyJvm"

#: Spark setting: the threads each of the driver's block-manager pools that remove blocks keeps for a job's context
#: (`bound_block_manager_pools`; 0 leaves Spark's own pools, which grow to 100 threads each)
BLOCK_MANAGER_THREADS_KEY = "spark.eos.blockManagerThreads"
_BLOCK_MANAGER_THREADS = 2
#: the driver's endpoints whose pools run block removals (the master's asks of every block manager, and the
#: driver's own block manager's removals), each a ThreadPoolExecutor of 100 core threads that time out
_BLOCK_MANAGER_ENDPOINTS = ("org.apache.spark.storage.BlockManagerMasterEndpoint",
                            "org.apache.spark.storage.BlockManagerStorageEndpoint")


# Local masters: everything on this machine, so everything listens on loopback only, the UI too (off).
_LOCAL_CONF = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
}


def is_local_master(master: str) -> bool:
    """local, local[...] and local-cluster[...]: the driver and every executor run on this machine."""
    return master == "local" or master.startswith(("local[", "local-cluster["))


def _submitted() -> bool:
    """Whether this process was launched by spark-submit (or another JVM that already holds the gateway)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


class _NumpyConverterUntilNumpy:
    """One of PySpark's py4j input converters for NumPy values, asked nothing until NumPy is imported.

    PySpark's converters ask `pyspark.testing.utils` whether NumPy is installed, and importing that module
    imports pandas, NumPy and PyArrow: at the driver's first py4j call with an argument, ~85 MiB and ~0.3 s
    of CPU the driver never uses. No argument can be a NumPy value before NumPy is imported; after that, the
    converter is PySpark's own."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def can_convert(self, obj: Any) -> bool:
        return "numpy" in sys.modules and bool(self.inner.can_convert(obj))

    def convert(self, obj: Any, gateway_client: Any) -> Any:
        return self.inner.convert(obj, gateway_client)


def _numpy_converters_until_numpy() -> None:
    """Wrap PySpark's NumPy converters (idempotent); before this process's first py4j call."""
    from py4j.protocol import INPUT_CONVERTER
    from pyspark.sql.types import NumpyArrayConverter, NumpyScalarConverter

    for i, converter in enumerate(INPUT_CONVERTER):
        if isinstance(converter, NumpyArrayConverter | NumpyScalarConverter):
            INPUT_CONVERTER[i] = _NumpyConverterUntilNumpy(converter)


def _defaults_file_master() -> str | None:
    """spark.master from spark-defaults.conf ($SPARK_CONF_DIR, else $SPARK_HOME/conf), read without a JVM."""
    conf_dir = os.environ.get("SPARK_CONF_DIR") or (
        os.path.join(os.environ["SPARK_HOME"], "conf") if os.environ.get("SPARK_HOME") else None)
    if not conf_dir or not os.path.isfile(path := os.path.join(conf_dir, "spark-defaults.conf")):
        return None
    with open(path) as f:
        for line in f:
            parts = line.strip().split(None, 1)
            if len(parts) == 2 and parts[0] == "spark.master":
                return parts[1].strip()
    return None


#: the masters Spark accepts (its SparkSubmit and SparkContext), by form
_MASTER_FORMS = re.compile(r"local|local\[(\d+|\*)(\s*,\s*\d+)?\]|local-cluster\[\s*\d+\s*,\s*\d+\s*,\s*\d+\s*\]"
                           r"|yarn|(spark|k8s)://\S+")


def check_master(master: str) -> str:
    """`master`, if Spark accepts its form; else a ConfigError that lists the forms (before a JVM starts, whose
    own error is a stack trace)."""
    if not _MASTER_FORMS.fullmatch(master):
        from eos.errors import ConfigError

        raise ConfigError(f"Spark master {master!r} is not one Spark accepts: use local[N] or local[N,F] (N task "
                          "threads, F attempts per task), local-cluster[N,cores,MB], spark://host:port, yarn or "
                          "k8s://https://host:port")
    return master


def resolve_master(master: str | None = None) -> str:
    """The master to run on: the one given (`--master`, `app.run(master=)`); else the one spark-submit
    passed (`--master`, `--conf spark.master`) or spark-defaults.conf sets; else a local master."""
    if master:
        return check_master(master)
    if _submitted():
        from pyspark import SparkConf, SparkContext

        _numpy_converters_until_numpy()
        SparkContext._ensure_initialized()  # connects to spark-submit's JVM, whose system properties hold it
        submitted = SparkConf().get("spark.master")
        if submitted:
            return str(submitted)
    return _defaults_file_master() or DEFAULT_MASTER


def _prepare_environment(master: str) -> None:
    if _submitted():
        return  # spark-submit set up the driver's environment (and its JVM is already running)
    _check_spark_home()
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if is_local_master(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors run on this machine


def _check_spark_home() -> None:
    """PySpark launches the driver's JVM from `$SPARK_HOME/bin/spark-submit` when the variable is set at all: an
    empty or mistaken one ended in "No such file or directory: './bin/spark-submit'" while the context started."""
    home = os.environ.get("SPARK_HOME")
    if home is not None and not os.path.isfile(os.path.join(home, "bin", "spark-submit")):
        from pyspark.version import __version__

        from eos.errors import ConfigError

        raise ConfigError(f"SPARK_HOME={home!r} holds no bin/spark-submit: point it at a Spark {__version__} "
                          "installation (PySpark's version), or unset it to use the Spark that comes with PySpark")


@contextmanager
def _environment(name: str, value: str | None) -> Iterator[None]:
    """`$name` = `value` inside the block (nothing changes when `value` is None), as it was after."""
    if value is None:
        yield
        return
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def _start_zygote(master: str, spark_conf: Any) -> None:
    """Before this process launches the JVM of a `local`/`local[...]` master whose daemon is the framework's:
    a zygote that imports the daemon's modules while the JVM starts (eos.worker.zygote), or the one forked from
    this driver earlier (`fork_zygote_early`). A JVM launched without one does not inherit the socket of an
    earlier context's zygote either."""
    from pyspark import SparkContext

    from eos.worker.zygote import ZYGOTE_ENV, start_zygote

    _ZYGOTES[:] = [z for z in _ZYGOTES if z.poll() is None]  # (reaps those that are done)
    forked = _FORKED.pop() if _FORKED else None
    if SparkContext._gateway is None and not _submitted() and _wants_zygote(master, spark_conf):
        if forked is not None and forked.poll() is None:
            forked.name()
            _ZYGOTES.append(forked)
        else:
            _ZYGOTES.append(start_zygote())
        return
    if forked is not None:
        forked.stop()
    if SparkContext._gateway is None and not _submitted():  # (else no JVM is launched here)
        os.environ.pop(ZYGOTE_ENV, None)


def _wants_zygote(master: str, spark_conf: Any) -> bool:
    return (_in_process_executor(master) and spark_conf.get(DAEMON_MODULE_KEY) == LOCAL_DAEMON_MODULE
            and str(spark_conf.get(ZYGOTE_KEY, "true")).lower() != "false")


def _in_process_executor(master: str) -> bool:
    """local and local[...]: the executor is the driver's JVM, and its Python daemon a child of it."""
    return master == "local" or master.startswith("local[")


def fork_zygote_early(master: str, conf: dict[str, str] | None = None) -> None:
    """For a driver about to run a job on a `local`/`local[...]` master (`eos run`): import what the driver will
    need to run it, then fork the daemon's zygote from this process (`eos.worker.zygote.fork_zygote`), before
    the job is loaded and before any client starts a thread. The driver and the Python workers then share the
    pages of the modules both import (pyspark, py4j, confluent-kafka, structlog, the framework) instead of
    holding a copy each, and the zygote has little left to import while the JVM starts. The next context this
    process builds uses it (`_start_zygote`), or ends it if that context needs none. Where the process cannot be
    forked (`eos.worker.zygote.forkable`), nothing happens: that context starts a zygote as before. For a JVM
    launched early (`launch_jvm_early`), the zygote listens where that JVM's environment says (a zygote is
    started there if the fork fails), and closes the driver's end of that JVM's stdin."""
    from eos.worker.zygote import fork_zygote, start_zygote

    early = _EARLY[0] if _EARLY else None
    if early is not None and early.zygote_socket is None:
        return  # (its context wants no zygote)
    if (not _in_process_executor(master) or not _launches_jvm()
            or str((conf or {}).get(ZYGOTE_KEY, "true")).lower() == "false"):
        return
    import eos.driver.runner  # noqa: F401  (the driver's own imports, shared with the zygote from here)

    zygote = fork_zygote(early.zygote_socket if early else None, early.driver_only_fds() if early else ())
    if zygote is None and early is not None:
        _ZYGOTES.append(start_zygote(early.zygote_socket))
        return
    if zygote is not None:
        for earlier in _FORKED:
            earlier.stop()
        _FORKED[:] = [zygote]


def build_spark_context(master: str | None = None, app_name: str = "eos",
                        conf: dict[str, str] | None = None, *, for_job: bool = False,
                        bound_pools: bool = True) -> SparkContext:
    """Create (or return the running) SparkContext with EOS-safe settings, on `resolve_master(master)`.
    Settings spark-submit or spark-defaults.conf already made are kept (the EOS checks refuse unsafe ones);
    `conf` overrides both. `local-cluster[N,cores,MB]` masters start N executor JVMs on this machine.

    `for_job`: the context runs an application (`Application.run`, `eos run`), whose driver JVM gets the
    JIT's quick tier only (`QUICK_JIT_KEY`) and the serial collector from a small heap (`SERIAL_GC_KEY`) when
    this process starts it; other contexts (a Spark scan of the auditor, the user's own SQL) keep the JVM's
    defaults. A JVM `launch_jvm_early` launched for these settings is used rather than another. Its block-manager
    pools are bounded (`bound_block_manager_pools`) unless `bound_pools` is false (`ContextStart` bounds them once
    the first batch ran: `settle`)."""
    from pyspark import SparkConf, SparkContext

    active = SparkContext._active_spark_context
    if active is not None and master is None:
        return active
    master = resolve_master(master)
    _prepare_environment(master)
    _numpy_converters_until_numpy()
    launching = _launches_jvm()
    settings = _context_settings(master, app_name, conf, for_job=for_job, defaults=_jvm_defaults())
    spark_conf = SparkConf(loadDefaults=False).setAll(list(settings.items()))
    early = _take_early_jvm(settings)
    if early is None:
        _start_zygote(master, spark_conf)
    else:  # its zygote, if it wanted one, was forked for it (`fork_zygote_early`)
        _ZYGOTES.extend(_FORKED)
        _FORKED.clear()
    executors_python = spark_conf.get("spark.pyspark.python")
    with _environment("PYSPARK_PYTHON", executors_python if executors_python and not _submitted() else None):
        # PySpark takes the executors' Python from $PYSPARK_PYTHON when the context is created; only
        # spark-submit turns the setting into it. Set for this context only: a later one must not inherit it.
        sc = SparkContext.getOrCreate(spark_conf) if early is None else early.context(spark_conf)
    if launching:  # (spark-submit was given these as `--conf`; an early JVM, its settings but the name)
        _LAUNCHED_WITH.update(settings if early is None else early.settings)
    sc.setLogLevel("WARN")
    _quiet_accumulator_server(sc)
    if for_job and bound_pools and (threads := block_manager_threads(settings)):
        bound_block_manager_pools(sc, threads)
    return sc


def _jvm_defaults() -> dict[str, str]:
    """The Spark settings of the driver's JVM that a new context starts from: its system properties (none
    before it runs), but for those that are there only because this process launched it with them. Those
    were an earlier context's, which must not pass to the next: its executors' Python, say, or its name."""
    from pyspark import SparkConf, SparkContext

    if SparkContext._jvm is None:
        return {}
    return {key: value for key, value in SparkConf().getAll() if _LAUNCHED_WITH.get(key) != value}


def block_manager_threads(conf: Any) -> int:
    """`spark.eos.blockManagerThreads` of `conf` (a ConfigError, before any JVM starts, if it is not a count)."""
    value = str(conf.get(BLOCK_MANAGER_THREADS_KEY, _BLOCK_MANAGER_THREADS)).strip()
    if not value.isdigit():
        from eos.errors import ConfigError

        raise ConfigError(f"{BLOCK_MANAGER_THREADS_KEY} must be a whole number of threads (0: Spark's own pools), "
                          f"got {value!r}")
    return int(value)


def bound_block_manager_pools(sc: SparkContext, threads: int) -> int:
    """Keep `threads` threads in each of the driver's pools that remove blocks; returns how many pools it bounded.

    Spark removes a job's broadcast task binary when the driver's collector drops it (`ContextCleaner`): a task
    on the block manager master's ask pool, another on the block manager's removal pool. Both pools are made by
    `ThreadUtils.newDaemonCachedThreadPool(prefix, 100)`: 100 core threads that time out after 60 s, and a
    pool below its core size starts a new thread for every task. A job's driver runs a Spark job per batch, so
    each pool held ~one thread per removal of the last minute, 100 each after a minute of small batches: ~200
    idle threads and ~20 MiB of their stacks in the driver JVM (docs/measurements.md). The pools queue their
    tasks without bound, so with fewer core threads they run them in turn; no task in them waits for another.

    Spark has no setting for these pools: they are reached through its private fields (Java reflection over
    Py4J, without calling methods of Spark's classes, whose signatures Py4J could not all resolve). Best
    effort: a Spark without them is left as it is, with a note in the log."""
    from py4j.protocol import Py4JError

    try:
        jvm = sc._jvm
        assert jvm is not None
        lookup = jvm.java.lang.Class.forName
        env = _private_field(lookup("org.apache.spark.SparkContext"), "_env").get(sc._jsc.sc())
        rpc_env = _private_field(lookup("org.apache.spark.SparkEnv"), "rpcEnv").get(env)
        dispatcher = _private_field(lookup("org.apache.spark.rpc.netty.NettyRpcEnv"), "dispatcher").get(rpc_env)
        endpoints = _private_field(lookup("org.apache.spark.rpc.netty.Dispatcher"),
                                   "endpointRefs").get(dispatcher).keySet().toArray()
        pool_type = lookup("java.util.concurrent.ThreadPoolExecutor")
        bounded = 0
        for name in _BLOCK_MANAGER_ENDPOINTS:
            endpoint_class = lookup(name)
            fields = [f for f in endpoint_class.getDeclaredFields() if pool_type.isAssignableFrom(f.getType())]
            for endpoint in (e for e in endpoints if endpoint_class.isInstance(e)):
                for field in fields:
                    field.setAccessible(True)
                    pool = field.get(endpoint)
                    if pool is not None and pool.getCorePoolSize() > threads:
                        pool.setCorePoolSize(threads)
                        bounded += 1
    except (Py4JError, OSError, LookupError) as exc:  # (OSError: a JVM gone that refuses a new connection)
        logger(__name__).info("the driver's block-manager pools keep Spark's sizes",
                              error=f"{type(exc).__name__}: {exc}")
        return 0
    return bounded


def _private_field(cls: Any, name: str) -> Any:
    """The declared field `name` of Java class `cls`, made accessible (Scala names some private fields
    `<class>$$<name>`)."""
    for field in cls.getDeclaredFields():
        if str(field.getName()) == name or str(field.getName()).endswith(f"$${name}"):
            field.setAccessible(True)
            return field
    raise LookupError(f"{cls.getName()} has no field {name}")


def _launches_jvm() -> bool:
    """Whether a context created now launches the driver's JVM (none runs in this process yet, and spark-submit
    did not launch one), without importing PySpark to find out."""
    if _submitted():
        return False
    context = sys.modules.get("pyspark.core.context") or sys.modules.get("pyspark.context")
    return context is None or context.SparkContext._gateway is None


def _context_settings(master: str, app_name: str | None, conf: dict[str, str] | None, *, for_job: bool,
                      defaults: dict[str, str]) -> dict[str, str]:
    """A context's Spark settings: `defaults` (those of the JVM running already, if one is), the master, the
    application's name (if given and not set), the framework's settings where not set, `conf` over all of
    them, and, for a JVM about to be launched, the framework's JVM options."""
    settings = {**defaults, "spark.master": master}
    if app_name is not None:
        settings.setdefault("spark.app.name", app_name)
    for key, value in {**_BASE_CONF, **(_LOCAL_CONF if is_local_master(master) else {})}.items():
        settings.setdefault(key, value)
    settings.update(conf or {})
    check_socket_dir(settings)
    if for_job:
        block_manager_threads(settings)
    if _launches_jvm():
        # this process starts the driver's JVM: let it map the class-data archive (eos.driver.classdata)
        options = " ".join(filter(None, [driver_java_options(settings),
                                         _QUICK_JIT if for_job and _quick_jit(settings) else None,
                                         _SERIAL_GC if for_job and _serial_gc(settings) else None]))
        if options:
            user = settings.get("spark.driver.extraJavaOptions")
            settings["spark.driver.extraJavaOptions"] = f"{user} {options}" if user else options
    executors_python = settings.get("spark.pyspark.python")
    if (is_local_master(master) and not _submitted()
            and os.path.abspath(executors_python or os.environ.get("PYSPARK_PYTHON") or sys.executable)
            == os.path.abspath(sys.executable)):
        # the executors run this Python, which has pyspark and the framework installed: their Python daemon
        # imports both compiled instead of from Spark's zip, once before forking (eos.worker.daemon)
        settings.setdefault(DAEMON_MODULE_KEY, LOCAL_DAEMON_MODULE)
    return settings


def launch_jvm_early(master: str, conf: dict[str, str] | None = None) -> None:
    """For `eos run`, before it imports the driver's modules and loads the job: launch the driver's JVM for the
    context a job's run will create on `master` with `conf` (`build_spark_context(..., for_job=True)`), so that
    the JVM's start (~1.3 s to its gateway) overlaps the driver's own. The context takes it if its settings and
    the launch's environment are still those it was launched with (the application's name aside, which the
    context sets), else ends it and launches another. A daemon zygote, if the context wants one, must then be
    forked for it (`fork_zygote_early`): the JVM names its socket already. Nothing happens when spark-submit
    launched the JVM, one runs already, `spark.eos.earlyJvm` is false, or the zygote could not be forked."""
    from eos.driver.jvm import LaunchedJvm
    from eos.worker.zygote import ZYGOTE_ENV, forkable, zygote_socket_path

    if (not _launches_jvm() or _EARLY or str((conf or {}).get(EARLY_JVM_KEY, "true")).lower() == "false"):
        return
    _prepare_environment(master)
    settings = _context_settings(master, None, conf, for_job=True, defaults={})
    overrides: dict[str, str] = {}
    if executors_python := settings.get("spark.pyspark.python"):
        overrides["PYSPARK_PYTHON"] = executors_python  # (as `build_spark_context` sets it for its launch)
    if _wants_zygote(master, settings):
        if not forkable():
            return  # (the zygote is started beside the JVM when the context is created, and names its socket then)
        overrides[ZYGOTE_ENV] = zygote_socket_path()
    try:
        jvm = LaunchedJvm(settings, {k: v for k, v in os.environ.items() if k != ZYGOTE_ENV}, overrides)
    except OSError as exc:
        logger(__name__).warning("could not launch Spark's JVM early; the context launches it",
                                 error=f"{type(exc).__name__}: {exc}")
        if ZYGOTE_ENV in overrides:
            os.rmdir(os.path.dirname(overrides[ZYGOTE_ENV]))
        return
    jvm.zygote_socket = overrides.get(ZYGOTE_ENV)
    _EARLY.append(jvm)
    atexit.register(discard_early)  # (a run that ends before its context, on an error, leaves nothing running)


def discard_early() -> None:
    """End the JVM `launch_jvm_early` launched and the zygote `fork_zygote_early` forked, if no context took them
    (the run ended before creating one), rather than leave them to notice that the driver is gone."""
    early = list(_EARLY)
    while _EARLY:
        _EARLY.pop().discard()
    while _FORKED:
        _FORKED.pop().stop()  # (a zygote removes its socket and directory as it ends)
    for jvm in early:
        if jvm.zygote_socket is not None:
            with contextlib.suppress(OSError):  # the directory made for a zygote never forked
                os.rmdir(os.path.dirname(jvm.zygote_socket))


def _take_early_jvm(settings: dict[str, str]) -> LaunchedJvm | None:
    """The JVM launched early, if a context with `settings` can use it; else None (and that JVM is ended)."""
    if not _EARLY:
        return None
    jvm = _EARLY.pop()
    if _launches_jvm() and jvm.fits(settings):
        return jvm
    logger(__name__).info("the JVM launched early does not fit the context; launching another")
    jvm.discard()
    return None


#: The longest path a Unix domain socket may have: sun_path holds 108 bytes on Linux, 104 on macOS and the BSDs,
#: with the terminating NUL
_SOCKET_PATH_MAX = 107 if sys.platform.startswith("linux") else 103
#: Spark names each socket `.<uuid>.sock` in its directory
_SOCKET_NAME = ".00000000-0000-0000-0000-000000000000.sock"
_JAVA_TMPDIR = re.compile(r"-Djava\.io\.tmpdir=(\S+)")


def _socket_path_length(directory: str) -> int:
    return len(os.fsencode(os.path.join(directory, _SOCKET_NAME)))


def unix_sockets_fit(directory: str) -> bool:
    """Whether Spark's Unix domain sockets (`.<uuid>.sock`) can be made in `directory` (their paths are short
    enough)."""
    return _socket_path_length(directory) <= _SOCKET_PATH_MAX


def with_java_tmpdir(options: str, directory: str) -> str:
    """JVM `options` (JAVA_TOOL_OPTIONS, SPARK_SUBMIT_OPTS) that put `java.io.tmpdir` in `directory`: unchanged
    when they set it already (the caller's choice stands) or when Spark's Unix sockets would not fit there (the
    driver's start would fail)."""
    if "-Djava.io.tmpdir=" in options or not unix_sockets_fit(directory):
        return options
    return f"{options} -Djava.io.tmpdir={directory}".strip()


def _driver_tmpdir(conf: Any) -> tuple[str, str]:
    """The driver JVM's `java.io.tmpdir` (/tmp unless set), and what sets it ("" for the default). A JVM reads
    JAVA_TOOL_OPTIONS, then the java launcher's JDK_JAVA_OPTIONS, then its command line (where spark-submit puts
    SPARK_SUBMIT_OPTS before the user's options), then _JAVA_OPTIONS; the last setting of a property wins."""
    found = ("/tmp", "")
    for name in ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "SPARK_SUBMIT_OPTS", "", "_JAVA_OPTIONS"):
        options = os.environ.get(name, "") if name else user_java_options(conf)
        for directory in _JAVA_TMPDIR.findall(options):
            found = (directory, f"-Djava.io.tmpdir in {name}" if name else "-Djava.io.tmpdir")
    return found


def check_socket_dir(conf: Any) -> None:
    """With Unix domain sockets on, the driver's sockets go in `spark.python.unix.domain.socket.dir`, else in the
    driver JVM's `java.io.tmpdir`. A directory too long for a socket's path would fail the context's start with
    PySpark's "AF_UNIX path too long"; fail first, saying what to change."""
    if str(conf.get(UNIX_SOCKETS_KEY, "false")).lower() != "true":
        return
    directory = conf.get(UNIX_SOCKET_DIR_KEY)
    setting = UNIX_SOCKET_DIR_KEY
    if directory is None:
        directory, setting = _driver_tmpdir(conf)
    longest = _socket_path_length(directory)
    if longest > _SOCKET_PATH_MAX:
        from eos.errors import ConfigError

        raise ConfigError(
            f"Spark's Python workers would listen on Unix domain sockets in {directory!r} ({setting}), but a "
            f"socket's path there is {longest} bytes, over this system's {_SOCKET_PATH_MAX}: set "
            f"{UNIX_SOCKET_DIR_KEY} to a directory of at most {_SOCKET_PATH_MAX - len(_SOCKET_NAME) - 1} characters "
            f"(e.g. /tmp), or {UNIX_SOCKETS_KEY}=false for loopback TCP")


def _quiet_accumulator_server(sc: SparkContext) -> None:
    """PySpark's accumulator server prints a traceback when Spark's JVM goes away with its connection open, as
    a SIGTERM to the driver's process group makes it: an EOFError, or, when the JVM was interrupted while
    writing its authentication token, a ValueError that the token is not correct (the JVM logs
    ClosedByInterruptException). A closed connection is all either says. Other errors print as before, and so
    does a wrong token on a connection still open."""
    server = getattr(sc, "_accumulatorServer", None)
    if server is None or getattr(server, "_eos_quiet", False):
        return
    original = server.handle_error

    def handle_error(request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, (EOFError, ConnectionError)):
            return
        if isinstance(error, ValueError) and "token" in str(error) and _closed_by_peer(request):
            return
        original(request, client_address)

    server.handle_error, server._eos_quiet = handle_error, True


def _closed_by_peer(connection: Any) -> bool:
    """Whether the other end has closed `connection` (a socket) with nothing left to read."""
    try:
        return bool(connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"")
    except BlockingIOError:
        return False
    except OSError:
        return True


def _quick_jit(conf: Any) -> bool:
    """Whether a job's driver JVM gets the quick JIT tier: not when the user turned it off or chose JIT options."""
    return _ours(conf, QUICK_JIT_KEY, _USER_JIT)


def _serial_gc(conf: Any) -> bool:
    """Whether a job's driver JVM gets the serial collector and a small initial heap: not when the user turned
    it off or chose collector or heap options."""
    return _ours(conf, SERIAL_GC_KEY, _USER_GC)


def _ours(conf: Any, key: str, users: tuple[str, ...]) -> bool:
    """Whether the framework's JVM options behind `key` apply: `key` is not false and the user's driver JVM
    options hold none of `users`."""
    if str(conf.get(key, "true")).lower() == "false":
        return False
    return not any(option in user_java_options(conf) for option in users)


class ContextStart:
    """A SparkContext being built (`build_spark_context`) on a thread of its own, so that the driver's other
    preparations (Kafka checks, internal topics, the lease, the first offsets) overlap the JVM's start instead
    of following it. `context()` waits for it and raises what building it raised; `discard()` stops it
    when the run ends before needing it (a configuration error found meanwhile); `settle()` does what the context
    needs only once the first batch ran."""

    def __init__(self, master: str | None = None, app_name: str = "eos", conf: dict[str, str] | None = None) -> None:
        self.master = resolve_master(master)
        self._sc: SparkContext | None = None
        self._error: BaseException | None = None
        self._discarded = False
        self._settled = False
        self._lock = threading.Lock()
        # a daemon thread: a driver that exits on an error meanwhile does not wait for the JVM's start
        self._thread = threading.Thread(target=self._build, args=(self.master, app_name, conf),
                                        name="eos-spark-context", daemon=True)
        self._thread.start()

    def _build(self, master: str | None, app_name: str, conf: dict[str, str] | None) -> None:
        try:
            sc = build_spark_context(master, app_name, conf, for_job=True, bound_pools=False)
        except BaseException as exc:  # handed to the thread that asks for the context
            self._error = exc
            return
        with self._lock:
            self._sc = sc
            if self._discarded:
                stop_context(sc)

    def context(self) -> SparkContext:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._sc is not None
        return self._sc

    def settle(self) -> None:
        """Once the run's first batch ran (and only once): bound the driver's block-manager pools
        (`bound_block_manager_pools`), which matters only after many batches. Its ~40 calls into a JVM that runs
        its first job only then took 0.07-0.27 s, which the first batch waited for when they came first."""
        if self._settled or self._sc is None:
            return
        self._settled = True
        from py4j.protocol import Py4JError

        # A SIGTERM to the whole process group may have ended Spark's JVM during the first batch: Py4J then
        # raised its own error for a call the JVM left unanswered, an OSError for one it refused (a new
        # connection), and logged a traceback for the first. The run ends as the stop says, with none of them.
        with jvm_may_be_gone():
            try:
                threads = block_manager_threads(spark_conf(self._sc))
            except (Py4JError, OSError):
                return
            if threads:
                bound_block_manager_pools(self._sc, threads)

    def discard(self) -> None:
        """Stop the context now if it is up, else as soon as it is."""
        with self._lock:
            self._discarded = True
            if self._sc is not None:
                stop_context(self._sc)


class _Py4JSendErrors(logging.Filter):
    """Drops the traceback Py4J logs through the root logger when a call's answer never comes (the JVM went away
    while it read), and keeps the error it names."""

    MESSAGE = "Exception while sending command."

    def __init__(self) -> None:
        super().__init__()
        self.errors: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() != self.MESSAGE:
            return True
        error = record.exc_info[1] if record.exc_info else None
        self.errors.append(f"{type(error).__name__}: {error}" if error is not None else self.MESSAGE)
        return False


@contextmanager
def jvm_may_be_gone() -> Iterator[_Py4JSendErrors]:
    """Around calls into a JVM that may have exited (a SIGTERM to the driver's whole process group ends Spark's
    JVM with the driver): Py4J logs a traceback to stderr for a connection reset mid-answer, and PySpark warns
    that it could not stop the JVM cleanly, both after a run that ended cleanly. The caller says, in one line,
    that the JVM had exited; what the filter kept names the error."""
    root = logging.getLogger()
    errors = _Py4JSendErrors()
    # Py4J's logging.exception() gives an unconfigured root logger a stderr handler that outlives the call
    placeholder = logging.NullHandler() if not root.handlers else None
    if placeholder is not None:
        root.addHandler(placeholder)
    root.addFilter(errors)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Unable to cleanly shutdown Spark JVM", category=RuntimeWarning)
            yield errors
    finally:
        root.removeFilter(errors)
        if placeholder is not None:
            root.removeHandler(placeholder)


def stop_context(sc: SparkContext) -> None:
    """Stop a context whose JVM may be gone already: a SIGTERM to the driver's whole process group (systemd's
    default `KillMode=control-group`) ends Spark's JVM with the driver, and stopping it then raised a
    connection error from Py4J after the run had ended cleanly. There is nothing left to stop then."""
    from py4j.protocol import Py4JError

    log = logger(__name__)
    server = getattr(sc, "_accumulatorServer", None)
    sc._accumulatorServer = None  # type: ignore[assignment]  # (stopped below, after the JVM as stop() does)
    try:
        with jvm_may_be_gone() as gone:
            sc.stop()
    except (Py4JError, OSError) as exc:
        _forget_jvm(sc)
        log.info("Spark's JVM had already exited", error=f"{type(exc).__name__}: {exc}")
        from pyspark import SparkContext

        with SparkContext._lock:
            SparkContext._active_spark_context = None
    else:
        if gone.errors:  # PySpark caught Py4J's error itself and stopped what remained
            _forget_jvm(sc)
            log.info("Spark's JVM had already exited", error=gone.errors[0])
    finally:
        if server is not None:
            shut_accumulator_server(server)


def shut_accumulator_server(server: Any) -> None:
    """Shut down a context's accumulator server (PySpark's socketserver) in the background. `SparkContext.stop()`
    calls the server's `shutdown()`, which waits for the server's loop: up to a second in the handler of the
    JVM's connection (which polls each second whether to go on), or half a second in its select; 0.6-0.7 s
    of every driver's exit, a sixth of a short `eos run`. Nothing waits on it: a process that ends closes
    the socket, and the file of a server on a Unix socket is removed here (its shutdown removes it only if it
    is still there)."""
    server.server_shutdown = True  # (what its handlers poll)
    if isinstance(server.server_address, str):
        with contextlib.suppress(OSError):
            os.remove(server.server_address)
    threading.Thread(target=server.shutdown, name="accumulator-server-stop", daemon=True).start()


def _forget_jvm(sc: SparkContext) -> None:
    """Tell Py4J that the context's JVM is gone. The driver still holds proxies of Java objects (the last batch's,
    the context's own), and each one's finalizer, when it is collected after the stop or at exit, sends the JVM
    a release command: to a JVM that is gone, Py4J logged a traceback through the root logger after the run had
    ended cleanly (`make test`, the SIGTERM to the process group, once). A client that is not connected sends
    nothing."""
    client = getattr(getattr(sc, "_gateway", None), "_gateway_client", None)
    if client is not None:
        client.is_connected = False


def build_spark_session(master: str | None = None, app_name: str = "eos",
                        conf: dict[str, str] | None = None) -> SparkSession:
    """A SparkSession over `build_spark_context` (for users who also run SQL next to their jobs)."""
    from pyspark.sql import SparkSession

    return SparkSession(build_spark_context(master, app_name, conf))


def spark_context_of(spark: Any) -> SparkContext:
    """Accept a SparkContext or a SparkSession."""
    return spark.sparkContext if hasattr(spark, "sparkContext") else spark


def is_local(sc: Any) -> bool:
    """Local mode: the driver's JVM runs every task (no executors to place tasks on)."""
    return bool(sc.master == "local" or sc.master.startswith("local["))


def live_executors(sc: Any) -> list[str]:
    """Executor ids Spark currently has (none in local mode, where the driver runs every task)."""
    if is_local(sc):
        return []  # (asking would log "Requesting executors is not supported" on every batch)
    ids = sc._jsc.sc().getExecutorIds().mkString(",")
    return [e for e in ids.split(",") if e and e != "driver"]


def executor_locations(sc: Any) -> dict[str, str]:
    """Spark's location string (`executor_<host>_<id>`) of each executor Spark's status store knows, so that
    executors no task has run on yet can hold tasks and standbys too."""
    return {executor: location for executor, location, _ in _executor_infos(sc)}


def _executor_infos(sc: Any) -> Iterator[tuple[str, str, int]]:
    """(id, location string, cores) of each executor in Spark's status store."""
    executors = sc._jsc.sc().statusStore().executorList(True).iterator()
    while executors.hasNext():
        info = executors.next()
        if info.id() != "driver":
            yield info.id(), f"executor_{info.hostPort().rsplit(':', 1)[0]}_{info.id()}", int(info.totalCores())


def task_slots(sc: Any) -> dict[str | None, int]:
    """How many tasks Spark runs at once where: a local master's threads (under None), else each executor's
    cores over `spark.task.cpus`, by location string."""
    if is_local(sc):
        return {None: max(1, int(sc.defaultParallelism))}
    per_task = max(1, int(spark_conf(sc).get("spark.task.cpus", "1")))
    return {location: max(1, cores // per_task) for _, location, cores in _executor_infos(sc)}


def total_task_slots(sc: Any) -> int:
    """How many tasks the application runs at once: a local master's threads; on a cluster the more of its
    executors' slots so far and what its master and settings ask for (`local-cluster[N,cores,MB]`,
    `spark.cores.max`, or `spark.executor.instances` x `spark.executor.cores`, over `spark.task.cpus`), since
    executors register a moment after the context; Spark's default parallelism where nothing says."""
    slots = sum(task_slots(sc).values())
    if is_local(sc):
        return slots
    conf = spark_conf(sc)
    per_task = max(1, _setting(conf, "spark.task.cpus") or 1)
    cluster = re.fullmatch(r"local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*\d+\s*\]", str(sc.master))
    cores = (int(cluster[1]) * int(cluster[2]) if cluster else _setting(conf, "spark.cores.max")
             or _setting(conf, "spark.executor.instances") * _setting(conf, "spark.executor.cores"))
    return max(slots, cores // per_task) or max(1, int(sc.defaultParallelism))


def _setting(conf: dict[str, str], key: str) -> int:
    """A whole-number Spark setting, 0 where it is unset or not a number."""
    try:
        return int(conf.get(key, "0"))
    except ValueError:
        return 0


def located_rdd(sc: Any, items: list[Any], locations: list[str | None]) -> Any:
    """One partition per item, each with its preferred location, built on the JVM with
    `SparkContext.makeRDD` (PySpark has no API for it) and wrapped as a Python RDD."""
    from pyspark.rdd import RDD
    from pyspark.serializers import BatchedSerializer, CPickleSerializer

    jvm, pickler = sc._jvm, CPickleSerializer()
    convert = jvm.scala.jdk.javaapi.CollectionConverters
    pairs = jvm.java.util.ArrayList()
    for item, location in zip(items, locations, strict=True):
        prefs = jvm.java.util.ArrayList()
        if location:
            prefs.add(location)
        # Each element is one pickled batch of one item: the framing PySpark's workers read.
        pairs.add(jvm.scala.Tuple2(pickler.dumps([item]), convert.asScala(prefs).toSeq()))
    tag = jvm.scala.reflect.ClassTag.apply(jvm.java.lang.Class.forName("[B"))
    jrdd = sc._jsc.sc().makeRDD(convert.asScala(pairs).toSeq(), tag).toJavaRDD()
    return RDD(jrdd, sc, BatchedSerializer(CPickleSerializer(), 1))


def task_rdd(sc: Any, items: list[Any], locations: list[str | None]) -> Any:
    """One Spark partition per item, at its preferred executor where one is given."""
    if any(locations):
        return located_rdd(sc, items, locations)
    return sc.parallelize(items, len(items))


def spark_conf(sc: Any) -> dict[str, str]:
    """The running context's Spark settings: those its JVM context holds (`SparkContext.getConf()` adds the
    JVM's system properties, which may be an earlier context's)."""
    return dict(sc._conf.getAll())
