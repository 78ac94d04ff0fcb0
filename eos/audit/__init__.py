"""The auditor: proves or disproves exactly-once on committed output."""

from eos.audit.aggregate import AggregateResult, audit_aggregate
from eos.audit.lineage import LineageResult, audit_lineage

__all__ = ["AggregateResult", "LineageResult", "audit_aggregate", "audit_lineage"]
