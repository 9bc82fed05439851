"""DefaultPreemption, table-driven after the reference's default_preemption_test.go.

The framework runtime is not used here: ``StandInHandle`` implements the handle methods the
plugin calls (same names and semantics as ``framework/runtime.py``) over real plugins.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

import pydantic
import pytest

from kopf_scheduler.api.objects import Node, Pod, parse_pod
from kopf_scheduler.api.policy import parse_pod_disruption_budget
from kopf_scheduler.cache.snapshot import Snapshot
from kopf_scheduler.config.profile import adapter
from kopf_scheduler.framework.diagnosis import NodeToStatus
from kopf_scheduler.framework.interface import Code, CycleState, Status
from kopf_scheduler.framework.preemption import disruption_budgets
from kopf_scheduler.framework.types import NodeInfo
from kopf_scheduler.plugins.default_preemption import (
    DefaultPreemption,
    DefaultPreemptionArgs,
    filter_pods_with_pdb_violation,
)
from kopf_scheduler.plugins.node_resources_fit import NodeResourcesFit
from kopf_scheduler.queue.nominator import Nominator
from kopf_scheduler_workbench.testing.builders import make_node, pod_dict

NEG, LOW, MID, HIGH, VERY_HIGH = -100, 0, 100, 1000, 10000


def placed(node_name: str, victims: int) -> Status:
    """v1.37.2's successful PostFilter status (its test table's wantStatus)."""
    return Status(
        Code.SUCCESS,
        f"preemption: found a potential placement for pod on node {node_name}, preempting {victims} victims",
    )


SMALL = {"cpu": "100m", "memory": "100"}
MEDIUM = {"cpu": "200m", "memory": "200"}
LARGE = {"cpu": "300m", "memory": "300"}
VERY_LARGE = {"cpu": "500m", "memory": "500"}
MAX_INT32 = 2**31 - 1


def ts(second: int) -> str:
    return f"2025-01-01T00:00:{second:02d}Z"


def pod(
    name: str,
    *,
    node: str = "",
    priority: int | None = None,
    req: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    start: int | None = None,
    namespace: str = "default",
    nominated: str = "",
    terminating: bool = False,
    conditions: Sequence[Mapping[str, str]] = (),
    **spec: Any,
) -> Pod:
    raw = pod_dict(
        name, namespace, resources=req, labels=labels, node_name=node, priority=priority, uid=name, **spec
    )
    if start is not None:
        raw["status"]["startTime"] = ts(start)
    if nominated:
        raw["status"]["nominatedNodeName"] = nominated
    if terminating:
        raw["metadata"]["deletionTimestamp"] = ts(59)
    if conditions:
        raw["status"]["conditions"] = [dict(c) for c in conditions]
    return parse_pod(raw)


def node(name: str, *, cpu: str = "500m", memory: str = "500", pods: str = "32", **kw: Any) -> Node:
    return make_node(name, cpu=cpu, memory=memory, pods=pods, **kw)


def pdb(
    name: str,
    match_labels: Mapping[str, str] | None,
    allowed: int,
    *,
    namespace: str = "default",
    disrupted: Sequence[str] = (),
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if match_labels is not None:
        spec["selector"] = {"matchLabels": dict(match_labels)}
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
        "status": {"disruptionsAllowed": allowed, "disruptedPods": {p: ts(0) for p in disrupted}},
    }


# --- stand-in framework pieces -------------------------------------------------------------------


class CountingFilter:
    """A Filter plugin returning a fixed code (or success) and counting its calls."""

    def __init__(
        self, name: str = "FakeFilter", code: Code = Code.SUCCESS, *, match_name: bool = False
    ) -> None:
        self.name = name
        self.code = code
        self.match_name = match_name
        self.calls = 0

    def filter(self, state: CycleState, p: Pod, info: NodeInfo) -> Status | None:
        self.calls += 1
        if self.match_name:  # the reference's MatchFilter: fits only the node named like the pod
            return None if p.name == info.name else Status(Code.UNSCHEDULABLE, "node doesn't match")
        return None if self.code == Code.SUCCESS else Status(self.code, "injected filter status")


class ErrorOnLabelPlugin:
    """The reference's TestPlugin: PreFilter extensions fail on nodes labelled error=true."""

    name = "test-plugin"

    def pre_filter(self, state: CycleState, p: Pod, nodes: Sequence[NodeInfo]) -> tuple[None, None]:
        return None, None

    def add_pod(self, state: CycleState, p: Pod, to_add: Pod, info: NodeInfo) -> Status | None:
        if info.node is not None and info.node.labels.get("error") == "true":
            return Status.as_error(RuntimeError(f"failed to add pod: {p.name}"))
        return None

    def remove_pod(self, state: CycleState, p: Pod, to_remove: Pod, info: NodeInfo) -> Status | None:
        if info.node is not None and info.node.labels.get("error") == "true":
            return Status.as_error(RuntimeError(f"failed to remove pod: {p.name}"))
        return None


class StandInHandle:
    """The handle methods DefaultPreemption uses, with the runtime's semantics."""

    def __init__(
        self,
        nodes: Sequence[Node],
        pods: Sequence[Pod],
        plugins: Sequence[Any],
        pdbs: Sequence[Mapping[str, Any]] = (),
        nominator: Nominator | None = None,
    ) -> None:
        infos = []
        for n in nodes:
            info = NodeInfo()
            info.set_node(n)
            for p in pods:
                if p.node_name == n.name:
                    info.add_pod(p)
            infos.append(info)
        self.snapshot = Snapshot(infos)
        views = [parse_pod_disruption_budget(d) for d in pdbs]  # as the informer stores them
        self.objects: dict[str, dict[str, Any]] = {
            "PodDisruptionBudget": {f"{v.metadata.namespace}/{v.metadata.name}": v for v in views}
        }
        self.plugins = list(plugins)
        self.nominator = nominator or Nominator()
        self.parallelism = 16

    def run_pre_filter_plugins(self, state: CycleState, p: Pod) -> None:
        for pl in self.plugins:
            if hasattr(pl, "pre_filter"):
                _, status = pl.pre_filter(state, p, self.snapshot.list())
                assert status is None or status.is_success(), status

    def run_filter_plugins(self, state: CycleState, p: Pod, info: NodeInfo) -> Status | None:
        for pl in self.plugins:
            if hasattr(pl, "filter"):
                status = pl.filter(state, p, info)
                if status is not None and not status.is_success():
                    return status.with_plugin(pl.name)
        return None

    def _extension(
        self, which: str, state: CycleState, p: Pod, other: Pod, info: NodeInfo
    ) -> Status | None:
        verb = "AddPod" if which == "add_pod" else "RemovePod"
        for pl in self.plugins:
            if hasattr(pl, "pre_filter") and hasattr(pl, which):
                status = getattr(pl, which)(state, p, other, info)
                if status is not None and not status.is_success():
                    return Status(
                        Code.ERROR, f'running {verb} on PreFilter plugin "{pl.name}": {status.message}'
                    )
        return None

    def run_pre_filter_extension_add_pod(
        self, state: CycleState, p: Pod, to_add: Pod, info: NodeInfo
    ) -> Status | None:
        return self._extension("add_pod", state, p, to_add, info)

    def run_pre_filter_extension_remove_pod(
        self, state: CycleState, p: Pod, to_remove: Pod, info: NodeInfo
    ) -> Status | None:
        return self._extension("remove_pod", state, p, to_remove, info)

    def run_filter_plugins_with_nominated_pods(
        self, state: CycleState, p: Pod, info: NodeInfo
    ) -> Status | None:
        """First with the nominated pods of >= priority on the node, then (if any) without them."""
        status: Status | None = None
        for i in range(2):
            state_to_use, info_to_use = state, info
            if i == 0:
                nominated = [
                    n
                    for n in self.nominator.nominated_pods_for_node(info.name)
                    if n.priority >= p.priority and n.uid != p.uid
                ]
                if nominated:
                    state_to_use, info_to_use = state.clone(), info.clone()
                    for n in nominated:
                        info_to_use.add_pod(n)
                        err = self.run_pre_filter_extension_add_pod(state_to_use, p, n, info_to_use)
                        if err is not None:
                            return err
                added = bool(nominated)
            elif not added or not (status is None or status.is_success()):
                break
            status = self.run_filter_plugins(state_to_use, p, info_to_use)
            if status is not None and not status.is_success() and not status.is_rejected():
                return status
        return status


