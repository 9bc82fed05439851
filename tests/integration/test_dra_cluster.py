"""DynamicResources on the real control plane: devices published in ResourceSlices are allocated to
pods' ResourceClaims, written back to the claims, never given to two pods, and freed for the next.

Without kube-controller-manager here, the tests play the resourceclaim controller where a cluster
would need it (freeing a claim whose pod is gone).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kopf_scheduler_workbench.controlplane import ControlPlane
from kopf_scheduler_workbench.testing.invariants import ClusterState, check

from .test_operator_helpers import (
    Replica,
    create,
    deploy,
    fresh_namespace,
    get_json,
    leading_replica,
    node,
    node_of,
    pod,
    reason_events,
    wait_for,
)

pytestmark = pytest.mark.integration

DRIVER = "gpu.example.com"


@pytest.fixture(scope="module")
def namespace(control_plane: ControlPlane) -> str:
    return fresh_namespace(control_plane, "dra")


@pytest.fixture(scope="module")
def replica(
    control_plane: ControlPlane, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replica]:
    kubeconfig = deploy(control_plane)
    name = f"dra-{namespace}"
    with leading_replica(kubeconfig, name, [namespace], name, tmp_path_factory.mktemp("dra")) as r:
        yield r


def device_class(name: str, driver: str = DRIVER) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
    }


def gpu_slice(node_name: str, gpus: int, driver: str = DRIVER) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-gpus"},
        "spec": {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": f"gpu-{i}", "attributes": {"model": {"string": "a100"}, "index": {"int": i}}}
                for i in range(gpus)
            ],
        },
    }


def gpu_claim(name: str, namespace: str, class_name: str, selector: str | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": class_name}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


def gpu_pod(name: str, namespace: str, claim_name: str) -> dict[str, Any]:
    obj = pod(name, namespace)
    obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim_name}]
    obj["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    return obj


def claim_status(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    return dict(get_json(plane, "resourceclaim", name, "-n", namespace).get("status") or {})


def failed_notes(plane: ControlPlane, namespace: str, name: str) -> list[str]:
    return [e.get("note", "") for e in reason_events(plane, namespace, name, "FailedScheduling")]


def test_claim_allocated_on_the_node_with_the_device(
    control_plane: ControlPlane, replica: Replica, namespace: str
) -> None:
    plane, tag = control_plane, uuid.uuid4().hex[:6]
    with_gpu, without = f"dra-gpu-{tag}", f"dra-cpu-{tag}"
    cls = f"gpu-{tag}"
    driver = f"first-{tag}.example.com"
    create(plane, node(with_gpu), node(without), device_class(cls, driver), gpu_slice(with_gpu, 1, driver))
    create(plane, gpu_claim(f"c-{tag}", namespace, cls))
    time.sleep(1.0)  # let the replica's informers see slices and claims before the pod
    create(plane, gpu_pod(f"p-{tag}", namespace, f"c-{tag}"))
    wait_for(
        lambda: node_of(plane, namespace, f"p-{tag}") or None,
        30,
        what="pod bound",
    )
    assert node_of(plane, namespace, f"p-{tag}") == with_gpu
    status = claim_status(plane, namespace, f"c-{tag}")
    (result,) = status["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"], result["device"], result["request"]) == (
        driver,
        with_gpu,
        "gpu-0",
        "gpu",
    )
    terms = status["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [with_gpu]}]}]
    uid = get_json(plane, "pod", f"p-{tag}", "-n", namespace)["metadata"]["uid"]
    assert status["reservedFor"] == [{"resource": "pods", "name": f"p-{tag}", "uid": uid}]
    meta = get_json(plane, "resourceclaim", f"c-{tag}", "-n", namespace)["metadata"]
    assert "resource.kubernetes.io/delete-protection" in meta["finalizers"]


def test_exclusive_device_never_shared_and_freed_for_the_next_pod(
    control_plane: ControlPlane, replica: Replica, namespace: str
) -> None:
    plane, tag = control_plane, uuid.uuid4().hex[:6]
    host, cls = f"dra-one-{tag}", f"one-{tag}"
    driver = f"one-{tag}.example.com"  # devices no other test's class selects
    create(plane, node(host), device_class(cls, driver), gpu_slice(host, 1, driver))
    create(plane, gpu_claim(f"a-{tag}", namespace, cls), gpu_claim(f"b-{tag}", namespace, cls))
    time.sleep(1.0)
    create(
        plane, gpu_pod(f"first-{tag}", namespace, f"a-{tag}"), gpu_pod(f"second-{tag}", namespace, f"b-{tag}")
    )

    def outcome() -> tuple[str, str] | None:
        bound = [n for n in (f"first-{tag}", f"second-{tag}") if node_of(plane, namespace, n)]
        waiting = [n for n in (f"first-{tag}", f"second-{tag}") if failed_notes(plane, namespace, n)]
        return (bound[0], waiting[0]) if len(bound) == 1 and len(waiting) == 1 else None

    winner, loser = wait_for(outcome, 30, what=f"one bound, one failed:\n{replica.logs()}")
    note = failed_notes(plane, namespace, loser)[-1]
    assert "cannot allocate all claims" in note, note
    time.sleep(2.0)
    assert not node_of(plane, namespace, loser)  # still waiting: the only GPU is taken
    # The pod goes; the resourceclaim controller (played here) drops its reservation and allocation.
    won_claim = f"a-{tag}" if winner == f"first-{tag}" else f"b-{tag}"
    plane.kubectl("delete", "pod", winner, "-n", namespace, "--grace-period=0", "--force", "--wait=false")
    plane.kubectl(
        "patch",
        "resourceclaim",
        won_claim,
        "-n",
        namespace,
        "--subresource=status",
        "--type=json",
        "-p",
        '[{"op": "remove", "path": "/status/allocation"}, {"op": "remove", "path": "/status/reservedFor"}]',
    )
    wait_for(
        lambda: node_of(plane, namespace, loser) or None, 40, what=f"freed device reused:\n{replica.logs()}"
    )
    assert node_of(plane, namespace, loser) == host
    # The invariant checker's device rule on every claim of the cluster: no device given twice.
    claims = get_json(plane, "resourceclaims", "-A")["items"]
    assert check(ClusterState(resource_claims=claims)).ok


def test_selector_matching_nothing_gets_the_reference_message(
    control_plane: ControlPlane, replica: Replica, namespace: str
) -> None:
    plane, tag = control_plane, uuid.uuid4().hex[:6]
    host, cls = f"dra-sel-{tag}", f"sel-{tag}"
    create(plane, node(host), device_class(cls), gpu_slice(host, 2))
    create(plane, gpu_claim(f"h-{tag}", namespace, cls, f'device.attributes["{DRIVER}"].model == "h100"'))
    time.sleep(1.0)
    create(plane, gpu_pod(f"h100-{tag}", namespace, f"h-{tag}"))
    notes = wait_for(lambda: failed_notes(plane, namespace, f"h100-{tag}") or None, 30, what=replica.logs())
    nodes = len(get_json(plane, "nodes")["items"])
    assert notes[-1].startswith(f"0/{nodes} nodes are available: {nodes} cannot allocate all claims."), notes[
        -1
    ]
    cond = [
        c
        for c in get_json(plane, "pod", f"h100-{tag}", "-n", namespace)["status"]["conditions"]
        if c["type"] == "PodScheduled"
    ]
    assert cond and cond[0]["reason"] == "Unschedulable"


def test_missing_claim_waits_at_pre_enqueue_then_schedules(
    control_plane: ControlPlane, replica: Replica, namespace: str
) -> None:
    plane, tag = control_plane, uuid.uuid4().hex[:6]
    host, cls = f"dra-late-{tag}", f"late-{tag}"
    driver = f"late-{tag}.example.com"
    create(plane, node(host), device_class(cls, driver), gpu_slice(host, 1, driver))
    create(plane, gpu_pod(f"early-{tag}", namespace, f"late-{tag}"))
    time.sleep(2.0)
    assert not node_of(plane, namespace, f"early-{tag}")
    create(plane, gpu_claim(f"late-{tag}", namespace, cls))  # the claim's Add event requeues the pod
    wait_for(lambda: node_of(plane, namespace, f"early-{tag}") or None, 30, what=replica.logs())
    assert node_of(plane, namespace, f"early-{tag}") == host


def test_claim_from_template_waits_until_generated(
    control_plane: ControlPlane, replica: Replica, namespace: str
) -> None:
    """A template entry has no claim until the resourceclaim controller makes one (played here: a
    claim owned by the pod, then the pod's status.resourceClaimStatuses); the pod waits at
    PreEnqueue and is scheduled on the status update."""
    plane, tag = control_plane, uuid.uuid4().hex[:6]
    host, cls = f"dra-tmpl-{tag}", f"tmpl-{tag}"
    driver = f"tmpl-{tag}.example.com"
    create(plane, node(host), device_class(cls, driver), gpu_slice(host, 1, driver))
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": f"t-{tag}", "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": cls}}]}}},
    }
    body = pod(f"gen-{tag}", namespace)
    body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": f"t-{tag}"}]
    create(plane, template, body)
    time.sleep(2.0)
    assert not node_of(plane, namespace, f"gen-{tag}")  # no claim yet: held at PreEnqueue
    uid = get_json(plane, "pod", f"gen-{tag}", "-n", namespace)["metadata"]["uid"]
    claim = gpu_claim(f"gen-{tag}-gpu", namespace, cls)
    claim["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": f"gen-{tag}", "uid": uid, "controller": True}
    ]
    create(plane, claim)
    generated = {
        "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": f"gen-{tag}-gpu"}]}
    }
    plane.kubectl(
        "patch", "pod", f"gen-{tag}", "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps(generated),
    )  # fmt: skip
    wait_for(lambda: node_of(plane, namespace, f"gen-{tag}") or None, 30, what="generated claim allocated")
    assert node_of(plane, namespace, f"gen-{tag}") == host
    status = claim_status(plane, namespace, f"gen-{tag}-gpu")
    assert status["reservedFor"][0]["uid"] == uid


def test_device_taint_rule_keeps_pods_off_a_device_unless_tolerated(
    control_plane: ControlPlane, replica: Replica, namespace: str
) -> None:
    plane, tag = control_plane, uuid.uuid4().hex[:6]
    host, cls, driver = f"dra-taint-{tag}", f"taint-{tag}", f"taint-{tag}.example.com"
    rule = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": f"maintenance-{tag}"},
        "spec": {
            "deviceSelector": {"driver": driver, "pool": host, "device": "gpu-0"},
            "taint": {"key": "maintenance", "value": "true", "effect": "NoSchedule"},
        },
    }
    create(plane, node(host), device_class(cls, driver), gpu_slice(host, 1, driver), rule)
    plain = gpu_claim(f"plain-{tag}", namespace, cls)
    tolerant = gpu_claim(f"tolerant-{tag}", namespace, cls)
    tolerant["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [
        {"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}
    ]
    create(plane, plain, tolerant)
    time.sleep(1.0)
    create(plane, gpu_pod(f"plain-{tag}", namespace, f"plain-{tag}"))
    notes = wait_for(lambda: failed_notes(plane, namespace, f"plain-{tag}") or None, 30, what=replica.logs())
    assert "cannot allocate all claims" in notes[-1], notes[-1]
    create(plane, gpu_pod(f"tolerant-{tag}", namespace, f"tolerant-{tag}"))
    wait_for(lambda: node_of(plane, namespace, f"tolerant-{tag}") or None, 30, what="tolerating pod bound")
    assert node_of(plane, namespace, f"tolerant-{tag}") == host
    result = claim_status(plane, namespace, f"tolerant-{tag}")["allocation"]["devices"]["results"][0]
    assert result["tolerations"] == [{"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}]


def test_extended_resource_backed_by_a_device_class(
    control_plane: ControlPlane, replica: Replica, namespace: str
) -> None:
    """DRAExtendedResource: a container asks for `<domain>/gpu: 1`; no node offers it as allocatable,
    a DeviceClass stands for it, and the scheduler makes, allocates and names the claim."""
    plane, tag = control_plane, uuid.uuid4().hex[:6]
    host, cls, driver = f"dra-ext-{tag}", f"ext-{tag}", f"ext-{tag}.example.com"
    resource = f"{driver}/gpu"
    klass = device_class(cls, driver)
    klass["spec"]["extendedResourceName"] = resource
    create(plane, node(host), klass, gpu_slice(host, 1, driver))
    time.sleep(1.0)
    body = pod(f"ext-{tag}", namespace)
    body["spec"]["containers"][0]["resources"] = {"requests": {resource: "1"}, "limits": {resource: "1"}}
    create(plane, body)
    wait_for(lambda: node_of(plane, namespace, f"ext-{tag}") or None, 30, what="extended-resource pod bound")
    assert node_of(plane, namespace, f"ext-{tag}") == host
    status = get_json(plane, "pod", f"ext-{tag}", "-n", namespace)["status"]["extendedResourceClaimStatus"]
    assert status["requestMappings"] == [
        {"containerName": "c", "resourceName": resource, "requestName": "container-0-request-0"}
    ]
    claim = get_json(plane, "resourceclaim", status["resourceClaimName"], "-n", namespace)
    assert claim["metadata"]["annotations"]["resource.kubernetes.io/extended-resource-claim"] == "true"
    assert claim["metadata"]["ownerReferences"][0]["name"] == f"ext-{tag}"
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"], result["device"]) == (driver, host, "gpu-0")
    # The one device is taken: a second such pod cannot be placed.
    second = pod(f"ext2-{tag}", namespace)
    second["spec"]["containers"][0]["resources"] = {"requests": {resource: "1"}, "limits": {resource: "1"}}
    create(plane, second)
    notes = wait_for(lambda: failed_notes(plane, namespace, f"ext2-{tag}") or None, 30, what=replica.logs())
    assert "cannot allocate all claims" in notes[-1], notes[-1]
