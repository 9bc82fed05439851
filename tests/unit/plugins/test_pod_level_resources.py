"""Pod-level resources and in-place resize through the resource plugins (v1.37.2 behaviour).

Filter cases are the pod-level rows of the reference's fit_test.go TestEnoughRequests (node:
makeResources(10, 20, 32, 5, 20, 5)); the resize cases check that a node counts a pod being
resized at the max of spec, allocated and actuated resources, so it is not overcommitted.
"""

from __future__ import annotations

from typing import Any

import pytest
from node_plugin_helpers import assert_filter_vector_agrees, assert_score_vector_agrees, make_snapshot

from kopf_scheduler.api.objects import parse_pod
from kopf_scheduler.framework.interface import Code, CycleState
from kopf_scheduler.plugins.node_resources_balanced_allocation import NodeResourcesBalancedAllocation
from kopf_scheduler.plugins.node_resources_fit import NodeResourcesFit, NodeResourcesFitArgs
from kopf_scheduler_workbench.testing.builders import make_node, pod_dict

EXT = "example.com/aaa"
HUGE = "hugepages-2Mi"


def small_node(name: str = "n1") -> Any:
    return make_node(
        name, cpu="10m", memory="20", pods="32", extra={EXT: "5", "ephemeral-storage": "20", HUGE: "5"}
    )


def pod(
    containers: list[dict[str, str]],
    *,
    init: list[dict[str, str]] | None = None,
    pod_level: dict[str, str] | None = None,
    name: str = "p",
    node_name: str = "",
    status: dict[str, Any] | None = None,
) -> Any:
    cs = [{"name": f"c{i}", "image": "img", "resources": {"requests": r}} for i, r in enumerate(containers)]
    raw = pod_dict(name, containers=cs, node_name=node_name)
    if init:
        raw["spec"]["initContainers"] = [
            {"name": f"i{i}", "image": "img", "resources": {"requests": r}} for i, r in enumerate(init)
        ]
    if pod_level is not None:
        raw["spec"]["resources"] = {"requests": pod_level}
    if status is not None:
        raw["status"] = status
    return parse_pod(raw)


CM = {"cpu": "1m", "memory": "1"}
FILTER_CASES = [
    # (name, pod, existing pod's requests on the node, reasons, code)
    (
        "both pod-level and container-level resources fit",
        pod([CM], pod_level={"cpu": "1m", "memory": "2"}),
        {"cpu": "5m", "memory": "5"},
        [],
        None,
    ),
    (
        "pod-level cpu resource not fit",
        pod([CM], pod_level={"cpu": "7m", "memory": "2"}),
        {"cpu": "5m", "memory": "5"},
        ["Insufficient cpu"],
        Code.UNSCHEDULABLE,
    ),
    (
        "pod-level memory resource not fit",
        pod([CM], pod_level={"cpu": "3m", "memory": "2"}),
        {"cpu": "5m", "memory": "19"},
        ["Insufficient memory"],
        Code.UNSCHEDULABLE,
    ),
    (
        "pod-level hugepages resource fit",
        pod([{}], pod_level={"cpu": "3m", "memory": "2", HUGE: "5"}),
        None,
        [],
        None,
    ),
    (
        "both pod-level and container-level hugepages resource fit",
        pod([{**CM, HUGE: "3"}], pod_level={"cpu": "3m", "memory": "2", HUGE: "5"}),
        None,
        [],
        None,
    ),
    (
        "pod-level hugepages resource not fit",
        pod([{}], pod_level={"cpu": "3m", "memory": "2", HUGE: "10"}),
        None,
        [f"Insufficient {HUGE}"],
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
    ),
    (
        "one pod-level cpu resource fits and all init and non-init containers resources fit",
        pod([CM], init=[CM], pod_level={"cpu": "3m", "memory": "2"}),
        {"cpu": "5m", "memory": "19"},
        ["Insufficient memory"],
        Code.UNSCHEDULABLE,
    ),
]


