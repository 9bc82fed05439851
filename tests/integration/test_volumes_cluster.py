"""VolumeBinding with WaitForFirstConsumer claims on the real control plane.

No PV controller or external provisioner runs here, so the tests play those parts: VolumeBinding's
PreBind writes its decision (the PV's claimRef, or the PVC's selected-node annotation) and then
waits for the claim to be bound; the test completes the binding the way the PV controller (and
a provisioner) would, and the pod is bound only after that.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kopf_scheduler_workbench.controlplane import ControlPlane

from .test_operator_helpers import (
    Replica,
    create,
    deploy,
    events,
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

SELECTED_NODE = "volume.kubernetes.io/selected-node"
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"


@pytest.fixture(scope="module")
def namespace(control_plane: ControlPlane) -> str:
    return fresh_namespace(control_plane, "vol")


@pytest.fixture(scope="module")
def replica(
    control_plane: ControlPlane, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replica]:
    kubeconfig = deploy(control_plane)
    name = f"vol-{namespace}"
    with leading_replica(kubeconfig, name, [namespace], name, tmp_path_factory.mktemp("vol")) as r:
        yield r


def storage_class(name: str, provisioner: str) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": "WaitForFirstConsumer",
    }


def local_pv(
    name: str, class_name: str, node_name: str, claim: dict[str, Any] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "capacity": {"storage": "1Gi"},
        "accessModes": ["ReadWriteOnce"],
        "persistentVolumeReclaimPolicy": "Retain",
        "storageClassName": class_name,
        "local": {"path": "/mnt/data"},
        "nodeAffinity": {
            "required": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node_name]}
                        ]
                    }
                ]
            }
        },
    }
    if claim is not None:
        spec["claimRef"] = claim
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name}, "spec": spec}


def claim(name: str, namespace: str, class_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": class_name,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }


def pod_with_claim(name: str, namespace: str, claim_name: str, tag: str) -> dict[str, Any]:
    obj = pod(name, namespace, node_selector={"t": tag})
    obj["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}]
    obj["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    return obj


def patch(plane: ControlPlane, *args: str, body: dict[str, Any], status: bool = False) -> None:
    extra = ["--subresource=status"] if status else []
    plane.kubectl("patch", *args, *extra, "--type=merge", "-p", json.dumps(body))


def bind_claim(plane: ControlPlane, namespace: str, claim_name: str, pv_name: str) -> None:
    """What the PV controller does once a PV's claimRef names the claim: bind both sides."""
    patch(
        plane,
        "pvc",
        claim_name,
        "-n",
        namespace,
        body={
            "metadata": {"annotations": {BIND_COMPLETED: "yes", BOUND_BY_CONTROLLER: "yes"}},
            "spec": {"volumeName": pv_name},
        },
    )
    patch(
        plane,
        "pvc",
        claim_name,
        "-n",
        namespace,
        status=True,
        body={
            "status": {
                "phase": "Bound",
                "accessModes": ["ReadWriteOnce"],
                "capacity": {"storage": "1Gi"},
            }
        },
    )
    patch(plane, "pv", pv_name, status=True, body={"status": {"phase": "Bound"}})


def explain(plane: ControlPlane, replica: Replica, namespace: str, name: str) -> str:
    """The pod's status, events and the replica's log tail, for a failure message."""
    obj = get_or_none(plane, "pod", name, "-n", namespace) or {}
    notes = [f"{e['reason']}: {e['note']}" for e in events(plane, namespace, name)]
    return f"status={obj.get('status')}\nevents={notes}\nlog:\n{replica.logs()}"


def get_or_none(plane: ControlPlane, *args: str) -> dict[str, Any] | None:
    try:
        return dict(get_json(plane, *args))
    except subprocess.CalledProcessError:
        return None


