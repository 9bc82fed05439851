"""NodeResourcesBalancedAllocation: reference table values, best-effort skip, args, vector agreement."""

from __future__ import annotations

import random
from typing import Any

import pytest
from node_plugin_helpers import assert_score_vector_agrees, make_snapshot, req_pod, scores
from pydantic import ValidationError

from kopf_scheduler.config.profile import adapter
from kopf_scheduler.framework.interface import Code, CycleState
from kopf_scheduler.plugins.node_resources_balanced_allocation import (
    NodeResourcesBalancedAllocation,
    NodeResourcesBalancedAllocationArgs,
)
from kopf_scheduler.plugins.resource_allocation import balance, balanced_score
from kopf_scheduler_workbench.testing.builders import make_node

GPU = "nvidia.com/gpu"


def plugin(raw: dict[str, Any] | None = None) -> NodeResourcesBalancedAllocation:
    args = adapter(NodeResourcesBalancedAllocationArgs).validate_python(raw or {})
    return NodeResourcesBalancedAllocation(args)


def cm(cpu: str, memory: str) -> dict[str, str]:
    return {"cpu": cpu, "memory": memory}


# The reference's balanced_allocation_test.go table (v1.37.2): pods are lists of containers, nodes
# (milli cpu, memory, extra). Since 1.37 the score is 50 + (50 + balance with the pod - balance
# without it) / 2, with balance = (1 - std of the fractions) * 100.
CPU_MEM = None
WITH_GPU = {"resources": [{"name": "cpu"}, {"name": "memory"}, {"name": GPU}]}
CASES = [
    # (name, pod containers, nodes, existing (node, containers), args, expected)
    (
        # n1: with 0.75/0.5 -> 87, without 0/0 -> 100: 50 + 37 // 2; n2: 100 both -> 75
        "nothing scheduled, resources requested, differently sized nodes",
        [cm("1000m", "2000"), cm("2000m", "3000")],
        [("4000m", "10000", {}), ("6000m", "10000", {})],
        [],
        CPU_MEM,
        [68, 75],
    ),
    (
        # n1: with 0.6/0.25 -> 82, without 0.3/0 -> 85 -> 73; n2: with 0.6/0.5 -> 95, without 0.3/0.25 -> 97
        "resources requested, pods scheduled with resources",
        [cm("1000m", "2000"), cm("2000m", "3000")],
        [("10000m", "20000", {}), ("10000m", "20000", {})],
        [
            ("n1", [{"cpu": "1000m"}, {"cpu": "2000m"}]),
            ("n2", [cm("1000m", "2000"), cm("2000m", "3000")]),
        ],
        CPU_MEM,
        [73, 74],
    ),
    (
        "resources requested, pods scheduled with resources, differently sized nodes",
        [cm("1000m", "2000"), cm("2000m", "3000")],
        [("10000m", "20000", {}), ("10000m", "50000", {})],
        [
            ("n1", [{"cpu": "1000m"}, {"cpu": "2000m"}]),
            ("n2", [cm("1000m", "2000"), cm("2000m", "3000")]),
        ],
        CPU_MEM,
        [73, 70],
    ),
    (
        # n1 goes from 1/0 (50) to 1/1 (100): the best move scores 100; n2 from 100 to 50 scores 50
        "resources requested, pods scheduled with resources, nodes to reach min/max score",
        [{"memory": "2000"}, {"memory": "3000"}],
        [("3000m", "5000", {}), ("3000m", "5000", {})],
        [("n1", [{"cpu": "1000m"}, {"cpu": "2000m"}])],
        CPU_MEM,
        [100, 50],
    ),
    (
        "requested resources at node capacity",
        [{"cpu": "1000m"}, {"cpu": "2000m"}],
        [("6000m", "10000", {}), ("6000m", "10000", {})],
        [
            ("n1", [{"cpu": "1000m"}, {"cpu": "2000m"}]),
            ("n2", [cm("1000m", "2000"), cm("2000m", "3000")]),
        ],
        CPU_MEM,
        [62, 62],
    ),
    (
        "scalar resource is included in the score computation if pod requests the scalar resource",
        [{"cpu": "0", "memory": "0", GPU: "1"}],
        [("3500m", "40000", {GPU: "8"}), ("3500m", "40000", {GPU: "8"})],
        [
            ("n1", [cm("1000m", "2000"), {"cpu": "2000m", "memory": "3000", GPU: "3"}]),
            ("n2", [cm("1000m", "2000"), cm("2000m", "3000")]),
        ],
        WITH_GPU,
        [75, 76],
    ),
    (
        "scalar resource is not included in the score computation if pod doesn't request the scalar resource",
        [cm("1000m", "2000"), cm("2000m", "3000")],
        [("3500m", "40000", {GPU: "8"}), ("3500m", "40000", {})],
        [],
        WITH_GPU,
        [56, 56],
    ),
    (
        # 0.5, 0.5, 0.2 with the pod: mean 0.4, std sqrt(0.02) -> 85, from 100 without: 67
        "three resources",
        [{"cpu": "2000m", "memory": "5000", GPU: "1"}],
        [("4000m", "10000", {GPU: "5"}), ("4000m", "10000", {})],
        [],
        WITH_GPU,
        [67, 75],
    ),
    (
        # actual requests, not non-zero defaults: an existing pod without requests adds nothing
        "existing pods without requests add nothing",
        [cm("1000m", "2000")],
        [("4000m", "8000", {})],
        [("n1", [{}])],
        CPU_MEM,
        [75],
    ),
]


