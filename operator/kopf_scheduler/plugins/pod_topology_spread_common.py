"""Helpers shared by PodTopologySpread and InterPodAffinity (the reference's ``common.go`` + helpers).

Two speed devices live here, both exact:

* :func:`topology_codes` maps every snapshot row to an integer code of its value for one
  topology key (``-1`` when the node lacks the key), so per-node topology checks become numpy
  lookups. Codes are kept on the snapshot (its ``memo``) and revalidated by its row generations.
* :class:`NodeMemo` memoises per-node results keyed by ``NodeInfo.generation``, which changes on
  every mutation of the node or its pods, so a result computed for an unchanged node in an earlier
  cycle is reused instead of walking its pods again.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np

from kopf_scheduler.api import kinds
from kopf_scheduler.api.objects import Node, Pod
from kopf_scheduler.api.types import (
    NO_EXECUTE,
    NO_SCHEDULE,
    LabelSelector,
    LabelSelectorRequirement,
    TopologySpreadConstraint,
)
from kopf_scheduler.framework.snapshot import Snapshot
from kopf_scheduler.framework.types import NodeInfo

__all__ = [
    "HOSTNAME_LABEL",
    "ZONE_LABEL",
    "NodeMemo",
    "RowTally",
    "SpreadConstraint",
    "TallyStore",
    "count_pods_match_selector",
    "default_selector",
    "filter_constraints",
    "go_round",
    "has_nodeless_rows",
    "node_labels_match_constraints",
    "required_node_affinity_matches",
    "topology_codes",
    "untolerated_do_not_schedule_taint",
]

HOSTNAME_LABEL = "kubernetes.io/hostname"
ZONE_LABEL = "topology.kubernetes.io/zone"

T = TypeVar("T")


# --- topology codes per snapshot ------------------------------------------------------------------


class _Columns:
    __slots__ = ("codes", "gens", "layout", "nodeless", "nodes")

    def __init__(self, nodes: list[Node | None], layout: int = 0, gens: np.ndarray | None = None) -> None:
        self.nodes = nodes
        self.layout = layout
        self.gens = gens
        self.codes: dict[str, tuple[np.ndarray, dict[str, int]]] = {}
        self.nodeless = {i for i, node in enumerate(nodes) if node is None}

    def set_node(self, i: int, node: Node | None) -> None:
        """Row i now holds ``node``: recode it in every key computed so far (new values get new codes)."""
        self.nodes[i] = node
        if node is None:
            self.nodeless.add(i)
        else:
            self.nodeless.discard(i)
        for key, (codes, values) in self.codes.items():
            value = node.labels.get(key) if node is not None else None
            if value is None:
                codes[i] = -1
            else:
                code = values.get(value)
                if code is None:
                    code = values[value] = len(values)
                codes[i] = code


_MEMO_KEY = "pod_topology_spread_common.columns"


def _columns(snapshot: Snapshot) -> _Columns:
    """The snapshot's columns (kept in its ``memo``), brought up to date: only rows whose generation
    moved are looked at, as a node object can only change with its NodeInfo's generation."""
    infos: Sequence[NodeInfo] = snapshot.node_infos
    cols: _Columns | None = snapshot.memo.get(_MEMO_KEY)
    row_gen = snapshot.row_generation
    layout = snapshot.layout
    if cols is None or cols.layout != layout or cols.gens is None or len(cols.gens) != len(infos):
        cols = snapshot.memo[_MEMO_KEY] = _Columns([info.node for info in infos], layout, row_gen.copy())
        return cols
    changed = np.flatnonzero((row_gen != cols.gens) | (row_gen <= 0))
    if changed.size:
        for i in changed.tolist():
            node = infos[i].node
            if node is not cols.nodes[i]:
                cols.set_node(i, node)
        cols.gens[changed] = row_gen[changed]
    return cols


def topology_codes(snapshot: Snapshot, key: str) -> tuple[np.ndarray, dict[str, int]]:
    """Per snapshot row, the code of the node's value for ``key`` (-1: no such label), and value->code.

    Codes are stable while the layout lasts; a value no row holds any more keeps its code.
    """
    cols = _columns(snapshot)
    hit = cols.codes.get(key)
    if hit is not None:
        return hit
    values: dict[str, int] = {}
    codes = np.full(len(cols.nodes), -1, dtype=np.int32)
    for i, node in enumerate(cols.nodes):
        if node is None:
            continue
        value = node.labels.get(key)
        if value is not None:
            code = values.get(value)
            if code is None:
                code = values[value] = len(values)
            codes[i] = code
    cols.codes[key] = (codes, values)
    return codes, values


