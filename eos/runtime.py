"""A task's processing runtime inside one worker: its processor (or batch function) and its stores.

Kept by the worker between batches while the task stays there; dropped whenever a batch fails, so a
runtime never carries effects of a transaction that did not commit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from confluent_kafka import Message

from eos.deadletter import ProducedRecord
from eos.processing import BatchOutcome, DeadLetterPolicy, ProcessorContext, run_processor
from eos.stateful import TaskStores
from eos.topology import SubTopology
from eos.vectorized import run_batch_function

if TYPE_CHECKING:
    from eos.task import Job
    from eos.worker import WorkerClients

__all__ = ["TaskRuntime"]


class TaskRuntime:
    def __init__(self, job: "Job", sub: SubTopology, partition: int) -> None:
        cfg = job.config
        self.sub = sub
        self.partition = partition
        self.task = f"{sub.name}-{partition}"
        self.dlq = DeadLetterPolicy(cfg.dlq_topic, partition if partition < job.extras.get("dlq_partitions", 0)
                                    else None, self.task, cfg.on_bad_record == "fail")
        self.lineage = cfg.lineage
        self.stores = TaskStores(cfg, sub, partition) if sub.stores else None
        self.context = ProcessorContext(application_id=cfg.application_id, subtopology=sub.name, partition=partition,
                                        output_topic=sub.output, key_serde=sub.output_key_serde,
                                        value_serde=sub.output_value_serde, lineage=cfg.lineage,
                                        stores=dict(self.stores.views) if self.stores else None)
        self.processor = sub.processor_factory() if sub.processor_factory is not None else None
        if self.processor is not None:
            self.processor.init(self.context)

    def ensure_restored(self, clients: "WorkerClients", log: Any) -> tuple[float, int]:
        """Open the task's stores and bring them up to their changelog's end. Returns (ms, records replayed)."""
        return self.stores.open(clients, log) if self.stores else (0.0, 0)

    def process(self, messages: list[Message], stream_time: int) -> BatchOutcome:
        sub = self.sub
        if self.processor is not None:
            self.context.stream_time = stream_time
            return run_processor(self.processor, self.context, messages, key_serde=sub.key_serde,
                                 value_serde=sub.value_serde, dlq=self.dlq,
                                 scoped=self.stores.scoped() if self.stores else ())
        assert sub.batch_fn is not None
        outcome = run_batch_function(sub.batch_fn, sub.batch_format, messages, key_serde=sub.key_serde,
                                     value_serde=sub.value_serde, out_key_serde=sub.output_key_serde,
                                     out_value_serde=sub.output_value_serde, output_topic=sub.output,
                                     lineage=self.lineage, dlq=self.dlq)
        outcome.stream_time = max(outcome.stream_time, stream_time)
        return outcome

    def changelog_records(self) -> list[ProducedRecord]:
        return self.stores.changelog_records() if self.stores else []

    def after_commit(self, last_offsets: dict[tuple[str, int], int]) -> None:
        """Called only after the batch's transaction committed: state changes reach the local stores."""
        if self.stores:
            self.stores.apply(last_offsets)

    def store_offsets(self) -> dict[str, int]:
        return self.stores.offsets() if self.stores else {}

    def release(self) -> None:
        """End of a batch (committed or not): close persistent stores and unlock the task's directory."""
        if self.stores:
            self.stores.release()

    def close(self) -> None:
        self.release()
        if self.processor is not None:
            self.processor.close()
