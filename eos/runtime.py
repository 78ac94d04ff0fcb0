"""A task's processing runtime inside one worker: its processor (or batch function) and its stores.

Kept by the worker between batches while the task stays there; dropped whenever a batch fails, so a
runtime never carries effects of a transaction that did not commit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from confluent_kafka import Message

from eos.deadletter import ProducedRecord
from eos.processing import BatchOutcome, DeadLetterPolicy, ProcessorContext, run_processor
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
        self.context = ProcessorContext(application_id=cfg.application_id, subtopology=sub.name, partition=partition,
                                        output_topic=sub.output, key_serde=sub.output_key_serde,
                                        value_serde=sub.output_value_serde, lineage=cfg.lineage)
        self.processor = sub.processor_factory() if sub.processor_factory is not None else None
        if self.processor is not None:
            self.processor.init(self.context)

    def ensure_restored(self, clients: "WorkerClients", log: Any) -> tuple[float, int]:
        """Bring the task's stores up to their changelog's end. Returns (ms spent, records replayed)."""
        return 0.0, 0

    def process(self, messages: list[Message], stream_time: int) -> BatchOutcome:
        sub = self.sub
        if self.processor is not None:
            self.context.stream_time = stream_time
            return run_processor(self.processor, self.context, messages, key_serde=sub.key_serde,
                                 value_serde=sub.value_serde, dlq=self.dlq)
        assert sub.batch_fn is not None
        outcome = run_batch_function(sub.batch_fn, sub.batch_format, messages, key_serde=sub.key_serde,
                                     value_serde=sub.value_serde, out_key_serde=sub.output_key_serde,
                                     out_value_serde=sub.output_value_serde, output_topic=sub.output,
                                     lineage=self.lineage, dlq=self.dlq)
        outcome.stream_time = max(outcome.stream_time, stream_time)
        return outcome

    def changelog_records(self) -> list[ProducedRecord]:
        return []

    def after_commit(self) -> None:
        """Called only after the batch's transaction committed."""

    def close(self) -> None:
        if self.processor is not None:
            self.processor.close()