def has_nodeless_rows(snapshot: Snapshot) -> bool:
    """Whether some snapshot row has no node (vector shortcuts that assume a node per row bail out)."""
    return bool(_columns(snapshot).nodeless)


def lookup_array(values: Mapping[str, int], table: Mapping[str, int], default: int = 0) -> np.ndarray:
    """An int64 array indexed by ``code + 1`` (slot 0 is "no label") of ``table[value]``."""
    out = np.full(len(values) + 1, default, dtype=np.int64)
    if len(table) <= len(values):  # walk the smaller mapping (hostname keys have a value per node)
        for value, got in table.items():
            found = values.get(value)
            if found is not None:
                out[found + 1] = got
    else:
        for value, code in values.items():
            hit = table.get(value)
            if hit is not None:
                out[code + 1] = hit
    return out


# --- per-node memo ----------------------------------------------------------------------------------


class NodeMemo:
    """Per-node results for (node name, signature id), valid for one node generation; generation 0
    is never cached.

    A signature (whatever the per-node result depends on besides the node itself) is interned once
    per cycle with :meth:`scope`, so the per-node lookups hash small tuples only. Only the latest
    generation's result is kept per node and signature: generations only grow, so an older one is
    never asked for again, and keying by generation kept one dead entry per pod add or delete on
    the node, the memo growing with the pods ever seen until ``limit``.
    """

    __slots__ = ("_data", "_limit", "_sigs")

    def __init__(self, limit: int = 1 << 18) -> None:
        self._data: dict[tuple[str, int], tuple[int, Any]] = {}
        self._sigs: dict[Hashable, int] = {}
        self._limit = limit

    def scope(self, signature: Hashable) -> int:
        sid = self._sigs.get(signature)
        if sid is None:
            if len(self._sigs) >= 4096:  # ids are about to be reused: forget what they named
                self._sigs.clear()
                self._data.clear()
            sid = self._sigs[signature] = len(self._sigs)
        return sid

    def get(self, info: NodeInfo, sid: int, compute: Callable[[NodeInfo], T]) -> T:
        gen = info.generation
        if gen <= 0:
            return compute(info)
        key = (info.name, sid)
        hit = self._data.get(key)
        if hit is not None and hit[0] == gen:
            return cast(T, hit[1])
        value = compute(info)
        if hit is None and len(self._data) >= self._limit:
            self._data.clear()
        self._data[key] = (gen, value)
        return value

    def __len__(self) -> int:
        return len(self._data)


# --- per-row tallies ---------------------------------------------------------------------------------


class RowTally:
    """A running sum over snapshot rows of per-row ``(pair, weight)`` items.

    ``refresh`` recomputes only rows whose NodeInfo generation moved since the last refresh (the
    snapshot's exact ``row_generation``; generation <= 0 means "unknown", always recomputed),
    subtracting their old items and adding the new ones, so a cycle costs O(changed rows) instead
    of a walk over every node. ``hits[pair]`` counts the items behind a pair: a pair is present iff
    some row produced it (even when its weights cancel out), as a full walk would find.
    """

    __slots__ = ("gens", "hits", "layout", "parts", "weights")

    def __init__(self, layout: int, n: int) -> None:
        self.layout = layout
        self.gens = np.full(n, -1, dtype=np.int64)
        self.parts: list[tuple[tuple[Hashable, int], ...]] = [()] * n
        self.weights: dict[Hashable, int] = {}
        self.hits: dict[Hashable, int] = {}

    def refresh(
        self, snapshot: Any, compute: Callable[[NodeInfo], Iterable[tuple[Hashable, int]]]
    ) -> RowTally:
        row_gen: np.ndarray = snapshot.row_generation
        infos: Sequence[NodeInfo] = snapshot.node_infos
        changed = np.flatnonzero((row_gen != self.gens) | (row_gen <= 0))
        if not changed.size:
            return self
        weights, hits, parts = self.weights, self.hits, self.parts
        for r in changed.tolist():
            for pair, w in parts[r]:
                left = hits[pair] - 1
                if left:
                    hits[pair] = left
                    weights[pair] -= w
                else:
                    del hits[pair]
                    del weights[pair]
            new = tuple(compute(infos[r]))
            parts[r] = new
            for pair, w in new:
                hits[pair] = hits.get(pair, 0) + 1
                weights[pair] = weights.get(pair, 0) + w
        self.gens[changed] = row_gen[changed]
        return self