def setup(
    nodes: Sequence[Node],
    pods: Sequence[Pod],
    preemptor: Pod,
    *,
    plugins: Sequence[Any] | None = None,
    pdbs: Sequence[Mapping[str, Any]] = (),
    args: DefaultPreemptionArgs | None = None,
    nominator: Nominator | None = None,
) -> tuple[DefaultPreemption, StandInHandle, CycleState]:
    handle = StandInHandle(
        nodes, pods, plugins if plugins is not None else [NodeResourcesFit()], pdbs, nominator
    )
    plugin = DefaultPreemption(args, handle)
    plugin.rng = random.Random(4)
    state = CycleState()
    handle.run_pre_filter_plugins(state, preemptor)
    return plugin, handle, state


def statuses(codes: Mapping[str, Code]) -> NodeToStatus:
    m = NodeToStatus()
    for name, code in codes.items():
        m.set(name, Status(code))
    return m


U, UU = Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE
ONE_POD = {"pods": "1", "cpu": "0", "memory": "0"}
NODE_RES = {"cpu": "200m", "memory": "400"}


# --- PostFilter -----------------------------------------------------------------------------------

POST_FILTER_CASES: list[dict[str, Any]] = [
    {
        "id": "pod with higher priority can be made schedulable",
        "pod": pod("p", priority=HIGH),
        "pods": [pod("p1", node="node1")],
        "nodes": [node("node1", **ONE_POD)],
        "statuses": {"node1": U},
        "want_node": "node1",
        "want_victims": ["p1"],
        "want_status": placed("node1", 1),
    },
    {
        "id": "pod with tied priority is still unschedulable",
        "pod": pod("p"),
        "pods": [pod("p1", node="node1")],
        "nodes": [node("node1", **ONE_POD)],
        "statuses": {"node1": U},
        "want_node": "",
        "want_status": Status(
            U, "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
        ),
    },
    {
        "id": "preemption should respect filteredNodesStatuses",
        "pod": pod("p", priority=HIGH),
        "pods": [pod("p1", node="node1")],
        "nodes": [node("node1", **ONE_POD)],
        "statuses": {"node1": UU},
        "want_node": "",
        "want_status": Status(
            U, "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
        ),
    },
    {
        "id": "absent node status means UnschedulableAndUnresolvable",
        "pod": pod("p", priority=HIGH),
        "pods": [pod("p1", node="node1")],
        "nodes": [node("node1", **ONE_POD)],
        "statuses": {},
        "want_node": "",
        "want_status": Status(
            U, "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
        ),
    },
    {
        "id": "pod can be made schedulable on one node",
        "pod": pod("p", priority=MID),
        "pods": [pod("p1", node="node1", priority=HIGH), pod("p2", node="node2", priority=LOW)],
        "nodes": [node("node1", **ONE_POD), node("node2", **ONE_POD)],
        "statuses": {"node1": U, "node2": U},
        "want_node": "node2",
        "want_victims": ["p2"],
        "want_status": placed("node2", 1),
    },
    {
        "id": "schedulable on minHighestPriority node (PDB violations counted, not forbidden)",
        "pod": pod("p", priority=VERY_HIGH),
        "pods": [
            pod("p1", node="node1", priority=HIGH, labels={"pdb": "non-violating"}),
            pod("p2", node="node1", priority=LOW, labels={"pdb": "violating"}),
            pod("p3", node="node2", priority=MID, labels={"pdb": "violating"}),
        ],
        "pdbs": [
            pdb("violating-pdb", {"pdb": "violating"}, 0),
            pdb("non-violating-pdb", {"pdb": "non-violating"}, MAX_INT32),
        ],
        "nodes": [node("node1", **ONE_POD), node("node2", **ONE_POD)],
        "statuses": {"node1": U, "node2": U},
        "want_node": "node2",
        "want_victims": ["p3"],
        "want_status": placed("node2", 1),
    },
    {
        "id": "no candidate nodes found, no enough resource after removing low priority pods",
        "pod": pod("p", priority=HIGH, req=LARGE),
        "pods": [pod("p1", node="node1"), pod("p2", node="node2")],
        "nodes": [node("node1", **NODE_RES), node("node2", **NODE_RES)],
        "statuses": {"node1": U, "node2": U},
        "want_node": "",
        "want_status": Status(U, "preemption: 0/2 nodes are available: 2 Insufficient cpu."),
    },
    {
        "id": "no candidate nodes found with mixed reasons",
        "pod": pod("p", priority=HIGH, req=LARGE),
        "pods": [
            pod("p1", node="node1", priority=HIGH),
            pod("p2", node="node2"),
            pod("p3", node="node3", priority=HIGH),
        ],
        "nodes": [node("node1", **ONE_POD), node("node2", **NODE_RES), node("node3", **ONE_POD)],
        "statuses": {"node1": U, "node2": U, "node3": U},
        "want_node": "",
        "want_status": Status(
            U,
            "preemption: 0/3 nodes are available: 1 Insufficient cpu, "
            "2 No preemption victims found for incoming pod.",
        ),
    },
    {
        "id": "no candidate nodes found with mixed reason, unresolvable and absent nodes",
        "pod": pod("p", priority=HIGH, req=LARGE),
        "pods": [pod("p1", node="node1"), pod("p2", node="node2")],
        "nodes": [node(f"node{i}", **NODE_RES) for i in range(1, 5)],
        "statuses": {"node1": U, "node2": U, "node4": UU},
        "want_node": "",
        "want_status": Status(
            U,
            "preemption: 0/4 nodes are available: 2 Insufficient cpu, "
            "2 Preemption is not helpful for scheduling.",
        ),
    },
    {
        "id": "only one node but failed with TestPlugin",
        "pod": pod("p", priority=HIGH, req=LARGE),
        "pods": [pod("p1", node="node1")],
        "nodes": [node("node1", cpu="300m", memory="300", labels={"error": "true"})],
        "statuses": {"node1": U},
        "plugins": "with-test-plugin",
        "want_node": None,
        "want_status": Status(
            Code.ERROR,
            'preemption: running RemovePod on PreFilter plugin "test-plugin": failed to remove pod: p',
        ),
    },
    {
        "id": "one failed with TestPlugin and the other pass",
        "pod": pod("p", priority=HIGH, req=LARGE),
        "pods": [pod("p1", node="node1"), pod("p2", node="node2", req=MEDIUM)],
        "nodes": [
            node("node1", cpu="300m", memory="300", labels={"error": "true"}),
            node("node2", cpu="300m", memory="300"),
        ],
        "statuses": {"node1": U, "node2": U},
        "plugins": "with-test-plugin",
        "want_node": "node2",
        "want_victims": ["p2"],
        "want_status": placed("node2", 1),
    },
    {
        "id": "preemptionPolicy Never",
        "pod": pod("p", priority=HIGH, preemptionPolicy="Never"),
        "pods": [pod("p1", node="node1")],
        "nodes": [node("node1", **ONE_POD)],
        "statuses": {"node1": U},
        "want_node": None,
        "want_status": Status(U, "preemption: not eligible due to preemptionPolicy=Never."),
    },
]


