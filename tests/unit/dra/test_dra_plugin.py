"""The DynamicResources plugin through the whole engine (``simulate``) and at its extension points."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest
from dra_builders import device, device_class, resource_slice

from kopf_scheduler.api import kinds
from kopf_scheduler.api.objects import parse_pod
from kopf_scheduler.api.resource import (
    ConsumerReference,
    DeviceRequest,
    DeviceSubRequest,
    ResourceClaim,
    allocation_to_api,
    claim_to_api,
    parse_device_class,
    parse_resource_claim,
    parse_resource_slice,
)
from kopf_scheduler.config.profile import adapter
from kopf_scheduler.dra.manager import DraManager
from kopf_scheduler.framework.interface import Code, CycleState
from kopf_scheduler.memory_client import MemoryClusterClient
from kopf_scheduler.plugins.dynamic_resources import STATE_KEY, DynamicResources
from kopf_scheduler.simulate import SimulationError, load_documents, simulate

EX = Path(__file__).resolve().parent.parent.parent / "examples"


def run(path: Path, seed: int = 1) -> dict[str, Any]:
    inputs = load_documents([str(path)])
    outcomes = asyncio.run(simulate(inputs, seed))
    return {"objects": inputs.objects, **{o.name: o for o in outcomes}}


def test_gpu_pool_allocates_each_device_once() -> None:
    got = run(EX / "dra_gpus.yaml")
    taken = [
        d for name in ("train-0", "train-1", "infer-a") for ds in got[name].allocations.values() for d in ds
    ]
    assert len(taken) == len(set(taken)) == 3  # three claims, three distinct GPUs
    for name in ("train-0", "train-1", "infer-a"):
        (devices,) = got[name].allocations.values()
        node = devices[0].split("/")[1]  # the pool is named after its node
        assert got[name].node == node
    # One shared claim: both pods on its node, one device between them.
    assert got["infer-b"].node == got["infer-a"].node
    assert got["infer-b"].allocations == got["infer-a"].allocations
    claim = got["objects"]["ResourceClaim"]["default/shared-gpu"]
    assert {r.name for r in claim.status.reserved_for} == {"infer-a", "infer-b"}
    assert "resource.kubernetes.io/delete-protection" in claim.finalizers
    nothing_left = (
        "0/3 nodes are available: 3 cannot allocate all claims. "
        "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    )
    assert got["train-2"].node == "" and got["train-2"].message == nothing_left
    assert got["wants-h100"].node == "" and got["wants-h100"].message == nothing_left


def test_allocation_written_as_the_reference_writes_it() -> None:
    got = run(EX / "dra_gpus.yaml")
    claim: ResourceClaim = got["objects"]["ResourceClaim"]["default/train-0-gpu"]
    assert claim.status.allocation is not None
    allocation = allocation_to_api(claim.status.allocation)  # what the API is sent
    (result,) = allocation["devices"]["results"]
    assert result["request"] == "gpu" and result["driver"] == "gpu.example.com"
    node = got["train-0"].node
    assert allocation["nodeSelector"] == {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
    }
    assert allocation["allocationTimestamp"]
    assert claim.status.reserved_for == (ConsumerReference("pods", "train-0", "uid-train-0"),)


# --- extension points -----------------------------------------------------------------------------


class Handle:
    def __init__(self, objects: dict[str, dict[str, Any]], client: MemoryClusterClient) -> None:
        self.objects = objects
        self.client = client
        self.dra = DraManager(objects)


def pod(name: str, claim: str | None = None, template: str | None = None, statuses: Any = None) -> Any:
    entry: dict[str, Any] = {"name": "gpu"}
    if claim:
        entry["resourceClaimName"] = claim
    if template:
        entry["resourceClaimTemplateName"] = template
    raw: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "c"}], "resourceClaims": [entry]},
    }
    if statuses is not None:
        raw["status"] = {"resourceClaimStatuses": statuses}
    return parse_pod(raw)


def gpu_claim(name: str, **status: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-claim-{name}",
            "resourceVersion": "1",
        },
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
    }
    if status:
        out["status"] = status
    return out


def world(*claims: dict[str, Any], gpus: int = 1) -> tuple[DynamicResources, dict[str, dict[str, Any]]]:
    """The plugin over objects stored as the informers store them: typed views."""
    objects: dict[str, dict[str, Any]] = {
        "DeviceClass": {"gpu": parse_device_class(device_class("gpu", "gpu.example.com"))},
        "ResourceSlice": {
            "s": parse_resource_slice(
                resource_slice(
                    "s", "node-1", "p", "gpu.example.com", *(device(f"gpu-{i}") for i in range(gpus))
                )
            )
        },
        "ResourceClaim": {f"default/{c['metadata']['name']}": parse_resource_claim(c) for c in claims},
    }
    plugin = DynamicResources(handle=Handle(objects, MemoryClusterClient(objects=objects)))  # type: ignore[arg-type]
    return plugin, objects


class NodeInfo:
    def __init__(self, name: str) -> None:
        from kopf_scheduler.api.objects import Node

        self.node = Node(name=name)


def test_pre_enqueue_waits_for_generated_claim() -> None:
    plugin, _ = world()
    status = plugin.pre_enqueue(pod("p", template="t"))
    assert status is not None and status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert status.message == 'pod "default/p": ResourceClaim not created yet'
    status = plugin.pre_enqueue(pod("p", claim="missing"))
    assert status is not None and status.message == 'resourceclaim.resource.k8s.io "missing" not found'
    # A generated claim must be owned by the pod.
    plugin, _ = world(gpu_claim("p-gpu"))
    status = plugin.pre_enqueue(
        pod("p", template="t", statuses=[{"name": "gpu", "resourceClaimName": "p-gpu"}])
    )
    assert status is not None
    assert (
        status.message == "ResourceClaim default/p-gpu was not created for Pod default/p (Pod is not owner)"
    )
    assert plugin.pre_enqueue(pod("p", claim="p-gpu")) is None


def test_unknown_device_class_is_unresolvable() -> None:
    claim = gpu_claim("c")
    claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "nope"
    plugin, _ = world(claim)
    _, status = plugin.pre_filter(CycleState(), pod("p", claim="c"), [])
    assert status is not None and status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert status.message == "request gpu: device class nope does not exist"


def test_reserve_keeps_a_device_from_the_next_pod_until_unreserve() -> None:
    plugin, _ = world(gpu_claim("a"), gpu_claim("b"), gpus=1)
    first, second = CycleState(), CycleState()
    plugin.pre_filter(first, pod("p1", claim="a"), [])
    assert plugin.filter(first, pod("p1", claim="a"), NodeInfo("node-1")) is None  # type: ignore[arg-type]
    assert plugin.reserve(first, pod("p1", claim="a"), "node-1") is None
    plugin.pre_filter(second, pod("p2", claim="b"), [])
    status = plugin.filter(second, pod("p2", claim="b"), NodeInfo("node-1"))  # type: ignore[arg-type]
    assert status is not None and status.message == "cannot allocate all claims"
    # The claim itself is in flight: another pod sharing it waits.
    _, status = plugin.pre_filter(CycleState(), pod("p3", claim="a"), [])
    assert (
        status is not None
        and status.message == "resource claim default/a is in the process of being allocated"
    )
    plugin.unreserve(first, pod("p1", claim="a"), "node-1")
    third = CycleState()
    plugin.pre_filter(third, pod("p2", claim="b"), [])
    assert plugin.filter(third, pod("p2", claim="b"), NodeInfo("node-1")) is None  # type: ignore[arg-type]


def test_pre_bind_writes_allocation_and_reservation() -> None:
    plugin, objects = world(gpu_claim("a"))
    state, p = CycleState(), pod("p1", claim="a")
    plugin.pre_filter(state, p, [])
    plugin.filter(state, p, NodeInfo("node-1"))  # type: ignore[arg-type]
    plugin.reserve(state, p, "node-1")
    assert asyncio.run(plugin.pre_bind(state, p, "node-1")) is None
    stored: ResourceClaim = objects["ResourceClaim"]["default/a"]
    assert stored.status.allocation is not None
    assert stored.status.allocation.results[0].device == "gpu-0"
    assert stored.status.reserved_for == (ConsumerReference("pods", "p1", "uid-p1"),)
    assert plugin.tracker.get_pending("uid-claim-a") is None  # no longer in flight: written


def test_pre_bind_fails_when_claim_was_allocated_elsewhere() -> None:
    plugin, objects = world(gpu_claim("a"))
    state, p = CycleState(), pod("p1", claim="a")
    plugin.pre_filter(state, p, [])
    plugin.filter(state, p, NodeInfo("node-1"))  # type: ignore[arg-type]
    plugin.reserve(state, p, "node-1")
    other = gpu_claim("a", allocation={"devices": {"results": []}})
    other["metadata"]["resourceVersion"] = "7"
    objects["ResourceClaim"]["default/a"] = parse_resource_claim(other)  # someone else won the race
    status = asyncio.run(plugin.pre_bind(state, p, "node-1"))
    assert status is not None and status.code == Code.ERROR
    assert "claim default/a got allocated elsewhere in the meantime" in status.message


def test_post_filter_deallocates_a_claim_unusable_everywhere() -> None:
    allocated = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "p", "device": "gpu-0"}]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gone"]}]}
                ]
            },
        }
    }
    plugin, objects = world(gpu_claim("a", **allocated))
    state, p = CycleState(), pod("p1", claim="a")

    async def go() -> Any:
        plugin.pre_filter(state, p, [])
        status = plugin.filter(state, p, NodeInfo("node-1"))  # type: ignore[arg-type]
        assert status is not None and status.message == "resourceclaim not available on the node"
        _, post = plugin.post_filter(state, p, {"node-1": status})
        await asyncio.gather(*plugin._tasks)
        return post

    post = asyncio.run(go())
    assert post is not None and post.code == Code.UNSCHEDULABLE
    assert post.message == "deallocation of ResourceClaim completed"
    assert objects["ResourceClaim"]["default/a"].status.allocation is None


def test_pods_without_claims_skip() -> None:
    plugin, _ = world()
    state = CycleState()
    raw = {"metadata": {"name": "x", "namespace": "default"}, "spec": {"containers": [{"name": "c"}]}}
    _, status = plugin.pre_filter(state, parse_pod(raw), [])
    assert status is not None and status.code == Code.SKIP
    assert state.get(STATE_KEY) is not None


@pytest.mark.parametrize("value,seconds", [("10s", 10.0), ("1m30s", 90.0), (5, 5.0), ("250ms", 0.25)])
def test_args_durations(value: Any, seconds: float) -> None:
    from kopf_scheduler.plugins.dynamic_resources import DynamicResourcesArgs

    assert adapter(DynamicResourcesArgs).validate_python({"filterTimeout": value}).filter_timeout == seconds


def test_allocation_stops_once_enough_nodes_are_feasible(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above 100 nodes the reference stops filtering once it has found enough feasible nodes
    (numFeasibleNodesToFind); the per-node allocation must not run on the rest."""
    from kopf_scheduler.simulate import documents_to_inputs
    from kopf_scheduler_workbench.bench.workloads import workloads

    w = workloads("small")["SchedulingWithResourceClaim"]  # 200 nodes, 2 devices each
    objs = w.node_objects() + w.cluster_objects()
    pods = w.measure_objects("kopf-scheduler")[:5]  # five pods sharing test-claim-0
    for i, p in enumerate(pods):
        p["metadata"]["uid"] = f"u{i}"
    inputs = documents_to_inputs([(str(i), o) for i, o in enumerate(objs + pods)])
    calls = {"filter": 0}
    original = DynamicResources.filter

    def counting(self: DynamicResources, *args: Any) -> Any:
        calls["filter"] += 1
        return original(self, *args)

    monkeypatch.setattr(DynamicResources, "filter", counting)
    outcomes = asyncio.run(simulate(inputs, 0))
    assert all(o.node for o in outcomes)
    assert len({o.node for o in outcomes}) == 1  # one claim, one node
    # The first pod allocates: 100 nodes (200 nodes * 48 %, at least 100) looked at, not 200;
    # the other four use the allocated claim and need no per-node call at all.
    assert calls["filter"] == 100