class RowCounts:
    """A per-row int64 column (e.g. matching pods per node), recomputed only for rows whose
    generation moved, like ``RowTally``."""

    __slots__ = ("gens", "layout", "values")

    def __init__(self, layout: int, n: int) -> None:
        self.layout = layout
        self.gens = np.full(n, -1, dtype=np.int64)
        self.values = np.zeros(n, dtype=np.int64)

    def refresh(self, snapshot: Any, compute: Callable[[NodeInfo], int]) -> RowCounts:
        row_gen: np.ndarray = snapshot.row_generation
        infos: Sequence[NodeInfo] = snapshot.node_infos
        changed = np.flatnonzero((row_gen != self.gens) | (row_gen <= 0))
        if changed.size:
            values = self.values
            for r in changed.tolist():
                values[r] = compute(infos[r])
            self.gens[changed] = row_gen[changed]
        return self


class TallyStore:
    """RowTallies per snapshot and signature (the few most recently used signatures are kept)."""

    __slots__ = ("_by_snapshot", "_limit")

    def __init__(self, limit: int = 16) -> None:
        self._by_snapshot: weakref.WeakKeyDictionary[Any, dict[Hashable, RowTally]] = (
            weakref.WeakKeyDictionary()
        )
        self._limit = limit

    @staticmethod
    def supports(snapshot: Snapshot) -> bool:
        """The snapshot's row generations are current (every row has one)."""
        return len(snapshot.row_generation) == len(snapshot.node_infos)

    def _slot(self, snapshot: Any, signature: Hashable, kind: type[T]) -> T:
        per_snap = self._by_snapshot.get(snapshot)
        if per_snap is None:
            per_snap = self._by_snapshot[snapshot] = {}
        layout: int = snapshot.layout
        key = (kind, signature)
        entry: Any = per_snap.pop(key, None)
        if entry is None or entry.layout != layout or len(entry.gens) != len(snapshot.node_infos):
            entry = kind(layout, len(snapshot.node_infos))  # type: ignore[call-arg]
        per_snap[key] = entry  # most recently used last
        if len(per_snap) > self._limit:
            del per_snap[next(iter(per_snap))]
        return cast(T, entry)

    def get(
        self,
        snapshot: Any,
        signature: Hashable,
        compute: Callable[[NodeInfo], Iterable[tuple[Hashable, int]]],
    ) -> RowTally:
        """The refreshed tally of ``signature``; ``compute`` must depend only on the NodeInfo."""
        return self._slot(snapshot, signature, RowTally).refresh(snapshot, compute)

    def counts(self, snapshot: Any, signature: Hashable, compute: Callable[[NodeInfo], int]) -> np.ndarray:
        """The refreshed per-row column of ``signature`` (read-only for callers)."""
        return self._slot(snapshot, signature, RowCounts).refresh(snapshot, compute).values


# --- node inclusion ---------------------------------------------------------------------------------


def required_node_affinity_matches(pod: Pod, node: Node) -> bool:
    """``nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)``: nodeSelector and required terms."""
    labels = node.labels
    for key, value in pod.node_selector.items():
        if labels.get(key) != value:
            return False
    na = pod.affinity.node_affinity if pod.affinity else None
    if na is not None and na.required is not None:
        return na.required.matches(node.name, labels)
    return True


def untolerated_do_not_schedule_taint(pod: Pod, node: Node) -> bool:
    """Whether the node has a NoSchedule/NoExecute taint none of the pod's tolerations tolerate."""
    for taint in node.taints:
        if taint.effect not in (NO_SCHEDULE, NO_EXECUTE):
            continue
        if not any(t.tolerates(taint) for t in pod.tolerations):
            return True
    return False


# --- constraints ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """A constraint with its selector resolved; ``selector`` None matches nothing (nil selector)."""

    max_skew: int
    topology_key: str
    selector: LabelSelector | None
    min_domains: int = 1
    node_affinity_policy: str = "Honor"
    node_taints_policy: str = "Ignore"

    def matches(self, labels: Mapping[str, str]) -> bool:
        return self.selector is not None and self.selector.matches(labels)

    def includes_node(self, pod: Pod, node: Node, affinity_ok: bool | None = None) -> bool:
        """``matchNodeInclusionPolicies``; ``affinity_ok`` may carry a precomputed affinity match."""
        if self.node_affinity_policy == "Honor":
            ok = required_node_affinity_matches(pod, node) if affinity_ok is None else affinity_ok
            if not ok:
                return False
        return not (self.node_taints_policy == "Honor" and untolerated_do_not_schedule_taint(pod, node))


