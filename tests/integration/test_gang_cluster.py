"""Gang scheduling on a real control plane with GenericWorkload on, beside the reference.

Ours (the example SchedulerProfile ``gang``, schedulerName ``kopf-gang``) and kube-scheduler v1.37.2
(``--feature-gates=GenericWorkload=true``, ``default-scheduler``) each get a gang of 8 pods of 800m
on their own pool of seven 1-cpu nodes: neither binds any, and both write the same words on the
pods and on the PodGroup. An eighth node in each pool lets both gangs bind whole. Killing our
scheduler while a gang binds loses nothing, and the gang ends whole (no partial gang).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kopf_scheduler.cluster.controlplane import ControlPlane
from kopf_scheduler.cluster.listing import fetch_state
from kopf_scheduler.testing.invariants import check

from .test_operator_helpers import (
    ROOT,
    Replica,
    cli,
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

OURS = "kopf-gang"
REFERENCE = "default-scheduler"


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    p = ControlPlane(workloads=True)
    try:
        p.start()
        yield p
    finally:
        p.stop()


@pytest.fixture(scope="module")
def namespace(plane: ControlPlane) -> str:
    return fresh_namespace(plane, "gang")


@pytest.fixture(scope="module")
def sa_kubeconfig(plane: ControlPlane) -> Path:
    kubeconfig = deploy(plane)
    plane.kubectl("apply", "-f", str(ROOT / "manifests" / "custom-resources" / "schedulerprofile-gang.yaml"))
    return kubeconfig


@pytest.fixture(scope="module")
def reference(
    plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[subprocess.Popen[bytes]]:
    log = (tmp_path_factory.mktemp("ref") / "kube-scheduler.log").open("wb")
    proc = subprocess.Popen(
        [
            str(plane.bin_path),
            "kube-scheduler",
            f"--kubeconfig={plane.kubeconfig}",
            "--leader-elect=false",
            "--secure-port=0",
            f"--feature-gates={plane.feature_gates()}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(10)
        log.close()


def pod_group(name: str, namespace: str, min_count: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }


def members(group: str, namespace: str, scheduler: str, pool: str, count: int = 8) -> list[dict[str, Any]]:
    out = []
    for i in range(1, count + 1):
        p = pod(f"{group}-{i}", namespace, scheduler, cpu="800m", node_selector={"pool": pool})
        p["spec"]["schedulingGroup"] = {"podGroupName": group}
        out.append(p)
    return out


def bound_count(plane: ControlPlane, namespace: str, group: str) -> int:
    pods = get_json(plane, "pods", "-n", namespace)["items"]
    return sum(
        1
        for p in pods
        if (p["spec"].get("schedulingGroup") or {}).get("podGroupName") == group and p["spec"].get("nodeName")
    )


def whole(plane: ControlPlane, namespace: str, group: str) -> Callable[[], bool | None]:
    return lambda: bound_count(plane, namespace, group) == 8 or None


def failed_messages(plane: ControlPlane, namespace: str, group: str, count: int = 8) -> dict[str, str]:
    """Member number -> the note of its first FailedScheduling event (once every member has one)."""

    def all_failed() -> dict[str, str] | None:
        out = {}
        for i in range(1, count + 1):
            evs = reason_events(plane, namespace, f"{group}-{i}", "FailedScheduling")
            if not evs:
                return None
            out[f"{i}"] = sorted(evs, key=lambda e: e["metadata"]["creationTimestamp"])[0]["note"]
        return out

    return wait_for(all_failed, 60, what=f"FailedScheduling on every member of {group}")


def initially_scheduled(plane: ControlPlane, namespace: str, group: str, status: str) -> dict[str, Any]:
    def cond() -> dict[str, Any] | None:
        raw = get_json(plane, "podgroups.scheduling.k8s.io", group, "-n", namespace)
        for c in (raw.get("status") or {}).get("conditions") or ():
            if c["type"] == "PodGroupInitiallyScheduled" and c["status"] == status:
                return dict(c)
        return None

    return wait_for(cond, 60, what=f"PodGroupInitiallyScheduled={status} on {group}")


def test_gang_on_room_for_seven_binds_none_then_all_with_an_eighth_node_as_the_reference(
    plane: ControlPlane,
    namespace: str,
    sa_kubeconfig: Path,
    reference: subprocess.Popen[bytes],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with leading_replica(sa_kubeconfig, "gang", [namespace], "gang-a", tmp_path_factory.mktemp("gang")) as r:
        pools = {OURS: "ours", REFERENCE: "ref"}
        for pool in pools.values():
            create(plane, *(node(f"{pool}-{i}", cpu="1", labels={"pool": pool}) for i in range(1, 8)))
        for scheduler, pool in pools.items():
            create(plane, pod_group(f"{pool}-g8", namespace, 8))
            create(plane, *members(f"{pool}-g8", namespace, scheduler, pool))
        ours = failed_messages(plane, namespace, "ours-g8")
        ref = failed_messages(plane, namespace, "ref-g8")
        assert bound_count(plane, namespace, "ours-g8") == 0, r.logs()
        assert bound_count(plane, namespace, "ref-g8") == 0
        # The same words, pod by pod (the one that found no node says why in its own words).
        assert sorted(ours.values()) == sorted(ref.values()), (ours, ref)
        assert (
            sum(
                m.startswith("pod group is unschedulable, minCount (8) cannot be satisfied")
                for m in ours.values()
            )
            == 7
        )
        ours_cond = initially_scheduled(plane, namespace, "ours-g8", "False")
        ref_cond = initially_scheduled(plane, namespace, "ref-g8", "False")
        for key in ("reason", "message"):
            assert ours_cond[key] == ref_cond[key], (ours_cond, ref_cond)

        for pool in pools.values():
            create(plane, node(f"{pool}-8", cpu="1", labels={"pool": pool}))
        for pool in pools.values():
            group = f"{pool}-g8"
            wait_for(whole(plane, namespace, group), 60, what=f"{group} bound")
            assert initially_scheduled(plane, namespace, f"{pool}-g8", "True")["reason"] == "Scheduled"
        report = check(fetch_state(str(plane.kubeconfig)), [OURS], namespaces=[namespace])
        assert report.ok, report.summary()


def test_killing_the_scheduler_mid_gang_leaves_no_partial_gang(
    plane: ControlPlane, namespace: str, sa_kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    logs = tmp_path_factory.mktemp("gang-kill")
    create(plane, *(node(f"kill-{i}", cpu="1", labels={"pool": "kill"}) for i in range(1, 9)))
    r = Replica(sa_kubeconfig, "gang-kill", [namespace], "gang-kill-a", logs)
    try:
        wait_for(lambda: r.ready() and r.leading(), 60, what=f"replica ready:\n{r.logs()}")
        create(plane, pod_group("kill-g8", namespace, 8))
        create(plane, *members("kill-g8", namespace, OURS, "kill"))
        # Killed right after the group cycle succeeds, while its binds are being sent.
        attempts = "scheduler_podgroup_schedule_attempts_total"
        wait_for(lambda: r.metric(attempts, 'result="scheduled"') or None, 60, 0.005, "the group cycle")
    finally:
        r.kill()  # SIGKILL: binds in flight die with it
    at_kill = bound_count(plane, namespace, "kill-g8")
    print(f"members bound right after the scheduler was killed: {at_kill} of 8")
    with leading_replica(sa_kubeconfig, "gang-kill", [namespace], "gang-kill-b", logs):
        wait_for(
            lambda: bound_count(plane, namespace, "kill-g8") == 8 or None, 90, what="the gang bound whole"
        )
        report = check(fetch_state(str(plane.kubeconfig)), [OURS], namespaces=[namespace])
        assert report.ok, report.summary()


def test_a_gang_that_cannot_make_it_stops_early_with_the_references_words(
    plane: ControlPlane,
    namespace: str,
    sa_kubeconfig: Path,
    reference: subprocess.Popen[bytes],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """minCount 3, four members, room for one: the cycle ends after the third member (1 placed,
    1 left); the fourth is never tried and says so in the reference's words."""
    with leading_replica(sa_kubeconfig, "gang", [namespace], "gang-c", tmp_path_factory.mktemp("gang-c")):
        pools = {OURS: "ours-early", REFERENCE: "ref-early"}
        for pool in pools.values():
            create(plane, node(f"{pool}-1", cpu="1", labels={"pool": pool}))
        # Members first, their PodGroup last: the group is let in with all four at once (with the
        # group first, a cycle may start after the third member, as it may in the reference).
        for scheduler, pool in pools.items():
            create(plane, *members(pool, namespace, scheduler, pool, count=4))
        for pool in pools.values():
            create(plane, pod_group(pool, namespace, 3))
        ours = failed_messages(plane, namespace, "ours-early", 4)
        ref = failed_messages(plane, namespace, "ref-early", 4)
        assert ours == ref, (ours, ref)
        assert ours["4"] == "minCount (3) cannot be satisfied: 1 scheduled, 1 remaining"
        assert bound_count(plane, namespace, "ours-early") == 0


def test_simulate_from_cluster_says_why_a_gang_member_waits(plane: ControlPlane, sa_kubeconfig: Path) -> None:
    """Read-only what-if on the live cluster: the listing carries the PodGroups, and a member of a
    gang short of minCount is shown held by GangScheduling (the cluster itself says nothing)."""
    ns = fresh_namespace(plane, "gang-whatif")  # no replica serves it: its pods stay pending
    create(plane, pod_group("short", ns, 3))
    create(plane, *members("short", ns, OURS, "none", count=2))
    out = cli(plane, "simulate", "--from-cluster", "-o", "json")
    rows = {p["name"]: p for p in json.loads(out)["pods"] if p["namespace"] == ns}
    waiting = (
        "not attempted: GangScheduling: waiting for minCount pods from a gang to appear in scheduling queue"
    )
    assert {rows[f"short-{i}"]["now"]["message"] for i in (1, 2)} == {waiting}, rows
