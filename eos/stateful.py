"""Stateful sub-topologies: changelog topics and store runtimes (filled in by the state-store layer)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eos.config import EosConfig
from eos.topology import SubTopology
from transactions import KafkaAdmin

__all__ = ["prepare_changelogs"]


def prepare_changelogs(admin: KafkaAdmin, config: EosConfig, subtopologies: Mapping[str, SubTopology],
                       partition_counts: Mapping[str, int]) -> dict[str, Any]:
    if any(sub.stateful for sub in subtopologies.values()):
        raise NotImplementedError("state stores are not available yet")
    return {}
