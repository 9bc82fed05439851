"""The per-cycle snapshot: NodeInfos in a fixed order plus numpy columns of their numbers.

Vector plugins read the arrays (one row per node, in ``node_infos`` order) to do the same
arithmetic for every node at once; per-node plugins read the NodeInfos. The cache refreshes
only the rows of nodes whose generation changed since the last snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from kopf_scheduler.api.types import CPU, EPHEMERAL_STORAGE, MEMORY, NO_EXECUTE, NO_SCHEDULE, PODS, PREFER_NO_SCHEDULE
from kopf_scheduler.framework.types import NodeInfo

__all__ = ["NodeArrays", "Snapshot"]

BASE_COLUMNS = (CPU, MEMORY, EPHEMERAL_STORAGE, PODS)


class NodeArrays:
    """Column store of per-node numbers. Resources are columns of ``allocatable``/``requested``:
    cpu (milli), memory, ephemeral-storage, pods (allocatable pods / pods on the node), then
    scalar resources in ``columns`` order."""

    def __init__(self, n: int, scalar_names: Iterable[str] = ()) -> None:
        self.columns: dict[str, int] = {name: i for i, name in enumerate(BASE_COLUMNS)}
        for name in scalar_names:
            self.columns.setdefault(name, len(self.columns))
        width = len(self.columns)
        self.allocatable = np.zeros((n, width), dtype=np.int64)
        self.requested = np.zeros((n, width), dtype=np.int64)
        self.non_zero_requested = np.zeros((n, 2), dtype=np.int64)  # cpu, memory
        self.unschedulable = np.zeros(n, dtype=bool)
        self.has_hard_taints = np.zeros(n, dtype=bool)  # any NoSchedule/NoExecute taint
        self.prefer_no_schedule_taints = np.zeros(n, dtype=np.int64)

    def set_row(self, i: int, info: NodeInfo) -> None:
        cols = self.columns
        alloc, req = info.allocatable, info.requested
        self.allocatable[i, :4] = (alloc.milli_cpu, alloc.memory, alloc.ephemeral_storage, alloc.allowed_pod_number)
        self.requested[i, :4] = (req.milli_cpu, req.memory, req.ephemeral_storage, len(info.pods))
        if len(cols) > 4:
            self.allocatable[i, 4:] = 0
            self.requested[i, 4:] = 0
            for name, amount in alloc.scalar.items():
                self.allocatable[i, cols[name]] = amount
            for name, amount in req.scalar.items():
                if name in cols:
                    self.requested[i, cols[name]] = amount
        self.non_zero_requested[i] = (info.non_zero_requested.milli_cpu, info.non_zero_requested.memory)
        node = info.node
        taints = node.taints if node else ()
        self.unschedulable[i] = bool(node and node.unschedulable)
        self.has_hard_taints[i] = any(t.effect in (NO_SCHEDULE, NO_EXECUTE) for t in taints)
        self.prefer_no_schedule_taints[i] = sum(1 for t in taints if t.effect == PREFER_NO_SCHEDULE)


class Snapshot:
    """An immutable-for-the-cycle view of the cluster (``cache.Snapshot``), a ``NodeLister``."""

    def __init__(self, node_infos: Sequence[NodeInfo] = ()) -> None:
        self.node_infos: list[NodeInfo] = []
        self.index: dict[str, int] = {}
        self.generation = 0
        self.arrays = NodeArrays(0)
        self._with_affinity: list[NodeInfo] | None = None
        self._with_anti_affinity: list[NodeInfo] | None = None
        if node_infos:
            self.rebuild(node_infos)

    # -- building (the cache calls these) --

    def rebuild(self, node_infos: Sequence[NodeInfo]) -> None:
        self.node_infos = list(node_infos)
        self.index = {info.name: i for i, info in enumerate(self.node_infos)}
        scalars: dict[str, None] = {}
        for info in self.node_infos:
            for name in info.allocatable.scalar:
                scalars[name] = None
        self.arrays = NodeArrays(len(self.node_infos), scalars)
        for i, info in enumerate(self.node_infos):
            self.arrays.set_row(i, info)
        self._invalidate_lists()

    def replace(self, i: int, info: NodeInfo) -> bool:
        """Swap in a changed node at row i; False when its scalar resources need a rebuild."""
        if any(name not in self.arrays.columns for name in info.allocatable.scalar):
            return False
        self.node_infos[i] = info
        self.arrays.set_row(i, info)
        self._invalidate_lists()
        return True

    def _invalidate_lists(self) -> None:
        self._with_affinity = None
        self._with_anti_affinity = None

    # -- NodeLister --

    def list(self) -> Sequence[NodeInfo]:
        return self.node_infos

    def get(self, node_name: str) -> NodeInfo | None:
        i = self.index.get(node_name)
        return None if i is None else self.node_infos[i]

    def have_pods_with_affinity_list(self) -> Sequence[NodeInfo]:
        if self._with_affinity is None:
            self._with_affinity = [n for n in self.node_infos if n.pods_with_affinity]
        return self._with_affinity

    def have_pods_with_required_anti_affinity_list(self) -> Sequence[NodeInfo]:
        if self._with_anti_affinity is None:
            self._with_anti_affinity = [n for n in self.node_infos if n.pods_with_required_anti_affinity]
        return self._with_anti_affinity

    def __len__(self) -> int:
        return len(self.node_infos)
