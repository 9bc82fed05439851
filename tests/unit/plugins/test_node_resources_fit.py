"""NodeResourcesFit: fitsRequest reasons, scoring strategies (reference tables), args, hints, vectors."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from node_plugin_helpers import (
    assert_filter_vector_agrees,
    assert_score_vector_agrees,
    make_snapshot,
    req_pod,
    scores,
)
from pydantic import ValidationError

from kopf_scheduler.config.profile import adapter
from kopf_scheduler.framework.interface import ActionType, Code, CycleState, EventResource, QueueingHint
from kopf_scheduler.plugins.node_resources_fit import NodeResourcesFit, NodeResourcesFitArgs
from kopf_scheduler.plugins.resource_allocation import broken_linear
from kopf_scheduler_workbench.testing.builders import make_node, make_pod

EXT = "example.com/aaa"
HUGE = "hugepages-2Mi"


def small_node(name: str = "n1", pods: str = "32") -> Any:
    # makeResources(10, 20, 32, 5, 20, 5) of the reference's fit_test.go
    return make_node(
        name, cpu="10m", memory="20", pods=pods, extra={EXT: "5", "ephemeral-storage": "20", HUGE: "5"}
    )


def fit(args: dict[str, Any] | None = None) -> NodeResourcesFit:
    return NodeResourcesFit(adapter(NodeResourcesFitArgs).validate_python(args or {}), None)


FILTER_CASES = [
    # (name, pod requests per container, init containers, existing pod requests, args, reasons, code)
    ("no resources requested always fits", [], [], {"cpu": "10m", "memory": "20"}, None, [], None),
    (
        "too many resources fails",
        [{"cpu": "1m", "memory": "1"}],
        [],
        {"cpu": "10m", "memory": "20"},
        None,
        ["Insufficient cpu", "Insufficient memory"],
        Code.UNSCHEDULABLE,
    ),
    ("both resources fit", [{"cpu": "1m", "memory": "1"}], [], {"cpu": "5m", "memory": "5"}, None, [], None),
    (
        "request larger than the node is unresolvable",
        [{"cpu": "11m", "memory": "1"}],
        [],
        {},
        None,
        ["Insufficient cpu"],
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
    ),
    (
        "too many resources fails due to init container cpu",
        [{"cpu": "1m", "memory": "1"}],
        [{"cpu": "3m", "memory": "1"}],
        {"cpu": "8m", "memory": "19"},
        None,
        ["Insufficient cpu"],
        Code.UNSCHEDULABLE,
    ),
    (
        "init container fits when it is the max but below free",
        [{"cpu": "1m", "memory": "1"}],
        [{"cpu": "2m", "memory": "1"}],
        {"cpu": "8m", "memory": "19"},
        None,
        [],
        None,
    ),
    (
        "extended resource insufficient",
        [{EXT: "1"}],
        [],
        {EXT: "5"},
        None,
        [f"Insufficient {EXT}"],
        Code.UNSCHEDULABLE,
    ),
    (
        "extended resource ignored by name",
        [{EXT: "1"}],
        [],
        {EXT: "5"},
        {"ignoredResources": [EXT]},
        [],
        None,
    ),
    (
        "extended resource ignored by group",
        [{EXT: "1"}],
        [],
        {EXT: "5"},
        {"ignoredResourceGroups": ["example.com"]},
        [],
        None,
    ),
    (
        "unknown extended resource is unresolvable",
        [{"example.com/bbb": "1"}],
        [],
        {},
        None,
        ["Insufficient example.com/bbb"],
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
    ),
    (
        "hugepages are not extended resources, so not ignorable",
        [{HUGE: "6"}],
        [],
        {},
        {"ignoredResourceGroups": ["hugepages-2Mi"]},
        [f"Insufficient {HUGE}"],
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
    ),
    (
        "ephemeral storage insufficient",
        [{"ephemeral-storage": "10"}],
        [],
        {"ephemeral-storage": "15"},
        None,
        ["Insufficient ephemeral-storage"],
        Code.UNSCHEDULABLE,
    ),
    ("ephemeral storage fits", [{"ephemeral-storage": "5"}], [], {"ephemeral-storage": "15"}, None, [], None),
]


@pytest.mark.parametrize(("name", "containers", "inits", "existing", "args", "reasons", "code"), FILTER_CASES)
def test_filter(
    name: str,
    containers: list[dict[str, str]],
    inits: list[dict[str, str]],
    existing: dict[str, str],
    args: dict[str, Any] | None,
    reasons: list[str],
    code: Code | None,
) -> None:
    pod = req_pod(*containers)
    if inits:
        pod = make_pod(
            "p",
            containers=[
                {"name": f"c{i}", "image": "i", "resources": {"requests": c}}
                for i, c in enumerate(containers)
            ],
            initContainers=[
                {"name": f"i{i}", "image": "i", "resources": {"requests": c}} for i, c in enumerate(inits)
            ],
        )
    pods = [req_pod(existing, name="e", node_name="n1")] if existing else []
    snapshot = make_snapshot([small_node()], pods)
    plugin = fit(args)
    state = CycleState()
    assert plugin.pre_filter(state, pod, snapshot.list()) == (None, None)
    status = plugin.filter(state, pod, snapshot.list()[0])
    if not reasons:
        assert status is None
    else:
        assert status is not None
        assert status.code == code
        assert status.reasons == reasons
    assert_filter_vector_agrees(plugin, state, pod, snapshot)


def test_too_many_pods_comes_first() -> None:
    node = small_node(pods="1")
    snapshot = make_snapshot([node], [req_pod({"cpu": "10m"}, name="e", node_name="n1")])
    pod = req_pod({"cpu": "1m"})
    plugin = fit()
    state = CycleState()
    plugin.pre_filter(state, pod, snapshot.list())
    status = plugin.filter(state, pod, snapshot.list()[0])
    assert status is not None
    assert status.reasons == ["Too many pods", "Insufficient cpu"]
    assert status.code == Code.UNSCHEDULABLE
    assert_filter_vector_agrees(plugin, state, pod, snapshot)


def test_too_many_pods_even_without_requests() -> None:
    snapshot = make_snapshot([small_node(pods="1")], [req_pod(name="e", node_name="n1")])
    pod = req_pod()
    plugin = fit()
    state = CycleState()
    plugin.pre_filter(state, pod, snapshot.list())
    status = plugin.filter(state, pod, snapshot.list()[0])
    assert status is not None and status.reasons == ["Too many pods"]


def test_filter_without_prefilter_is_an_error() -> None:
    snapshot = make_snapshot([small_node()])
    status = fit().filter(CycleState(), req_pod(), snapshot.list()[0])
    assert status is not None and status.code == Code.ERROR
    assert fit().filter_vector(CycleState(), req_pod(), snapshot, __import__("numpy").arange(1)) is None


def test_scalar_reasons_are_sorted() -> None:
    snapshot = make_snapshot([small_node()])
    pod = req_pod({"example.com/zzz": "1", "example.com/bbb": "1"})
    plugin = fit()
    state = CycleState()
    plugin.pre_filter(state, pod, snapshot.list())
    status = plugin.filter(state, pod, snapshot.list()[0])
    assert status is not None
    assert status.reasons == ["Insufficient example.com/bbb", "Insufficient example.com/zzz"]


# --- scoring: least_allocated_test.go / most_allocated_test.go / requested_to_capacity_ratio_test.go ---

BIG_REQ = [{"cpu": "1000", "memory": "2000"}, {"cpu": "2000", "memory": "3000"}]
DEFAULT = [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]

LEAST_CASES = [
    (
        "nothing scheduled, nothing requested",
        [],
        [("4000", "10000"), ("4000", "10000")],
        [],
        DEFAULT,
        [100, 100],
    ),
    (
        "nothing scheduled, resources requested, differently sized nodes",
        BIG_REQ,
        [("4000", "10000"), ("6000", "10000")],
        [],
        DEFAULT,
        [37, 50],
    ),
    (
        "no resources requested, pods scheduled",
        [],
        [("4000", "10000"), ("4000", "10000")],
        [("n1", []), ("n1", []), ("n2", []), ("n2", [])],
        DEFAULT,
        [100, 100],
    ),
    (
        "no resources requested, pods scheduled with resources",
        [],
        [("10000", "20000"), ("10000", "20000")],
        [
            ("n1", [{"cpu": "3000", "memory": "0"}]),
            ("n1", [{"cpu": "3000", "memory": "0"}]),
            ("n2", [{"cpu": "3000", "memory": "0"}]),
            ("n2", [{"cpu": "3000", "memory": "5000"}]),
        ],
        DEFAULT,
        [70, 57],
    ),
    (
        "resources requested, pods scheduled with resources",
        BIG_REQ,
        [("10000", "20000"), ("10000", "20000")],
        [("n1", [{"cpu": "3000", "memory": "0"}]), ("n2", [{"cpu": "3000", "memory": "5000"}])],
        DEFAULT,
        [57, 45],
    ),
    (
        "resources requested, pods scheduled with resources, differently sized nodes",
        BIG_REQ,
        [("10000", "20000"), ("10000", "50000")],
        [("n1", [{"cpu": "3000", "memory": "0"}]), ("n2", [{"cpu": "3000", "memory": "5000"}])],
        DEFAULT,
        [57, 60],
    ),
    (
        "requested resources exceed node capacity",
        [{"cpu": "3000", "memory": "0"}],
        [("4000", "10000"), ("4000", "10000")],
        [("n1", [{"cpu": "3000", "memory": "0"}]), ("n2", [{"cpu": "3000", "memory": "5000"}])],
        DEFAULT,
        [50, 25],
    ),
    (
        "zero node resources, pods scheduled with resources",
        [],
        [("0", "0"), ("0", "0")],
        [("n1", [{"cpu": "3000", "memory": "0"}]), ("n2", [{"cpu": "3000", "memory": "5000"}])],
        DEFAULT,
        [0, 0],
    ),
    (
        "different weight on cpu and memory, differently sized nodes",
        BIG_REQ,
        [("4000", "10000"), ("6000", "10000")],
        [],
        [{"name": "memory", "weight": 2}, {"name": "cpu", "weight": 1}],
        [41, 50],
    ),
]


def _score_setup(
    containers: list[dict[str, str]],
    nodes: list[tuple[str, str]],
    existing: list[tuple[str, list[dict[str, str]]]],
    extra: list[dict[str, str]] | None = None,
) -> tuple[Any, Any]:
    node_objs = [
        make_node(f"n{i + 1}", cpu=c, memory=m, extra=(extra[i] if extra else None))
        for i, (c, m) in enumerate(nodes)
    ]
    pods = [req_pod(*reqs, name=f"e{i}", node_name=n) for i, (n, reqs) in enumerate(existing)]
    return req_pod(*containers), make_snapshot(node_objs, pods)


@pytest.mark.parametrize(("name", "containers", "nodes", "existing", "resources", "expected"), LEAST_CASES)
def test_least_allocated(
    name: str,
    containers: list[dict[str, str]],
    nodes: list[tuple[str, str]],
    existing: list[tuple[str, list[dict[str, str]]]],
    resources: list[dict[str, Any]],
    expected: list[int],
) -> None:
    pod, snapshot = _score_setup(containers, nodes, existing)
    plugin = fit({"scoringStrategy": {"type": "LeastAllocated", "resources": resources}})
    state = CycleState()
    assert plugin.pre_score(state, pod, snapshot.list()) is None
    assert assert_score_vector_agrees(plugin, state, pod, snapshot) == expected
    # Without PreScore the plugin computes the requests itself.
    assert scores(plugin, CycleState(), pod, snapshot) == expected


EXT_RES = [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}, {"name": EXT, "weight": 1}]


def test_least_allocated_bypasses_unrequested_extended_resource() -> None:
    pod, snapshot = _score_setup(BIG_REQ, [("6000", "10000"), ("6000", "10000")], [], [{}, {EXT: "4"}])
    plugin = fit({"scoringStrategy": {"resources": EXT_RES}})
    state = CycleState()
    plugin.pre_score(state, pod, snapshot.list())
    assert assert_score_vector_agrees(plugin, state, pod, snapshot) == [50, 50]


def test_least_allocated_honors_requested_extended_resource() -> None:
    reqs = [{"cpu": "1000", "memory": "2000", EXT: "2"}, {"cpu": "2000", "memory": "3000"}]
    pod, snapshot = _score_setup(reqs, [("6000", "10000"), ("6000", "10000")], [], [{EXT: "4"}, {EXT: "10"}])
    plugin = fit({"scoringStrategy": {"resources": EXT_RES}})
    state = CycleState()
    plugin.pre_score(state, pod, snapshot.list())
    # node1: (50 + 50 + 50) / 3; node2: (50 + 50 + 80) / 3
    assert assert_score_vector_agrees(plugin, state, pod, snapshot) == [50, 60]


def test_containers_without_requests_score_with_defaults() -> None:
    # A container with no cpu/memory requests counts 100m / 200Mi for scoring (NonZero requests).
    pod = make_pod("p")  # one container, no requests
    snapshot = make_snapshot([make_node("n1", cpu="1", memory="1000Mi")])
    plugin = fit()
    state = CycleState()
    plugin.pre_score(state, pod, snapshot.list())
    # cpu (1000-100)*100/1000 = 90; memory (1000-200)*100/1000 = 80 -> 85
    assert assert_score_vector_agrees(plugin, state, pod, snapshot) == [85]


MOST_CASES = [
    ("nothing scheduled, nothing requested", [], [("4000", "10000"), ("4000", "10000")], [], DEFAULT, [0, 0]),
    (
        "nothing scheduled, resources requested, differently sized nodes",
        BIG_REQ,
        [("4000", "10000"), ("6000", "10000")],
        [],
        DEFAULT,
        [62, 50],
    ),
    (
        "resources requested, pods scheduled with resources",
        BIG_REQ,
        [("10000", "20000"), ("10000", "20000")],
        [("n1", [{"cpu": "3000", "memory": "0"}]), ("n2", [{"cpu": "3000", "memory": "5000"}])],
        DEFAULT,
        [42, 55],
    ),
    (
        "requested over capacity is clamped",
        [{"cpu": "5000", "memory": "9000"}],
        [("4000", "10000"), ("10000", "8000")],
        [],
        DEFAULT,
        [95, 75],
    ),
    (
        "different weights",
        BIG_REQ,
        [("4000", "10000"), ("6000", "10000")],
        [],
        [{"name": "memory", "weight": 2}, {"name": "cpu", "weight": 1}],
        [58, 50],
    ),
]


@pytest.mark.parametrize(("name", "containers", "nodes", "existing", "resources", "expected"), MOST_CASES)
def test_most_allocated(
    name: str,
    containers: list[dict[str, str]],
    nodes: list[tuple[str, str]],
    existing: list[tuple[str, list[dict[str, str]]]],
    resources: list[dict[str, Any]],
    expected: list[int],
) -> None:
    pod, snapshot = _score_setup(containers, nodes, existing)
    plugin = fit({"scoringStrategy": {"type": "MostAllocated", "resources": resources}})
    state = CycleState()
    plugin.pre_score(state, pod, snapshot.list())
    assert assert_score_vector_agrees(plugin, state, pod, snapshot) == expected


LEAST_SHAPE = [{"utilization": 0, "score": 10}, {"utilization": 100, "score": 0}]
MOST_SHAPE = [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]

RTCR_CASES = [
    (
        "nothing scheduled, nothing requested",
        [],
        [("4000", "10000"), ("4000", "10000")],
        [],
        LEAST_SHAPE,
        [100, 100],
    ),
    # node1: cpu 75% -> 25, memory 50% -> 50, round(37.5) = 38
    (
        "nothing scheduled, resources requested, differently sized nodes",
        BIG_REQ,
        [("4000", "10000"), ("6000", "10000")],
        [],
        LEAST_SHAPE,
        [38, 50],
    ),
    # node1: cpu 6000/10000 -> 40, memory 5000/20000 -> 75 -> round(57.5) = 58
    (
        "resources requested, pods scheduled with resources",
        BIG_REQ,
        [("10000", "20000"), ("10000", "20000")],
        [("n1", [{"cpu": "3000", "memory": "0"}]), ("n2", [{"cpu": "3000", "memory": "5000"}])],
        LEAST_SHAPE,
        [58, 45],
    ),
    # bin packing: node1 cpu 75, memory 50 -> round(62.5) = 63; node2 cpu 50, memory 50
    ("bin packing", BIG_REQ, [("4000", "10000"), ("6000", "10000")], [], MOST_SHAPE, [63, 50]),
    # over capacity uses the score at 100%: 0 is not counted, so only memory counts
    ("over capacity", [{"cpu": "5000", "memory": "5000"}], [("4000", "10000")], [], LEAST_SHAPE, [50]),
]


@pytest.mark.parametrize(("name", "containers", "nodes", "existing", "shape", "expected"), RTCR_CASES)
def test_requested_to_capacity_ratio(
    name: str,
    containers: list[dict[str, str]],
    nodes: list[tuple[str, str]],
    existing: list[tuple[str, list[dict[str, str]]]],
    shape: list[dict[str, int]],
    expected: list[int],
) -> None:
    pod, snapshot = _score_setup(containers, nodes, existing)
    plugin = fit(
        {
            "scoringStrategy": {
                "type": "RequestedToCapacityRatio",
                "resources": DEFAULT,
                "requestedToCapacityRatio": {"shape": shape},
            }
        }
    )
    state = CycleState()
    plugin.pre_score(state, pod, snapshot.list())
    assert assert_score_vector_agrees(plugin, state, pod, snapshot) == expected


@pytest.mark.parametrize(
    ("shape", "p", "expected"),
    [
        ([(10, 1), (90, 9)], 5, 1),
        ([(10, 1), (90, 9)], 10, 1),
        ([(10, 1), (90, 9)], 15, 1),
        ([(10, 1), (90, 9)], 50, 5),
        ([(10, 1), (90, 9)], 90, 9),
        ([(10, 1), (90, 9)], 95, 9),
        # a decreasing segment truncates toward zero as Go does: 10 + trunc(-3.3) = 7
        ([(0, 10), (100, 0)], 33, 7),
        ([(0, 2), (40, 10), (100, 0)], 70, 5),
    ],
)
def test_broken_linear(shape: list[tuple[int, int]], p: int, expected: int) -> None:
    assert broken_linear(shape, p) == expected


# --- vector agreement on random clusters ------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"])
def test_vector_agrees_on_random_cluster(strategy: str) -> None:
    rng = random.Random(7)
    nodes = []
    for i in range(60):
        extra = {EXT: str(rng.randint(0, 4))} if rng.random() < 0.5 else {}
        nodes.append(
            make_node(
                f"n{i}",
                cpu=f"{rng.randint(0, 8000)}m",
                memory=str(rng.randint(0, 64) * 2**28),
                pods=str(rng.randint(0, 6)),
                extra=extra,
            )
        )
    pods = []
    for j in range(150):
        node = nodes[rng.randrange(len(nodes))]
        req = {"cpu": f"{rng.randint(0, 2000)}m"}
        if rng.random() < 0.7:
            req["memory"] = str(rng.randint(0, 8) * 2**28)
        if rng.random() < 0.2:
            req[EXT] = "1"
        pods.append(req_pod(req, name=f"e{j}", node_name=node.name))
    snapshot = make_snapshot(nodes, pods)
    args: dict[str, Any] = {
        "scoringStrategy": {
            "type": strategy,
            "resources": [
                *EXT_RES[:2],
                {"name": EXT, "weight": 3},
                {"name": "ephemeral-storage", "weight": 1},
            ],
        }
    }
    if strategy == "RequestedToCapacityRatio":
        shape = [
            {"utilization": 0, "score": 3},
            {"utilization": 40, "score": 10},
            {"utilization": 100, "score": 1},
        ]
        args["scoringStrategy"]["requestedToCapacityRatio"] = {"shape": shape}
    plugin = fit(args)
    for k in range(40):
        req = (
            {}
            if k % 5 == 0
            else {"cpu": f"{rng.randint(0, 3000)}m", "memory": str(rng.randint(0, 8) * 2**28)}
        )
        if k % 3 == 0:
            req[EXT] = str(rng.randint(1, 3))
        pod = req_pod(req) if req else make_pod(f"q{k}")
        state = CycleState()
        plugin.pre_filter(state, pod, snapshot.list())
        assert_filter_vector_agrees(plugin, state, pod, snapshot)
        plugin.pre_score(state, pod, snapshot.list())
        assert_score_vector_agrees(plugin, state, pod, snapshot)


def assert_filter_statuses_agree(plugin: NodeResourcesFit, state: CycleState, pod: Any, snapshot: Any) -> int:
    """``filter_statuses`` on the rejected rows says what ``filter`` says, node by node."""
    per_node = [plugin.filter(state, pod, info) for info in snapshot.list()]
    rejected = np.array([i for i, st in enumerate(per_node) if st is not None], dtype=np.int64)
    if not rejected.size:
        return 0
    bulk = plugin.filter_statuses(state, pod, snapshot, rejected[::-1])
    assert bulk is not None
    for row, status in zip(rejected[::-1].tolist(), bulk, strict=True):
        expected = per_node[row]
        assert expected is not None
        assert (status.code, status.reasons) == (expected.code, expected.reasons), snapshot.list()[row].name
    return len(rejected)


def test_filter_statuses_agree_on_random_cluster() -> None:
    rng = random.Random(11)
    nodes = [
        make_node(
            f"n{i}",
            cpu=f"{rng.randint(0, 4000)}m",
            memory=str(rng.randint(0, 16) * 2**28),
            pods=str(rng.randint(0, 4)),
            extra={EXT: str(rng.randint(0, 3)), "ephemeral-storage": str(rng.randint(0, 9))}
            if rng.random() < 0.5
            else {},
        )
        for i in range(80)
    ]
    pods = [
        req_pod({"cpu": f"{rng.randint(0, 1500)}m"}, name=f"e{j}", node_name=nodes[rng.randrange(80)].name)
        for j in range(120)
    ]
    snapshot = make_snapshot(nodes, pods)
    plugin = fit()
    compared = 0
    for k in range(60):
        req: dict[str, str] = {} if k % 7 == 0 else {"cpu": f"{rng.randint(0, 5000)}m"}
        if k % 2:
            req["memory"] = str(rng.randint(0, 20) * 2**28)
        if k % 3 == 0:
            req[EXT] = str(rng.randint(1, 4))
        if k % 4 == 0:
            req["ephemeral-storage"] = str(rng.randint(1, 12))
        if k % 5 == 0:
            req["example.com/nowhere"] = "1"  # no node offers it: unresolvable everywhere
        pod = req_pod(req) if req else make_pod(f"q{k}")
        state = CycleState()
        plugin.pre_filter(state, pod, snapshot.list())
        compared += assert_filter_statuses_agree(plugin, state, pod, snapshot)
    assert compared > 500  # the cases above reject plenty of nodes, for every reason


def test_filter_statuses_share_one_status_per_outcome() -> None:
    snapshot = make_snapshot([small_node(f"n{i}") for i in range(5)])
    plugin = fit()
    pod = req_pod({"cpu": "11m"})
    state = CycleState()
    plugin.pre_filter(state, pod, snapshot.list())
    bulk = plugin.filter_statuses(state, pod, snapshot, np.arange(5))
    assert bulk is not None and len({id(s) for s in bulk}) == 1
    assert bulk[0].code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE and bulk[0].reasons == ["Insufficient cpu"]


# --- args -------------------------------------------------------------------------------------------


def test_args_defaults() -> None:
    args = NodeResourcesFitArgs()
    assert args.scoring_strategy.type == "LeastAllocated"
    assert [(r.name, r.weight) for r in args.scoring_strategy.resources] == [("cpu", 1), ("memory", 1)]
    assert args.ignored_resources == [] and args.ignored_resource_groups == []
    # v1 defaulting: empty resources -> cpu and memory; weight 0 -> 1
    args = adapter(NodeResourcesFitArgs).validate_python(
        {
            "scoringStrategy": {"type": "MostAllocated", "resources": []},
            "ignoredResources": ["example.com/foo"],
        }
    )
    assert [r.name for r in args.scoring_strategy.resources] == ["cpu", "memory"]
    args = adapter(NodeResourcesFitArgs).validate_python(
        {"scoringStrategy": {"resources": [{"name": "cpu", "weight": 0}]}}
    )
    assert args.scoring_strategy.resources[0].weight == 1


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"scoringStrategy": {"resources": [{"name": "memory", "weight": -1}]}},
            "scoringStrategy.resources[0].weight",
        ),
        (
            {
                "scoringStrategy": {
                    "resources": [{"name": "memory", "weight": 1}, {"name": "cpu", "weight": 101}]
                }
            },
            "resource weight of cpu not in valid range (0, 100]",
        ),
        ({"scoringStrategy": {"type": "Foo"}}, 'Unsupported value: "Foo"'),
        ({"ignoredResourceGroups": ["example.com/aaa"]}, "resource group name can't contain '/'"),
        ({"ignoredResources": ["-bad-"]}, "ignoredResources[0]"),
        (
            {
                "scoringStrategy": {
                    "type": "RequestedToCapacityRatio",
                    "requestedToCapacityRatio": {
                        "shape": [{"utilization": 50, "score": 1}, {"utilization": 10, "score": 2}]
                    },
                }
            },
            "values must be sorted in increasing order",
        ),
        (
            {
                "scoringStrategy": {
                    "type": "RequestedToCapacityRatio",
                    "requestedToCapacityRatio": {"shape": []},
                }
            },
            "at least one point must be specified",
        ),
        (
            {
                "scoringStrategy": {
                    "type": "RequestedToCapacityRatio",
                    "requestedToCapacityRatio": {"shape": [{"utilization": 101, "score": 11}]},
                }
            },
            "not in valid range [0, 10]",
        ),
        ({"scoringStrategy": {"type": "RequestedToCapacityRatio"}}, "requestedToCapacityRatio"),
        ({"unknownField": 1}, "unknownField"),
    ],
)
def test_args_validation(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as err:
        adapter(NodeResourcesFitArgs).validate_python(raw)
    assert message in str(err.value)


# --- events and queueing hints ----------------------------------------------------------------------


def test_events_to_register() -> None:
    events = list(fit().events_to_register())
    assert [e.event.resource for e in events] == [EventResource.POD, EventResource.NODE]
    assert events[0].event.action == ActionType.DELETE | ActionType.UPDATE_POD_SCALE_DOWN
    assert events[1].event.action == ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE


def test_hint_after_pod_event() -> None:
    plugin = fit()
    target = req_pod({"cpu": "1", "memory": "1Gi"}, name="target")
    unscheduled = req_pod({"cpu": "1"}, name="u")
    scheduled = req_pod({"cpu": "1"}, name="s", node_name="n1")
    assert plugin.is_schedulable_after_pod_event(target, unscheduled, None) == QueueingHint.QUEUE_SKIP
    assert plugin.is_schedulable_after_pod_event(target, scheduled, None) == QueueingHint.QUEUE
    # scale down of a resource the target requests
    smaller = req_pod({"cpu": "500m"}, name="s", node_name="n1", uid=scheduled.uid)
    assert plugin.is_schedulable_after_pod_event(target, scheduled, smaller) == QueueingHint.QUEUE
    # scale down of a resource the target does not request
    ext_before = req_pod({EXT: "2"}, name="x", node_name="n1")
    ext_after = req_pod({EXT: "1"}, name="x", node_name="n1")
    assert plugin.is_schedulable_after_pod_event(target, ext_before, ext_after) == QueueingHint.QUEUE_SKIP
    # scale down of an unscheduled pod frees nothing
    assert (
        plugin.is_schedulable_after_pod_event(target, unscheduled, req_pod(name="u"))
        == QueueingHint.QUEUE_SKIP
    )


def test_hint_after_node_change() -> None:
    plugin = fit()
    pod = req_pod({"cpu": "2", "memory": "1Gi"})
    small = make_node("n1", cpu="1", memory="4Gi")
    big = make_node("n1", cpu="4", memory="4Gi")
    bigger = make_node("n1", cpu="8", memory="4Gi")
    relabeled = make_node("n1", cpu="4", memory="4Gi", labels={"a": "b"})
    assert plugin.is_schedulable_after_node_change(pod, None, small) == QueueingHint.QUEUE_SKIP
    assert plugin.is_schedulable_after_node_change(pod, None, big) == QueueingHint.QUEUE
    assert plugin.is_schedulable_after_node_change(pod, small, big) == QueueingHint.QUEUE
    assert plugin.is_schedulable_after_node_change(pod, big, bigger) == QueueingHint.QUEUE
    assert plugin.is_schedulable_after_node_change(pod, big, relabeled) == QueueingHint.QUEUE_SKIP
    more_pods = make_node("n1", cpu="4", memory="4Gi", pods="200")
    assert plugin.is_schedulable_after_node_change(pod, big, more_pods) == QueueingHint.QUEUE
