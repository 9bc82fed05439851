"""DRAExtendedResource in DynamicResources (the reference's ``extendeddynamicresources.go``).

A pod asking for an extended resource that a DeviceClass stands for (``example.com/gpu: 1``) and
that a node does not offer through a device plugin gets a ResourceClaim the scheduler makes for
it: in memory from PreFilter on (named ``<extended-resources>``), with one device request per
container and resource on each node, created in the API in PreBind (``generateName:
<pod>-extended-resources-``, owned by the pod) and named in the pod's
``status.extendedResourceClaimStatus`` with the container -> request mappings.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from kopf_scheduler.api.containers import Container
from kopf_scheduler.api.objects import Pod
from kopf_scheduler.dra.extended import is_dra_extended_resource_name

if TYPE_CHECKING:  # api/resource.py is imported where a claim or a request is made (a DeviceClass met)
    from kopf_scheduler.api.resource import DeviceClass, DeviceRequest, ResourceClaim

__all__ = [
    "ANNOTATION",
    "SPECIAL_NAME",
    "extended_requests",
    "find_extended_claim",
    "node_claim",
    "requests_and_mappings",
    "special_claim",
]

SPECIAL_NAME = "<extended-resources>"
ANNOTATION = "resource.kubernetes.io/extended-resource-claim"


def extended_requests(pod: Pod, by_name: Mapping[str, DeviceClass]) -> dict[str, int]:
    """The pod's requests of extended resources some DeviceClass stands for (amount > 0)."""
    return {
        name: qty
        for name, qty in pod.filter_requests.scalar.items()
        if qty and is_dra_extended_resource_name(name) and name in by_name
    }


def find_extended_claim(pod: Pod, claims: Iterable[ResourceClaim]) -> ResourceClaim | None:
    for claim in claims:
        if claim.metadata.annotations.get(ANNOTATION) != "true":
            continue
        for ref in claim.metadata.owner_references:
            if ref.name == pod.name and ref.controller and ref.uid == pod.uid:
                return claim
    return None


def node_claim(claim: ResourceClaim, requests: Sequence[DeviceRequest]) -> ResourceClaim:
    """The extended-resource claim with one node's requests: what PreBind creates in the API."""
    from kopf_scheduler.api.resource import claim_with_requests

    return claim_with_requests(claim, requests)


def special_claim(pod: Pod) -> ResourceClaim:
    """The pod's extended-resource claim, in memory until PreBind creates it."""
    from kopf_scheduler.api.resource import parse_resource_claim

    return parse_resource_claim(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "namespace": pod.namespace,
                "name": SPECIAL_NAME,
                "uid": str(uuid.uuid4()),
                "generateName": f"{pod.name}-extended-resources-",
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid, "controller": True}
                ],
                "annotations": {ANNOTATION: "true"},
            },
            "spec": {},
        }
    )


def _container_amount(container: Container, name: str) -> int:
    amount = container.requests.get(name)
    if amount is None:
        return 0
    return int(amount) if amount.denominator == 1 else 0  # AsInt64: whole numbers only


def _count(request: DeviceRequest) -> int:
    return request.exactly.count if request.exactly is not None else 0


def _request_for(
    index: int, container: Container, name: str, class_name: str, reusable: Sequence[DeviceRequest | None]
) -> tuple[DeviceRequest | None, list[dict[str, str]]]:
    """``createResourceRequestAndMappings``: a request for the container's amount, less what the
    long-lived containers after an init container already asked (it may reuse their devices)."""
    amount = _container_amount(container, name)
    if amount == 0:
        return None, []
    mappings: list[dict[str, str]] = []
    have = 0
    for request in reusable:
        if request is None:
            continue
        have += _count(request)
        mappings.append({"containerName": container.name, "resourceName": name, "requestName": request.name})
        if have >= amount:
            return None, mappings
    from kopf_scheduler.api.resource import DeviceRequest, DeviceSubRequest

    keys = sorted(container.requests)
    request_name = f"container-{index}-request-{keys.index(name) if name in keys else 0}"
    request = DeviceRequest(
        request_name,
        exactly=DeviceSubRequest(request_name, class_name, allocation_mode="ExactCount", count=amount - have),
    )
    mappings.append({"containerName": container.name, "resourceName": name, "requestName": request_name})
    return request, mappings


def requests_and_mappings(
    pod: Pod, extended: Mapping[str, int], by_name: Mapping[str, DeviceClass]
) -> tuple[list[DeviceRequest], list[dict[str, str]]]:
    """``createRequestsAndMappings``: device requests (sorted by name) and container mappings (the
    pod status's ``extendedResourceClaimStatus.requestMappings`` as written)."""
    inits = pod.init_containers
    containers = (*inits, *pod.containers)
    long_lived = [i for i, c in enumerate(containers) if i >= len(inits) or c.sidecar]
    short_lived = [i for i in range(len(inits)) if i not in long_lived]
    requests: list[DeviceRequest] = []
    mappings: list[dict[str, str]] = []
    for name in sorted(extended):
        cls = by_name.get(name)
        class_name = cls.metadata.name if cls is not None else ""
        if not class_name:
            continue
        long_requests: list[DeviceRequest | None] = [None] * len(containers)
        long_mappings: list[dict[str, str]] = []
        for i in long_lived:
            request, found = _request_for(i, containers[i], name, class_name, ())
            long_requests[i] = request
            long_mappings.extend(found)
        largest: DeviceRequest | None = None
        short_names: set[str] = set()
        short_mappings: list[dict[str, str]] = []
        for i in short_lived:
            request, found = _request_for(i, containers[i], name, class_name, long_requests[i:])
            if request is not None:
                short_names.add(request.name)
                if largest is None or _count(largest) < _count(request):
                    largest = request
            short_mappings.extend(found)
        if largest is not None and len(short_names) > 1:
            # Init containers run one after the other: one request, the largest, serves them all.
            short_names.discard(largest.name)
            for m in short_mappings:
                if m["requestName"] in short_names:
                    m["requestName"] = largest.name
        if largest is not None:
            requests.append(largest)
        requests.extend(r for r in long_requests if r is not None)
        mappings.extend(long_mappings)
        mappings.extend(short_mappings)
    requests.sort(key=lambda r: r.name)
    return requests, mappings
