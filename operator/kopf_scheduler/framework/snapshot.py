"""The per-cycle snapshot: NodeInfos in a fixed order plus numpy columns of their numbers.

Vector plugins read the arrays (one row per node, in ``node_infos`` order) to do the same
arithmetic for every node at once; per-node plugins read the NodeInfos. The cache refreshes
only the rows of nodes whose generation changed since the last snapshot.
"""

from __future__ import annotations

import itertools
import operator
import weakref
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from kopf_scheduler.api.types import (
    CPU,
    EPHEMERAL_STORAGE,
    MEMORY,
    NO_EXECUTE,
    NO_SCHEDULE,
    PODS,
    PREFER_NO_SCHEDULE,
)
from kopf_scheduler.framework.types import ImageState, NodeInfo

__all__ = ["BASE_COLUMNS", "NodeArrays", "RowList", "Snapshot"]

_layouts = itertools.count(1)

BASE_COLUMNS = (CPU, MEMORY, EPHEMERAL_STORAGE, PODS)


_allocatable = operator.attrgetter("allocatable")
_name = operator.attrgetter("name")
_generation = operator.attrgetter("generation")
_requested = operator.attrgetter("requested")
_non_zero_requested = operator.attrgetter("non_zero_requested")
_pods = operator.attrgetter("pods")
_node = operator.attrgetter("node")
_base_amounts = operator.attrgetter("milli_cpu", "memory", "ephemeral_storage", "allowed_pod_number")
_base_requests = operator.attrgetter("milli_cpu", "memory", "ephemeral_storage")
_cpu_memory = operator.attrgetter("milli_cpu", "memory")


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
        self.allocatable[i, :4] = (
            alloc.milli_cpu,
            alloc.memory,
            alloc.ephemeral_storage,
            alloc.allowed_pod_number,
        )
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

    def set_rows(self, infos: Sequence[NodeInfo]) -> None:
        """``set_row(i, infos[i])`` for every row: each column filled from one list at once, so
        that a snapshot built from nothing (5,000 nodes at the first cycle) costs a list per
        column instead of a numpy assignment per cell."""
        if len(infos) != len(self.unschedulable):
            raise ValueError(f"{len(infos)} NodeInfos for {len(self.unschedulable)} rows")
        if not infos:
            return
        n = len(infos)

        def column(get: Callable[[Any], tuple[int, ...]], width: int, objs: Iterable[Any]) -> np.ndarray:
            flat = itertools.chain.from_iterable(map(get, objs))
            return np.fromiter(flat, dtype=np.int64, count=n * width).reshape(n, width)

        self.allocatable[:, :4] = column(_base_amounts, 4, map(_allocatable, infos))
        self.requested[:, :3] = column(_base_requests, 3, map(_requested, infos))
        self.requested[:, 3] = np.fromiter(map(len, map(_pods, infos)), dtype=np.int64, count=n)
        self.non_zero_requested[:] = column(_cpu_memory, 2, map(_non_zero_requested, infos))
        nodes = list(map(_node, infos))
        self.unschedulable[:] = [bool(node and node.unschedulable) for node in nodes]
        self.has_hard_taints[:] = False
        self.prefer_no_schedule_taints[:] = 0
        for i, node in enumerate(nodes):
            if node is not None and node.taints:
                taints = node.taints
                self.has_hard_taints[i] = any(t.effect in (NO_SCHEDULE, NO_EXECUTE) for t in taints)
                self.prefer_no_schedule_taints[i] = sum(1 for t in taints if t.effect == PREFER_NO_SCHEDULE)
        cols = self.columns
        if len(cols) > 4:
            self.allocatable[:, 4:] = 0
            self.requested[:, 4:] = 0
            for i, info in enumerate(infos):
                for name, amount in info.allocatable.scalar.items():
                    self.allocatable[i, cols[name]] = amount
                for name, amount in info.requested.scalar.items():
                    if name in cols:
                        self.requested[i, cols[name]] = amount