@pytest.mark.parametrize("case", POST_FILTER_CASES, ids=[c["id"] for c in POST_FILTER_CASES])
def test_post_filter(case: dict[str, Any]) -> None:
    plugins: list[Any] = [NodeResourcesFit()]
    if case.get("plugins") == "with-test-plugin":
        plugins.append(ErrorOnLabelPlugin())
    plugin, _, state = setup(
        case["nodes"], case["pods"], case["pod"], plugins=plugins, pdbs=case.get("pdbs", ())
    )
    result, status = plugin.post_filter(state, case["pod"], statuses(case["statuses"]))
    assert status == case["want_status"]
    if status is not None:
        assert status.code == case["want_status"].code
        assert status.plugin == "DefaultPreemption"
    if case["want_node"] is None:
        assert result is None
    else:
        assert result is not None
        assert result.nominated_node_name == case["want_node"]
        assert sorted(v.name for v in result.victims) == case.get("want_victims", [])


def test_post_filter_returns_victims_from_snapshot_and_leaves_snapshot_untouched() -> None:
    pods = [
        pod("p1.1", node="node1", priority=LOW, req=SMALL),
        pod("p1.2", node="node1", priority=LOW, req=SMALL),
    ]
    preemptor = pod("p", priority=HIGH, req=VERY_LARGE)
    plugin, handle, state = setup([node("node1")], pods, preemptor)
    before = [p.uid for p in handle.snapshot.get("node1").pods]  # type: ignore[union-attr]
    requested = handle.snapshot.get("node1").requested.milli_cpu  # type: ignore[union-attr]
    result, status = plugin.post_filter(state, preemptor, statuses({"node1": U}))
    assert result is not None and status is not None and status.code == Code.SUCCESS
    assert status.message.endswith("on node node1, preempting 2 victims")
    assert result.victims[0] is pods[0] or result.victims[0] is pods[1]
    assert [p.uid for p in handle.snapshot.get("node1").pods] == before  # type: ignore[union-attr]
    assert handle.snapshot.get("node1").requested.milli_cpu == requested  # type: ignore[union-attr]


# --- dry run (candidates and reprieve) ------------------------------------------------------------

