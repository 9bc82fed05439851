"""NodeResourcesBalancedAllocation: reference table values, best-effort skip, args, vector agreement."""

from __future__ import annotations

import random
from typing import Any

import pytest
from node_plugin_helpers import assert_score_vector_agrees, make_snapshot, req_pod, scores
from pydantic import ValidationError

from kopf_scheduler.framework.interface import Code, CycleState
from kopf_scheduler.plugins.node_resources_balanced_allocation import (
    NodeResourcesBalancedAllocation,
    NodeResourcesBalancedAllocationArgs,
)
from kopf_scheduler.plugins.resource_allocation import balanced_score
from kopf_scheduler.testing.builders import make_node

GPU = "nvidia.com/gpu"


def plugin(raw: dict[str, Any] | None = None) -> NodeResourcesBalancedAllocation:
    return NodeResourcesBalancedAllocation(NodeResourcesBalancedAllocationArgs.model_validate(raw or {}))


CASES = [
    # (name, pod requests, nodes (cpu, memory, extra), existing (node, requests), resources, expected)
    (
        # node1: |0.75 - 0.5| / 2 = 0.125 -> 87; node2: 0.5, 0.5 -> 100
        "nothing scheduled, resources requested, differently sized nodes",
        {"cpu": "3000", "memory": "5000"},
        [("4000", "10000", {}), ("6000", "10000", {})],
        [],
        None,
        [87, 100],
    ),
    (
        # node1: 0.6, 0.25 -> 82; node2: 0.6, 0.5 -> 95
        "resources requested, pods scheduled with resources",
        {"cpu": "3000", "memory": "5000"},
        [("10000", "20000", {}), ("10000", "20000", {})],
        [("n1", {"cpu": "3000", "memory": "0"}), ("n2", {"cpu": "3000", "memory": "5000"})],
        None,
        [82, 95],
    ),
    (
        # fractions above 1 are capped: node1 cpu 1.0, memory 0.5 -> 75
        "requested resources exceed node capacity",
        {"cpu": "3000", "memory": "5000"},
        [("4000", "10000", {}), ("4000", "10000", {})],
        [("n1", {"cpu": "3000"}), ("n2", {"cpu": "3000", "memory": "5000"})],
        None,
        [75, 100],
    ),
    (
        # 0.5, 0.5, 0.2: mean 0.4, std sqrt(0.02) -> 85; node2 has no gpu: 0.5, 0.5 -> 100
        "three resources",
        {"cpu": "2000", "memory": "5000", GPU: "1"},
        [("4000", "10000", {GPU: "5"}), ("4000", "10000", {})],
        [],
        {"resources": [{"name": "cpu"}, {"name": "memory"}, {"name": GPU}]},
        [85, 100],
    ),
    (
        # a scalar the pod does not request is left out: 0.75, 0.5
        "scalar resource not requested is bypassed",
        {"cpu": "3000", "memory": "5000"},
        [("4000", "10000", {GPU: "4"})],
        [("n1", {GPU: "4"})],
        {"resources": [{"name": "cpu"}, {"name": "memory"}, {"name": GPU}]},
        [87],
    ),
    (
        # actual requests, not non-zero defaults: an existing pod without requests adds nothing
        "existing pods without requests add nothing",
        {"cpu": "1000", "memory": "2000"},
        [("4000", "8000", {})],
        [("n1", {})],
        None,
        [100],
    ),
]


@pytest.mark.parametrize(("name", "requests", "nodes", "existing", "raw", "expected"), CASES)
def test_score(
    name: str,
    requests: dict[str, str],
    nodes: list[tuple[str, str, dict[str, str]]],
    existing: list[tuple[str, dict[str, str]]],
    raw: dict[str, Any] | None,
    expected: list[int],
) -> None:
    node_objs = [make_node(f"n{i + 1}", cpu=c, memory=m, extra=x) for i, (c, m, x) in enumerate(nodes)]
    pods = [req_pod(r, name=f"e{i}", node_name=n) for i, (n, r) in enumerate(existing)]
    snapshot = make_snapshot(node_objs, pods)
    pod = req_pod(requests)
    pl = plugin(raw)
    state = CycleState()
    assert pl.pre_score(state, pod, snapshot.list()) is None
    assert assert_score_vector_agrees(pl, state, pod, snapshot) == expected
    assert scores(pl, CycleState(), pod, snapshot) == expected


def test_best_effort_pod_skips() -> None:
    pod = req_pod({})  # a container without requests: actual requests are zero
    status = plugin().pre_score(CycleState(), pod, [])
    assert status is not None and status.code == Code.SKIP


def test_balanced_score_scalar() -> None:
    assert balanced_score([1, 1], [2, 4]) == 87
    assert balanced_score([5, 1], [4, 4]) == 62  # capped at 1: |1 - 0.25| / 2
    assert balanced_score([1], [2]) == 100  # a single fraction has no spread
    assert balanced_score([0, 0], [0, 0]) == 100


def test_vector_agrees_on_random_cluster() -> None:
    rng = random.Random(3)
    nodes = [
        make_node(
            f"n{i}",
            cpu=f"{rng.randint(0, 16000)}m",
            memory=str(rng.randint(0, 32) * 2**27),
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
        NodeResourcesBalancedAllocationArgs.model_validate({"resources": [{"name": "cpu", "weight": 2}]})
    with pytest.raises(ValidationError, match="Duplicate value"):
        NodeResourcesBalancedAllocationArgs.model_validate({"resources": [{"name": "cpu"}, {"name": "cpu"}]})