@pytest.mark.parametrize(("name", "incoming", "existing", "reasons", "code"), FILTER_CASES)
def test_filter_with_pod_level_resources(
    name: str, incoming: Any, existing: dict[str, str] | None, reasons: list[str], code: Code | None
) -> None:
    pods = [pod([existing], name="e", node_name="n1")] if existing else []
    snapshot = make_snapshot([small_node()], pods)
    pl = NodeResourcesFit(NodeResourcesFitArgs(), None)
    state = CycleState()
    pl.pre_filter(state, incoming, snapshot.list())
    status = pl.filter(state, incoming, snapshot.list()[0])
    if not reasons:
        assert status is None
    else:
        assert status is not None
        assert status.reasons == reasons
        assert status.code == code
    assert_filter_vector_agrees(pl, state, incoming, snapshot)


def resizing_pod(name: str, node_name: str) -> Any:
    """Spec asks 1 cpu, but the kubelet has already allocated 3 (a resize in progress)."""
    return pod(
        [{"cpu": "1", "memory": "1Gi"}],
        name=name,
        node_name=node_name,
        status={
            "phase": "Running",
            "conditions": [{"type": "PodResizeInProgress", "status": "True"}],
            "containerStatuses": [
                {
                    "name": "c0",
                    "allocatedResources": {"cpu": "3", "memory": "1Gi"},
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                }
            ],
        },
    )


def test_node_with_a_resizing_pod_is_not_overcommitted() -> None:
    node = make_node("n1", cpu="4", memory="16Gi")
    snapshot = make_snapshot([node], [resizing_pod("r", "n1")])
    info = snapshot.list()[0]
    assert info.requested.milli_cpu == 3000
    assert info.non_zero_requested.milli_cpu == 3000
    incoming = pod([{"cpu": "2"}])
    pl = NodeResourcesFit(NodeResourcesFitArgs(), None)
    state = CycleState()
    pl.pre_filter(state, incoming, snapshot.list())
    status = pl.filter(state, incoming, info)
    assert status is not None and status.reasons == ["Insufficient cpu"]
    assert_filter_vector_agrees(pl, state, incoming, snapshot)


def test_removing_a_resizing_pod_frees_what_it_counted() -> None:
    node = make_node("n1", cpu="4", memory="16Gi")
    resizing = resizing_pod("r", "n1")
    snapshot = make_snapshot([node], [resizing])
    info = snapshot.list()[0].clone()
    assert info.remove_pod(resizing)
    assert (info.requested.milli_cpu, info.non_zero_requested.milli_cpu) == (0, 0)


def test_fit_score_ignores_pod_level_requests_balanced_allocation_uses_them() -> None:
    """The reference builds Fit's scorer without the pod-level option; BalancedAllocation has it."""
    nodes = [make_node("n1", cpu="4", memory="4Gi"), make_node("n2", cpu="8", memory="4Gi")]
    snapshot = make_snapshot(nodes)
    with_level = pod([{"cpu": "1", "memory": "1Gi"}], pod_level={"cpu": "3", "memory": "1Gi"})
    container_only = pod([{"cpu": "1", "memory": "1Gi"}])
    fit = NodeResourcesFit(NodeResourcesFitArgs(), None)
    ba = NodeResourcesBalancedAllocation()
    fit_scores = []
    ba_scores = []
    for p in (with_level, container_only):
        state = CycleState()
        fit.pre_score(state, p, snapshot.list())
        fit_scores.append(assert_score_vector_agrees(fit, state, p, snapshot))
        state = CycleState()
        ba.pre_score(state, p, snapshot.list())
        ba_scores.append(assert_score_vector_agrees(ba, state, p, snapshot))
    assert fit_scores[0] == fit_scores[1]
    assert ba_scores[0] != ba_scores[1]
    # n1: 3 cpu / 1Gi of 4 / 4Gi: 0.75 vs 0.25 -> 75 with the pod, 100 without -> 50 + 25 // 2;
    # n2: 0.375 vs 0.25 -> 93 -> 50 + 43 // 2
    assert ba_scores[0] == [62, 71]