class RowList:
    """The snapshot rows (ascending) whose NodeInfo passes ``pred``, kept up to date row by row.

    Built on first use (so NodeInfos edited before then are seen as edited), then ``replace``
    moves one row in or out with a bisect instead of rescanning every node each cycle.
    """

    __slots__ = ("_cached", "_infos", "_pred", "_rows")

    def __init__(self, infos: Sequence[NodeInfo], pred: Callable[[NodeInfo], object]) -> None:
        self._pred = pred
        self._rows = list(itertools.compress(range(len(infos)), map(pred, infos)))  # C-speed scan
        self._infos = [infos[i] for i in self._rows]
        self._cached: list[NodeInfo] | None = None

    def replace(self, i: int, info: NodeInfo) -> None:
        rows = self._rows
        k = bisect_left(rows, i)
        present = k < len(rows) and rows[k] == i
        if self._pred(info):
            if present:
                self._infos[k] = info
            else:
                rows.insert(k, i)
                self._infos.insert(k, info)
        elif present:
            del rows[k]
            del self._infos[k]
        else:
            return
        self._cached = None

    def infos(self) -> list[NodeInfo]:
        """A list of this cycle's NodeInfos; a fresh one after a change, so callers may keep it."""
        if self._cached is None:
            self._cached = list(self._infos)
        return self._cached


# Truthy when the node has such pods (attrgetters: RowList scans every row with them once a layout).
_has_affinity = operator.attrgetter("pods_with_affinity")
_has_required_anti_affinity = operator.attrgetter("pods_with_required_anti_affinity")
_image_states = operator.attrgetter("image_states")