def _bc_world() -> tuple[DynamicResources, dict[str, dict[str, Any]]]:
    plugin, objects = world(gpu_claim("a"))
    dev = device("gpu-0", bindingConditions=["attached"], bindingFailureConditions=["failed"])
    objects["ResourceSlice"] = {
        "s": parse_resource_slice(resource_slice("s", "node-1", "p", "gpu.example.com", dev))
    }
    plugin.poll_interval = 0.01
    return plugin, objects


def _bind_with_driver(plugin: DynamicResources, objects: dict[str, Any], condition: str | None) -> Any:
    state, p = CycleState(), pod("p1", claim="a")
    plugin.pre_filter(state, p, [])
    assert plugin.filter(state, p, NodeInfo("node-1")) is None  # type: ignore[arg-type]
    plugin.reserve(state, p, "node-1")

    async def go() -> Any:
        task = asyncio.ensure_future(plugin.pre_bind(state, p, "node-1"))
        for _ in range(200):  # the driver sees the allocation, then reports on the device
            await asyncio.sleep(0.01)
            if objects["ResourceClaim"]["default/a"].status.allocation is not None:
                break
        if condition is not None:
            stored: ResourceClaim = objects["ResourceClaim"]["default/a"]
            assert stored.status.allocation is not None
            raw = copy.deepcopy(dict(stored.raw))
            raw["status"] = {
                "allocation": allocation_to_api(stored.status.allocation),
                "reservedFor": [r.to_api() for r in stored.status.reserved_for],
                "devices": [
                    {
                        "driver": "gpu.example.com",
                        "pool": "p",
                        "device": "gpu-0",
                        "conditions": [{"type": condition, "status": "True"}],
                    }
                ],
            }
            raw["metadata"]["resourceVersion"] = "999"
            objects["ResourceClaim"]["default/a"] = parse_resource_claim(raw)  # the driver's write
        return await task

    return asyncio.run(go())