DRY_RUN_CASES: list[dict[str, Any]] = [
    {
        "id": "a pod that does not fit on any node",
        "fake": CountingFilter(code=Code.UNSCHEDULABLE),
        "fit": False,
        "nodes": ["node1", "node2"],
        "pod": pod("p", priority=HIGH),
        "pods": [pod("p1", node="node1", priority=MID), pod("p2", node="node2", priority=MID)],
        "want": {},
        "calls": 2,
    },
    {
        "id": "a pod that fits with no preemption",
        "fake": CountingFilter(),
        "fit": False,
        "nodes": ["node1", "node2"],
        "pod": pod("p", priority=HIGH),
        "pods": [pod("p1", node="node1", priority=MID), pod("p2", node="node2", priority=MID)],
        "want": {},
        "calls": 4,
        "errors": 2,
    },
    {
        "id": "a pod that fits on one node with no preemption",
        "fake": CountingFilter(match_name=True),
        "fit": False,
        "nodes": ["node1", "node2"],
        "pod": pod("node1", priority=HIGH),
        "pods": [pod("p1", node="node1", priority=MID), pod("p2", node="node2", priority=MID)],
        "want": {},
        "calls": 3,
        "errors": 1,
    },
    {
        "id": "a pod that fits on both nodes when lower priority pods are preempted",
        "nodes": ["node1", "node2"],
        "pod": pod("p", priority=HIGH, req=LARGE),
        "pods": [
            pod("p1", node="node1", priority=MID, req=LARGE),
            pod("p2", node="node2", priority=MID, req=LARGE),
        ],
        "want": {"node1": (["p1"], 0), "node2": (["p2"], 0)},
        "calls": 4,
    },
    {
        "id": "other pods running are higher priority, no preemption would happen",
        "nodes": ["node1", "node2"],
        "pod": pod("p", priority=LOW, req=LARGE),
        "pods": [
            pod("p1", node="node1", priority=MID, req=LARGE),
            pod("p2", node="node2", priority=MID, req=LARGE),
        ],
        "want": {},
        "calls": 0,
    },
    {
        "id": "medium priority pod is preempted, but lower priority one stays as it is small",
        "nodes": ["node1", "node2"],
        "pod": pod("p", priority=HIGH, req=LARGE),
        "pods": [
            pod("p1.1", node="node1", priority=LOW, req=SMALL),
            pod("p1.2", node="node1", priority=MID, req=LARGE),
            pod("p2", node="node2", priority=MID, req=LARGE),
        ],
        "want": {"node1": (["p1.2"], 0), "node2": (["p2"], 0)},
        "calls": 5,
    },
    {
        "id": "mixed priority pods are preempted",
        "nodes": ["node1", "node2"],
        "pod": pod("p", priority=HIGH, req=LARGE),
        "pods": [
            pod("p1.1", node="node1", priority=MID, req=SMALL),
            pod("p1.2", node="node1", priority=LOW, req=SMALL),
            pod("p1.3", node="node1", priority=MID, req=MEDIUM),
            pod("p1.4", node="node1", priority=HIGH, req=SMALL),
            pod("p2", node="node2", priority=HIGH, req=LARGE),
        ],
        "want": {"node1": (["p1.2", "p1.3"], 0)},
        "calls": 4,
    },
    {
        "id": "mixed priority pods are preempted, pick later StartTime one when priorities are equal",
        "nodes": ["node1", "node2"],
        "pod": pod("p", priority=HIGH, req=LARGE),
        "pods": [
            pod("p1.1", node="node1", priority=LOW, req=SMALL, start=5),
            pod("p1.2", node="node1", priority=LOW, req=SMALL, start=4),
            pod("p1.3", node="node1", priority=MID, req=MEDIUM, start=3),
            pod("p1.4", node="node1", priority=HIGH, req=SMALL, start=2),
            pod("p2", node="node2", priority=HIGH, req=LARGE, start=1),
        ],
        "want": {"node1": (["p1.1", "p1.3"], 0)},
        "calls": 4,
    },
    {
        "id": "preemption with violation of same pdb",
        "nodes": ["node1"],
        "pod": pod("p", priority=HIGH, req=VERY_LARGE),
        "pods": [
            pod("p1.1", node="node1", priority=MID, req=MEDIUM, labels={"app": "foo"}),
            pod("p1.2", node="node1", priority=MID, req=MEDIUM, labels={"app": "foo"}),
        ],
        "pdbs": [pdb("pdb", {"app": "foo"}, 1)],
        "want": {"node1": (["p1.1", "p1.2"], 1)},
        "calls": 3,
    },
    {
        "id": "pdb violation, the victim doesn't belong to DisruptedPods",
        "nodes": ["node1"],
        "pod": pod("p", priority=HIGH, req=VERY_LARGE),
        "pods": [
            pod("p1.1", node="node1", priority=MID, req=MEDIUM, labels={"app": "foo"}),
            pod("p1.2", node="node1", priority=MID, req=MEDIUM, labels={"app": "foo"}),
        ],
        "pdbs": [pdb("pdb", {"app": "foo"}, 1, disrupted=["p2"])],
        "want": {"node1": (["p1.1", "p1.2"], 1)},
        "calls": 3,
    },
    {
        "id": "pdb violation, the victim belongs to DisruptedPods",
        "nodes": ["node1"],
        "pod": pod("p", priority=HIGH, req=VERY_LARGE),
        "pods": [
            pod("p1.1", node="node1", priority=MID, req=MEDIUM, labels={"app": "foo"}),
            pod("p1.2", node="node1", priority=MID, req=MEDIUM, labels={"app": "foo"}),
        ],
        "pdbs": [pdb("pdb", {"app": "foo"}, 1, disrupted=["p1.2"])],
        "want": {"node1": (["p1.1", "p1.2"], 0)},
        "calls": 3,
    },
    {
        "id": "pdb violation, the victim in DisruptedPods is treated as non-violating",
        "nodes": ["node1"],
        "pod": pod("p", priority=HIGH, req=VERY_LARGE),
        "pods": [
            pod("p1.1", node="node1", priority=MID, req=MEDIUM, labels={"app": "foo"}),
            pod("p1.2", node="node1", priority=MID, req=MEDIUM, labels={"app": "foo"}),
            pod("p1.3", node="node1", priority=MID, req=MEDIUM, labels={"app": "foo"}),
        ],
        "pdbs": [pdb("pdb", {"app": "foo"}, 1, disrupted=["p1.3"])],
        "want": {"node1": (["p1.1", "p1.2", "p1.3"], 1)},
        "calls": 4,
    },
    {
        "id": "all nodes are possible candidates, but DefaultPreemptionArgs limits to 2",
        "args": DefaultPreemptionArgs(min_candidate_nodes_percentage=40, min_candidate_nodes_absolute=1),
        "offset": 4,
        "nodes": [f"node{i}" for i in range(1, 6)],
        "pod": pod("p", priority=HIGH, req=LARGE),
        "pods": [pod(f"p{i}", node=f"node{i}", priority=MID, req=LARGE) for i in range(1, 6)],
        # offset 4 => node5, node1
        "want": {"node1": (["p1"], 0), "node5": (["p5"], 0)},
        "calls": 4,
    },
    {
        "id": "preemption looks past numCandidates until a non-PDB violating node is found",
        "args": DefaultPreemptionArgs(min_candidate_nodes_percentage=40, min_candidate_nodes_absolute=2),
        "offset": 4,
        "nodes": [f"node{i}" for i in range(1, 6)],
        "pod": pod("p", priority=HIGH, req=LARGE),
        "pods": [
            pod("p1", node="node1", priority=MID, req=LARGE, labels={"app": "foo"}),
            pod("p2", node="node2", priority=MID, req=LARGE, labels={"app": "foo"}),
            pod("p3", node="node3", priority=MID, req=LARGE),
            pod("p4", node="node4", priority=MID, req=LARGE),
            pod("p5", node="node5", priority=MID, req=LARGE, labels={"app": "foo"}),
        ],
        "pdbs": [pdb("pdb", {"app": "foo"}, 0)],
        # node5 (pdb), node1 (pdb), node2 (pdb, dropped: the violating list is full), node3 (ok)
        "want": {"node1": (["p1"], 1), "node3": (["p3"], 0), "node5": (["p5"], 1)},
        "calls": 8,
    },
]


@pytest.mark.parametrize("case", DRY_RUN_CASES, ids=[c["id"] for c in DRY_RUN_CASES])
def test_dry_run_preemption(case: dict[str, Any]) -> None:
    fake = case.get("fake") or CountingFilter()
    plugins: list[Any] = [fake]
    if case.get("fit", True):
        plugins.append(NodeResourcesFit())
    nodes = [node(n) for n in case["nodes"]]
    plugin, handle, state = setup(
        nodes, case["pods"], case["pod"], plugins=plugins, pdbs=case.get("pdbs", ()), args=case.get("args")
    )
    infos = sorted(handle.snapshot.list(), key=lambda i: i.name)
    _, num = plugin.get_offset_and_num_candidates(len(infos))
    pdbs = disruption_budgets(handle.objects)
    got, node_statuses, errors = plugin.evaluator.dry_run_preemption(
        state, case["pod"], infos, pdbs, case.get("offset", 0), num
    )
    assert {c.name: (sorted(v.name for v in c.victims), c.num_pdb_violations) for c in got} == case["want"]
    assert fake.calls == case["calls"]
    assert len(errors) == case.get("errors", 0)
    if case.get("errors"):
        assert all(e.startswith("expected at least one victim pod on node") for e in errors)
    assert not set(node_statuses) & {c.name for c in got}