class Snapshot:
    """An immutable-for-the-cycle view of the cluster (``cache.Snapshot``), a ``NodeLister``."""

    def __init__(self, node_infos: Sequence[NodeInfo] = ()) -> None:
        self.node_infos: list[NodeInfo] = []
        # The same NodeInfos as a numpy object array: picking a cycle's rows (~500 of them for
        # PreScore/Score) is one fancy-index instead of a Python loop per pod.
        self._info_array: np.ndarray = np.empty(0, dtype=object)
        self.index: dict[str, int] = {}
        self.generation = 0
        self.arrays = NodeArrays(0)
        self._with_affinity: RowList | None = None
        self._with_anti_affinity: RowList | None = None
        # image name -> {row: that row's ImageState}; built on first use, kept up to date by replace.
        self._image_index: dict[str, dict[int, ImageState]] | None = None
        self._image_arrays: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        # Per-row NodeInfo generation, exact even for NodeInfos edited in place (they notify us), so
        # plugins can refresh per-row caches for the rows that changed only (np.flatnonzero).
        self.row_generation = np.zeros(0, dtype=np.int64)
        # Changes whenever rows are laid out anew (rebuild): per-row caches start over then.
        self.layout = next(_layouts)
        self._row_of: dict[int, int] = {}  # id(NodeInfo) -> row
        # What plugins derive per snapshot and keep up to date from ``layout`` and ``row_generation``
        # (the topology codes of PodTopologySpread and InterPodAffinity): it lives and dies with the
        # snapshot, a service of the framework's Handle, instead of a module's table keyed by snapshot.
        self.memo: dict[str, Any] = {}
        ref = weakref.ref(self)

        def notify(info: NodeInfo) -> None:
            snap = ref()
            if snap is not None:
                snap._row_changed(info)

        self._notify = notify
        if node_infos:
            self.rebuild(node_infos)

    # -- building (the cache calls these) --

    def rebuild(self, node_infos: Sequence[NodeInfo]) -> None:
        infos = self.node_infos = list(node_infos)
        n = len(infos)
        # fromiter: numpy must not look inside the NodeInfos (element by element, as objects).
        self._info_array = np.fromiter(infos, dtype=object, count=n)
        self.index = dict(zip(map(_name, infos), range(n), strict=True))
        scalars: dict[str, None] = {}
        for allocatable in map(_allocatable, infos):
            if allocatable.scalar:
                for name in allocatable.scalar:
                    scalars[name] = None
        self.arrays = NodeArrays(n, scalars)
        self.arrays.set_rows(infos)
        # What ``_track`` does row by row, for all rows at once.
        self.row_generation = np.fromiter(map(_generation, infos), dtype=np.int64, count=n)
        self._row_of = dict(zip(map(id, infos), range(n), strict=True))
        notify = self._notify
        for info in self.node_infos:
            watchers = info.watchers
            if watchers is None:
                info.watchers = [notify]
            elif notify not in watchers:
                watchers.append(notify)
        self.layout = next(_layouts)
        self._with_affinity = None
        self._with_anti_affinity = None
        self._image_index = None
        self._image_arrays = {}

    def replace(self, i: int, info: NodeInfo) -> bool:
        """Swap in a changed node at row i; False when its scalar resources need a rebuild."""
        if any(name not in self.arrays.columns for name in info.allocatable.scalar):
            return False
        old = self.node_infos[i]
        self.node_infos[i] = info
        self._info_array[i] = info
        self.arrays.set_row(i, info)
        if old is not info:
            self._row_of.pop(id(old), None)
        self._track(i, info)
        if self._with_affinity is not None:
            self._with_affinity.replace(i, info)
        if self._with_anti_affinity is not None:
            self._with_anti_affinity.replace(i, info)
        if self._image_index is not None and old.image_states is not info.image_states:
            self._reindex_images(i, old.image_states, info.image_states)
        return True

    def _track(self, i: int, info: NodeInfo) -> None:
        self.row_generation[i] = info.generation
        self._row_of[id(info)] = i
        watchers = info.watchers
        if watchers is None:
            info.watchers = [self._notify]
        elif self._notify not in watchers:
            watchers.append(self._notify)

    def infos_at(self, rows: np.ndarray) -> list[NodeInfo]:
        """The NodeInfos of these rows, in that order (``[node_infos[r] for r in rows]``)."""
        picked: list[NodeInfo] = self._info_array[rows].tolist()
        return picked

    def rows_of(self, infos: Sequence[NodeInfo]) -> np.ndarray | None:
        """Rows of these NodeInfos (which must be this snapshot's own objects), else None."""
        rows = list(map(self._row_of.get, map(id, infos)))
        if None in rows:
            return None
        return np.array(rows, dtype=np.int64)

    def _row_changed(self, info: NodeInfo) -> None:
        i = self._row_of.get(id(info))
        if i is not None and self.node_infos[i] is info:
            self.row_generation[i] = info.generation

    def _reindex_images(self, i: int, old: dict[str, ImageState], new: dict[str, ImageState]) -> None:
        index = self._image_index
        assert index is not None
        for image in old:
            per_row = index.get(image)
            if per_row is not None:
                per_row.pop(i, None)
                if not per_row:
                    del index[image]
            self._image_arrays.pop(image, None)
        for image, st in new.items():
            index.setdefault(image, {})[i] = st
            self._image_arrays.pop(image, None)

    def image_rows(self, image: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Rows whose node has ``image``, with that row's image size and node count (float64, as
        ImageLocality's arithmetic); None when no node has it."""
        if self._image_index is None:
            index: dict[str, dict[int, ImageState]] = {}
            for i, states in enumerate(map(_image_states, self.node_infos)):
                if states:  # most nodes' list no image (no kubelet reports them, or none yet)
                    for name, st in states.items():
                        index.setdefault(name, {})[i] = st
            self._image_index = index
        hit = self._image_arrays.get(image)
        if hit is None:
            per_row = self._image_index.get(image)
            if not per_row:
                return None
            n = len(per_row)
            rows = np.fromiter(per_row.keys(), dtype=np.int64, count=n)
            sizes = np.fromiter((st.size for st in per_row.values()), dtype=np.float64, count=n)
            nums = np.fromiter((st.num_nodes for st in per_row.values()), dtype=np.float64, count=n)
            hit = self._image_arrays[image] = (rows, sizes, nums)
        return hit

    # -- NodeLister --

    def list(self) -> Sequence[NodeInfo]:
        return self.node_infos

    def get(self, node_name: str) -> NodeInfo | None:
        i = self.index.get(node_name)
        return None if i is None else self.node_infos[i]

    def have_pods_with_affinity_list(self) -> Sequence[NodeInfo]:
        if self._with_affinity is None:
            self._with_affinity = RowList(self.node_infos, _has_affinity)
        return self._with_affinity.infos()

    def have_pods_with_required_anti_affinity_list(self) -> Sequence[NodeInfo]:
        if self._with_anti_affinity is None:
            self._with_anti_affinity = RowList(self.node_infos, _has_required_anti_affinity)
        return self._with_anti_affinity.infos()

    def __len__(self) -> int:
        return len(self.node_infos)