def test_pre_bind_waits_for_binding_conditions() -> None:
    plugin, objects = _bc_world()
    assert _bind_with_driver(plugin, objects, "attached") is None
    result = objects["ResourceClaim"]["default/a"].status.allocation.results[0]
    assert result.binding_conditions == ("attached",)


def test_pre_bind_fails_on_binding_failure_condition_and_times_out() -> None:
    plugin, objects = _bc_world()
    status = _bind_with_driver(plugin, objects, "failed")
    assert status is not None and status.code == Code.ERROR and "device binding failed" in status.message
    plugin, objects = _bc_world()
    plugin.binding_timeout = 0.05
    status = _bind_with_driver(plugin, objects, None)
    assert status is not None and status.message == "device binding timeout"


@pytest.mark.parametrize(
    "kind,name,breaks,where",
    [
        (
            "ResourceClaim",
            "shared-gpu",
            ("spec", "devices", "requests", 0, "exactly", "count"),
            "exactly.count",
        ),
        ("ResourceSlice", "node-b-gpus", ("spec", "devices"), "spec.devices"),
        (
            "ResourceSlice",
            "node-a-gpus",
            ("spec", "devices", 0, "capacity", "memory", "value"),
            "memory.value",
        ),
    ],
)
def test_malformed_dra_objects_are_the_inputs_error(
    kind: str, name: str, breaks: tuple[Any, ...], where: str
) -> None:
    """Objects the apiserver would refuse are refused when read, naming the document and the field
    (the informers log and skip them): no pod meets them half-parsed."""
    import yaml

    from kopf_scheduler.simulate import documents_to_inputs

    docs = [d for d in yaml.safe_load_all((EX / "dra_gpus.yaml").read_text()) if d]
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    target = doc
    for step in breaks[:-1]:
        target = target[step]
    target[breaks[-1]] = "lots" if breaks[-1] != "devices" else "oops"
    with pytest.raises(SimulationError) as info:
        documents_to_inputs([(str(i), d) for i, d in enumerate(docs)])
    assert f"({kind} {name})" in str(info.value) and where in str(info.value)