def test_static_wait_for_first_consumer_claim_is_bound_at_scheduling_time(
    control_plane: ControlPlane, replica: Replica, namespace: str
) -> None:
    plane = control_plane
    tag = uuid.uuid4().hex[:6]
    here, there = f"vs-a-{tag}", f"vs-b-{tag}"
    sc, pv_name, pvc_name, pod_name = f"local-{tag}", f"pv-{tag}", f"data-{tag}", f"user-{tag}"
    create(plane, node(here, labels={"t": tag}), node(there, labels={"t": tag}))
    create(plane, storage_class(sc, "kubernetes.io/no-provisioner"))
    create(plane, local_pv(pv_name, sc, here), claim(pvc_name, namespace, sc))
    # The PV controller marks a new unclaimed PV Available; only those are matched to claims.
    patch(plane, "pv", pv_name, status=True, body={"status": {"phase": "Available"}})
    # Let the scheduler's watches see the volume objects first (a pod seen earlier is only retried).
    time.sleep(1.0)
    create(plane, pod_with_claim(pod_name, namespace, pvc_name, tag))

    # PreBind sets the PV's claimRef and waits: the pod is not bound while the claim is not.
    try:
        pv = wait_for(
            lambda: (p := get_or_none(plane, "pv", pv_name)) and p["spec"].get("claimRef") and p,
            30,
            what="PV claimRef set by PreBind",
        )
    except TimeoutError as exc:
        raise AssertionError(explain(plane, replica, namespace, pod_name)) from exc
    pvc = get_json(plane, "pvc", pvc_name, "-n", namespace)
    ref = pv["spec"]["claimRef"]
    assert (ref["kind"], ref["namespace"], ref["name"], ref["uid"]) == (
        "PersistentVolumeClaim",
        namespace,
        pvc_name,
        pvc["metadata"]["uid"],
    )
    assert pv["metadata"]["annotations"][BOUND_BY_CONTROLLER] == "yes"
    time.sleep(1.0)
    assert node_of(plane, namespace, pod_name) == "", "bound before its claim was bound"
    assert not pvc["spec"].get("volumeName")
    # VolumeBinding's PreBindPreFlight said PreBind has work, so the chosen node was published as
    # nominatedNodeName before PreBind started waiting (NominatedNodeNameForExpectation), as the
    # reference kube-scheduler does.
    waiting = get_json(plane, "pod", pod_name, "-n", namespace)
    assert (waiting.get("status") or {}).get("nominatedNodeName") == here

    bind_claim(plane, namespace, pvc_name, pv_name)
    assert wait_for(lambda: node_of(plane, namespace, pod_name), 30, what="pod bound") == here
    assert get_json(plane, "pvc", pvc_name, "-n", namespace)["spec"]["volumeName"] == pv_name
    bound = get_json(plane, "pod", pod_name, "-n", namespace)
    assert not (bound.get("status") or {}).get("nominatedNodeName")  # the binding cleared it


def test_dynamic_provisioning_claim_gets_the_selected_node(
    control_plane: ControlPlane, replica: Replica, namespace: str
) -> None:
    plane = control_plane
    tag = uuid.uuid4().hex[:6]
    names = [f"vd-a-{tag}", f"vd-b-{tag}"]
    sc, pv_name, pvc_name, pod_name = f"dyn-{tag}", f"pvc-{tag}", f"scratch-{tag}", f"writer-{tag}"
    create(plane, *(node(n, labels={"t": tag}) for n in names))
    create(plane, storage_class(sc, f"example.com/fake-{tag}"))
    create(plane, claim(pvc_name, namespace, sc))
    time.sleep(1.0)
    create(plane, pod_with_claim(pod_name, namespace, pvc_name, tag))

    # PreBind asks the provisioner for a volume on the chosen node and waits for the claim.
    selected = wait_for(
        lambda: (
            get_json(plane, "pvc", pvc_name, "-n", namespace)["metadata"]
            .get("annotations", {})
            .get(SELECTED_NODE)
        ),
        30,
        what="selected-node annotation",
    )
    assert selected in names
    time.sleep(1.0)
    assert node_of(plane, namespace, pod_name) == "", "bound before its claim was provisioned"

    # The provisioner: a PV on the selected node, pre-bound to the claim; then the PV controller.
    pvc = get_json(plane, "pvc", pvc_name, "-n", namespace)
    ref = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "namespace": namespace,
        "name": pvc_name,
        "uid": pvc["metadata"]["uid"],
    }
    create(plane, local_pv(pv_name, sc, selected, claim=ref))
    bind_claim(plane, namespace, pvc_name, pv_name)
    assert wait_for(lambda: node_of(plane, namespace, pod_name), 30, what="pod bound") == selected