def _merge_match_label_keys(
    selector: LabelSelector | None, keys: Iterable[str], labels: Mapping[str, str]
) -> LabelSelector | None:
    """``mergeLabelSetWithSelector``: a nil selector stays nil; otherwise add ``key In (value)``."""
    extra = [LabelSelectorRequirement(k, "In", frozenset({labels[k]})) for k in keys if k in labels]
    if not extra or selector is None:
        return selector
    return selector.with_requirements(extra)


def filter_constraints(
    constraints: Iterable[TopologySpreadConstraint], pod_labels: Mapping[str, str], action: str
) -> list[SpreadConstraint]:
    """The constraints of one ``whenUnsatisfiable`` action, with matchLabelKeys merged in."""
    out: list[SpreadConstraint] = []
    for c in constraints:
        if c.when_unsatisfiable != action:
            continue
        selector = c.selector
        if c.match_label_keys:
            selector = _merge_match_label_keys(selector, c.match_label_keys, pod_labels)
        out.append(
            SpreadConstraint(
                max_skew=c.max_skew,
                topology_key=c.topology_key,
                selector=selector,
                min_domains=c.min_domains if c.min_domains is not None else 1,
                node_affinity_policy=c.node_affinity_policy or "Honor",
                node_taints_policy=c.node_taints_policy or "Ignore",
            )
        )
    return out


def node_labels_match_constraints(labels: Mapping[str, str], constraints: Sequence[SpreadConstraint]) -> bool:
    return all(c.topology_key in labels for c in constraints)


def count_pods_match_selector(pods: Iterable[Pod], selector: LabelSelector | None, namespace: str) -> int:
    """Matching pods in ``namespace``, skipping terminating ones; an empty selector counts none."""
    if selector is None or selector.is_empty():
        return 0
    count = 0
    for p in pods:
        if p.deletion_timestamp or p.namespace != namespace:
            continue
        if selector.matches(p.labels):
            count += 1
    return count


# --- default selector (helper.DefaultSelector) ------------------------------------------------------


def default_selector(pod: Pod, objects: Mapping[str, Mapping[str, object]]) -> LabelSelector:
    """Selector from the Services selecting the pod and its controlling RC/ReplicaSet/StatefulSet."""
    label_set: dict[str, str] = {}
    for svc in kinds.objects_of(objects, kinds.SERVICE).values():
        if svc.metadata.namespace != pod.namespace or svc.selector is None:  # nil selects nothing
            continue
        if all(pod.labels.get(k) == v for k, v in svc.selector.items()):
            label_set.update(svc.selector)
    selector = LabelSelector(tuple(sorted(label_set.items())))
    owner = next((ref for ref in pod.owner_references if ref.controller), None)
    if owner is None:
        return selector
    key = f"{pod.namespace}/{owner.name}"
    if owner.api_version == "v1" and owner.kind == "ReplicationController":
        rc = kinds.objects_of(objects, kinds.REPLICATION_CONTROLLER).get(key)
        if rc is not None:
            label_set.update(rc.selector or {})
            selector = LabelSelector(tuple(sorted(label_set.items())))
        return selector
    other: LabelSelector | None = None
    if owner.api_version == "apps/v1" and owner.kind == "ReplicaSet":
        rs = kinds.objects_of(objects, kinds.REPLICA_SET).get(key)
        other = rs.selector if rs is not None else None
    elif owner.api_version == "apps/v1" and owner.kind == "StatefulSet":
        ss = kinds.objects_of(objects, kinds.STATEFUL_SET).get(key)
        other = ss.selector if ss is not None else None
    if other is not None:  # a nil selector (labels.Nothing) has no requirements to add
        reqs = [LabelSelectorRequirement(k, "In", frozenset({v})) for k, v in other.match_labels]
        selector = selector.with_requirements([*reqs, *other.match_expressions])
    return selector


def go_round(x: float) -> int:
    """Go's ``math.Round`` (half away from zero) for the non-negative scores used here."""
    floor = math.floor(x)
    return int(floor + 1) if x - floor >= 0.5 else int(floor)