def test_dry_run_puts_non_violating_candidates_first() -> None:
    pods = [
        pod("p1", node="node1", priority=MID, req=LARGE, labels={"app": "foo"}),
        pod("p2", node="node2", priority=MID, req=LARGE),
    ]
    preemptor = pod("p", priority=HIGH, req=LARGE)
    plugin, handle, state = setup(
        [node("node1"), node("node2")], pods, preemptor, pdbs=[pdb("pdb", {"app": "foo"}, 0)]
    )
    got, _, _ = plugin.evaluator.dry_run_preemption(
        state, preemptor, handle.snapshot.list(), disruption_budgets(handle.objects), 0, 2
    )
    assert [(c.name, c.num_pdb_violations) for c in got] == [("node2", 0), ("node1", 1)]


def test_reprieve_keeps_pdb_protected_victims_when_possible() -> None:
    # Either pod alone makes room; the PDB-protected one is reprieved first.
    pods = [
        pod("a", node="node1", priority=LOW, req=LARGE, start=1),
        pod("b", node="node1", priority=LOW, req=LARGE, labels={"app": "db"}, start=2),
    ]
    preemptor = pod("p", priority=HIGH, req=LARGE)
    plugin, handle, state = setup(
        [node("node1", cpu="600m", memory="600")], pods, preemptor, pdbs=[pdb("pdb", {"app": "db"}, 0)]
    )
    victims, violations, status = plugin.select_victims_on_node(
        state, preemptor, handle.snapshot.list()[0].clone(), disruption_budgets(handle.objects)
    )
    assert status is None
    assert [v.name for v in victims] == ["a"]
    assert violations == 0
    # Without the PDB the more important (older) pod "a" is reprieved instead.
    victims, _, _ = plugin.select_victims_on_node(state, preemptor, handle.snapshot.list()[0].clone(), [])
    assert [v.name for v in victims] == ["b"]


def test_victims_sorted_by_importance_after_mixed_reprieve() -> None:
    pods = [
        pod("low-pdb", node="node1", priority=LOW, req=MEDIUM, labels={"app": "db"}),
        pod("mid", node="node1", priority=MID, req=MEDIUM),
    ]
    preemptor = pod("p", priority=HIGH, req=VERY_LARGE)
    plugin, handle, state = setup([node("node1")], pods, preemptor, pdbs=[pdb("pdb", {"app": "db"}, 0)])
    victims, violations, status = plugin.select_victims_on_node(
        state, preemptor, handle.snapshot.list()[0].clone(), disruption_budgets(handle.objects)
    )
    assert status is None and violations == 1
    assert [v.name for v in victims] == ["mid", "low-pdb"]


# --- the choice among candidates (each tie-break) ------------------------------------------------