def test_provisioner_dropping_the_selected_node_fails_prebind_and_the_pod_is_retried(
    control_plane: ControlPlane, replica: Replica, namespace: str
) -> None:
    plane = control_plane
    tag = uuid.uuid4().hex[:6]
    names = [f"vr-a-{tag}", f"vr-b-{tag}"]
    sc, pv_name, pvc_name, pod_name = f"retry-{tag}", f"pvc-r-{tag}", f"cache-{tag}", f"reader-{tag}"
    create(plane, *(node(n, labels={"t": tag}) for n in names))
    create(plane, storage_class(sc, f"example.com/flaky-{tag}"))
    pvc_obj = claim(pvc_name, namespace, sc)
    # Another annotation keeps the map non-empty once selected-node goes: "provisioning failed",
    # not "annotation reset".
    pvc_obj["metadata"]["annotations"] = {"example.com/team": tag}
    create(plane, pvc_obj)
    time.sleep(1.0)
    create(plane, pod_with_claim(pod_name, namespace, pvc_name, tag))

    def selected_node() -> str | None:
        annotations = get_json(plane, "pvc", pvc_name, "-n", namespace)["metadata"].get("annotations") or {}
        return annotations.get(SELECTED_NODE)

    first = wait_for(selected_node, 30, what="selected-node annotation")
    assert first in names
    # The provisioner cannot provision there: it removes the annotation to ask for a reschedule.
    patch(plane, "pvc", pvc_name, "-n", namespace, body={"metadata": {"annotations": {SELECTED_NODE: None}}})
    try:
        ev = wait_for(
            lambda: reason_events(plane, namespace, pod_name, "FailedScheduling"), 30, what="FailedScheduling"
        )[0]
    except TimeoutError as exc:
        raise AssertionError(explain(plane, replica, namespace, pod_name)) from exc
    assert ev["type"] == "Warning"
    assert ev["note"] == (
        f'running PreBind plugin "VolumeBinding": binding volumes: provisioning failed for PVC "{pvc_name}"'
    )
    assert node_of(plane, namespace, pod_name) == ""

    # The pod is retried (backoff) and asks again; this time the provisioner delivers.
    try:
        again = wait_for(selected_node, 30, what="selected-node annotation again")
    except TimeoutError as exc:
        raise AssertionError(explain(plane, replica, namespace, pod_name)) from exc
    assert again in names
    pvc = get_json(plane, "pvc", pvc_name, "-n", namespace)
    ref = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "namespace": namespace,
        "name": pvc_name,
        "uid": pvc["metadata"]["uid"],
    }
    create(plane, local_pv(pv_name, sc, again, claim=ref))
    bind_claim(plane, namespace, pvc_name, pv_name)
    assert wait_for(lambda: node_of(plane, namespace, pod_name), 30, what="pod bound") == again


def test_unbound_immediate_claim_is_reported_then_the_pod_binds_once_the_claim_is_bound(
    control_plane: ControlPlane, replica: Replica, namespace: str
) -> None:
    plane = control_plane
    tag = uuid.uuid4().hex[:6]
    here, there = f"vi-a-{tag}", f"vi-b-{tag}"
    sc, pv_name, pvc_name, pod_name = f"imm-{tag}", f"pv-i-{tag}", f"logs-{tag}", f"tail-{tag}"
    create(plane, node(here, labels={"t": tag}), node(there, labels={"t": tag}))
    create(plane, {**storage_class(sc, f"example.com/imm-{tag}"), "volumeBindingMode": "Immediate"})
    create(plane, claim(pvc_name, namespace, sc))
    time.sleep(1.0)
    total = len(get_json(plane, "nodes")["items"])
    create(plane, pod_with_claim(pod_name, namespace, pvc_name, tag))
    try:
        ev = wait_for(
            lambda: reason_events(plane, namespace, pod_name, "FailedScheduling"), 30, what="FailedScheduling"
        )[0]
    except TimeoutError as exc:
        raise AssertionError(explain(plane, replica, namespace, pod_name)) from exc
    # v1.37.2: VolumeBinding's PreFilter rejects as UnschedulableAndUnresolvable, so
    # DynamicResources' PreFilter never ran; its PostFilter (before DefaultPreemption) fails with
    # the missing cycle state, which ends the PostFilter phase without a preemption part.
    assert (
        ev["note"]
        == f"0/{total} nodes are available: pod has unbound immediate PersistentVolumeClaims. not found"
    )

    # The PV controller binds the claim to a PV that only `here` reaches: the claim's update
    # requeues the pod, and the bound PV's node affinity decides the node.
    pvc = get_json(plane, "pvc", pvc_name, "-n", namespace)
    ref = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "namespace": namespace,
        "name": pvc_name,
        "uid": pvc["metadata"]["uid"],
    }
    create(plane, local_pv(pv_name, sc, here, claim=ref))
    bind_claim(plane, namespace, pvc_name, pv_name)
    try:
        bound = wait_for(lambda: node_of(plane, namespace, pod_name), 30, what="pod bound")
    except TimeoutError as exc:
        raise AssertionError(explain(plane, replica, namespace, pod_name)) from exc
    assert bound == here


def csi_pv(name: str, driver: str, handle: str, claim: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "capacity": {"storage": "1Gi"},
        "accessModes": ["ReadWriteOnce"],
        "persistentVolumeReclaimPolicy": "Retain",
        "storageClassName": "",
        "csi": {"driver": driver, "volumeHandle": handle},
    }
    if claim is not None:
        spec["claimRef"] = claim
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name}, "spec": spec}


