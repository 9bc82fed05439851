"""Topology spread and inter-pod anti-affinity on the real control plane (``kopf-scheduler run``).

This module runs its own etcd + kube-apiserver: the ``0/N nodes are available`` message counts
every node in the cluster, and the session plane holds other modules' nodes (tainted, cordoned,
unlabelled) that would change it. Each test deletes its nodes when done, so the next one starts
from an empty node list.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
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
    pod,
    reason_events,
    wait_for,
)

pytestmark = pytest.mark.integration

ZONE = "topology.kubernetes.io/zone"


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    own = ControlPlane()
    try:
        own.start()
        yield own
    finally:
        own.stop()


@pytest.fixture(scope="module")
def namespace(plane: ControlPlane) -> str:
    return fresh_namespace(plane, "aff")


@pytest.fixture(scope="module")
def replica(
    plane: ControlPlane, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replica]:
    kubeconfig = deploy(plane)
    name = f"aff-{namespace}"
    with leading_replica(kubeconfig, name, [namespace], name, tmp_path_factory.mktemp("aff")) as r:
        yield r


@pytest.fixture
def nodes(plane: ControlPlane, namespace: str) -> Iterator[list[str]]:
    """Names of the nodes a test creates; they and the namespace's pods are deleted afterwards."""
    names: list[str] = []
    yield names
    plane.kubectl("delete", "pods", "--all", "-n", namespace, "--grace-period=0", "--force", "--wait=false")
    if names:
        plane.kubectl("delete", "node", "--wait=false", *names)


def zoned_nodes(tag: str, zones: int, per_zone: int) -> list[dict[str, Any]]:
    return [
        node(f"z{z}-n{i}-{tag}", labels={ZONE: f"zone-{z}-{tag}"})
        for z in range(zones)
        for i in range(per_zone)
    ]


def labelled_pod(name: str, namespace: str, labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    obj = pod(name, namespace)
    obj["metadata"]["labels"] = labels
    obj["spec"].update(spec)
    return obj


def assignments(plane: ControlPlane, namespace: str, selector: str) -> dict[str, str]:
    items = get_json(plane, "pods", "-n", namespace, "-l", selector)["items"]
    return {p["metadata"]["name"]: p["spec"].get("nodeName") or "" for p in items}


def all_bound(plane: ControlPlane, namespace: str, selector: str, count: int) -> dict[str, str] | None:
    """Pod name -> node once exactly ``count`` pods match and all are bound, else None."""
    placed = assignments(plane, namespace, selector)
    return placed if len(placed) == count and all(placed.values()) else None


def zone_of(plane: ControlPlane) -> dict[str, str]:
    return {
        n["metadata"]["name"]: n["metadata"]["labels"].get(ZONE, "")
        for n in get_json(plane, "nodes")["items"]
    }


def pod_scheduled(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any] | None:
    obj = get_json(plane, "pod", name, "-n", namespace)
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond["type"] == "PodScheduled":
            return dict(cond)
    return None


def test_zone_spread_do_not_schedule_places_three_per_zone(
    plane: ControlPlane, replica: Replica, namespace: str, nodes: list[str]
) -> None:
    tag = uuid.uuid4().hex[:6]
    objs = zoned_nodes(tag, zones=3, per_zone=2)
    nodes.extend(o["metadata"]["name"] for o in objs)
    create(plane, *objs)
    labels = {"app": f"spread-{tag}"}
    constraint = {
        "maxSkew": 1,
        "topologyKey": ZONE,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": labels},
    }
    create(
        plane,
        *(
            labelled_pod(f"s{i}-{tag}", namespace, labels, topologySpreadConstraints=[constraint])
            for i in range(9)
        ),
    )
    selector = f"app=spread-{tag}"
    placed = wait_for(
        lambda: all_bound(plane, namespace, selector, 9),
        45,
        what="all 9 spread pods bound",
    )
    zones = zone_of(plane)
    per_zone = Counter(zones[n] for n in placed.values())
    assert per_zone == {f"zone-{z}-{tag}": 3 for z in range(3)}, placed
    assert set(placed.values()) <= set(nodes)


def test_anti_affinity_runs_out_of_zones_then_binds_when_a_peer_goes(
    plane: ControlPlane, replica: Replica, namespace: str, nodes: list[str]
) -> None:
    tag = uuid.uuid4().hex[:6]
    objs = zoned_nodes(tag, zones=3, per_zone=1)
    nodes.extend(o["metadata"]["name"] for o in objs)
    create(plane, *objs)
    total = len(get_json(plane, "nodes")["items"])
    assert total == 3, "nodes of an earlier test are still there; the message would differ"
    labels = {"app": f"anti-{tag}"}
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": labels}, "topologyKey": ZONE}
            ]
        }
    }
    names = [f"a{i}-{tag}" for i in range(3)]
    create(plane, *(labelled_pod(n, namespace, labels, affinity=anti) for n in names))
    selector = f"app=anti-{tag}"
    placed = wait_for(
        lambda: all_bound(plane, namespace, selector, 3),
        30,
        what="three anti-affine pods bound",
    )
    zones = zone_of(plane)
    assert len({zones[n] for n in placed.values()}) == 3, placed

    fourth = f"a3-{tag}"
    create(plane, labelled_pod(fourth, namespace, labels, affinity=anti))
    ev = wait_for(
        lambda: reason_events(plane, namespace, fourth, "FailedScheduling"), 30, what="FailedScheduling"
    )[0]
    expected = (
        "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules. "
        "preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
    )
    assert ev["type"] == "Warning"
    assert ev["note"] == expected
    cond = wait_for(lambda: pod_scheduled(plane, namespace, fourth), 15, what="PodScheduled condition")
    assert cond["status"] == "False"
    assert cond["reason"] == "Unschedulable"
    assert cond["message"] == expected
    assert assignments(plane, namespace, selector)[fourth] == ""

    # One peer goes: its zone frees up, and the pod binds there on the delete event, long before
    # the unschedulable pool's 5-minute flush.
    gone = names[0]
    freed_zone = zones[placed[gone]]
    started = time.monotonic()
    # A bound pod's deletion is graceful and only its kubelet would finish it; no kubelet runs
    # here, so delete it the way the kubelet's final delete does (grace period 0).
    plane.kubectl("delete", "pod", gone, "-n", namespace, "--grace-period=0", "--force", "--wait=false")
    bound = wait_for(
        lambda: assignments(plane, namespace, selector).get(fourth), 20, interval=0.1, what="fourth bound"
    )
    elapsed = time.monotonic() - started
    assert elapsed < 20
    assert zones[bound] == freed_zone
    final = assignments(plane, namespace, selector)
    assert gone not in final
    assert len({zones[n] for n in final.values()}) == 3, final
