"""VolumeZone, after the reference's volume_zone_test.go."""

from __future__ import annotations

import pytest
from _volume_helpers import FakeHandle, node_info, objects, pod_with, pod_with_claims, pv, pvc, view
from _volume_helpers import storage_class as sc

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.framework.interface import (
    ActionType,
    Code,
    CycleState,
    EventResource,
    QueueingHint,
    Status,
)
from kopf_scheduler.framework.types import NodeInfo
from kopf_scheduler.plugins.volume_zone import VolumeZone

BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
CONFLICT = Status.unresolvable("node(s) had no available volume zone")

PVS = [
    pv("Vol_1", labels={BETA_ZONE: "us-west1-a"}),
    pv("Vol_2", labels={BETA_REGION: "us-west1-b", "uselessLabel": "none"}),
    pv("Vol_3", labels={BETA_REGION: "us-west1-c"}),
    pv("Vol_Multi", labels={BETA_ZONE: "us-west1-a__us-west1-b"}),
    pv("Vol_Invalid", labels={BETA_ZONE: "us-west1-a__"}),
    pv("Vol_GA", labels={ZONE: "us-west1-a", REGION: "us-west1"}),
]
PVCS = [
    pvc("PVC_1", bound_pv="Vol_1"),
    pvc("PVC_2", bound_pv="Vol_2"),
    pvc("PVC_3", bound_pv="Vol_3"),
    pvc("PVC_Multi", bound_pv="Vol_Multi"),
    pvc("PVC_Invalid", bound_pv="Vol_Invalid"),
    pvc("PVC_GA", bound_pv="Vol_GA"),
    pvc("PVC_NoPV", bound_pv="Vol_Not_Exist"),
    pvc("PVC_Wait", "wait-sc"),
    pvc("PVC_Immediate", "immediate-sc"),
    pvc("PVC_NoClass"),
    pvc("PVC_NoSuchClass", "no-such-sc"),
]
CLASSES = [sc("wait-sc", "WaitForFirstConsumer"), sc("immediate-sc", "Immediate")]


def _run(pod: Pod, node: NodeInfo) -> tuple[Status | None, Status | None]:
    plugin = VolumeZone(None, FakeHandle(objects=objects(PVCS, PVS, CLASSES)))
    state = CycleState()
    _, pre = plugin.pre_filter(state, pod, [node])
    if pre is not None:
        return pre, None
    return None, plugin.filter(state, pod, node)


FILTER_CASES = [
    ("pod without volume", pod_with("p"), {BETA_ZONE: "us-west1-a"}, None),
    ("node without labels", pod_with_claims("PVC_1"), {}, None),
    ("beta zone matched", pod_with_claims("PVC_1"), {BETA_ZONE: "us-west1-a", "uselessLabel": "none"}, None),
    (
        "beta region matched",
        pod_with_claims("PVC_2"),
        {BETA_REGION: "us-west1-b", "uselessLabel": "none"},
        None,
    ),
    ("beta zone failed", pod_with_claims("PVC_1"), {BETA_ZONE: "us-west1-b"}, CONFLICT),
    ("beta region failed", pod_with_claims("PVC_2"), {BETA_REGION: "no_us-west1-b"}, CONFLICT),
    ("node labels lack the key", pod_with_claims("PVC_1"), {BETA_REGION: "us-west1"}, CONFLICT),
    ("multi-zone PV matches either zone", pod_with_claims("PVC_Multi"), {BETA_ZONE: "us-west1-b"}, None),
    ("multi-zone PV, other zone", pod_with_claims("PVC_Multi"), {BETA_ZONE: "us-west1-c"}, CONFLICT),
    ("beta PV label matched by GA node label", pod_with_claims("PVC_1"), {ZONE: "us-west1-a"}, None),
    ("beta PV label vs GA node label mismatch", pod_with_claims("PVC_1"), {ZONE: "us-west1-b"}, CONFLICT),
    ("GA PV labels matched", pod_with_claims("PVC_GA"), {ZONE: "us-west1-a", REGION: "us-west1"}, None),
    ("GA PV labels vs beta node labels", pod_with_claims("PVC_GA"), {BETA_ZONE: "us-west1-a"}, CONFLICT),
    (
        "two PVs, both satisfied",
        pod_with_claims("PVC_1", "PVC_2"),
        {BETA_ZONE: "us-west1-a", BETA_REGION: "us-west1-b"},
        None,
    ),
    (
        "two PVs, one fails",
        pod_with_claims("PVC_1", "PVC_3"),
        {BETA_ZONE: "us-west1-a", BETA_REGION: "us-west1-b"},
        CONFLICT,
    ),
]


