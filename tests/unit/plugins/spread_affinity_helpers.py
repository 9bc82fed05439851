"""Scaffolding for the InterPodAffinity / PodTopologySpread tests: a stand-in Handle, a cycle runner."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kopf_scheduler.api.objects import Node, Pod
from kopf_scheduler.cache.snapshot import Snapshot
from kopf_scheduler.framework.interface import Code, CycleState, Status
from kopf_scheduler.framework.types import NodeInfo
from kopf_scheduler_workbench.testing.builders import make_node, make_pod


@dataclass
class FakeHandle:
    snapshot: Snapshot
    objects: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


def build_snapshot(nodes: Sequence[Node], pods: Sequence[Pod]) -> Snapshot:
    infos: dict[str, NodeInfo] = {}
    for node in nodes:
        info = NodeInfo()
        info.set_node(node)
        infos[node.name] = info
    for pod in pods:
        infos[pod.node_name].add_pod(pod)
    return Snapshot(list(infos.values()))


def node(name: str, **labels: str) -> Node:
    return make_node(name, labels=labels)


def pod(
    name: str,
    node_name: str = "",
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    **spec: Any,
) -> Pod:
    return make_pod(name, namespace, node_name=node_name, labels=labels or {}, **spec)


def run_filter(plugin: Any, pod_: Pod, snap: Snapshot) -> tuple[Status | None, dict[str, Status | None]]:
    """PreFilter then Filter on every node; also checks filter_vector agrees with the per-node verdicts."""
    state = CycleState()
    _, pre = plugin.pre_filter(state, pod_, snap.list())
    if pre is not None and pre.code == Code.SKIP:
        return pre, {}
    statuses = {info.name: plugin.filter(state, pod_, info) for info in snap.list()}
    idx = np.arange(len(snap))
    mask = plugin.filter_vector(state, pod_, snap, idx)
    assert mask is not None
    assert list(mask) == [statuses[i.name] is None for i in snap.list()]
    # a shuffled subset too
    sub = idx[::-1][: max(1, len(idx) // 2)]
    sub_mask = plugin.filter_vector(state, pod_, snap, sub)
    assert list(sub_mask) == [statuses[snap.node_infos[i].name] is None for i in sub]
    return pre, statuses


def run_score(
    plugin: Any, pod_: Pod, snap: Snapshot, feasible: Sequence[str] | None = None
) -> tuple[Status | None, dict[str, int]]:
    """PreScore, Score (checked against score_vector) and NormalizeScore over the feasible nodes."""
    names = list(feasible) if feasible is not None else [i.name for i in snap.list()]
    infos = [snap.get(n) for n in names]
    assert all(i is not None for i in infos)
    nodes = [i for i in infos if i is not None]
    state = CycleState()
    pre = plugin.pre_score(state, pod_, nodes)
    if pre is not None and pre.code == Code.SKIP:
        return pre, {}
    assert pre is None, pre
    raw = []
    for info in nodes:
        value, status = plugin.score(state, pod_, info)
        assert status is None
        raw.append(value)
    idx = np.array([snap.index[n] for n in names], dtype=np.int64)
    vec = plugin.score_vector(state, pod_, snap, idx)
    assert vec is not None
    assert list(vec) == raw
    scores = np.array(raw, dtype=np.int64)
    assert plugin.normalize_score(state, pod_, scores) is None
    return None, dict(zip(names, (int(s) for s in scores), strict=True))


def unschedulable(*reasons: str) -> Status:
    return Status(Code.UNSCHEDULABLE, *reasons)


def unresolvable(*reasons: str) -> Status:
    return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, *reasons)
