"""NominatedNodeNameForExpectation on the real apiserver: the engine, with a Permit plugin that
holds the pod, writes ``status.nominatedNodeName`` through the real ClusterClient before it waits;
the apiserver's binding then clears it (ClearingNominatedNodeNameAfterBinding), and a rejected
wait clears it with the FailedScheduling."""

from __future__ import annotations

import asyncio
import random
import uuid
from typing import Any

import pytest

from kopf_scheduler.api.objects import Pod, parse_node, parse_pod
from kopf_scheduler.cluster.apiclient import ApiClient
from kopf_scheduler.cluster.client import KubeClusterClient
from kopf_scheduler.cluster.connection import from_kubeconfig
from kopf_scheduler.engine import new_engine
from kopf_scheduler.framework.interface import Code, CycleState, Plugin, Status
from kopf_scheduler.framework.profiles import load_profile
from kopf_scheduler.framework.registry import Registry
from kopf_scheduler.plugins.default_binder import DefaultBinder
from kopf_scheduler_workbench.controlplane import ControlPlane

from .test_operator_helpers import create, fresh_namespace, get_json, node, pod

pytestmark = pytest.mark.integration


class Hold(Plugin):
    name = "Hold"

    def permit(self, state: CycleState, p: Pod, node_name: str) -> tuple[Status | None, float]:
        return Status(Code.WAIT), 60.0


class Sort(Plugin):
    name = "Sort"

    def less(self, a: Any, b: Any) -> bool:
        return bool(a.timestamp < b.timestamp)


REG = Registry({"Sort": Sort, "Hold": Hold, "DefaultBinder": DefaultBinder})
SCHEDULER = "nnn-test"  # no operator of another test module takes these pods
SPEC = {
    "schedulerName": SCHEDULER,
    "plugins": {
        "multiPoint": {
            "enabled": [{"name": "Sort"}, {"name": "Hold"}, {"name": "DefaultBinder"}],
            "disabled": [{"name": "*"}],
        }
    },
}


async def hold_then(plane: ControlPlane, namespace: str, verdict: str) -> tuple[str, dict[str, Any]]:
    """Schedule one pod that Permit holds; return the nomination seen while it waits, and the pod after."""
    tag = uuid.uuid4().hex[:6]
    node_name, pod_name = f"hold-{tag}", f"held-{tag}"
    create(plane, node(node_name, labels={"t": tag}))
    create(plane, pod(pod_name, namespace, scheduler=SCHEDULER, cpu="100m", node_selector={"t": tag}))
    raw_pod = get_json(plane, "pod", pod_name, "-n", namespace)
    api = ApiClient(from_kubeconfig(plane.kubeconfig))
    client = KubeClusterClient(api)
    engine = new_engine(
        client, [load_profile(SPEC, REG)], registry=REG, rng=random.Random(0), with_default=False
    )
    sched, cache, queue = engine.scheduler, engine.cache, engine.queue
    cache.add_node(parse_node(get_json(plane, "node", node_name)))
    held = parse_pod(raw_pod)
    queue.add(held)
    try:
        assert await sched.schedule_one()
        fw = sched.profiles.frameworks[SCHEDULER]
        seen = ""
        for _ in range(200):
            await asyncio.sleep(0.05)
            status = get_json(plane, "pod", pod_name, "-n", namespace).get("status") or {}
            seen = status.get("nominatedNodeName") or ""
            if seen:
                break
        waiting = fw.get_waiting_pod(held.uid)
        assert waiting is not None
        if verdict == "allow":
            waiting.allow("Hold")
        else:
            waiting.reject("Hold", "held back")
        await sched.wait_for_bindings()
    finally:
        await api.close()
    after = get_json(plane, "pod", pod_name, "-n", namespace)
    return seen if seen != node_name else "the node", after


def test_the_chosen_node_is_nominated_while_permit_holds_the_pod(control_plane: ControlPlane) -> None:
    ns = fresh_namespace(control_plane, "nnn")
    seen, after = asyncio.run(hold_then(control_plane, ns, "allow"))
    assert seen == "the node"
    assert after["spec"].get("nodeName")
    assert not (after.get("status") or {}).get("nominatedNodeName")  # the binding cleared it


def test_a_rejected_wait_clears_the_nomination(control_plane: ControlPlane) -> None:
    ns = fresh_namespace(control_plane, "nnn")
    seen, after = asyncio.run(hold_then(control_plane, ns, "reject"))
    assert seen == "the node"
    assert not after["spec"].get("nodeName")
    status = after.get("status") or {}
    assert not status.get("nominatedNodeName"), status
    cond = next(c for c in status.get("conditions") or () if c["type"] == "PodScheduled")
    assert (cond["reason"], cond["message"]) == ("Unschedulable", "0/1 nodes are available: 1 held back.")