def test_extended_resource_through_a_device_class() -> None:
    """DRAExtendedResource: `example.com/gpu: 2` on a node without it as allocatable is met by two
    devices of the DeviceClass standing for it, through a claim the scheduler creates; on a node with
    a device plugin NodeResourcesFit counts it as ever; on a node with neither it cannot be met."""
    inputs = load_documents([str(EX / "dra_extended_resource.yaml")])
    client_statuses: dict[str, Any] = {}
    original = MemoryClusterClient.set_pod_extended_resource_claim_status

    async def spy(self: MemoryClusterClient, pod: Any, status: Any) -> None:
        client_statuses[pod.key] = status
        await original(self, pod, status)

    MemoryClusterClient.set_pod_extended_resource_claim_status = spy  # type: ignore[method-assign]
    try:
        got = {o.name: o for o in asyncio.run(simulate(inputs, 1))}
    finally:
        MemoryClusterClient.set_pod_extended_resource_claim_status = original  # type: ignore[method-assign]
    assert got["on-dra"].node == "node-a"
    status = client_statuses["default/on-dra"]
    assert status["requestMappings"] == [
        {"containerName": "main", "resourceName": "example.com/gpu", "requestName": "container-0-request-0"}
    ]
    claim: ResourceClaim = kinds.objects_of(inputs.objects, kinds.RESOURCE_CLAIM)[
        f"default/{status['resourceClaimName']}"
    ]
    assert claim.generate_name == "on-dra-extended-resources-"
    assert claim.metadata.annotations == {"resource.kubernetes.io/extended-resource-claim": "true"}
    assert claim.metadata.owner_references[0].uid == "uid-on-dra"
    (request,) = claim.spec.requests
    assert request.name == "container-0-request-0" and request.exactly is not None
    assert (request.exactly.device_class_name, request.exactly.allocation_mode, request.exactly.count) == (
        "gpu.example.com",
        "ExactCount",
        2,
    )
    assert claim.status.allocation is not None
    assert sorted(r.device for r in claim.status.allocation.results) == ["gpu-0", "gpu-1"]
    assert claim.status.reserved_for == (ConsumerReference("pods", "on-dra", "uid-on-dra"),)
    assert got["on-device-plugin"].node == "node-b" and "default/on-device-plugin" not in client_statuses
    assert got["nowhere"].node == ""
    assert got["nowhere"].message.startswith("0/3 nodes are available: 1 cannot allocate all claims, ")