SELECT_CASES: list[dict[str, Any]] = [
    {
        "id": "a pod that fits on both nodes when lower priority pods are preempted",
        "nodes": ["node1", "node2"],
        "pod": pod("p", priority=HIGH, req=LARGE),
        "pods": [
            pod("p1", node="node1", priority=MID, req=LARGE, start=0),
            pod("p2", node="node2", priority=MID, req=LARGE, start=0),
        ],
        "expected": {"node1", "node2"},
    },
    {
        "id": "node with min highest priority pod is picked",
        "nodes": ["node1", "node2", "node3"],
        "pod": pod("p", priority=HIGH, req=VERY_LARGE),
        "pods": [
            pod("p1.1", node="node1", priority=MID, req=MEDIUM, start=0),
            pod("p1.2", node="node1", priority=MID, req=LARGE, start=0),
            pod("p2.1", node="node2", priority=MID, req=MEDIUM, start=0),
            pod("p2.2", node="node2", priority=LOW, req=MEDIUM, start=0),
            pod("p3.1", node="node3", priority=LOW, req=MEDIUM, start=0),
            pod("p3.2", node="node3", priority=LOW, req=MEDIUM, start=0),
        ],
        "expected": {"node3"},
    },
    {
        "id": "when highest priorities are the same, minimum sum of priorities is picked",
        "nodes": ["node1", "node2", "node3"],
        "pod": pod("p", priority=HIGH, req=VERY_LARGE),
        "pods": [
            pod("p1.1", node="node1", priority=MID, req=MEDIUM, start=0),
            pod("p1.2", node="node1", priority=MID, req=LARGE, start=0),
            pod("p2.1", node="node2", priority=MID, req=LARGE, start=0),
            pod("p2.2", node="node2", priority=LOW, req=MEDIUM, start=0),
            pod("p3.1", node="node3", priority=MID, req=MEDIUM, start=0),
            pod("p3.2", node="node3", priority=MID, req=MEDIUM, start=0),
        ],
        "expected": {"node2"},
    },
    {
        "id": "when highest priority and sum are the same, minimum number of pods is picked",
        "nodes": ["node1", "node2", "node3"],
        "pod": pod("p", priority=HIGH, req=VERY_LARGE),
        "pods": [
            pod("p1.1", node="node1", priority=MID, req=SMALL, start=0),
            pod("p1.2", node="node1", priority=NEG, req=SMALL, start=0),
            pod("p1.3", node="node1", priority=MID, req=SMALL, start=0),
            pod("p1.4", node="node1", priority=NEG, req=SMALL, start=0),
            pod("p2.1", node="node2", priority=MID, req=LARGE, start=0),
            pod("p2.2", node="node2", priority=NEG, req=MEDIUM, start=0),
            pod("p3.1", node="node3", priority=MID, req=MEDIUM, start=0),
            pod("p3.2", node="node3", priority=NEG, req=SMALL, start=0),
            pod("p3.3", node="node3", priority=LOW, req=SMALL, start=0),
        ],
        "expected": {"node2"},
    },
    {
        "id": "sum of adjusted priorities is considered",
        "nodes": ["node1", "node2", "node3"],
        "pod": pod("p", priority=HIGH, req=VERY_LARGE),
        "pods": [
            pod("p1.1", node="node1", priority=MID, req=SMALL, start=0),
            pod("p1.2", node="node1", priority=NEG, req=SMALL, start=0),
            pod("p1.3", node="node1", priority=NEG, req=SMALL, start=0),
            pod("p2.1", node="node2", priority=MID, req=LARGE, start=0),
            pod("p2.2", node="node2", priority=NEG, req=MEDIUM, start=0),
            pod("p3.1", node="node3", priority=MID, req=MEDIUM, start=0),
            pod("p3.2", node="node3", priority=NEG, req=SMALL, start=0),
            pod("p3.3", node="node3", priority=LOW, req=SMALL, start=0),
        ],
        "expected": {"node2"},
    },
    {
        "id": "non-overlapping lowest high priority, sum priorities, and number of pods",
        "nodes": ["node1", "node2", "node3", "node4"],
        "pod": pod("p", priority=VERY_HIGH, req=VERY_LARGE),
        "pods": [
            pod("p1.1", node="node1", priority=MID, req=SMALL, start=0),
            pod("p1.2", node="node1", priority=LOW, req=SMALL, start=0),
            pod("p1.3", node="node1", priority=LOW, req=SMALL, start=0),
            pod("p2.1", node="node2", priority=HIGH, req=LARGE, start=0),
            pod("p3.1", node="node3", priority=MID, req=MEDIUM, start=0),
            pod("p3.2", node="node3", priority=LOW, req=SMALL, start=0),
            pod("p3.3", node="node3", priority=LOW, req=SMALL, start=0),
            pod("p3.4", node="node3", priority=LOW, req=MEDIUM, start=0),
            pod("p4.1", node="node4", priority=MID, req=MEDIUM, start=0),
            pod("p4.2", node="node4", priority=MID, req=SMALL, start=0),
            pod("p4.3", node="node4", priority=MID, req=SMALL, start=0),
            pod("p4.4", node="node4", priority=NEG, req=SMALL, start=0),
        ],
        "expected": {"node1"},
    },
    {
        "id": "same priority, same number of victims, different start time for each node's pod",
        "nodes": ["node1", "node2", "node3"],
        "pod": pod("p", priority=HIGH, req=VERY_LARGE),
        "pods": [
            pod("p1.1", node="node1", priority=MID, req=MEDIUM, start=2),
            pod("p1.2", node="node1", priority=MID, req=MEDIUM, start=2),
            pod("p2.1", node="node2", priority=MID, req=MEDIUM, start=3),
            pod("p2.2", node="node2", priority=MID, req=MEDIUM, start=3),
            pod("p3.1", node="node3", priority=MID, req=MEDIUM, start=1),
            pod("p3.2", node="node3", priority=MID, req=MEDIUM, start=1),
        ],
        "expected": {"node2"},
    },
    {
        "id": "same priority, same number of victims, different start time for all pods",
        "nodes": ["node1", "node2", "node3"],
        "pod": pod("p", priority=HIGH, req=VERY_LARGE),
        "pods": [
            pod("p1.1", node="node1", priority=MID, req=MEDIUM, start=4),
            pod("p1.2", node="node1", priority=MID, req=MEDIUM, start=2),
            pod("p2.1", node="node2", priority=MID, req=MEDIUM, start=5),
            pod("p2.2", node="node2", priority=MID, req=MEDIUM, start=1),
            pod("p3.1", node="node3", priority=MID, req=MEDIUM, start=3),
            pod("p3.2", node="node3", priority=MID, req=MEDIUM, start=6),
        ],
        "expected": {"node3"},
    },
    {
        "id": "different priority, same number of victims, different start time for all pods",
        "nodes": ["node1", "node2", "node3"],
        "pod": pod("p", priority=HIGH, req=VERY_LARGE),
        "pods": [
            pod("p1.1", node="node1", priority=LOW, req=MEDIUM, start=4),
            pod("p1.2", node="node1", priority=MID, req=MEDIUM, start=2),
            pod("p2.1", node="node2", priority=MID, req=MEDIUM, start=6),
            pod("p2.2", node="node2", priority=LOW, req=MEDIUM, start=1),
            pod("p3.1", node="node3", priority=LOW, req=MEDIUM, start=3),
            pod("p3.2", node="node3", priority=MID, req=MEDIUM, start=5),
        ],
        "expected": {"node2"},
    },
]


@pytest.mark.parametrize("case", SELECT_CASES, ids=[c["id"] for c in SELECT_CASES])
@pytest.mark.parametrize("seed", [0, 1, 4])
def test_select_best_candidate(case: dict[str, Any], seed: int) -> None:
    nodes = [node(n) for n in case["nodes"]]
    plugin, _, state = setup(nodes, case["pods"], case["pod"])
    plugin.rng = random.Random(seed)
    result, status = plugin.post_filter(state, case["pod"], statuses({n: U for n in case["nodes"]}))
    assert result is not None and result.nominated_node_name in case["expected"]
    assert status == Status(
        Code.SUCCESS,
        f"preemption: found a potential placement for pod on node {result.nominated_node_name}, "
        f"preempting {len(result.victims)} victims",
    )


# --- custom eligibility and ordering hooks --------------------------------------------------------


def test_custom_is_eligible_pod_filters_victims() -> None:
    pods = [
        pod("v1", node="node1", priority=MID, req=LARGE, labels={"preemptible": "no"}, start=0),
        pod("v2", node="node2", priority=MID, req=LARGE, labels={"preemptible": "yes"}, start=0),
        pod("v3", node="node3", priority=LOW, req=LARGE, labels={"preemptible": "yes"}, start=0),
        pod("v4", node="node4", priority=LOW, req=LARGE, start=0),
    ]
    preemptor = pod("p1", priority=HIGH, req=LARGE)
    names = ["node1", "node2", "node3", "node4"]
    plugin, handle, state = setup([node(n) for n in names], pods, preemptor)
    plugin.is_eligible_pod = lambda info, victim, p: victim.labels.get("preemptible") == "yes"
    got, _, _ = plugin.evaluator.dry_run_preemption(state, preemptor, handle.snapshot.list(), [], 0, 4)
    assert {c.name: [v.name for v in c.victims] for c in got} == {"node2": ["v2"], "node3": ["v3"]}
    assert plugin.evaluator.select_candidate(got).name == "node3"  # type: ignore[union-attr]


def test_custom_more_important_pod_orders_reprieve() -> None:
    pods = [
        pod("v1", node="node1", priority=LOW, req=MEDIUM, start=2),
        pod("v2", node="node1", priority=LOW, req=MEDIUM, start=0),
        pod("v3", node="node1", priority=MID, req=MEDIUM, start=1),
    ]
    preemptor = pod("p2", priority=HIGH, req=LARGE)
    plugin, handle, state = setup([node("node1")], pods, preemptor)
    plugin.more_important_pod = lambda a, b: a.start_time < b.start_time  # oldest first
    got, _, _ = plugin.evaluator.dry_run_preemption(state, preemptor, handle.snapshot.list(), [], 0, 1)
    assert [v.name for v in got[0].victims] == ["v3", "v1"]


