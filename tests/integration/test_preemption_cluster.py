"""DefaultPreemption on the real control plane: victims, nomination, then the bind.

The fillers are bound directly (``spec.nodeName``) so the test decides what runs where; their
priorities come from PriorityClasses through the apiserver's Priority admission plugin. No kubelet
runs: a bound pod's deletion is graceful and waits for its kubelet, so the test plays the kubelet
and finishes the deletion of pods marked for deletion (grace period 0).
"""

from __future__ import annotations

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


@pytest.fixture(scope="module")
def namespace(control_plane: ControlPlane) -> str:
    return fresh_namespace(control_plane, "pre")


@pytest.fixture(scope="module")
def replica(
    control_plane: ControlPlane, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replica]:
    kubeconfig = deploy(control_plane)
    name = f"pre-{namespace}"
    with leading_replica(kubeconfig, name, [namespace], name, tmp_path_factory.mktemp("pre")) as r:
        yield r


@pytest.fixture(scope="module")
def classes(control_plane: ControlPlane) -> dict[str, str]:
    """PriorityClass names by role: low=100, mid=500, high=1000, never=1000 with preemptionPolicy Never."""
    tag = uuid.uuid4().hex[:6]
    names = {"low": f"low-{tag}", "mid": f"mid-{tag}", "high": f"high-{tag}", "never": f"never-{tag}"}
    values = {"low": 100, "mid": 500, "high": 1000, "never": 1000}
    objs: list[dict[str, Any]] = []
    for role, name in names.items():
        obj: dict[str, Any] = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": values[role],
        }
        if role == "never":
            obj["preemptionPolicy"] = "Never"
        objs.append(obj)
    create(control_plane, *objs)
    return names


def prio_pod(
    name: str, namespace: str, priority_class: str, cpu: str, tag: str, node_name: str | None = None
) -> dict[str, Any]:
    obj = pod(name, namespace, cpu=cpu, node_selector={"t": tag}, node_name=node_name)
    obj["spec"]["priorityClassName"] = priority_class
    if node_name:
        obj["spec"]["schedulerName"] = "other"  # placed by the test, not scheduled
    return obj


