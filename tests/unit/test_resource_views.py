"""The DRA kinds' typed views (api/resource.py): parsed once, malformed input named by field, and
claims written back from their typed fields; the DRA manager owned by the engine."""

from __future__ import annotations

import copy
import dataclasses
from fractions import Fraction
from typing import Any

import pytest

from kopf_scheduler.api import kinds
from kopf_scheduler.api.resource import (
    ConsumerReference,
    ResourceClaimStatus,
    allocation_to_api,
    claim_to_api,
    parse_device_class,
    parse_resource_claim,
    parse_resource_slice,
)
from kopf_scheduler.api.types import ObjectError
from kopf_scheduler.config.profile import SchedulerProfileSpec
from kopf_scheduler.engine import new_engine
from kopf_scheduler.memory_client import MemoryClusterClient

ALLOCATION: dict[str, Any] = {
    "devices": {
        "results": [
            {
                "request": "gpu",
                "driver": "gpu.example.com",
                "pool": "node-a",
                "device": "gpu-0",
                "consumedCapacity": {"memory": "1Gi"},
                "shareID": "s-1",
            }
        ],
        "config": [{"source": "FromClass", "opaque": {"driver": "gpu.example.com", "parameters": {"a": 1}}}],
    },
    "nodeSelector": {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}
        ]
    },
    "allocationTimestamp": "2026-11-26T02:00:00Z",
}


def claim(**status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": "c",
            "namespace": "ns",
            "uid": "u-c",
            "resourceVersion": "5",
            "finalizers": ["other.example.com/keep"],
            "labels": {"app": "x"},
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "firstAvailable": [
                            {"name": "big", "deviceClassName": "gpu", "count": 2},
                            {
                                "name": "small",
                                "deviceClassName": "gpu",
                                "capacity": {"requests": {"memory": "1Gi"}},
                                "tolerations": [{"key": "k", "operator": "Exists"}],
                            },
                        ],
                    }
                ],
                "constraints": [{"matchAttribute": "gpu.example.com/model"}],
            }
        },
        **({"status": status} if status else {}),
    }


def test_claim_parsed_once_into_typed_fields() -> None:
    view = parse_resource_claim(
        claim(allocation=ALLOCATION, reservedFor=[{"resource": "pods", "name": "p", "uid": "u"}])
    )
    (request,) = view.spec.requests
    assert request.exactly is None and [s.name for s in request.first_available] == ["big", "small"]
    big, small = request.first_available
    assert (big.count, big.allocation_mode, small.count) == (2, "ExactCount", 1)
    assert small.capacity_requests == {"memory": Fraction(2**30)}
    assert small.tolerations[0].operator == "Exists"
    assert view.spec.constraints[0].match_attribute == "gpu.example.com/model"
    assert view.status.allocation is not None
    (result,) = view.status.allocation.results
    assert result.device_id == ("gpu.example.com", "node-a", "gpu-0")
    assert result.consumed_capacity == {"memory": Fraction(2**30)}
    assert view.status.allocation.node_selector is not None
    assert view.status.allocation.node_selector.matches("node-a", {})
    assert not view.status.allocation.node_selector.matches("node-b", {})
    assert view.is_reserved_for("u") and not view.is_reserved_for("v")
    assert kinds.RESOURCE_CLAIM.key_of(view) == "ns/c"


def test_claim_without_namespace_is_in_default() -> None:
    raw = claim()
    del raw["metadata"]["namespace"]
    assert parse_resource_claim(raw).key == "default/c"


@pytest.mark.parametrize(
    "path,value,where",
    [
        (("spec", "devices", "requests", 0, "firstAvailable", 0, "count"), "two", "firstAvailable[0].count"),
        (("spec", "devices", "requests"), {"a": 1}, "spec.devices.requests"),
        (("status", "allocation", "devices", "results", 0, "consumedCapacity", "memory"), "lots", "memory"),
    ],
)
def test_malformed_claim_names_the_field(path: tuple[Any, ...], value: Any, where: str) -> None:
    raw = copy.deepcopy(claim(allocation=ALLOCATION))
    target: Any = raw
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    with pytest.raises(ObjectError) as info:
        parse_resource_claim(raw)
    assert where in str(info.value)


def test_status_write_built_from_typed_fields() -> None:
    """Reserving adds a consumer; the allocation read from the API goes back as stored (it never
    changes once written), the drivers' device status untouched, metadata from the fields."""
    device_status = {"driver": "gpu.example.com", "pool": "node-a", "device": "gpu-0", "data": {"x": [1]}}
    view = parse_resource_claim(claim(allocation=ALLOCATION, devices=[device_status]))
    reserved = dataclasses.replace(
        view,
        finalizers=(*view.finalizers, "resource.kubernetes.io/delete-protection"),
        status=dataclasses.replace(view.status, reserved_for=(ConsumerReference("pods", "p", "u-p"),)),
    )
    body = claim_to_api(reserved)
    assert body["status"] == {
        "allocation": ALLOCATION,
        "reservedFor": [{"resource": "pods", "name": "p", "uid": "u-p"}],
        "devices": [device_status],
    }
    assert body["metadata"]["finalizers"] == [
        "other.example.com/keep",
        "resource.kubernetes.io/delete-protection",
    ]
    assert body["metadata"]["resourceVersion"] == "5" and body["metadata"]["labels"] == {"app": "x"}
    assert body["spec"] == claim()["spec"]  # never changed, sent as read
    # Deallocated: no allocation, reservations or device status.
    assert claim_to_api(dataclasses.replace(view, status=ResourceClaimStatus()))["status"] == {}