# --- nominated pods -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nominated_priority", "want_node", "want_message"),
    [
        (HIGH, "", "preemption: 0/1 nodes are available: 1 Insufficient cpu."),
        (LOW, "node1", None),
    ],
)
def test_nominated_pods_of_higher_or_equal_priority_count_against_the_node(
    nominated_priority: int, want_node: str, want_message: str | None
) -> None:
    nominator = Nominator()
    nominator.add_nominated_pod(
        pod("n", priority=nominated_priority, req={"cpu": "200m", "memory": "0"}), "node1"
    )
    pods = [pod("a", node="node1", priority=LOW, req=LARGE)]
    preemptor = pod("p", priority=HIGH, req={"cpu": "400m", "memory": "0"})
    plugin, _, state = setup([node("node1")], pods, preemptor, nominator=nominator)
    result, status = plugin.post_filter(state, preemptor, statuses({"node1": U}))
    assert result is not None and result.nominated_node_name == want_node
    if want_message is None:
        assert status == placed("node1", 1)
        assert [v.name for v in result.victims] == ["a"]
    else:
        assert status == Status(U, want_message)


# --- eligibility ----------------------------------------------------------------------------------

DISRUPTION_TARGET = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}

ELIGIBLE_CASES: list[dict[str, Any]] = [
    {
        "id": "pod with nominated node that is now unresolvable",
        "pod": pod("p_with_nominated_node", priority=HIGH, nominated="node1"),
        "pods": [pod("p1", node="node1", priority=LOW, terminating=True, conditions=[DISRUPTION_TARGET])],
        "nodes": ["node1"],
        "nominated_status": Status(UU, "node(s) had untolerated taint"),
        "expected": (True, ""),
    },
    {
        "id": "pod without nominated node",
        "pod": pod("p_without_nominated_node", priority=HIGH),
        "pods": [],
        "nodes": [],
        "nominated_status": None,
        "expected": (True, ""),
    },
    {
        "id": "pod with PreemptNever policy",
        "pod": pod("p_with_preempt_never_policy", priority=HIGH, preemptionPolicy="Never"),
        "pods": [],
        "nodes": [],
        "nominated_status": None,
        "expected": (False, "not eligible due to preemptionPolicy=Never."),
    },
    {
        "id": "preemption victim pod terminating, as indicated by the DisruptionTarget condition",
        "pod": pod("p_with_nominated_node", priority=HIGH, nominated="node1"),
        "pods": [pod("p1", node="node1", priority=LOW, terminating=True, conditions=[DISRUPTION_TARGET])],
        "nodes": ["node1"],
        "nominated_status": Status(U),
        "expected": (False, "not eligible due to a terminating pod on the nominated node."),
    },
    {
        "id": "non-victim pods terminating",
        "pod": pod("p_with_nominated_node", priority=HIGH, nominated="node1"),
        "pods": [pod("p1", node="node1", priority=LOW, terminating=True)],
        "nodes": ["node1"],
        "nominated_status": Status(U),
        "expected": (True, ""),
    },
    {
        "id": "terminating victim of higher priority does not block",
        "pod": pod("p_with_nominated_node", priority=MID, nominated="node1"),
        "pods": [pod("p1", node="node1", priority=HIGH, terminating=True, conditions=[DISRUPTION_TARGET])],
        "nodes": ["node1"],
        "nominated_status": Status(U),
        "expected": (True, ""),
    },
]


@pytest.mark.parametrize("case", ELIGIBLE_CASES, ids=[c["id"] for c in ELIGIBLE_CASES])
def test_pod_eligible_to_preempt_others(case: dict[str, Any]) -> None:
    plugin, _, _ = setup([node(n) for n in case["nodes"]], case["pods"], case["pod"], plugins=[])
    assert plugin.pod_eligible_to_preempt_others(case["pod"], case["nominated_status"]) == case["expected"]


def test_terminating_victim_on_nominated_node_stops_post_filter() -> None:
    preemptor = pod("p", priority=HIGH, nominated="node1")
    pods = [pod("p1", node="node1", priority=LOW, terminating=True, conditions=[DISRUPTION_TARGET])]
    plugin, _, state = setup([node("node1", **ONE_POD)], pods, preemptor)
    result, status = plugin.post_filter(state, preemptor, statuses({"node1": U}))
    assert result is None
    assert status == Status(U, "preemption: not eligible due to a terminating pod on the nominated node.")


# --- PDB splitting --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pods", "pdbs", "violating"),
    [
        pytest.param(
            [pod("a", labels={"app": "x"})], [pdb("b", {"app": "x"}, 0)], ["a"], id="budget exhausted"
        ),
        pytest.param([pod("a", labels={"app": "x"})], [pdb("b", {"app": "x"}, 1)], [], id="within budget"),
        pytest.param(
            [pod("a", labels={"app": "x"}), pod("b", labels={"app": "x"})],
            [pdb("b", {"app": "x"}, 1)],
            ["b"],
            id="budget spent in order",
        ),
        pytest.param([pod("a")], [pdb("b", {}, 0)], [], id="pod without labels matches nothing"),
        pytest.param(
            [pod("a", labels={"app": "x"})], [pdb("b", {}, 0)], [], id="empty selector matches nothing"
        ),
        pytest.param(
            [pod("a", labels={"app": "x"})], [pdb("b", None, 0)], [], id="nil selector matches nothing"
        ),
        pytest.param(
            [pod("a", labels={"app": "x"})],
            [pdb("b", {"app": "x"}, 0, namespace="other")],
            [],
            id="other namespace",
        ),
        pytest.param(
            [pod("a", labels={"app": "x"})],
            [pdb("b", {"app": "x"}, 0, disrupted=["a"])],
            [],
            id="already in disruptedPods",
        ),
        pytest.param(
            [pod("a", labels={"app": "x", "tier": "db"}), pod("b", labels={"tier": "db"})],
            [
                {
                    "metadata": {"name": "expr", "namespace": "default"},
                    "spec": {
                        "selector": {
                            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["db"]}]
                        }
                    },
                    "status": {"disruptionsAllowed": 1},
                },
                pdb("lbl", {"app": "x", "tier": "db"}, 0),
            ],
            ["a", "b"],
            id="expression-only selector and multi-label selector",
        ),
        pytest.param(
            [pod("a", labels={"app": "x", "tier": "web"})],
            [pdb("lbl", {"app": "x", "tier": "db"}, 0)],
            [],
            id="all matchLabels must match",
        ),
    ],
)
def test_filter_pods_with_pdb_violation(
    pods: list[Pod], pdbs: list[dict[str, Any]], violating: list[str]
) -> None:
    parsed = [parse_pod_disruption_budget(d) for d in pdbs]
    got_violating, got_rest = filter_pods_with_pdb_violation(pods, parsed)
    assert [p.name for p in got_violating] == violating
    assert [p.name for p in got_rest] == [p.name for p in pods if p.name not in violating]