def test_extended_resource_requests_share_devices_with_init_containers() -> None:
    from kopf_scheduler.plugins.dynamic_resources.extended_resources import requests_and_mappings

    gpu = "example.com/gpu"
    raw = {
        "metadata": {"name": "p", "namespace": "default", "uid": "u"},
        "spec": {
            "initContainers": [
                {"name": "prep", "resources": {"requests": {gpu: "1"}}},
                {"name": "warm", "resources": {"requests": {gpu: "3"}}},
            ],
            "containers": [{"name": "main", "resources": {"requests": {"cpu": "1", gpu: "2"}}}],
        },
    }
    by_name = {gpu: parse_device_class({"metadata": {"name": "gpu-class"}})}
    pod = parse_pod(raw)
    pod.raw = {}  # the parsed containers are all it reads
    requests, mappings = requests_and_mappings(pod, {gpu: 3}, by_name)
    # main asks 2 (its own request); prep's 1 is covered by main's devices (init containers run
    # before it); warm's 3 by main's 2 and a request of its own for 1 more.
    assert requests == [
        DeviceRequest(
            "container-1-request-0", DeviceSubRequest("container-1-request-0", "gpu-class", count=1)
        ),
        DeviceRequest(
            "container-2-request-1", DeviceSubRequest("container-2-request-1", "gpu-class", count=2)
        ),
    ]
    assert mappings == [
        {"containerName": "main", "resourceName": gpu, "requestName": "container-2-request-1"},
        {"containerName": "prep", "resourceName": gpu, "requestName": "container-2-request-1"},
        {"containerName": "warm", "resourceName": gpu, "requestName": "container-2-request-1"},
        {"containerName": "warm", "resourceName": gpu, "requestName": "container-1-request-0"},
    ]


def test_extended_resource_claim_for_a_node_is_written_as_typed() -> None:
    """node_claim's typed spec and the object PreBind writes (claim_to_api) say the same: the
    write parses back to the same claim, the pod's ownership and annotation kept."""
    from kopf_scheduler.plugins.dynamic_resources.extended_resources import (
        ANNOTATION,
        node_claim,
        requests_and_mappings,
        special_claim,
    )

    gpu = "example.com/gpu"
    pod = parse_pod(
        {
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"containers": [{"name": "main", "resources": {"requests": {gpu: "2"}}}]},
        }
    )
    by_name = {gpu: parse_device_class({"metadata": {"name": "gpu-class"}})}
    requests, _ = requests_and_mappings(pod, {gpu: 2}, by_name)
    claim = node_claim(special_claim(pod), requests)
    assert claim.spec.requests == tuple(requests)
    written = claim_to_api(claim)
    assert written["spec"] == {
        "devices": {
            "requests": [
                {
                    "name": "container-0-request-0",
                    "exactly": {"deviceClassName": "gpu-class", "allocationMode": "ExactCount", "count": 2},
                }
            ]
        }
    }
    assert parse_resource_claim(written) == claim
    assert claim.metadata.annotations == {ANNOTATION: "true"}
    assert [(r.name, r.uid, r.controller) for r in claim.metadata.owner_references] == [("p", "u", True)]