def bound_csi_claim(plane: ControlPlane, namespace: str, name: str, pv_name: str, driver: str) -> None:
    """A claim already bound (by the PV controller) to a CSI PV of ``driver``."""
    create(plane, claim(name, namespace, ""))
    uid = get_json(plane, "pvc", name, "-n", namespace)["metadata"]["uid"]
    ref = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": namespace, "name": name}
    ref["uid"] = uid
    create(plane, csi_pv(pv_name, driver, f"handle-{pv_name}", claim=ref))
    bind_claim(plane, namespace, name, pv_name)


def test_csi_driver_csi_node_and_volume_attachment_objects_decide_the_node(
    control_plane: ControlPlane, replica: Replica, namespace: str
) -> None:
    """Objects created through the API reach NodeVolumeLimits via the edge's informers (listed and
    watched as the manifests' ServiceAccount): a CSIDriver opting in to
    preventPodSchedulingIfMissing rules out the node whose CSINode lacks the driver, a
    VolumeAttachment fills a node's attach limit, and deleting it frees the node again."""
    plane = control_plane
    tag = uuid.uuid4().hex[:6]
    a, b, c = (f"vc-{x}-{tag}" for x in "abc")
    driver = f"disk-{tag}.csi.example.com"
    create(plane, node(a), node(b), node(c))
    create(
        plane,
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSIDriver",
            "metadata": {"name": driver},
            "spec": {"attachRequired": True, "preventPodSchedulingIfMissing": True},
        },
    )
    for name, drivers in ((a, [driver]), (b, [driver]), (c, [])):
        create(
            plane,
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "CSINode",
                "metadata": {"name": name},
                "spec": {
                    "drivers": [{"name": d, "nodeID": name, "allocatable": {"count": 1}} for d in drivers]
                },
            },
        )
    in_use, attachment = f"vc-in-use-{tag}", f"va-{tag}"
    create(
        plane,
        csi_pv(in_use, driver, f"handle-{in_use}"),
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "VolumeAttachment",
            "metadata": {"name": attachment},
            "spec": {"attacher": driver, "nodeName": a, "source": {"persistentVolumeName": in_use}},
        },
    )
    claims = [f"vc-data-{i}-{tag}" for i in (1, 2)]
    for i, claim_name in enumerate(claims):
        bound_csi_claim(plane, namespace, claim_name, f"vc-pv-{i}-{tag}", driver)
    time.sleep(1.0)

    def csi_pod(name: str, claim_name: str) -> dict[str, Any]:
        obj = pod(name, namespace)
        # matchFields on metadata.name (one value per term, as validation wants): NodeAffinity's
        # PreFilter narrows the search to the three nodes, so the other nodes of the shared
        # control plane share one reason in the message.
        terms = [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n]}]} for n in (a, b, c)
        ]
        obj["spec"]["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
        }
        obj["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}]
        return obj

    first, second = f"vc-first-{tag}", f"vc-second-{tag}"
    create(plane, csi_pod(first, claims[0]))
    try:
        assert wait_for(lambda: node_of(plane, namespace, first), 30, what="first pod bound") == b
    except TimeoutError as exc:
        raise AssertionError(explain(plane, replica, namespace, first)) from exc

    total = len(get_json(plane, "nodes")["items"])
    create(plane, csi_pod(second, claims[1]))
    try:
        ev = wait_for(
            lambda: reason_events(plane, namespace, second, "FailedScheduling"), 30, what="FailedScheduling"
        )[0]
    except TimeoutError as exc:
        raise AssertionError(explain(plane, replica, namespace, second)) from exc
    others = total - 3
    reasons = [f"1 {driver} CSI driver is not installed on the node", "2 node(s) exceed max volume count"]
    preemption = ["3 No preemption victims found for incoming pod"]
    if others:
        reasons.append(f"{others} node(s) didn't satisfy plugin(s) [NodeAffinity]")
        preemption.append(f"{others} Preemption is not helpful for scheduling")
    reasons.sort()
    preemption.sort()
    assert ev["note"] == (
        f"0/{total} nodes are available: {', '.join(reasons)}. "
        f"preemption: 0/{total} nodes are available: {', '.join(preemption)}."
    )

    # The attachment goes (the volume was detached): the watch's delete event requeues the pod.
    plane.kubectl("delete", "volumeattachment", attachment)
    try:
        assert wait_for(lambda: node_of(plane, namespace, second), 30, what="second pod bound") == a
    except TimeoutError as exc:
        raise AssertionError(explain(plane, replica, namespace, second)) from exc