# --- args, candidate count, PreEnqueue -------------------------------------------------------------


def test_args_defaults_and_aliases() -> None:
    args = DefaultPreemptionArgs()
    assert (args.min_candidate_nodes_percentage, args.min_candidate_nodes_absolute) == (10, 100)
    args = adapter(DefaultPreemptionArgs).validate_python(
        {"minCandidateNodesPercentage": 20, "minCandidateNodesAbsolute": 5}
    )
    assert (args.min_candidate_nodes_percentage, args.min_candidate_nodes_absolute) == (20, 5)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"minCandidateNodesPercentage": 101},
            "minCandidateNodesPercentage: Invalid value: 101: not in valid range [0, 100]",
        ),
        (
            {"minCandidateNodesPercentage": -1},
            "minCandidateNodesPercentage: Invalid value: -1: not in valid range [0, 100]",
        ),
        (
            {"minCandidateNodesAbsolute": -1},
            "minCandidateNodesAbsolute: Invalid value: -1: not in valid range [0, inf)",
        ),
        (
            {"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0},
            "cannot be zero at the same time as minCandidateNodesAbsolute",
        ),
        ({"minCandidateNodes": 3}, "Unexpected keyword argument"),
    ],
)
def test_args_validation(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=re.escape(message)):
        adapter(DefaultPreemptionArgs).validate_python(raw)


@pytest.mark.parametrize(
    ("pct", "absolute", "nodes", "want"),
    [
        (10, 100, 1000, 100),
        (10, 100, 5000, 500),
        (10, 100, 50, 50),
        (40, 1, 5, 2),
        (50, 0, 10, 5),
        (0, 3, 10, 3),
        (100, 0, 7, 7),
    ],
)
def test_calculate_num_candidates(pct: int, absolute: int, nodes: int, want: int) -> None:
    plugin = DefaultPreemption(
        DefaultPreemptionArgs(min_candidate_nodes_percentage=pct, min_candidate_nodes_absolute=absolute)
    )
    assert plugin.calculate_num_candidates(nodes) == want
    offset, num = plugin.get_offset_and_num_candidates(nodes)
    assert 0 <= offset < nodes and num == want


def test_pre_enqueue_waits_while_preemption_is_running() -> None:
    plugin = DefaultPreemption()
    p = pod("p", priority=HIGH)
    assert plugin.pre_enqueue(p) is None
    plugin.preemption_started(p.uid)
    status = plugin.pre_enqueue(p)
    assert status == Status(UU, "waiting for the preemption for this pod to be finished")
    assert status is not None and status.code == UU
    plugin.preemption_finished(p.uid)
    assert plugin.pre_enqueue(p) is None
    (hint,) = plugin.events_to_register()
    assert hint.hint is not None and int(hint.hint(p, None, None)) == 0


# --- through the real Framework (the reference's TestPreempt) --------------------------------------

SPREAD = [
    {
        "maxSkew": 1,
        "topologyKey": key,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchExpressions": [{"key": "foo", "operator": "Exists"}]},
    }
    for key in ("zone", "hostname")
]

PREEMPT_CASES: list[dict[str, Any]] = [
    {
        "id": "basic preemption logic",
        "pod": pod("p", priority=HIGH, req=VERY_LARGE, preemptionPolicy="PreemptLowerPriority"),
        "pods": [
            pod("p1.1", node="node1", priority=LOW, req=SMALL),
            pod("p1.2", node="node1", priority=LOW, req=SMALL),
            pod("p2.1", node="node2", priority=HIGH, req=LARGE),
            pod("p3.1", node="node3", priority=MID, req=MEDIUM),
        ],
        "nodes": [node("node1"), node("node2"), node("node3")],
        "plugins": ["NodeResourcesFit"],
        "want": ("node1", ["p1.1", "p1.2"]),
    },
    {
        "id": "preemption for topology spread constraints",
        "pod": pod("p", priority=HIGH, labels={"foo": ""}, topologySpreadConstraints=SPREAD),
        "pods": [
            pod("p-a1", node="node-a", priority=HIGH, labels={"foo": ""}),
            pod("p-a2", node="node-a", priority=HIGH, labels={"foo": ""}),
            pod("p-b1", node="node-b", priority=LOW, labels={"foo": ""}),
            pod("p-x1", node="node-x", priority=HIGH, labels={"foo": ""}),
            pod("p-x2", node="node-x", priority=HIGH, labels={"foo": ""}),
        ],
        "nodes": [
            node(n, labels={"hostname": n, "zone": z})
            for n, z in (("node-a", "zone1"), ("node-b", "zone1"), ("node-x", "zone2"))
        ],
        "plugins": ["PodTopologySpread"],
        "want": ("node-b", ["p-b1"]),
    },
    {
        "id": "no preempting in pod",
        "pod": pod("p", priority=HIGH, req=VERY_LARGE, preemptionPolicy="Never"),
        "pods": [
            pod("p1.1", node="node1", priority=LOW, req=SMALL),
            pod("p1.2", node="node1", priority=LOW, req=SMALL),
        ],
        "nodes": [node("node1")],
        "plugins": ["NodeResourcesFit"],
        "want": None,
    },
]


@pytest.mark.parametrize("case", PREEMPT_CASES, ids=[c["id"] for c in PREEMPT_CASES])
def test_preempt_through_framework(case: dict[str, Any]) -> None:
    from kopf_scheduler.framework.profiles import load_profile
    from kopf_scheduler.framework.runtime import Framework

    enabled = [{"name": n} for n in ["PrioritySort", *case["plugins"], "DefaultPreemption", "DefaultBinder"]]
    profile = load_profile(
        {"schedulerName": "t", "plugins": {"multiPoint": {"disabled": [{"name": "*"}], "enabled": enabled}}}
    )
    stand_in = StandInHandle(case["nodes"], case["pods"], [])
    fw = Framework(profile, snapshot=stand_in.snapshot, objects={}, nominator=Nominator())
    state = CycleState()
    _, status, _ = fw.run_pre_filter_plugins(state, case["pod"])
    assert status is None or status.is_success()
    node_statuses = NodeToStatus()
    for info in fw.snapshot.list():
        st = fw.run_filter_plugins(state, case["pod"], info)
        assert st is not None and st.code == U, st
        node_statuses.set(info.name, st)
    result, status = fw.run_post_filter_plugins(state, case["pod"], node_statuses)
    if case["want"] is None:
        assert result is None and status.code == U
        assert status.reasons == ["preemption: not eligible due to preemptionPolicy=Never."]
    else:
        assert status.is_success() and result is not None
        assert (result.nominated_node_name, sorted(v.name for v in result.victims)) == case["want"]
