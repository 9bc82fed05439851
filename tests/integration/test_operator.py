"""The operator against the real control plane, running as the manifests' ServiceAccount.

No kubelet runs: bound pods stay Pending, which is all these tests need (``spec.nodeName``).
Each test uses its own namespace and node labels, so other tests' nodes and pods only add noise.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from kopf_scheduler_workbench.controlplane import ControlPlane

from .test_operator_helpers import (
    ROOT,
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


@pytest.fixture(scope="module")
def sa_kubeconfig(control_plane: ControlPlane) -> Path:
    return deploy(control_plane)


@pytest.fixture(scope="module")
def namespace(control_plane: ControlPlane) -> str:
    return fresh_namespace(control_plane, "ops")


@pytest.fixture(scope="module")
def replica(
    control_plane: ControlPlane, sa_kubeconfig: Path, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replica]:
    log_dir = tmp_path_factory.mktemp("replica")
    with leading_replica(sa_kubeconfig, f"ops-{namespace}", [namespace], f"single-{namespace}", log_dir) as r:
        yield r


def _profile(name: str, scheduler: str, strategy: str) -> dict[str, object]:
    return {
        "apiVersion": "kopfscheduler.io/v1alpha1",
        "kind": "SchedulerProfile",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": scheduler,
            "plugins": {"score": {"disabled": [{"name": "NodeResourcesBalancedAllocation"}]}},
            "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": strategy}}}],
        },
    }


def _ready(plane: ControlPlane, name: str) -> dict[str, Any]:
    obj = get_json(plane, "schedulerprofile", name)
    conds = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or ()}
    ready = conds.get("Ready")
    if ready and obj["status"].get("observedGeneration") == obj["metadata"]["generation"]:
        return {**ready, "status_": obj["status"], "generation": obj["metadata"]["generation"]}
    return {}


def test_manifests_are_accepted_by_the_apiserver(control_plane: ControlPlane, sa_kubeconfig: Path) -> None:
    out = control_plane.kubectl("apply", "-f", str(ROOT / "crds"), "-f", str(ROOT / "manifests"))
    assert "deployment.apps/kopf-scheduler" in out
    assert "clusterrole.rbac.authorization.k8s.io/kopf-scheduler" in out
    out = control_plane.kubectl("apply", "-f", str(ROOT / "manifests" / "custom-resources"))
    assert "schedulerprofile.kopfscheduler.io/binpack" in out
    dep = get_json(control_plane, "deployment", "kopf-scheduler", "-n", "kopf-scheduler")
    assert dep["spec"]["replicas"] == 2
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["requests"]


@pytest.mark.parametrize(
    ("verb", "resource", "allowed"),
    [
        ("create", "pods --subresource=binding", True),
        ("patch", "pods --subresource=status", True),
        ("delete", "pods", True),
        ("create", "events.events.k8s.io", True),
        ("watch", "nodes", True),
        ("list", "persistentvolumeclaims", True),
        ("watch", "csidrivers.storage.k8s.io", True),  # NodeVolumeLimits, VolumeBinding (v1.37)
        ("watch", "volumeattachments.storage.k8s.io", True),
        ("watch", "csistoragecapacities.storage.k8s.io", True),
        ("create", "volumeattachments.storage.k8s.io", False),
        ("watch", "replicasets.apps", True),  # PodTopologySpread's system-default selector
        ("list", "services", True),
        ("update", "resourceclaims.resource.k8s.io", True),  # DynamicResources PreBind
        ("update", "resourceclaims.resource.k8s.io --subresource=status", True),
        ("update", "resourceclaims.resource.k8s.io --subresource=binding", True),
        ("watch", "resourceslices.resource.k8s.io", True),
        ("watch", "devicetaintrules.resource.k8s.io", True),
        ("create", "resourceclaims.resource.k8s.io", True),  # DRAExtendedResource claims
        ("delete", "resourceclaims.resource.k8s.io", True),
        ("update", "resourceslices.resource.k8s.io", False),
        ("create", "services", False),
        ("patch", "schedulerprofiles.kopfscheduler.io --subresource=status", True),
        ("patch", "clusterkopfpeerings.kopf.dev", True),
        ("get", "clusterkopfpeerings.kopf.dev", True),  # leader election reads before it writes
        ("create", "pods", False),
        ("update", "pods", False),
        ("patch", "pods", False),
        ("patch", "nodes", False),
        ("get", "secrets", False),
        ("list", "configmaps", False),
        ("patch", "schedulerprofiles.kopfscheduler.io", False),
        ("delete", "schedulerprofiles.kopfscheduler.io", False),
        ("create", "events", False),  # core/v1 events: we post events.k8s.io/v1 only
        ("update", "pods --subresource=status", False),
    ],
)
def test_service_account_has_least_privilege(
    control_plane: ControlPlane, sa_kubeconfig: Path, verb: str, resource: str, allowed: bool
) -> None:
    try:
        answer = control_plane.kubectl(
            "auth", "can-i", verb, *resource.split(), "-A", kubeconfig=sa_kubeconfig
        )
    except subprocess.CalledProcessError as exc:  # `can-i` exits 1 for "no"
        answer = exc.stdout
    assert answer.strip() == ("yes" if allowed else "no")


def test_pods_are_bound_with_events_and_conditions(
    control_plane: ControlPlane, replica: Replica, namespace: str
) -> None:
    tag = uuid.uuid4().hex[:6]
    create(control_plane, node(f"bind-a-{tag}", labels={"t": tag}), node(f"bind-b-{tag}", labels={"t": tag}))
    names = [f"p{i}-{tag}" for i in range(6)]
    create(control_plane, *(pod(n, namespace, node_selector={"t": tag}) for n in names))
    for name in names:
        assigned = wait_for(partial(node_of, control_plane, namespace, name), 30, what=name)
        assert assigned in (f"bind-a-{tag}", f"bind-b-{tag}")
        evs = wait_for(
            partial(reason_events, control_plane, namespace, name, "Scheduled"),
            15,
            what=f"Scheduled event of {name}",
        )
        assert len(evs) == 1
        ev = evs[0]
        assert ev["type"] == "Normal"
        assert ev["reportingController"] == "kopf-scheduler"
        assert ev["action"] == "Binding"
        assert ev["note"] == f"Successfully assigned {namespace}/{name} to {assigned}"
    # The apiserver's binding sets PodScheduled=True itself; we never wrote a False condition.
    conds = {
        c["type"]: c
        for c in get_json(control_plane, "pod", names[0], "-n", namespace)["status"]["conditions"]
    }
    assert conds["PodScheduled"]["status"] == "True"
    assert replica.metric("scheduler_schedule_attempts_total", 'result="scheduled"') >= len(names)


def test_unschedulable_pod_reports_and_binds_when_a_node_fits(
    control_plane: ControlPlane, replica: Replica, namespace: str
) -> None:
    tag = uuid.uuid4().hex[:6]
    name = f"big-{tag}"
    create(control_plane, pod(name, namespace, cpu="500"))
    ev = wait_for(
        lambda: [e for e in events(control_plane, namespace, name) if e["reason"] == "FailedScheduling"],
        30,
        what="FailedScheduling",
    )[0]
    assert ev["type"] == "Warning" and ev["action"] == "Scheduling"
    assert ev["reportingController"] == "kopf-scheduler"
    assert ev["note"].startswith("0/") and " nodes are available: " in ev["note"]
    assert "Insufficient cpu" in ev["note"]
    cond = wait_for(
        lambda: next(
            (
                c
                for c in get_json(control_plane, "pod", name, "-n", namespace)["status"].get("conditions")
                or ()
                if c["type"] == "PodScheduled"
            ),
            None,
        ),
        15,
    )
    assert cond["status"] == "False" and cond["reason"] == "Unschedulable"
    assert cond["message"] == ev["note"]
    # A node that fits arrives: the NodeAdd event moves the pod out of the unschedulable pool.
    create(control_plane, node(f"huge-{tag}", cpu="1000"))
    assert (
        wait_for(lambda: node_of(control_plane, namespace, name), 30, what="bind after node add")
        == f"huge-{tag}"
    )


def test_profile_edits_change_placement_live_and_invalid_edits_keep_the_last_valid(
    control_plane: ControlPlane, replica: Replica, namespace: str
) -> None:
    tag = uuid.uuid4().hex[:6]
    scheduler = f"live-{tag}"
    busy, idle = f"busy-{tag}", f"idle-{tag}"
    create(control_plane, node(busy, labels={"t": tag}), node(idle, labels={"t": tag}))
    # Half of `busy` is taken by a pod bound directly (another scheduler's pod still counts).
    create(control_plane, pod(f"filler-{tag}", namespace, scheduler="other", cpu="4", node_name=busy))
    create(control_plane, _profile(f"prof-{tag}", scheduler, "LeastAllocated"))
    ready = wait_for(lambda: _ready(control_plane, f"prof-{tag}"), 30, what="profile Ready")
    assert ready["status"] == "True"
    assert ready["status_"]["scoreStrategy"] == "LeastAllocated"
    printed = control_plane.kubectl("get", "schedulerprofile", f"prof-{tag}")
    assert scheduler in printed and "LeastAllocated" in printed and "True" in printed

    def place(name: str) -> str:
        create(control_plane, pod(name, namespace, scheduler=scheduler, cpu="1", node_selector={"t": tag}))
        return str(wait_for(lambda: node_of(control_plane, namespace, name), 30, what=name))

    assert place(f"least-{tag}") == idle

    patch = {
        "spec": {
            "pluginConfig": [
                {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}}
            ]
        }
    }
    control_plane.kubectl("patch", "schedulerprofile", f"prof-{tag}", "--type=merge", "-p", json.dumps(patch))
    ready = wait_for(
        lambda: (
            (r := _ready(control_plane, f"prof-{tag}"))
            and r["status_"]["scoreStrategy"] == "MostAllocated"
            and r
        ),
        30,
        what="MostAllocated in force",
    )
    generation = ready["generation"]
    assert place(f"most-{tag}") == busy

    bad = {
        "spec": {
            "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "Sideways"}}}]
        }
    }
    control_plane.kubectl("patch", "schedulerprofile", f"prof-{tag}", "--type=merge", "-p", json.dumps(bad))
    invalid = wait_for(
        lambda: (r := _ready(control_plane, f"prof-{tag}")) and r["status"] == "False" and r,
        30,
        what="invalid",
    )
    assert invalid["reason"] == "InvalidProfile"
    assert "spec.pluginConfig[0].args" in str(invalid["message"])
    status = invalid["status_"]
    assert status["activeGeneration"] == generation
    assert status["scoreStrategy"] == "MostAllocated"
    printed = control_plane.kubectl("get", "schedulerprofile", f"prof-{tag}")
    assert "False" in printed
    # The last valid version (MostAllocated) still schedules.
    assert place(f"still-most-{tag}") == busy

    # Deleting the profile stops scheduling for that name: the next pod stays pending.
    control_plane.kubectl("delete", "schedulerprofile", f"prof-{tag}")
    time.sleep(2)
    create(
        control_plane, pod(f"orphan-{tag}", namespace, scheduler=scheduler, cpu="1", node_selector={"t": tag})
    )
    time.sleep(3)
    assert node_of(control_plane, namespace, f"orphan-{tag}") == ""


def test_default_profile_serves_without_any_resource(
    control_plane: ControlPlane, replica: Replica, namespace: str
) -> None:
    profiles = get_json(control_plane, "schedulerprofiles")["items"]
    assert all(p["spec"]["schedulerName"] != "kopf-scheduler" for p in profiles)
    name = f"default-{uuid.uuid4().hex[:6]}"
    create(control_plane, pod(name, namespace))
    assert wait_for(lambda: node_of(control_plane, namespace, name), 30, what=name)
