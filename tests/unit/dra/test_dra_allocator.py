"""The structured allocator against cases of the reference's own table
(``structured/internal/allocatortesting``), by name, plus our edge cases."""

from __future__ import annotations

from typing import Any

import pytest
from dra_builders import (
    CLASS_A,
    CLASS_B,
    DRIVER_A,
    DRIVER_B,
    EARTH,
    NODE1,
    NODE2,
    PLANET_KEY,
    POOL1,
    POOL2,
    POOL3,
    POOL4,
    REGION1,
    REGION2,
    REGION_KEY,
    REQ0,
    REQ1,
    all_request,
    allocation,
    claim,
    device,
    device_class,
    label_selector,
    local_selector,
    request,
    resource_slice,
    result,
)

from kopf_scheduler.api.objects import Node
from kopf_scheduler.api.resource import (
    DeviceClass,
    DeviceTaint,
    ResourceSlice,
    allocation_to_api,
    parse_device_class,
    parse_device_taint_rule,
    parse_resource_claim,
    parse_resource_slice,
)
from kopf_scheduler.dra.allocator import AllocationError, Allocator, InvalidPoolsError
from kopf_scheduler.dra.cel import CelCache
from kopf_scheduler.dra.features import DEFAULT_FEATURES, Features
from kopf_scheduler.dra.state import AllocatedState, gather_allocated_state

CEL = CelCache()
MEM_GE_1GI = f'device.capacity["{DRIVER_A}"].memory.compareTo(quantity("1Gi")) >= 0'
MEM_GE_2GI = f'device.capacity["{DRIVER_A}"].memory.compareTo(quantity("2Gi")) >= 0'
CLASSES = {CLASS_A: device_class(CLASS_A, DRIVER_A), CLASS_B: device_class(CLASS_B, DRIVER_B)}


def _slice(s: dict[str, Any] | ResourceSlice) -> ResourceSlice:
    return s if isinstance(s, ResourceSlice) else parse_resource_slice(s)


def node(name: str, region: str) -> Node:
    return Node(name=name, labels={REGION_KEY: region, PLANET_KEY: EARTH})


def allocate(
    claims: list[dict[str, Any]],
    slices: list[dict[str, Any]] | list[ResourceSlice],
    at: Node,
    *,
    classes: dict[str, Any] | None = None,
    allocated: set[tuple[str, str, str]] | None = None,
    features: Features = DEFAULT_FEATURES,
) -> list[dict[str, Any]] | None:
    """The allocator on the objects' typed views (parsed here, as the informers parse them); the
    results as the API takes them (what the reference's table states)."""
    state = AllocatedState(allocated_devices=set(allocated or ()))
    views: dict[str, DeviceClass] = {
        n: parse_device_class(c) for n, c in (CLASSES if classes is None else classes).items()
    }
    allocator = Allocator(features, state, views, [_slice(s) for s in slices], CEL)
    got = allocator.allocate(at, [parse_resource_claim(c) for c in claims])
    return None if got is None else [allocation_to_api(a) for a in got]


def partitioned_pool(partitions: int, each: str) -> list[dict[str, Any]]:
    """A pool of two slices: partitions that each consume ``each`` of a 10Gi counter, and the counter."""
    consumes = [{"counterSet": "gpu", "counters": {"mem": {"value": each}}}]
    parts = (device(f"part-{i}", consumesCounters=consumes) for i in range(partitions))
    return [resource_slice("slice-1", NODE1, POOL1, DRIVER_A, *parts, count=2), counter_slice()]


def counter_slice() -> dict[str, Any]:
    """Since v1.35 shared counters live in a slice of their own in the pool."""
    counters = [{"name": "gpu", "counters": {"mem": {"value": "10Gi"}}}]
    out = resource_slice("slice-counters", NODE1, POOL1, DRIVER_A, count=2, sharedCounters=counters)
    out["spec"]["devices"] = []
    return out


def attrs(**values: Any) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, v in values.items():
        kind = "bool" if isinstance(v, bool) else "int" if isinstance(v, int) else "string"
        if isinstance(v, str) and v.count(".") == 2 and v[0].isdigit():
            kind = "version"
        out[name] = {kind: v}
    return out


