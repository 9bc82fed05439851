"""Gang scheduling on a real control plane with GenericWorkload on, beside the reference.

Ours (the example SchedulerProfile ``gang``, schedulerName ``kopf-gang``) and kube-scheduler v1.37.2
(``--feature-gates=GenericWorkload=true``, ``default-scheduler``) each get a gang of 8 pods of 800m
on their own pool of seven 1-cpu nodes: neither binds any, and both write the same words on the
pods and on the PodGroup. An eighth node in each pool lets both gangs bind whole. Killing our
scheduler while a gang binds loses nothing, and the gang ends whole (no partial gang).
"""

from __future__ import annotations

import functools
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kopf_scheduler_workbench.clusterstate import fetch_state
from kopf_scheduler_workbench.controlplane import ControlPlane
from kopf_scheduler_workbench.testing.invariants import check

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


# The note when DynamicResources' PodGroupPostFilter finds no pod-group state: no member reached its
# PreFilter in the group's cycle.
DRA_GROUP_STATE_NOT_FOUND = 'error in "DynamicResources" PodGroupPostFilter plugins: not found'


def turned_away_early(ours: dict[str, str], ref: dict[str, str]) -> bool:
    """Whether a side's group cycle ended before any member reached DynamicResources' PreFilter
    (DRA_GROUP_STATE_NOT_FOUND) in a case built so that none does: the reference did, now and then in
    a loaded run, never on replay (its members let in before its GangScheduling saw them all?). That
    run says nothing of what the case compares, so it is run again on fresh objects; a side that does
    it every time fails the comparison after the last attempt."""
    raced = any(DRA_GROUP_STATE_NOT_FOUND in note for note in (*ours.values(), *ref.values()))
    if raced:
        print(f"a group cycle ended before DynamicResources' PreFilter: {ours} / {ref}; again")
    return raced


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
    1 left); the fourth is never tried and says so in the reference's words. (Run again on fresh
    pools, twice at most, when a side's cycle ended before DynamicResources' PreFilter:
    ``turned_away_early``.)"""
    with leading_replica(sa_kubeconfig, "gang", [namespace], "gang-c", tmp_path_factory.mktemp("gang-c")):
        for attempt in range(3):
            pools = {OURS: f"ours-early{attempt}", REFERENCE: f"ref-early{attempt}"}
            for pool in pools.values():
                create(plane, node(f"{pool}-1", cpu="1", labels={"pool": pool}))
            # Members first, their PodGroup last: the group is let in with all four at once (with the
            # group first, a cycle may start after the third member, as it may in the reference).
            for scheduler, pool in pools.items():
                create(plane, *members(pool, namespace, scheduler, pool, count=4))
            for pool in pools.values():
                create(plane, pod_group(pool, namespace, 3))
            ours = failed_messages(plane, namespace, pools[OURS], 4)
            ref = failed_messages(plane, namespace, pools[REFERENCE], 4)
            if not turned_away_early(ours, ref):
                break
        assert ours == ref, (ours, ref)
        assert ours["4"] == "minCount (3) cannot be satisfied: 1 scheduled, 1 remaining"
        assert bound_count(plane, namespace, pools[OURS]) == 0


def test_a_gang_turned_away_before_dynamic_resources_prefilter_errs_as_the_reference(
    plane: ControlPlane,
    namespace: str,
    sa_kubeconfig: Path,
    reference: subprocess.Popen[bytes],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Both members of a gang of two name a PVC that does not exist: VolumeBinding's PreFilter turns
    the first away before DynamicResources' PreFilter runs, PlacementFeasible then rules the group
    out, and DynamicResources' PodGroupPostFilter finds no pod-group state. Both schedulers give
    every member, and the PodGroup, that error."""
    with leading_replica(sa_kubeconfig, "gang", [namespace], "gang-d", tmp_path_factory.mktemp("gang-d")):
        pools = {OURS: "ours-nopvc", REFERENCE: "ref-nopvc"}
        for pool in pools.values():
            create(plane, node(f"{pool}-1", cpu="4", labels={"pool": pool}))
        for scheduler, pool in pools.items():
            gang = members(pool, namespace, scheduler, pool, count=2)
            for m in gang:
                m["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "missing"}}]
            create(plane, *gang)
        for pool in pools.values():
            create(plane, pod_group(pool, namespace, 2))
        ours = failed_messages(plane, namespace, "ours-nopvc", 2)
        ref = failed_messages(plane, namespace, "ref-nopvc", 2)
        assert ours == ref == {"1": DRA_GROUP_STATE_NOT_FOUND, "2": DRA_GROUP_STATE_NOT_FOUND}, (ours, ref)
        ours_cond = initially_scheduled(plane, namespace, "ours-nopvc", "False")
        ref_cond = initially_scheduled(plane, namespace, "ref-nopvc", "False")
        assert ours_cond["reason"] == ref_cond["reason"] == "SchedulerError", (ours_cond, ref_cond)
        assert ours_cond["message"] == ref_cond["message"] == DRA_GROUP_STATE_NOT_FOUND


def test_a_pod_deleted_before_its_cycle_is_skipped_in_the_references_words(
    plane: ControlPlane,
    namespace: str,
    sa_kubeconfig: Path,
    reference: subprocess.Popen[bytes],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """skipPodSchedule: a pod held by a finalizer is deleted while a scheduling gate keeps it out
    of the queue, then ungated; both schedulers pop it, place it nowhere and tell so in one Warning
    event, ``skip schedule deleting pod: ns/name``, with no PodScheduled condition."""
    names = {OURS: "ours-leaving", REFERENCE: "ref-leaving"}
    hold = '[{"op": "remove", "path": "/metadata/finalizers"}]'
    with leading_replica(sa_kubeconfig, "gang", [namespace], "skip-d", tmp_path_factory.mktemp("skip-d")):
        try:
            for scheduler, name in names.items():
                p = pod(name, namespace, scheduler)
                p["metadata"]["finalizers"] = ["kopfscheduler.io/test-hold"]
                p["spec"]["schedulingGates"] = [{"name": "kopfscheduler.io/test-gate"}]
                create(plane, p)
                plane.kubectl("delete", "pod", name, "-n", namespace, "--wait=false")
                ungate = '[{"op": "remove", "path": "/spec/schedulingGates"}]'
                plane.kubectl("patch", "pod", name, "-n", namespace, "--type=json", "-p", ungate)

            def skipped(name: str) -> list[str] | None:
                return [e["note"] for e in reason_events(plane, namespace, name, "FailedScheduling")] or None

            notes = {
                scheduler: wait_for(functools.partial(skipped, name), 60, what=f"FailedScheduling on {name}")
                for scheduler, name in names.items()
            }
            written = {}
            for scheduler, name in names.items():
                assert notes[scheduler] == [f"skip schedule deleting pod: {namespace}/{name}"], notes
                raw = get_json(plane, "pod", name, "-n", namespace)
                assert not raw["spec"].get("nodeName")
                written[scheduler] = [
                    (c["status"], c.get("reason"), c.get("message"))
                    for c in (raw.get("status") or {}).get("conditions") or []
                    if c["type"] == "PodScheduled"
                ]
            # Neither wrote a condition: what is there is the apiserver's, from when the gate was on.
            gated = [("False", "SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates")]
            assert written[OURS] == written[REFERENCE] == gated, written
        finally:
            for name in names.values():
                plane.kubectl("patch", "pod", name, "-n", namespace, "--type=json", "-p", hold)


def test_a_gangs_claim_unavailable_where_its_member_was_tried_is_deallocated_as_the_reference(
    plane: ControlPlane,
    namespace: str,
    sa_kubeconfig: Path,
    reference: subprocess.Popen[bytes],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Gangs with DRA claims: each member of a gang of two has its own claim, allocated on a node
    that is gone. The first member is tried and fails there, PlacementFeasible rules the group out,
    and DynamicResources' PodGroupPostFilter deallocates the first member's claim (the only member
    that reached its PreFilter); the second's claim is left as it was. Both schedulers alike."""

    def claim(name: str) -> dict[str, Any]:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gone"}}]}},
        }

    def allocate(name: str, device: str) -> None:
        result = {"request": "gpu", "driver": "gone.example.com", "pool": "gone", "device": device}
        allocation = {
            "devices": {"results": [result]},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gone"]}]}
                ]
            },
        }
        body = json.dumps({"status": {"allocation": allocation}})
        status = ("--subresource=status", "--type=merge", "-p", body)
        plane.kubectl("patch", "resourceclaim", name, "-n", namespace, *status)

    def allocated(name: str) -> bool:
        raw = get_json(plane, "resourceclaim", name, "-n", namespace)
        return bool((raw.get("status") or {}).get("allocation"))

    with leading_replica(sa_kubeconfig, "gang", [namespace], "gang-e", tmp_path_factory.mktemp("gang-e")):
        for attempt in range(3):  # see turned_away_early
            pools = {OURS: f"ours-claims{attempt}", REFERENCE: f"ref-claims{attempt}"}
            for pool in pools.values():
                create(plane, node(f"{pool}-1", cpu="4", labels={"pool": pool}))
                for i in (1, 2):
                    create(plane, claim(f"{pool}-{i}"))
                    allocate(f"{pool}-{i}", f"{pool}-{i}")
            for scheduler, pool in pools.items():
                gang = members(pool, namespace, scheduler, pool, count=2)
                for i, m in enumerate(gang, 1):
                    m["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"{pool}-{i}"}]
                    m["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
                create(plane, *gang)
            for pool in pools.values():
                create(plane, pod_group(pool, namespace, 2))
            ours = failed_messages(plane, namespace, pools[OURS], 2)
            ref = failed_messages(plane, namespace, pools[REFERENCE], 2)
            if not turned_away_early(ours, ref):
                break
        assert ours == ref, (ours, ref)
        assert ours["2"] == "minCount (2) cannot be satisfied: 0 scheduled, 1 remaining", ours
        for pool in pools.values():
            wait_for(lambda pool=pool: not allocated(f"{pool}-1") or None, 30, what=f"{pool}-1 deallocated")
        time.sleep(2.0)  # a later cycle tries the first member again: the second's claim stays
        assert [allocated(f"{pool}-2") for pool in pools.values()] == [True, True]
        assert [bound_count(plane, namespace, pool) for pool in pools.values()] == [0, 0]


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


def test_a_gang_preempts_what_it_needs_cluster_wide_as_the_reference(
    plane: ControlPlane,
    namespace: str,
    sa_kubeconfig: Path,
    reference: subprocess.Popen[bytes],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Workload-aware preemption, ours and the reference side by side on twin pools: four 1-cpu
    nodes each run a low-priority 600m unit (three pods and one member of a ``disruptionMode: all``
    PodGroup whose other member is on a 500m node the gang cannot use), a fifth node runs a 500m
    pod of the gang's own priority. A gang of four 800m members preempts the three pods and the
    whole low group (five victims, the one on the unused node too), is nominated to the four
    nodes, and binds there once the victims are gone (the test plays the kubelet)."""
    tag = namespace.rsplit("-", 1)[-1]
    low, high = f"gang-low-{tag}", f"gang-high-{tag}"
    create(
        plane,
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": low},
            "value": 100,
        },
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": high},
            "value": 1000,
        },
    )

    def placed(name: str, node_name: str, cpu: str, cls: str, group: str = "") -> dict[str, Any]:
        p = pod(name, namespace, "other", cpu=cpu, node_name=node_name)
        p["spec"]["priorityClassName"] = cls
        if group:
            p["spec"]["schedulingGroup"] = {"podGroupName": group}
        return p

    pools = {OURS: "ours-pre", REFERENCE: "ref-pre"}
    with leading_replica(
        sa_kubeconfig, "gang", [namespace], "gang-p", tmp_path_factory.mktemp("gang-p")
    ) as r:
        for pool in pools.values():
            nodes = [node(f"{pool}-n{i}", cpu="1", labels={"pool": pool}) for i in range(1, 6)]
            nodes.append(node(f"{pool}-n6", cpu="500m", labels={"pool": pool}))
            create(plane, *nodes)
            lg = pod_group(f"{pool}-lg", namespace, 1)
            lg["spec"] = {
                "schedulingPolicy": {"basic": {}},
                "disruptionMode": {"all": {}},
                "priorityClassName": low,
            }
            create(plane, lg)
            create(
                plane,
                *(placed(f"{pool}-low-{i}", f"{pool}-n{i}", "600m", low) for i in range(1, 4)),
                placed(f"{pool}-lg-1", f"{pool}-n4", "600m", low, f"{pool}-lg"),
                placed(f"{pool}-lg-2", f"{pool}-n6", "200m", low, f"{pool}-lg"),
                placed(f"{pool}-peer", f"{pool}-n5", "500m", high),
            )
        for scheduler, pool in pools.items():
            gang = members(f"{pool}-hi", namespace, scheduler, pool, count=4)
            for m in gang:
                m["spec"]["priorityClassName"] = high
            create(plane, *gang)
        for pool in pools.values():
            g = pod_group(f"{pool}-hi", namespace, 4)
            g["spec"]["priorityClassName"] = high
            create(plane, g)

        def victims(pool: str) -> list[str] | None:
            pods = get_json(plane, "pods", "-n", namespace)["items"]
            out = sorted(
                p["metadata"]["name"].removeprefix(pool + "-")
                for p in pods
                if p["metadata"]["name"].startswith(pool) and p["metadata"].get("deletionTimestamp")
            )
            return out if len(out) == 5 else None

        def group_message(group: str, needle: str) -> str | None:
            cond = initially_scheduled(plane, namespace, group, "False")
            return str(cond["message"]) if needle in cond["message"] else None

        # The group's condition first says what it preempts: the same words from both.
        needle = "preempting 5 victims"
        said = {
            pool: wait_for(
                lambda pool=pool: group_message(f"{pool}-hi", needle), 60, 0.1, f"{pool}: {needle}"
            )
            for pool in pools.values()
        }
        assert said["ours-pre"] == said["ref-pre"], said
        # Retried while the victims still terminate, ours says it waits for them. (So did the
        # reference when this test ran alone; in a full run it did not always retry within a
        # minute, even after a node was added, so it is not waited for here.)
        ongoing = "minCount (4) cannot be satisfied: 0 scheduled, 3 remaining, pod group preemption: "
        ongoing += "ongoing preemption on nominated nodes"
        assert wait_for(lambda: group_message("ours-pre-hi", "ongoing"), 60, 0.1, "ours: ongoing") == ongoing
        expected = ["lg-1", "lg-2", "low-1", "low-2", "low-3"]
        for pool in pools.values():
            assert wait_for(lambda pool=pool: victims(pool), 60, what=f"{pool} victims") == expected, r.logs()
        ours = failed_messages(plane, namespace, "ours-pre-hi", 4)
        ref = failed_messages(plane, namespace, "ref-pre-hi", 4)
        assert sorted(ours.values()) == sorted(ref.values()), (ours, ref)

        def nominated(pool: str) -> dict[str, str] | None:
            pods = get_json(plane, "pods", "-n", namespace)["items"]
            out = {
                p["metadata"]["name"]: (p.get("status") or {}).get("nominatedNodeName", "")
                for p in pods
                if p["metadata"]["name"].startswith(f"{pool}-hi-")
            }
            return out if all(out.values()) and len(out) == 4 else None

        noms = {
            pool: wait_for(lambda pool=pool: nominated(pool), 60, what=f"{pool} nominated")
            for pool in pools.values()
        }
        for pool, n in noms.items():
            assert sorted(v.removeprefix(pool + "-") for v in n.values()) == ["n1", "n2", "n3", "n4"], n
        # The kubelet finishes the deletions; both gangs then bind whole where they were nominated.
        for pool in pools.values():
            gone = [f"{pool}-{v}" for v in expected]
            plane.kubectl(
                "delete", "pod", *gone, "-n", namespace, "--grace-period=0", "--force", "--wait=false"
            )
        for pool in pools.values():
            group = f"{pool}-hi"
            wait_for(
                lambda group=group: bound_count(plane, namespace, group) == 4 or None,
                90,
                what=f"{group} bound",
            )
            pods = get_json(plane, "pods", "-n", namespace)["items"]
            bound = {
                p["metadata"]["name"]: p["spec"].get("nodeName")
                for p in pods
                if p["metadata"]["name"].startswith(group + "-")
            }
            assert bound == noms[pool], (bound, noms[pool])
        report = check(fetch_state(str(plane.kubeconfig)), [OURS], namespaces=[namespace])
        assert report.ok, report.summary()
