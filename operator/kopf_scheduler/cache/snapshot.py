"""The cycle's snapshot is a framework type (plugins read it); the cache fills it. Kept importable
from here for callers that build snapshots next to a cache."""

from kopf_scheduler.framework.snapshot import BASE_COLUMNS, NodeArrays, RowList, Snapshot

__all__ = ["BASE_COLUMNS", "NodeArrays", "RowList", "Snapshot"]