CASES: dict[str, dict[str, Any]] = {
    "simple": dict(
        claims=[claim("claim-0", request(REQ0, CLASS_A))],
        slices=[resource_slice("slice-1", NODE1, POOL1, DRIVER_A)],
        node=node(NODE1, REGION1),
        expect=[allocation(local_selector(NODE1), result(REQ0, DRIVER_A, POOL1, "device-1"))],
    ),
    "other-node": dict(
        claims=[claim("claim-0", request(REQ0, CLASS_A))],
        slices=[
            resource_slice("slice-1", NODE1, POOL1, DRIVER_B),
            resource_slice("slice-2", NODE2, POOL2, DRIVER_A),
        ],
        node=node(NODE2, REGION2),
        expect=[allocation(local_selector(NODE2), result(REQ0, DRIVER_A, POOL2, "device-1"))],
    ),
    "small-and-large": dict(
        claims=[
            claim("claim-0", request(REQ0, CLASS_A, 1, MEM_GE_1GI), request(REQ1, CLASS_A, 1, MEM_GE_2GI))
        ],
        slices=[
            resource_slice(
                "slice-1",
                NODE1,
                POOL1,
                DRIVER_A,
                device("device-1", {"memory": "1Gi"}),
                device("device-2", {"memory": "2Gi"}),
            )
        ],
        node=node(NODE1, REGION1),
        expect=[
            allocation(
                local_selector(NODE1),
                result(REQ0, DRIVER_A, POOL1, "device-1"),
                result(REQ1, DRIVER_A, POOL1, "device-2"),
            )
        ],
    ),
    "small-and-large-backtrack-requests": dict(
        claims=[
            claim("claim-0", request(REQ0, CLASS_A, 1, MEM_GE_1GI), request(REQ1, CLASS_A, 1, MEM_GE_2GI))
        ],
        slices=[
            resource_slice(
                "slice-1",
                NODE1,
                POOL1,
                DRIVER_A,
                device("device-2", {"memory": "2Gi"}),
                device("device-1", {"memory": "1Gi"}),
            )
        ],
        node=node(NODE1, REGION1),
        expect=[
            allocation(
                local_selector(NODE1),
                result(REQ0, DRIVER_A, POOL1, "device-1"),
                result(REQ1, DRIVER_A, POOL1, "device-2"),
            )
        ],
    ),
    "small-and-large-backtrack-claims": dict(
        claims=[
            claim("claim-0", request(REQ0, CLASS_A, 1, MEM_GE_1GI)),
            claim("claim-1", request(REQ1, CLASS_A, 1, MEM_GE_2GI)),
        ],
        slices=[
            resource_slice(
                "slice-1",
                NODE1,
                POOL1,
                DRIVER_A,
                device("device-2", {"memory": "2Gi"}),
                device("device-1", {"memory": "1Gi"}),
            )
        ],
        node=node(NODE1, REGION1),
        expect=[
            allocation(local_selector(NODE1), result(REQ0, DRIVER_A, POOL1, "device-1")),
            allocation(local_selector(NODE1), result(REQ1, DRIVER_A, POOL1, "device-2")),
        ],
    ),
    "devices-split-across-different-slices": dict(
        claims=[claim("claim-0", request(REQ0, CLASS_A, 2))],
        slices=[
            resource_slice("slice-1", NODE1, POOL1, DRIVER_A),
            resource_slice("slice-2", NODE1, POOL2, DRIVER_A),
        ],
        node=node(NODE1, REGION1),
        expect=[
            allocation(
                local_selector(NODE1),
                result(REQ0, DRIVER_A, POOL1, "device-1"),
                result(REQ0, DRIVER_A, POOL2, "device-1"),
            )
        ],
    ),
    "obsolete-slice": dict(
        claims=[claim("claim-0", request(REQ0, CLASS_A))],
        slices=[
            resource_slice("slice-1-obsolete", NODE1, POOL1, DRIVER_A, device("device-1"), count=2),
            resource_slice(
                "slice-1-obsolete", NODE1, POOL1, DRIVER_A, device("device-2"), count=2, generation=2
            ),
        ],
        node=node(NODE1, REGION1),
        expect=None,
    ),
    "duplicate-slice": dict(
        claims=[claim("claim-0", request(REQ0, CLASS_A))],
        slices=[
            resource_slice("slice-1", NODE1, POOL1, DRIVER_A, count=2),
            resource_slice("slice-1-2", NODE1, POOL1, DRIVER_A, count=2),
        ],
        node=node(NODE1, REGION1),
        error=(InvalidPoolsError, "invalid resource pools were encountered"),
    ),
    "no-slices": dict(
        claims=[claim("claim-0", request(REQ0, CLASS_A))], slices=[], node=node(NODE1, REGION1), expect=None
    ),
    "not-enough-suitable-devices": dict(
        claims=[claim("claim-0", request(REQ0, CLASS_A)), claim("claim-0", request(REQ1, CLASS_A))],
        slices=[resource_slice("slice-1", NODE1, POOL1, DRIVER_A)],
        node=node(NODE1, REGION1),
        expect=None,
    ),
    "no-classes": dict(
        claims=[claim("claim-0", request(REQ0, CLASS_A))],
        slices=[resource_slice("slice-1", NODE1, POOL1, DRIVER_A)],
        node=node(NODE1, REGION1),
        classes={},
        error=(AllocationError, "could not retrieve device class class-a"),
    ),
    "unknown-class": dict(
        claims=[claim("claim-0", request(REQ0, "unknown-class"))],
        slices=[resource_slice("slice-1", NODE1, POOL1, DRIVER_A)],
        node=node(NODE1, REGION1),
        error=(AllocationError, "could not retrieve device class unknown-class"),
    ),
    "empty-class": dict(
        claims=[claim("claim-0", request(REQ0, ""))],
        slices=[resource_slice("slice-1", NODE1, POOL1, DRIVER_A)],
        node=node(NODE1, REGION1),
        error=(
            AllocationError,
            "claim default/claim-0, request req-0: missing device class name (unsupported request type?)",
        ),
    ),
    "no-claims-to-allocate": dict(
        claims=[],
        slices=[resource_slice("slice-1", NODE1, POOL1, DRIVER_A)],
        node=node(NODE1, REGION1),
        expect=[],
    ),
    "all-devices-single": dict(
        claims=[claim("claim-0", all_request(REQ0, CLASS_A))],
        slices=[resource_slice("slice-1", NODE1, POOL1, DRIVER_A)],
        node=node(NODE1, REGION1),
        expect=[allocation(local_selector(NODE1), result(REQ0, DRIVER_A, POOL1, "device-1"))],
    ),
    "all-devices-of-the-incomplete-pool": dict(
        claims=[claim("claim-0", all_request(REQ0, CLASS_A))],
        slices=[resource_slice("slice-1", NODE1, POOL1, DRIVER_A, count=2)],
        node=node(NODE1, REGION1),
        error=(
            AllocationError,
            "claim default/claim-0, request req-0: asks for all devices, but resource pool driver-a/pool-1 "
            "is currently being updated",
        ),
    ),
    "all-devices-plus-another": dict(
        claims=[claim("claim-0", all_request(REQ0, CLASS_A)), claim("claim-1", request(REQ0, CLASS_B))],
        slices=[
            resource_slice("slice-1", NODE1, POOL1, DRIVER_A),
            resource_slice("slice-1", NODE1, POOL1, DRIVER_B),
        ],
        node=node(NODE1, REGION1),
        expect=[
            allocation(local_selector(NODE1), result(REQ0, DRIVER_A, POOL1, "device-1")),
            allocation(local_selector(NODE1), result(REQ0, DRIVER_B, POOL1, "device-1")),
        ],
    ),
    "all-devices-no-solution": dict(
        claims=[claim("claim-1", request(REQ0, CLASS_A)), claim("claim-0", all_request(REQ0, CLASS_A))],
        slices=[resource_slice("slice-1", NODE1, POOL1, DRIVER_A)],
        node=node(NODE1, REGION1),
        expect=None,
    ),
    "all-devices-no-solution-reversed": dict(
        claims=[claim("claim-0", all_request(REQ0, CLASS_A)), claim("claim-1", request(REQ0, CLASS_A))],
        slices=[resource_slice("slice-1", NODE1, POOL1, DRIVER_A)],
        node=node(NODE1, REGION1),
        expect=None,
    ),
    "all-devices-some-allocated": dict(
        claims=[claim("claim-0", all_request(REQ0, CLASS_A))],
        slices=[resource_slice("slice-1", NODE1, POOL1, DRIVER_A, device("device-1"), device("device-2"))],
        allocated={(DRIVER_A, POOL1, "device-1")},
        node=node(NODE1, REGION1),
        expect=None,
    ),
    "all-devices-some-allocated-admin-access": dict(
        claims=[claim("claim-0", all_request(REQ0, CLASS_A, adminAccess=True))],
        slices=[resource_slice("slice-1", NODE1, POOL1, DRIVER_A, device("device-1"), device("device-2"))],
        allocated={(DRIVER_A, POOL1, "device-1")},
        node=node(NODE1, REGION1),
        expect=[
            allocation(
                local_selector(NODE1),
                result(REQ0, DRIVER_A, POOL1, "device-1", admin=True),
                result(REQ0, DRIVER_A, POOL1, "device-2", admin=True),
            )
        ],
    ),
    "network-attached-device": dict(
        claims=[claim("claim-0", request(REQ0, CLASS_A))],
        slices=[resource_slice("slice-1", label_selector(REGION_KEY, REGION1), POOL1, DRIVER_A)],
        node=node(NODE1, REGION1),
        expect=[allocation(label_selector(REGION_KEY, REGION1), result(REQ0, DRIVER_A, POOL1, "device-1"))],
    ),
    "unsuccessful-allocation-network-attached-device": dict(
        claims=[claim("claim-0", request(REQ0, CLASS_A))],
        slices=[resource_slice("slice-1", label_selector(REGION_KEY, REGION1), POOL1, DRIVER_A)],
        node=node(NODE2, REGION2),
        expect=None,
    ),
    "many-network-attached-devices": dict(
        claims=[claim("claim-0", request(REQ0, CLASS_A, 4))],
        slices=[
            resource_slice("slice-1", label_selector(REGION_KEY, REGION1), POOL1, DRIVER_A),
            resource_slice("slice-1", "all", POOL2, DRIVER_A),
            resource_slice("slice-1", label_selector(PLANET_KEY, EARTH), POOL3, DRIVER_A),
            resource_slice("slice-1", local_selector(NODE1), POOL4, DRIVER_A),
        ],
        node=node(NODE1, REGION1),
        expect=[
            allocation(
                {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": REGION_KEY, "operator": "In", "values": [REGION1]},
                                {"key": PLANET_KEY, "operator": "In", "values": [EARTH]},
                            ],
                            "matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE1]}],
                        }
                    ]
                },
                result(REQ0, DRIVER_A, POOL1, "device-1"),
                result(REQ0, DRIVER_A, POOL2, "device-1"),
                result(REQ0, DRIVER_A, POOL3, "device-1"),
                result(REQ0, DRIVER_A, POOL4, "device-1"),
            )
        ],
    ),
    "local-and-network-attached-devices": dict(
        claims=[claim("claim-0", request(REQ0, CLASS_A, 2))],
        slices=[
            resource_slice("slice-1", label_selector(REGION_KEY, REGION1), POOL1, DRIVER_A),
            resource_slice("slice-1", NODE1, POOL2, DRIVER_A),
        ],
        node=node(NODE1, REGION1),
        expect=[
            allocation(
                local_selector(NODE1),
                result(REQ0, DRIVER_A, POOL1, "device-1"),
                result(REQ0, DRIVER_A, POOL2, "device-1"),
            )
        ],
    ),
    "several-different-drivers": dict(
        claims=[claim("claim-0", request(REQ0, CLASS_A)), claim("claim-0", request(REQ0, CLASS_B))],
        slices=[
            resource_slice("slice-1", NODE1, POOL1, DRIVER_A, device("device-1"), device("device-2")),
            resource_slice("slice-1", NODE1, POOL1, DRIVER_B),
        ],
        node=node(NODE1, REGION1),
        expect=[
            allocation(local_selector(NODE1), result(REQ0, DRIVER_A, POOL1, "device-1")),
            allocation(local_selector(NODE1), result(REQ0, DRIVER_B, POOL1, "device-1")),
        ],
    ),
    "already-allocated-devices": dict(
        claims=[claim("claim-0", request(REQ0, CLASS_A))],
        slices=[resource_slice("slice-1", NODE1, POOL1, DRIVER_A)],
        allocated={(DRIVER_A, POOL1, "device-1"), (DRIVER_A, POOL1, "device-2")},
        node=node(NODE1, REGION1),
        expect=None,
    ),
    "admin-access-disabled": dict(
        claims=[claim("claim-0", request(REQ0, CLASS_A, adminAccess=True))],
        slices=[resource_slice("slice-1", NODE1, POOL1, DRIVER_A)],
        features=Features(admin_access=False),
        node=node(NODE1, REGION1),
        error=(
            AllocationError,
            "claim default/claim-0, request req-0: admin access is requested, but the feature is disabled",
        ),
    ),
    "admin-access-enabled": dict(
        claims=[claim("claim-0", request(REQ0, CLASS_A, adminAccess=True))],
        slices=[resource_slice("slice-1", NODE1, POOL1, DRIVER_A)],
        allocated={(DRIVER_A, POOL1, "device-1"), (DRIVER_A, POOL1, "device-2")},
        node=node(NODE1, REGION1),
        expect=[allocation(local_selector(NODE1), result(REQ0, DRIVER_A, POOL1, "device-1", admin=True))],
    ),
    "with-constraint": dict(
        claims=[
            claim(
                "claim-0",
                request(REQ0, CLASS_A),
                request(REQ1, CLASS_A),
                constraints=[
                    {"matchAttribute": f"{DRIVER_A}/numa"},
                    {"matchAttribute": f"{DRIVER_A}/driverVersion"},
                    {"matchAttribute": f"{DRIVER_A}/stringAttribute"},
                    {"matchAttribute": f"{DRIVER_A}/boolAttribute"},
                ],
            )
        ],
        slices=[
            resource_slice(
                "slice-1",
                NODE1,
                POOL1,
                DRIVER_A,
                *(
                    device(
                        d,
                        attributes=attrs(
                            driverVersion="1.0.0", numa=1, stringAttribute="s", boolAttribute=True
                        ),
                    )
                    for d in ("device-1", "device-2")
                ),
            )
        ],
        node=node(NODE1, REGION1),
        expect=[
            allocation(
                local_selector(NODE1),
                result(REQ0, DRIVER_A, POOL1, "device-1"),
                result(REQ1, DRIVER_A, POOL1, "device-2"),
            )
        ],
    ),
    "with-constraint-non-existent-attribute": dict(
        claims=[
            claim("claim-0", request(REQ0, CLASS_A), constraints=[{"matchAttribute": "example.com/nope"}])
        ],
        slices=[resource_slice("slice-1", NODE1, POOL1, DRIVER_A)],
        node=node(NODE1, REGION1),
        expect=None,
    ),
    "with-constraint-not-matching-int-attribute": dict(
        claims=[
            claim("claim-0", request(REQ0, CLASS_A, 2), constraints=[{"matchAttribute": f"{DRIVER_A}/numa"}])
        ],
        slices=[
            resource_slice(
                "slice-1",
                NODE1,
                POOL1,
                DRIVER_A,
                device("device-1", attributes=attrs(numa=1)),
                device("device-2", attributes=attrs(numa=2)),
            )
        ],
        node=node(NODE1, REGION1),
        expect=None,
    ),
    "with-constraint-for-request-retry": dict(
        claims=[
            claim(
                "claim-0",
                request(REQ0, CLASS_A),
                request(REQ1, CLASS_A),
                constraints=[
                    {"requests": [REQ0], "matchAttribute": f"{DRIVER_A}/driverVersion"},
                    {"matchAttribute": f"{DRIVER_A}/stringAttribute"},
                ],
            )
        ],
        slices=[
            resource_slice(
                "slice-1",
                NODE1,
                POOL1,
                DRIVER_A,
                device("device-1", attributes=attrs(driverVersion="1.0.0", stringAttribute="a")),
                device("device-2", attributes=attrs(driverVersion="2.0.0", stringAttribute="b")),
                device("device-3", attributes=attrs(driverVersion="3.0.0", stringAttribute="b")),
            )
        ],
        node=node(NODE1, REGION1),
        expect=[
            allocation(
                local_selector(NODE1),
                result(REQ0, DRIVER_A, POOL1, "device-2"),
                result(REQ1, DRIVER_A, POOL1, "device-3"),
            )
        ],
    ),
    "too-many-devices-single-request": dict(
        claims=[claim("claim-0", request(REQ0, CLASS_A, 500))],
        slices=[],
        node=node(NODE1, REGION1),
        error=(AllocationError, "exceeds the claim limit"),
    ),
    "too-many-devices-total": dict(
        claims=[claim("claim-0", request(REQ0, CLASS_A, 32), request(REQ1, CLASS_A, 1))],
        slices=[
            resource_slice("slice-1", NODE1, POOL1, DRIVER_A, *(device(f"device-{i}") for i in range(33)))
        ],
        node=node(NODE1, REGION1),
        error=(AllocationError, "exceeds the claim limit"),
    ),
    "unknown-selector": dict(
        claims=[claim("claim-0", request(REQ0, CLASS_A, 1, selectors=[{"future": {}}]))],
        slices=[resource_slice("slice-1", NODE1, POOL1, DRIVER_A)],
        node=node(NODE1, REGION1),
        error=(
            AllocationError,
            "claim default/claim-0, request req-0, selector #0: "
            "CEL expression empty (unsupported selector type?)",
        ),
    ),
    "unknown-allocation-mode": dict(
        claims=[claim("claim-0", request(REQ0, CLASS_A, 1, allocationMode="future-mode"))],
        slices=[resource_slice("slice-1", NODE1, POOL1, DRIVER_A)],
        node=node(NODE1, REGION1),
        error=(AllocationError, "claim default/claim-0, request req-0: unsupported count mode future-mode"),
    ),
    "unknown-constraint": dict(
        claims=[claim("claim-0", request(REQ0, CLASS_A), constraints=[{}])],
        slices=[resource_slice("slice-1", NODE1, POOL1, DRIVER_A)],
        node=node(NODE1, REGION1),
        error=(
            AllocationError,
            "claim default/claim-0, constraint #0: empty constraint (unsupported constraint type?)",
        ),
    ),
    "cel-runtime-error": dict(
        claims=[claim("claim-0", request(REQ0, CLASS_A, 1, f'device.attributes["{DRIVER_A}"].model == "x"'))],
        slices=[resource_slice("slice-1", NODE1, POOL1, DRIVER_A)],
        node=node(NODE1, REGION1),
        error=(
            AllocationError,
            "claim default/claim-0: selector #0 on device driver-a/pool-1/device-1: CEL runtime error:",
        ),
    ),
    "cel-unknown-domain-is-empty": dict(
        claims=[
            claim("claim-0", request(REQ0, CLASS_A, 1, '!("x" in device.attributes["other.example.com"])'))
        ],
        slices=[resource_slice("slice-1", NODE1, POOL1, DRIVER_A)],
        node=node(NODE1, REGION1),
        expect=[allocation(local_selector(NODE1), result(REQ0, DRIVER_A, POOL1, "device-1"))],
    ),
    "prioritized-list-falls-back": dict(
        claims=[
            claim(
                "claim-0",
                {
                    "name": REQ0,
                    "firstAvailable": [
                        {
                            "name": "big",
                            "deviceClassName": CLASS_A,
                            "count": 2,
                            "allocationMode": "ExactCount",
                        },
                        {
                            "name": "small",
                            "deviceClassName": CLASS_A,
                            "count": 1,
                            "allocationMode": "ExactCount",
                        },
                    ],
                },
            )
        ],
        slices=[resource_slice("slice-1", NODE1, POOL1, DRIVER_A)],
        node=node(NODE1, REGION1),
        expect=[allocation(local_selector(NODE1), result(f"{REQ0}/small", DRIVER_A, POOL1, "device-1"))],
    ),
    "tainted-device-not-tolerated": dict(
        claims=[claim("claim-0", request(REQ0, CLASS_A))],
        slices=[
            resource_slice(
                "slice-1",
                NODE1,
                POOL1,
                DRIVER_A,
                device("device-1", taints=[{"key": "k", "effect": "NoSchedule"}]),
            )
        ],
        node=node(NODE1, REGION1),
        expect=None,
    ),
    "tainted-device-tolerated": dict(
        claims=[
            claim("claim-0", request(REQ0, CLASS_A, 1, tolerations=[{"key": "k", "operator": "Exists"}]))
        ],
        slices=[
            resource_slice(
                "slice-1",
                NODE1,
                POOL1,
                DRIVER_A,
                device("device-1", taints=[{"key": "k", "effect": "NoSchedule"}]),
            )
        ],
        node=node(NODE1, REGION1),
        expect=[
            allocation(
                local_selector(NODE1),
                {
                    **result(REQ0, DRIVER_A, POOL1, "device-1"),
                    "tolerations": [{"key": "k", "operator": "Exists"}],
                },
            )
        ],
    ),
    "partitionable-counters-exhausted": dict(
        claims=[claim("claim-0", request(REQ0, CLASS_A, 2))],
        slices=[
            *partitioned_pool(2, "6Gi"),
        ],
        node=node(NODE1, REGION1),
        expect=None,
    ),
    "partitionable-counters-fit": dict(
        claims=[claim("claim-0", request(REQ0, CLASS_A, 2))],
        slices=[
            *partitioned_pool(3, "5Gi"),
        ],
        node=node(NODE1, REGION1),
        expect=[
            allocation(
                local_selector(NODE1),
                result(REQ0, DRIVER_A, POOL1, "part-0"),
                result(REQ0, DRIVER_A, POOL1, "part-1"),
            )
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_reference_cases(name: str) -> None:
    case = CASES[name]
    kwargs: dict[str, Any] = {}
    if "classes" in case:
        kwargs["classes"] = case["classes"]
    if "features" in case:
        kwargs["features"] = case["features"]
    if "error" in case:
        kind, text = case["error"]
        with pytest.raises(kind) as info:
            allocate(case["claims"], case["slices"], case["node"], allocated=case.get("allocated"), **kwargs)
        assert text in str(info.value)
        return
    got = allocate(case["claims"], case["slices"], case["node"], allocated=case.get("allocated"), **kwargs)
    assert got == case["expect"]


def test_allocated_state_from_claims_skips_admin_access() -> None:
    claims = [
        {"status": {"allocation": allocation(None, result(REQ0, DRIVER_A, POOL1, "device-1"))}},
        {"status": {"allocation": allocation(None, result(REQ0, DRIVER_A, POOL1, "device-2", admin=True))}},
        {"status": {}},
    ]
    state = gather_allocated_state([parse_resource_claim({"metadata": {"name": "c"}, **c}) for c in claims])
    assert state.allocated_devices == {(DRIVER_A, POOL1, "device-1")}


def test_allocated_counters_reduce_what_is_available() -> None:
    """A partition already allocated (known through its claim) uses the shared counters."""
    slices = partitioned_pool(3, "5Gi")
    claims = [claim("claim-0", request(REQ0, CLASS_A, 2))]
    free = allocate(claims, slices, node(NODE1, REGION1))
    assert free is not None
    busy = allocate(claims, slices, node(NODE1, REGION1), allocated={(DRIVER_A, POOL1, "part-2")})
    assert busy is None


def test_consumable_capacity_shares_one_device() -> None:
    slices = [
        resource_slice(
            "slice-1",
            NODE1,
            POOL1,
            DRIVER_A,
            device("nic", {"bandwidth": "10G"}, allowMultipleAllocations=True),
        )
    ]
    want = {"requests": {"bandwidth": "4G"}}
    claims = [
        claim("claim-0", request(REQ0, CLASS_A, 1, capacity=want)),
        claim("claim-1", request(REQ0, CLASS_A, 1, capacity=want)),
    ]
    got = allocate(claims, slices, node(NODE1, REGION1))
    assert got is not None
    shares = [a["devices"]["results"][0] for a in got]
    assert [s["device"] for s in shares] == ["nic", "nic"]
    assert shares[0]["shareID"] != shares[1]["shareID"]
    assert shares[0]["consumedCapacity"] == {"bandwidth": "4000000000"}
    three = [*claims, claim("claim-2", request(REQ0, CLASS_A, 1, capacity=want))]
    assert allocate(three, slices, node(NODE1, REGION1)) is None  # 12G > 10G


def test_class_and_claim_config_in_result() -> None:
    opaque = {"opaque": {"driver": DRIVER_A, "parameters": {"x": 1}}}
    classes = {CLASS_A: device_class(CLASS_A, DRIVER_A, config=[opaque])}
    claims = [claim("claim-0", request(REQ0, CLASS_A), config=[{"requests": [REQ0], **opaque}])]
    got = allocate(
        claims, [resource_slice("slice-1", NODE1, POOL1, DRIVER_A)], node(NODE1, REGION1), classes=classes
    )
    assert got is not None
    assert got[0]["devices"]["config"] == [
        {"source": "FromClass", **opaque},
        {"source": "FromClaim", **opaque},
    ]


def test_selector_cache_compiles_once() -> None:
    cache = CelCache()
    assert cache.get_or_compile("device.driver == 'a'") is cache.get_or_compile("device.driver == 'a'")
    assert cache.get_or_compile("device.driver ==").error


def test_device_taint_rules_taint_selected_devices() -> None:
    from kopf_scheduler.dra.taint_rules import TaintRuleCache, apply_taint_rules

    slices = [
        parse_resource_slice(
            resource_slice("slice-1", NODE1, POOL1, DRIVER_A, device("device-1"), device("device-2"))
        )
    ]
    raw_rule: dict[str, Any] = {
        "metadata": {"name": "maintenance"},
        "spec": {
            "deviceSelector": {"driver": DRIVER_A, "pool": POOL1, "device": "device-1"},
            "taint": {"key": "maintenance", "effect": "NoSchedule"},
        },
    }
    rule = parse_device_taint_rule(raw_rule)
    patched = apply_taint_rules(slices, [rule])
    assert patched[0].devices[0].taints == (DeviceTaint("maintenance", "", "NoSchedule"),)
    assert not patched[0].devices[1].taints
    assert not slices[0].devices[0].taints  # the informer's object is untouched
    # device-1 is tainted: a request for both devices fails, one for a single device gets device-2.
    assert allocate([claim("claim-0", request(REQ0, CLASS_A, 2))], patched, node(NODE1, REGION1)) is None
    got = allocate([claim("claim-0", request(REQ0, CLASS_A))], patched, node(NODE1, REGION1))
    assert got == [allocation(local_selector(NODE1), result(REQ0, DRIVER_A, POOL1, "device-2"))]
    # A rule for another driver selects nothing; a rule without a device selects the whole pool.
    other = parse_device_taint_rule(
        {**raw_rule, "spec": {**raw_rule["spec"], "deviceSelector": {"driver": DRIVER_B}}}
    )
    assert apply_taint_rules(slices, [other])[0] is slices[0]
    pool_wide = parse_device_taint_rule(
        {**raw_rule, "spec": {**raw_rule["spec"], "deviceSelector": {"pool": POOL1}}}
    )
    assert all(d.taints for d in apply_taint_rules(slices, [pool_wide])[0].devices)
    # The cache hands out the same patched object until the slice or a rule changes.
    cache = TaintRuleCache()
    first = cache.slices(slices, [rule])
    assert cache.slices(slices, [rule])[0] is first[0]
    assert cache.slices(slices, [parse_device_taint_rule(raw_rule)])[0] is not first[0]
