"""The auditor: proves or disproves exactly-once on committed output (docs/design.md, section 9).

    report = audit(bootstrap, inputs=["orders"], outputs=["orders-enriched"], dead_letter_topic="app-dlq",
                   group="app")
    report.verdict  # "PASS" or "FAIL"
"""

from eos.audit.aggregate import AggregateResult, audit_aggregate
from eos.audit.auditor import (
    AggregateSpec,
    AuditReport,
    OffsetCheck,
    TransactionCheck,
    audit,
    audit_application,
    audit_joins,
    audit_windowed,
)
from eos.audit.executors import LocalExecutor, SparkExecutor
from eos.audit.lineage import LineageResult, audit_lineage

__all__ = [
    "AggregateResult",
    "AggregateSpec",
    "AuditReport",
    "LineageResult",
    "LocalExecutor",
    "OffsetCheck",
    "SparkExecutor",
    "TransactionCheck",
    "audit",
    "audit_application",
    "audit_joins",
    "audit_windowed",
    "audit_aggregate",
    "audit_lineage",
]
