"""The local control plane with kube-controller-manager: ResourceClaimTemplates become claims our
scheduler allocates (and the claims go with their pods), ReplicaSets make pods we schedule, PDBs
get a status, as in a real cluster."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kopf_scheduler_workbench.controlplane import ControlPlane

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
    wait_for,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    with ControlPlane(controllers=True) as p:
        yield p


@pytest.fixture(scope="module")
def namespace(plane: ControlPlane) -> str:
    return fresh_namespace(plane, "kcm")


@pytest.fixture(scope="module")
def replica(
    plane: ControlPlane, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replica]:
    kubeconfig = deploy(plane)
    with leading_replica(kubeconfig, "kcm", [namespace], "kcm", tmp_path_factory.mktemp("kcm")) as r:
        yield r


def template_pod(name: str, namespace: str, template: str) -> dict[str, Any]:
    body = pod(name, namespace)
    body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": template}]
    body["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    body["spec"]["terminationGracePeriodSeconds"] = 0
    return body


def generated_claim(plane: ControlPlane, namespace: str, pod_name: str) -> str | None:
    statuses = (get_json(plane, "pod", pod_name, "-n", namespace).get("status") or {}).get(
        "resourceClaimStatuses"
    )
    return str(statuses[0]["resourceClaimName"]) if statuses else None


def test_template_claim_is_generated_allocated_and_freed(
    plane: ControlPlane, replica: Replica, namespace: str
) -> None:
    tag = uuid.uuid4().hex[:6]
    host, cls, driver = f"kcm-gpu-{tag}", f"gpu-{tag}", f"gpu-{tag}.example.com"
    create(
        plane,
        node(host),
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": cls},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{host}-gpus"},
            "spec": {
                "driver": driver,
                "nodeName": host,
                "pool": {"name": host, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "gpu-0", "attributes": {"model": {"string": "a100"}}}],
            },
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu", "namespace": namespace},
            "spec": {
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": cls}}]}}
            },
        },
    )
    create(plane, template_pod(f"a-{tag}", namespace, "one-gpu"))
    claim = wait_for(lambda: generated_claim(plane, namespace, f"a-{tag}"), 30, what="claim generated")
    meta = get_json(plane, "resourceclaim", claim, "-n", namespace)["metadata"]
    assert meta["ownerReferences"][0]["name"] == f"a-{tag}"
    wait_for(lambda: node_of(plane, namespace, f"a-{tag}") or None, 30, what="pod bound")
    assert node_of(plane, namespace, f"a-{tag}") == host
    status = get_json(plane, "resourceclaim", claim, "-n", namespace)["status"]
    assert status["allocation"]["devices"]["results"][0]["device"] == "gpu-0"
    assert status["reservedFor"][0]["name"] == f"a-{tag}"

    # The one GPU is taken: a second pod waits; once the first pod is gone the controllers release
    # and delete its claim, and the second pod gets the device.
    create(plane, template_pod(f"b-{tag}", namespace, "one-gpu"))
    wait_for(lambda: generated_claim(plane, namespace, f"b-{tag}"), 30, what="second claim generated")
    assert not node_of(plane, namespace, f"b-{tag}")
    plane.kubectl("delete", "pod", f"a-{tag}", "-n", namespace, "--grace-period=0", "--force", "--wait=false")
    wait_for(lambda: node_of(plane, namespace, f"b-{tag}") or None, 60, what="freed GPU reused")
    assert node_of(plane, namespace, f"b-{tag}") == host


def test_replicaset_pods_are_scheduled_and_pdb_gets_status(
    plane: ControlPlane, replica: Replica, namespace: str
) -> None:
    tag = uuid.uuid4().hex[:6]
    create(plane, node(f"kcm-rs-{tag}"))
    template = pod("x", namespace)
    labels = {"app": f"rs-{tag}"}
    rs = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": f"rs-{tag}", "namespace": namespace},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": template["spec"]},
        },
    }
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": f"pdb-{tag}", "namespace": namespace},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}},
    }
    create(plane, rs, pdb)

    def bound() -> int | None:
        items = get_json(plane, "pods", "-n", namespace, "-l", f"app=rs-{tag}")["items"]
        n = sum(1 for p in items if p["spec"].get("nodeName"))
        return n if n == 3 else None

    assert wait_for(bound, 60, what="3 ReplicaSet pods bound") == 3
    status = wait_for(
        lambda: (
            (get_json(plane, "pdb", f"pdb-{tag}", "-n", namespace).get("status") or {}).get("expectedPods")
            and get_json(plane, "pdb", f"pdb-{tag}", "-n", namespace)["status"]
        ),
        60,
        what="PDB status",
    )
    assert status["expectedPods"] == 3
