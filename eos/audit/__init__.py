"""The auditor: proves or disproves exactly-once on committed output."""

from eos.audit.lineage import LineageResult, audit_lineage

__all__ = ["LineageResult", "audit_lineage"]