@pytest.mark.parametrize(("name", "containers", "nodes", "existing", "raw", "expected"), CASES)
def test_score(
    name: str,
    containers: list[dict[str, str]],
    nodes: list[tuple[str, str, dict[str, str]]],
    existing: list[tuple[str, list[dict[str, str]]]],
    raw: dict[str, Any] | None,
    expected: list[int],
) -> None:
    node_objs = [make_node(f"n{i + 1}", cpu=c, memory=m, extra=x) for i, (c, m, x) in enumerate(nodes)]
    pods = [req_pod(*cs, name=f"e{i}", node_name=n) for i, (n, cs) in enumerate(existing)]
    snapshot = make_snapshot(node_objs, pods)
    pod = req_pod(*containers)
    pl = plugin(raw)
    state = CycleState()
    assert pl.pre_score(state, pod, snapshot.list()) is None
    assert assert_score_vector_agrees(pl, state, pod, snapshot) == expected
    # Without PreScore (the reference's "if PreScore not called" cases) the result is the same.
    assert scores(pl, CycleState(), pod, snapshot) == expected


def test_best_effort_pod_skips() -> None:
    pod = req_pod({})  # a container without requests: actual requests are zero
    status = plugin().pre_score(CycleState(), pod, [])
    assert status is not None and status.code == Code.SKIP


def test_balance_and_balanced_score_scalar() -> None:
    assert balance([1, 1], [2, 4]) == 87
    assert balance([5, 1], [4, 4]) == 62  # capped at 1: |1 - 0.25| / 2
    assert balance([1], [2]) == 100  # a single fraction has no spread
    assert balance([0, 0], [0, 0]) == 100
    assert balanced_score([1, 1], [0, 0], [2, 4]) == 50 + (50 + 87 - 100) // 2
    # Worst move (perfect balance to the largest spread) and best move.
    assert balanced_score([4, 0], [0, 0], [4, 4]) == 50
    assert balanced_score([4, 4], [4, 0], [4, 4]) == 100
    # Unchanged balance: 75, however loaded the node is.
    assert balanced_score([2, 2], [1, 1], [4, 4]) == 75


@pytest.mark.parametrize("least", [0, 1])
def test_vector_agrees_on_random_cluster(least: int) -> None:
    """``least`` 1: every node offers cpu and memory (the vector's one-formula path), 0: some do not."""
    rng = random.Random(3)
    nodes = [
        make_node(
            f"n{i}",
            cpu=f"{rng.randint(least, 16000)}m",
            memory=str(rng.randint(least, 32) * 2**27),
            extra=({GPU: str(rng.randint(0, 8))} if rng.random() < 0.4 else {}),
        )
        for i in range(80)
    ]
    pods = [
        req_pod(
            {"cpu": f"{rng.randint(0, 4000)}m", "memory": str(rng.randint(0, 8) * 2**27)},
            name=f"e{j}",
            node_name=nodes[rng.randrange(80)].name,
        )
        for j in range(200)
    ]
    snapshot = make_snapshot(nodes, pods)
    pl = plugin(
        {"resources": [{"name": "cpu"}, {"name": "memory"}, {"name": GPU}, {"name": "ephemeral-storage"}]}
    )
    two = plugin()
    for k in range(30):
        req = {"cpu": f"{rng.randint(1, 3000)}m", "memory": str(rng.randint(0, 4) * 2**27)}
        if k % 2:
            req[GPU] = "1"
        pod = req_pod(req)
        for p in (pl, two):
            state = CycleState()
            assert p.pre_score(state, pod, snapshot.list()) is None
            assert_score_vector_agrees(p, state, pod, snapshot)


def test_args() -> None:
    args = NodeResourcesBalancedAllocationArgs()
    assert [(r.name, r.weight) for r in args.resources] == [("cpu", 1), ("memory", 1)]
    with pytest.raises(ValidationError, match="must be 1"):
        adapter(NodeResourcesBalancedAllocationArgs).validate_python(
            {"resources": [{"name": "cpu", "weight": 2}]}
        )
    with pytest.raises(ValidationError, match="Duplicate value"):
        adapter(NodeResourcesBalancedAllocationArgs).validate_python(
            {"resources": [{"name": "cpu"}, {"name": "cpu"}]}
        )
