"""One allocator asked node after node, as Filter asks it: what it prepares once for the pod's
claims (validated requests, an error) and keeps per device (entries, node selectors) must give
each node the answer a fresh allocator gives it, in any order."""

from __future__ import annotations

from typing import Any

import pytest
from dra_builders import (
    CLASS_A,
    DRIVER_A,
    NODE1,
    NODE2,
    POOL1,
    POOL2,
    REQ0,
    REQ1,
    claim,
    device,
    device_class,
    request,
    resource_slice,
)

from kopf_scheduler.api.objects import Node
from kopf_scheduler.api.resource import (
    ResourceSlice,
    allocation_to_api,
    parse_device_class,
    parse_resource_claim,
    parse_resource_slice,
)
from kopf_scheduler.dra.allocator import AllocationError, Allocator
from kopf_scheduler.dra.cel import CelCache
from kopf_scheduler.dra.features import DEFAULT_FEATURES
from kopf_scheduler.dra.pools import PoolCache
from kopf_scheduler.dra.state import AllocatedState


def _model(name: str, model: str) -> dict[str, Any]:
    return device(name, attributes={"model": {"string": model}})


# node-1: two "b" devices; node-2: two "a" devices; node-3: one of each.
NODE3, POOL3 = "node-3", "pool-3"
SLICES: list[ResourceSlice] = [
    parse_resource_slice(
        resource_slice(f"s-{node}", node, pool, DRIVER_A, _model("d0", m0), _model("d1", m1))
    )
    for node, pool, m0, m1 in ((NODE1, POOL1, "b", "b"), (NODE2, POOL2, "a", "a"), (NODE3, POOL3, "a", "b"))
]
NODES = {name: Node(name=name) for name in (NODE1, NODE2, NODE3)}


def _allocator(pools: PoolCache, classes: dict[str, Any] | None = None) -> Allocator:
    views = {
        n: parse_device_class(c) for n, c in (classes or {CLASS_A: device_class(CLASS_A, DRIVER_A)}).items()
    }
    return Allocator(DEFAULT_FEATURES, AllocatedState(), views, SLICES, CelCache(), pools)


def _devices(got: Any) -> list[tuple[str, str]] | None:
    if got is None:
        return None
    return [(r["request"], r["device"]) for a in got for r in allocation_to_api(a)["devices"]["results"]]


SAME_MODEL = claim(
    "same-model",
    request(REQ0, CLASS_A),
    request(REQ1, CLASS_A),
    constraints=[{"requests": [REQ0, REQ1], "matchAttribute": f"{DRIVER_A}/model"}],
)
BIG_OR_SMALL = claim(
    "big-or-small",
    {
        "name": REQ0,
        "firstAvailable": [
            {
                "name": "big",
                "deviceClassName": CLASS_A,
                "count": 2,
                "selectors": [{"cel": {"expression": f'device.attributes["{DRIVER_A}"].model == "a"'}}],
            },
            {"name": "small", "deviceClassName": CLASS_A, "count": 1},
        ],
    },
)


@pytest.mark.parametrize(
    "raw, expect",
    [
        (SAME_MODEL, {NODE1: [(REQ0, "d0"), (REQ1, "d1")], NODE2: [(REQ0, "d0"), (REQ1, "d1")], NODE3: None}),
        (
            BIG_OR_SMALL,
            {
                NODE1: [(f"{REQ0}/small", "d0")],
                NODE2: [(f"{REQ0}/big", "d0"), (f"{REQ0}/big", "d1")],
                NODE3: [(f"{REQ0}/small", "d0")],
            },
        ),
    ],
    ids=["match-constraint", "first-available"],
)
def test_each_node_gets_what_a_fresh_allocator_gives_it(raw: dict[str, Any], expect: dict[str, Any]) -> None:
    claims = [parse_resource_claim(raw)]
    pools = PoolCache()
    fresh = {name: _devices(_allocator(PoolCache()).allocate(node, claims)) for name, node in NODES.items()}
    assert fresh == expect
    shared = _allocator(pools)
    for name in (NODE2, NODE1, NODE3, NODE2, NODE3, NODE1):
        assert _devices(shared.allocate(NODES[name], claims)) == expect[name], name
    # The next pod's allocator, over the same cached pools (and the devices' kept entries).
    again = _allocator(pools)
    for name in (NODE3, NODE1, NODE2):
        assert _devices(again.allocate(NODES[name], claims)) == expect[name], name


def test_an_invalid_claim_fails_alike_at_every_node() -> None:
    claims = [parse_resource_claim(claim("c", request(REQ0, "missing")))]
    allocator = _allocator(PoolCache())
    messages = []
    for node in (NODES[NODE1], NODES[NODE2], NODES[NODE1]):
        with pytest.raises(AllocationError) as caught:
            allocator.allocate(node, claims)
        messages.append(str(caught.value))
    assert (
        messages
        == [
            "claim default/c, request req-0: could not retrieve device class missing: "
            'deviceclass.resource.k8s.io "missing" not found'
        ]
        * 3
    )


@pytest.mark.parametrize("raw", [SAME_MODEL, BIG_OR_SMALL], ids=["exactly", "first-available"])
def test_each_node_gets_the_configuration_a_fresh_allocator_gives_it(raw: dict[str, Any]) -> None:
    opaque = {"opaque": {"driver": DRIVER_A, "parameters": {"x": 1}}}
    classes = {CLASS_A: device_class(CLASS_A, DRIVER_A, config=[opaque])}
    wanted = [REQ0] if raw is SAME_MODEL else [f"{REQ0}/small"]
    raw = {**raw, "spec": {"devices": {**raw["spec"]["devices"], "config": [{"requests": wanted, **opaque}]}}}
    claims = [parse_resource_claim(raw)]

    def configs(allocator: Allocator, name: str) -> Any:
        got = allocator.allocate(NODES[name], claims)
        return None if got is None else [allocation_to_api(a)["devices"].get("config") for a in got]

    fresh = {name: configs(_allocator(PoolCache(), classes), name) for name in NODES}
    assert any(fresh.values())
    shared = _allocator(PoolCache(), classes)
    for name in (NODE2, NODE1, NODE3, NODE2, NODE1):
        assert configs(shared, name) == fresh[name], name


def test_score_counts_the_chosen_first_available_subrequest_only() -> None:
    from kopf_scheduler.plugins.dynamic_resources.dynamic_resources import FIRST_AVAILABLE_MAX, _score

    claims = [parse_resource_claim(BIG_OR_SMALL), parse_resource_claim(SAME_MODEL)]
    for name, index in ((NODE1, 1), (NODE2, 0)):
        allocations = [_allocator(PoolCache()).allocate(NODES[name], [c]) for c in claims]
        if name == NODE1:
            assert allocations[1] is not None
        got = [a[0] for a in allocations if a is not None]
        assert _score(claims, got) == FIRST_AVAILABLE_MAX - index, name
    (exactly,) = _allocator(PoolCache()).allocate(NODES[NODE2], claims[1:]) or []
    assert _score(claims[1:], [exactly]) == 0
