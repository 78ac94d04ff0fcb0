"""Prometheus metrics of a running job, served by the driver (`metrics_port=` / `eos run --metrics-port`)
on 127.0.0.1 unless `metrics_host` says otherwise: what an operator watches on a dashboard or alerts on.

    eos_batches_total                       batches that ran
    eos_records_in_total{subtopology}       input records processed and committed
    eos_records_folded_total{subtopology}   of those, records folded into a keyed aggregation in one loop
                                            (eos.worker.folding)
    eos_records_direct_total{subtopology}   of those, records a function took without the graph's steps
                                            between its source and its sink (eos.worker.processing)
    eos_records_out_total{subtopology}      output records committed
    eos_dead_letters_total{subtopology}     records sent to the dead-letter topic
    eos_dropped_records_total{subtopology,reason}  records dropped on purpose (reason "late": all their
                                            windows had closed)
    eos_transactions_total{subtopology}     task transactions committed
    eos_fenced_tasks_total                  task attempts fenced by a newer attempt
    eos_commit_latency_seconds              commit_transaction() time per task (histogram)
    eos_batch_duration_seconds              plan to last task result (histogram)
    eos_consumer_lag_records{topic,partition}  stable end offset minus the committed offset, at planning
    eos_restored_records_total{subtopology} changelog records replayed to restore stores
    eos_standby_lag_records                 records the most lagging standby was behind before its refresh
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from eos.driver.reports import BatchReport
from eos.worker.plans import TaskResult, TaskStatus

__all__ = ["DriverMetrics"]

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class DriverMetrics:
    def __init__(self, application_id: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r, app = self.registry, {"application": application_id}
        sub = ["application", "subtopology"]
        self.batches = Counter("eos_batches", "Batches that ran", ["application"], registry=r).labels(**app)
        self.records_in = Counter("eos_records_in", "Input records committed", sub, registry=r)
        self.records_folded = Counter("eos_records_folded", "Input records folded into a keyed aggregation in one "
                                      "loop", sub, registry=r)
        self.records_direct = Counter("eos_records_direct", "Input records a function took without the graph's steps "
                                      "between its source and its sink", sub, registry=r)
        self.records_out = Counter("eos_records_out", "Output records committed", sub, registry=r)
        self.dead_letters = Counter("eos_dead_letters", "Records sent to the dead-letter topic", sub, registry=r)
        self.dropped = Counter("eos_dropped_records",
                               "Records dropped on purpose (late: their windows or a join's grace had closed)",
                               [*sub, "reason"], registry=r)
        self.transactions = Counter("eos_transactions", "Task transactions committed", sub, registry=r)
        self.fenced = Counter("eos_fenced_tasks", "Task attempts fenced by a newer attempt", ["application"],
                              registry=r).labels(**app)
        self.commit_latency = Histogram("eos_commit_latency_seconds", "commit_transaction() per task", ["application"],
                                        buckets=_LATENCY_BUCKETS, registry=r).labels(**app)
        self.batch_duration = Histogram("eos_batch_duration_seconds", "Batch duration", ["application"],
                                        buckets=_LATENCY_BUCKETS, registry=r).labels(**app)
        self.lag = Gauge("eos_consumer_lag_records", "Stable end offset minus committed offset, at planning",
                         ["application", "topic", "partition"], registry=r)
        self.restored = Counter("eos_restored_records", "Changelog records replayed to restore stores", sub,
                                registry=r)
        self.standby_lag = Gauge("eos_standby_lag_records", "Most lagging standby before its refresh",
                                 ["application"], registry=r).labels(**app)
        self._app = application_id
        self._server: Any = None
        self._thread: Any = None

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)

    def close(self) -> None:
        """Stop serving (the port is free again)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def observe_lag(self, lag: Mapping[tuple[str, int], int]) -> None:
        for (topic, partition), records in lag.items():
            self.lag.labels(self._app, topic, str(partition)).set(records)

    def observe_batch(self, report: BatchReport, results: list[TaskResult]) -> None:
        self.batches.inc()
        self.batch_duration.observe(report.duration_s)
        self.standby_lag.set(report.max_standby_lag)
        for result in results:
            labels = (self._app, result.task.subtopology)
            if result.status is TaskStatus.FENCED:
                self.fenced.inc()
            if result.restored_records:
                self.restored.labels(*labels).inc(result.restored_records)
            if result.status is not TaskStatus.COMMITTED:
                continue
            self.transactions.labels(*labels).inc()
            self.records_in.labels(*labels).inc(result.records_in)
            self.records_folded.labels(*labels).inc(result.records_folded)
            self.records_direct.labels(*labels).inc(result.records_direct)
            self.records_out.labels(*labels).inc(result.records_out)
            self.dead_letters.labels(*labels).inc(result.dead_letters)
            for reason, n in result.dropped.items():
                self.dropped.labels(*labels, reason).inc(n)
            self.commit_latency.observe(result.commit_ms / 1000)
