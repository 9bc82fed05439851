"""The scheduler cache and its per-cycle snapshot."""

from kopf_scheduler.cache.cache import Cache, CacheError, NodeTree
from kopf_scheduler.framework.snapshot import NodeArrays, Snapshot

__all__ = ["Cache", "CacheError", "NodeArrays", "NodeTree", "Snapshot"]