def get_or_none(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return dict(get_json(plane, "pod", name, "-n", namespace))
    except subprocess.CalledProcessError as exc:
        if "NotFound" in exc.stderr:
            return None
        raise


def condition(obj: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond["type"] == ctype:
            return dict(cond)
    return None


def explain(plane: ControlPlane, replica: Replica, namespace: str, name: str) -> str:
    obj = get_or_none(plane, namespace, name) or {}
    notes = [f"{e['reason']}: {e['note']}" for e in events(plane, namespace, name)]
    return f"status={obj.get('status')}\nevents={notes}\nlog:\n{replica.logs()}"


def test_preemption_evicts_the_fewest_lowest_priority_pods_then_binds_on_the_nominated_node(
    control_plane: ControlPlane, replica: Replica, namespace: str, classes: dict[str, str]
) -> None:
    plane = control_plane
    tag = uuid.uuid4().hex[:6]
    a, b = f"pa-{tag}", f"pb-{tag}"
    create(plane, node(a, cpu="2", labels={"t": tag}), node(b, cpu="2", labels={"t": tag}))
    # Node a: two low (0.5 cpu each) + one mid (1 cpu); node b: two mid (1 cpu each). Both full
    # for a 1-cpu pod. On a, evicting both lows suffices (the mid is reprieved); on b one mid must
    # go. The reference prefers the node whose highest-priority victim is lowest: a.
    low1, low2, mid_a = f"low1-{tag}", f"low2-{tag}", f"mida-{tag}"
    mid_b1, mid_b2 = f"midb1-{tag}", f"midb2-{tag}"
    create(
        plane,
        prio_pod(low1, namespace, classes["low"], "500m", tag, node_name=a),
        prio_pod(low2, namespace, classes["low"], "500m", tag, node_name=a),
        prio_pod(mid_a, namespace, classes["mid"], "1", tag, node_name=a),
        prio_pod(mid_b1, namespace, classes["mid"], "1", tag, node_name=b),
        prio_pod(mid_b2, namespace, classes["mid"], "1", tag, node_name=b),
    )
    assert get_json(plane, "pod", low1, "-n", namespace)["spec"]["priority"] == 100
    time.sleep(1.0)  # let the scheduler's cache see the fillers

    preemptor = f"urgent-{tag}"
    create(plane, prio_pod(preemptor, namespace, classes["high"], "1", tag))
    assert get_json(plane, "pod", preemptor, "-n", namespace)["spec"]["priority"] == 1000

    # The victims are marked (DisruptionTarget) and deleted; no kubelet, so they stay terminating.
    def terminating() -> list[str]:
        items = get_json(plane, "pods", "-n", namespace)["items"]
        return sorted(p["metadata"]["name"] for p in items if p["metadata"].get("deletionTimestamp"))

    try:
        wait_for(lambda: len(terminating()) >= 2, 30, what="victims deleted")
        nominated = wait_for(
            lambda: (get_json(plane, "pod", preemptor, "-n", namespace).get("status") or {}).get(
                "nominatedNodeName"
            ),
            15,
            what="nominatedNodeName",
        )
    except TimeoutError as exc:
        raise AssertionError(explain(plane, replica, namespace, preemptor)) from exc
    assert nominated == a
    # v1.37.2: the preemptor's note and PodScheduled message end with the PostFilter's success.
    success = f". preemption: found a potential placement for pod on node {a}, preempting 2 victims"
    notes = [e["note"] for e in reason_events(plane, namespace, preemptor, "FailedScheduling")]
    assert notes and notes[0].startswith("0/") and notes[0].endswith(success), notes
    # (later attempts, while the victims terminate, say "not eligible due to a terminating pod")
    cond = condition(get_json(plane, "pod", preemptor, "-n", namespace), "PodScheduled")
    assert cond is not None and cond["reason"] == "Unschedulable", cond
    assert cond["message"] in [
        e["note"] for e in reason_events(plane, namespace, preemptor, "FailedScheduling")
    ]
    time.sleep(1.0)  # a wrong extra victim would show up now
    assert terminating() == sorted([low1, low2])
    for victim in (low1, low2):
        obj = get_json(plane, "pod", victim, "-n", namespace)
        cond = condition(obj, "DisruptionTarget")
        assert cond is not None, obj.get("status")
        assert cond["status"] == "True"
        assert cond["reason"] == "PreemptionByScheduler"
        assert cond["message"] == "kopf-scheduler: preempting to accommodate a higher priority pod"
        preempted = reason_events(plane, namespace, victim, "Preempted")
        assert preempted, f"no Preempted event for {victim}"
    # The preemptor waits for its victims to be gone: they still hold the node's cpu.
    assert node_of(plane, namespace, preemptor) == ""
    # A lower-priority pod arriving meanwhile must not take the room reserved by the nomination,
    # nor preempt anyone for it (the terminating lows are already spoken for, mids are its peers).
    late = f"late-{tag}"
    create(plane, prio_pod(late, namespace, classes["mid"], "1", tag))
    wait_for(lambda: reason_events(plane, namespace, late, "FailedScheduling"), 30, what="late rejected")

    # The kubelet finishes the deletions; the preemptor then binds to the node it was nominated to.
    started = time.monotonic()
    plane.kubectl("delete", "pod", low1, low2, "-n", namespace, "--grace-period=0", "--force", "--wait=false")
    try:
        bound = wait_for(
            lambda: node_of(plane, namespace, preemptor), 20, interval=0.1, what="preemptor bound"
        )
    except TimeoutError as exc:
        raise AssertionError(explain(plane, replica, namespace, preemptor)) from exc
    assert bound == a
    # The apiserver's binding clears the nomination; nothing of ours may write it back afterwards.
    time.sleep(1.0)
    status = get_json(plane, "pod", preemptor, "-n", namespace).get("status") or {}
    assert not status.get("nominatedNodeName"), status
    assert time.monotonic() - started < 20
    time.sleep(1.0)
    assert node_of(plane, namespace, late) == "", "the late pod took the nominated node's room"
    for survivor in (mid_a, mid_b1, mid_b2):
        obj = get_json(plane, "pod", survivor, "-n", namespace)
        assert not obj["metadata"].get("deletionTimestamp"), survivor
        assert condition(obj, "DisruptionTarget") is None, survivor


def test_preemption_policy_never_reports_and_evicts_nobody(
    control_plane: ControlPlane, replica: Replica, namespace: str, classes: dict[str, str]
) -> None:
    plane = control_plane
    tag = uuid.uuid4().hex[:6]
    names = [f"nv-a-{tag}", f"nv-b-{tag}"]
    create(plane, *(node(n, cpu="1", labels={"t": tag}) for n in names))
    fillers = [f"fill{i}-{tag}" for i in range(2)]
    create(
        plane,
        *(
            prio_pod(f, namespace, classes["low"], "1", tag, node_name=n)
            for f, n in zip(fillers, names, strict=True)
        ),
    )
    time.sleep(1.0)
    polite = f"polite-{tag}"
    create(plane, prio_pod(polite, namespace, classes["never"], "1", tag))
    spec = get_json(plane, "pod", polite, "-n", namespace)["spec"]
    assert (spec["priority"], spec["preemptionPolicy"]) == (1000, "Never")

    try:
        ev = wait_for(
            lambda: reason_events(plane, namespace, polite, "FailedScheduling"), 30, what="FailedScheduling"
        )[0]
    except TimeoutError as exc:
        raise AssertionError(explain(plane, replica, namespace, polite)) from exc
    note = ev["note"]
    assert note.startswith("0/") and " nodes are available: " in note, note
    assert "2 Insufficient cpu" in note, note
    assert note.endswith(". preemption: not eligible due to preemptionPolicy=Never."), note
    cond = wait_for(
        lambda: condition(get_json(plane, "pod", polite, "-n", namespace), "PodScheduled"),
        15,
        what="condition",
    )
    assert (cond["status"], cond["reason"], cond["message"]) == ("False", "Unschedulable", note)

    time.sleep(2.0)  # an eviction, if any, would have been sent by now
    for filler in fillers:
        obj = get_json(plane, "pod", filler, "-n", namespace)
        assert not obj["metadata"].get("deletionTimestamp"), filler
        assert condition(obj, "DisruptionTarget") is None, filler
    status = get_json(plane, "pod", polite, "-n", namespace).get("status") or {}
    assert not status.get("nominatedNodeName")
    assert node_of(plane, namespace, polite) == ""