def test_new_allocation_serialized_from_its_fields() -> None:
    view = parse_resource_claim(claim(allocation=ALLOCATION))
    assert view.status.allocation is not None
    made_here = dataclasses.replace(view.status.allocation, raw=None)
    assert allocation_to_api(made_here) == {
        "devices": {
            "results": [
                {
                    "request": "gpu",
                    "driver": "gpu.example.com",
                    "pool": "node-a",
                    "device": "gpu-0",
                    "shareID": "s-1",
                    "consumedCapacity": {"memory": "1073741824"},
                }
            ],
            "config": ALLOCATION["devices"]["config"],
        },
        "nodeSelector": ALLOCATION["nodeSelector"],
        "allocationTimestamp": "2026-11-26T02:00:00Z",
    }
    assert made_here == view.status.allocation  # the stored form is not part of the value


def test_slice_devices_quantities_and_counters_parsed_once() -> None:
    view = parse_resource_slice(
        {
            "metadata": {"name": "s"},
            "spec": {
                "driver": "d",
                "pool": {"name": "p", "generation": 3, "resourceSliceCount": 2},
                "perDeviceNodeSelection": True,
                "sharedCounters": [{"name": "cs", "counters": {"mem": {"value": "8Gi"}}}],
                "devices": [
                    {
                        "name": "g0",
                        "nodeName": "n1",
                        "attributes": {"model": {"string": "a100"}, "d.example.com/idx": {"int": 3}},
                        "capacity": {
                            "mem": {
                                "value": "80Gi",
                                "requestPolicy": {
                                    "default": "1Gi",
                                    "validRange": {"min": "1Gi", "step": "1Gi"},
                                },
                            }
                        },
                        "consumesCounters": [{"counterSet": "cs", "counters": {"mem": {"value": "4Gi"}}}],
                        "taints": [{"key": "k", "effect": "NoSchedule"}],
                    }
                ],
            },
        }
    )
    assert (view.pool.generation, view.pool.resource_slice_count, view.per_device_node_selection) == (
        3,
        2,
        True,
    )
    assert view.shared_counters[0].counters == {"mem": Fraction(8 * 2**30)}
    (device,) = view.devices
    assert device.attributes["model"].value == "a100" and device.attributes["d.example.com/idx"].kind == "int"
    cap = device.capacity["mem"]
    assert cap.value == 80 * 2**30 and cap.request_policy is not None and cap.request_policy.default == 2**30
    assert device.consumes_counters[0].counters == {"mem": Fraction(4 * 2**30)}
    assert device.taints[0].effect == "NoSchedule" and device.node_name == "n1"
    with pytest.raises(ObjectError, match=r"spec.devices\[0\].capacity.mem.value"):
        parse_resource_slice(
            {
                "metadata": {"name": "s"},
                "spec": {"devices": [{"name": "g", "capacity": {"mem": {"value": "x"}}}]},
            }
        )


def test_device_class_extended_resource_name() -> None:
    cls = parse_device_class(
        {
            "metadata": {"name": "gpu"},
            "spec": {
                "selectors": [{"cel": {"expression": "true"}}, {}],
                "extendedResourceName": "example.com/gpu",
                "config": [{"opaque": {"driver": "d", "parameters": {}}}],
            },
        }
    )
    assert [s.expression for s in cls.selectors] == ["true", None]  # None: a selector kind we do not know
    assert cls.extended_resource_name == "example.com/gpu"
    assert cls.config == ({"driver": "d", "parameters": {}},)


def test_dra_manager_belongs_to_the_engine_and_survives_a_profile_rebuild() -> None:
    """No module-global DRA state: each engine has one manager, every profile's framework hands it
    out, and a profile rebuilt live keeps it (claims in flight, warm caches)."""
    first = new_engine(MemoryClusterClient(), [SchedulerProfileSpec(scheduler_name="other")])
    second = new_engine(MemoryClusterClient())
    frameworks = list(first.profiles.frameworks.values())
    assert len(frameworks) == 2
    manager = frameworks[0].dra
    assert all(fw.dra is manager for fw in frameworks)
    assert next(iter(second.profiles.frameworks.values())).dra is not manager
    rebuilt = first.profiles.set(SchedulerProfileSpec(scheduler_name="other"))
    assert rebuilt.dra is manager
