"""Shared helpers for the node/resource plugin tests: a stand-in Handle, snapshots, vector checks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from kopf_scheduler.api.objects import Node, Pod
from kopf_scheduler.cache.snapshot import Snapshot
from kopf_scheduler.framework.interface import CycleState, Status
from kopf_scheduler.framework.types import NodeInfo
from kopf_scheduler_workbench.testing.builders import make_pod


class FakeHandle:
    def __init__(
        self, snapshot: Snapshot | None = None, objects: Mapping[str, Any] | None = None, client: Any = None
    ) -> None:
        self.snapshot = snapshot or Snapshot()
        self.objects = objects or {}
        self.client = client


def make_snapshot(nodes: Sequence[Node], pods: Sequence[Pod] = ()) -> Snapshot:
    infos: dict[str, NodeInfo] = {}
    for node in nodes:
        info = NodeInfo()
        info.set_node(node)
        infos[node.name] = info
    for pod in pods:
        infos[pod.node_name].add_pod(pod)
    return Snapshot(list(infos.values()))


def req_pod(*containers: Mapping[str, str], name: str = "p", **kwargs: Any) -> Pod:
    """A pod with one container per requests mapping (none at all when called without any)."""
    cs = [
        {"name": f"c{i}", "image": "img", "resources": {"requests": dict(r)}}
        for i, r in enumerate(containers)
    ]
    return make_pod(name, containers=cs, **kwargs)


def all_rows(snapshot: Snapshot) -> np.ndarray:
    return np.arange(len(snapshot), dtype=np.int64)


def filter_statuses(plugin: Any, state: CycleState, pod: Pod, snapshot: Snapshot) -> list[Status | None]:
    return [plugin.filter(state, pod, info) for info in snapshot.list()]


def assert_filter_vector_agrees(plugin: Any, state: CycleState, pod: Pod, snapshot: Snapshot) -> None:
    per_node = [s is None or s.is_success() for s in filter_statuses(plugin, state, pod, snapshot)]
    mask = plugin.filter_vector(state, pod, snapshot, all_rows(snapshot))
    assert mask is not None
    assert mask.dtype == bool
    assert mask.tolist() == per_node
    # Subsets of rows (large and small), in another order, must agree too.
    rows = all_rows(snapshot)[::-1]
    for sub in (rows[: max(1, len(rows) // 2)], rows[:1], rows[: max(1, len(rows) // 5)]):
        mask = plugin.filter_vector(state, pod, snapshot, sub)
        assert mask.tolist() == [per_node[i] for i in sub]


def scores(plugin: Any, state: CycleState, pod: Pod, snapshot: Snapshot) -> list[int]:
    out = []
    for info in snapshot.list():
        score, status = plugin.score(state, pod, info)
        assert status is None or status.is_success(), status
        out.append(score)
    return out


def assert_score_vector_agrees(plugin: Any, state: CycleState, pod: Pod, snapshot: Snapshot) -> list[int]:
    per_node = scores(plugin, state, pod, snapshot)
    vec = plugin.score_vector(state, pod, snapshot, all_rows(snapshot))
    assert vec is not None
    assert vec.dtype == np.int64
    assert vec.tolist() == per_node
    return per_node