@pytest.mark.parametrize(
    ("name", "pod", "node_labels", "want"), FILTER_CASES, ids=[c[0] for c in FILTER_CASES]
)
def test_filter(name: str, pod: Pod, node_labels: dict[str, str], want: Status | None) -> None:
    pre, got = _run(pod, node_info("host1", node_labels))
    if pre is not None:  # nothing zonal to check
        assert pre.code == Code.SKIP
        assert want is None
        return
    assert got == want


PRE_FILTER_CASES = [
    (
        "claim not found",
        pod_with_claims("PVC_NotExist"),
        Status.unresolvable('persistentvolumeclaim "PVC_NotExist" not found'),
    ),
    (
        "PV not found",
        pod_with_claims("PVC_NoPV"),
        Status.unresolvable('persistentvolume "Vol_Not_Exist" not found'),
    ),
    (
        "unbound Immediate claim",
        pod_with_claims("PVC_Immediate"),
        Status.unresolvable("PersistentVolume had no name"),
    ),
    (
        "unbound claim without class",
        pod_with_claims("PVC_NoClass"),
        Status.unresolvable("PersistentVolumeClaim had no pv name and storageClass name"),
    ),
    (
        "unknown class",
        pod_with_claims("PVC_NoSuchClass"),
        Status.unresolvable('storageclass.storage.k8s.io "no-such-sc" not found'),
    ),
    ("unbound WaitForFirstConsumer claim is skipped", pod_with_claims("PVC_Wait"), Status(Code.SKIP)),
    ("invalid zone label is ignored", pod_with_claims("PVC_Invalid"), Status(Code.SKIP)),
]


@pytest.mark.parametrize(("name", "pod", "want"), PRE_FILTER_CASES, ids=[c[0] for c in PRE_FILTER_CASES])
def test_pre_filter(name: str, pod: Pod, want: Status) -> None:
    pre, _ = _run(pod, node_info("host1", {BETA_ZONE: "us-west1-a"}))
    assert pre == want
    assert pre is not None and pre.code == want.code


def test_wait_claim_next_to_zonal_claim_still_checks_the_zonal_one() -> None:
    _, got = _run(pod_with_claims("PVC_Wait", "PVC_1"), node_info("host1", {BETA_ZONE: "us-west1-b"}))
    assert got == CONFLICT


def test_filter_without_pre_filter_state_recomputes() -> None:
    plugin = VolumeZone(None, FakeHandle(objects=objects(PVCS, PVS, CLASSES)))
    pod = pod_with_claims("PVC_1")
    assert plugin.filter(CycleState(), pod, node_info("h", {BETA_ZONE: "us-west1-b"})) == CONFLICT
    assert plugin.filter(CycleState(), pod, node_info("h", {BETA_ZONE: "us-west1-a"})) is None


def test_events_and_hints() -> None:
    plugin = VolumeZone(None, FakeHandle())
    events = {(e.event.resource, e.event.action): e.hint for e in plugin.events_to_register()}
    assert (EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL) in events
    pod = pod_with_claims("PVC_1")
    pvc_hint = events[(EventResource.PVC, ActionType.ADD | ActionType.UPDATE)]
    assert pvc_hint is not None
    assert pvc_hint(pod, None, view(pvc("PVC_1"))) == QueueingHint.QUEUE
    assert pvc_hint(pod, None, view(pvc("PVC_1", namespace="other"))) == QueueingHint.QUEUE_SKIP
    assert pvc_hint(pod, None, view(pvc("PVC_2"))) == QueueingHint.QUEUE_SKIP
    sc_hint = events[(EventResource.STORAGE_CLASS, ActionType.ADD)]
    assert sc_hint is not None
    assert sc_hint(pod, None, view(sc("w", "WaitForFirstConsumer"))) == QueueingHint.QUEUE
    assert sc_hint(pod, None, view(sc("i", "Immediate"))) == QueueingHint.QUEUE_SKIP
    pv_hint = events[(EventResource.PV, ActionType.ADD | ActionType.UPDATE)]
    assert pv_hint is not None
    assert pv_hint(pod, None, view(PVS[0])) == QueueingHint.QUEUE
    relabelled = pv("Vol_1", labels={BETA_ZONE: "us-west1-b"})
    assert pv_hint(pod, view(PVS[0]), view(relabelled)) == QueueingHint.QUEUE
    assert (
        pv_hint(pod, view(PVS[0]), view(pv("Vol_1", labels={BETA_ZONE: "us-west1-a", "x": "y"})))
        == QueueingHint.QUEUE_SKIP
    )
