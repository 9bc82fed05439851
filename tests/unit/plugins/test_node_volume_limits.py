"""NodeVolumeLimits (CSI), after the reference's v1.37.2 csi_test.go (limits from CSINode only,
migration GA, VolumeAttachments counted, VolumeLimitScaling's driver check)."""

from __future__ import annotations

from typing import Any

import pytest
from _volume_helpers import FakeHandle, csi_node, node_info, objects, pod_with, pod_with_claims, pv, pvc, view
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
from kopf_scheduler.plugins.node_volume_limits import NodeVolumeLimits

EBS = "ebs.csi.aws.com"
GCE = "pd.csi.storage.gke.io"
EXCEEDED = Status.unschedulable("node(s) exceed max volume count")


def _world() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Claims named like the reference's fakes: csi-<driver>-<i> bound to a PV of that driver."""
    pvcs, pvs = [], []
    for driver in (EBS, GCE):
        for i in range(4):
            pvs.append(pv(f"pv-{driver}-{i}", csi=(driver, f"{driver}-vol-{i}")))
            pvcs.append(pvc(f"csi-{driver}-{i}", "csi-sc", bound_pv=f"pv-{driver}-{i}"))
    for i in range(3):  # in-tree EBS PVs
        pvs.append(pv(f"pv-intree-{i}", source={"awsElasticBlockStore": {"volumeID": f"aws-vol-{i}"}}))
        pvcs.append(pvc(f"intree-{i}", "csi-sc", bound_pv=f"pv-intree-{i}"))
    pvs.append(pv("pv-hostpath", source={"hostPath": {"path": "/tmp"}}))
    pvcs.append(pvc("hostpath-0", "csi-sc", bound_pv="pv-hostpath"))
    pvcs.append(pvc("pending", "csi-sc"))  # unbound: counted through its class
    pvcs.append(pvc("missing-pv", "csi-sc", bound_pv="pv-gone"))  # PV gone: counted through its class
    pvcs.append(pvc("no-sc", None))  # unbound without class: not counted
    return pvcs, pvs, [sc("csi-sc", "WaitForFirstConsumer", provisioner=EBS)]


running = pod_with_claims(f"csi-{EBS}-3", name="running", node_name="node-a")
pending_pod = pod_with_claims("pending", name="pending-1", node_name="node-a")
pending_pod_2 = pod_with_claims("pending", name="pending-2", node_name="node-a")
missing_pv_pod = pod_with_claims("missing-pv", name="missing", node_name="node-a")
no_sc_pod = pod_with_claims("no-sc", name="nosc", node_name="node-a")
gce_two = pod_with_claims(f"csi-{GCE}-1", f"csi-{GCE}-2", name="gce2", node_name="node-a")
ebs_one = pod_with_claims(f"csi-{EBS}-0", name="ebs1")
ebs_two = pod_with_claims(f"csi-{EBS}-1", f"csi-{EBS}-2", name="ebs2", node_name="node-a")
in_tree_one = pod_with_claims("intree-0", name="it1")
in_tree_two = pod_with_claims("intree-1", "intree-2", name="it2", node_name="node-a")
hostpath_pod = pod_with_claims("hostpath-0", name="hp")
inline_ebs = pod_with("inline", {"name": "v", "awsElasticBlockStore": {"volumeID": "aws-inline1"}})
inline_same_id = pod_with("inline2", {"name": "v", "awsElasticBlockStore": {"volumeID": f"{EBS}-vol-1"}})


CASES: list[tuple[str, Pod, list[Pod], dict[str, int | None] | None, Status | None]] = [
    ("fits when node volume limit >= new pods CSI volume", ebs_one, [running, ebs_two], {EBS: 4}, None),
    ("doesn't when node volume limit <= pods CSI volume", ebs_one, [running, ebs_two], {EBS: 2}, EXCEEDED),
    ("should when driver does not support volume limits", ebs_one, [running, ebs_two], {EBS: None}, None),
    ("count pending PVCs towards volume limit", ebs_one, [pending_pod, ebs_two], {EBS: 2}, EXCEEDED),
    ("count multiple pending pvcs once", ebs_one, [pending_pod, pending_pod_2, ebs_two], {EBS: 4}, None),
    (
        "should count PVCs with invalid PV name but valid SC",
        ebs_one,
        [missing_pv_pod, ebs_two],
        {EBS: 2},
        EXCEEDED,
    ),
    ("don't count pvcs with missing SC", ebs_one, [running, no_sc_pod], {EBS: 2}, None),
    (
        "count pvcs with the same type towards volume limit",
        ebs_one,
        [gce_two, ebs_two],
        {EBS: 2, GCE: 2},
        EXCEEDED,
    ),
    ("don't count pvcs with different type", gce_two, [ebs_two, running], {EBS: 2, GCE: 2}, None),
    ("should count in-tree volumes if migration is enabled", in_tree_one, [in_tree_two], {EBS: 2}, EXCEEDED),
    (
        "should count unbound in-tree volumes if migration is enabled",
        pending_pod,
        [in_tree_two],
        {EBS: 2},
        EXCEEDED,
    ),
    (
        "should not limit pod if volume used does not report limits",
        in_tree_one,
        [in_tree_two],
        {EBS: None},
        None,
    ),
    ("should not count non-migratable in-tree volumes", hostpath_pod, [ebs_two], {EBS: 2}, None),
    (
        "should count in-tree inline volumes if migration is enabled",
        inline_ebs,
        [in_tree_two],
        {EBS: 2},
        EXCEEDED,
    ),
    ("in-tree and csi volumes count together", in_tree_one, [ebs_two], {EBS: 2}, EXCEEDED),
    ("in-tree, inline and csi volumes", inline_ebs, [ebs_two, in_tree_one], {EBS: 3}, EXCEEDED),
    (
        "inline volume with a CSI handle already attached",
        inline_same_id,
        [ebs_two, in_tree_one],
        {EBS: 3},
        None,
    ),
    ("csi volumes count against in-tree ones", ebs_one, [in_tree_two], {EBS: 2}, EXCEEDED),
    ("no CSINode: no limits", ebs_one, [running, ebs_two], None, None),
]


@pytest.mark.parametrize(("name", "pod", "existing", "drivers", "want"), CASES, ids=[c[0] for c in CASES])
def test_csi_limits(
    name: str,
    pod: Pod,
    existing: list[Pod],
    drivers: dict[str, int | None] | None,
    want: Status | None,
) -> None:
    pvcs, pvs, classes = _world()
    nodes = [csi_node("node-a", drivers)] if drivers is not None else []
    plugin = NodeVolumeLimits(None, FakeHandle(objects=objects(pvcs, pvs, classes, nodes)))
    info = node_info("node-a", pods=existing)
    _, pre = plugin.pre_filter(CycleState(), pod, [info])
    assert pre is None
    assert plugin.filter(CycleState(), pod, info) == want


def test_in_tree_counted_without_migration_annotation() -> None:
    """Migration is GA: any node with a CSINode counts in-tree EBS against the EBS driver."""
    pvcs, pvs, classes = _world()
    handle = FakeHandle(objects=objects(pvcs, pvs, classes, [csi_node("node-a", {EBS: 2})]))
    plugin = NodeVolumeLimits(None, handle)
    assert plugin.filter(CycleState(), in_tree_one, node_info("node-a", pods=[in_tree_two])) == EXCEEDED
    # Without a CSINode nothing is migrated (and there are no limits anyway).
    bare = NodeVolumeLimits(None, FakeHandle(objects=objects(pvcs, pvs, classes)))
    assert bare.filter(CycleState(), in_tree_one, node_info("node-a", pods=[in_tree_two])) is None


def test_node_allocatable_attach_limit_is_ignored() -> None:
    """Since the attach-limit allocatable was dropped, only CSINode counts limit volumes."""
    pvcs, pvs, classes = _world()
    plugin = NodeVolumeLimits(None, FakeHandle(objects=objects(pvcs, pvs, classes)))
    info = node_info("node-a", pods=[running, ebs_two], extra={f"attachable-volumes-csi-{EBS}": "1"})
    assert plugin.filter(CycleState(), ebs_one, info) is None


def test_portworx_in_tree_volumes_count_against_their_driver() -> None:
    px = "pxd.portworx.com"
    inline = pod_with("px1", {"name": "v", "portworxVolume": {"volumeID": "px-1"}})
    on_node = pod_with("px2", {"name": "v", "portworxVolume": {"volumeID": "px-2"}}, node_name="node-a")
    plugin = NodeVolumeLimits(None, FakeHandle(objects=objects(csi_nodes=[csi_node("node-a", {px: 1})])))
    assert plugin.pre_filter(CycleState(), inline, []) == (None, None)
    assert plugin.filter(CycleState(), inline, node_info("node-a", pods=[on_node])) == EXCEEDED
    same = pod_with("px3", {"name": "v", "portworxVolume": {"volumeID": "px-2"}})
    assert plugin.filter(CycleState(), same, node_info("node-a", pods=[on_node])) is None


def volume_attachment(name: str, node: str, attacher: str, pv_name: str | None) -> Any:
    source = {"persistentVolumeName": pv_name} if pv_name is not None else {}
    return view(
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "VolumeAttachment",
            "metadata": {"name": name},
            "spec": {"nodeName": node, "attacher": attacher, "source": source},
        }
    )


@pytest.mark.parametrize(
    ("name", "va_count", "want"),
    [
        ("should count VolumeAttachments towards volume limit when no pods exist", 2, EXCEEDED),
        ("should schedule pod when VolumeAttachments count does not exceed limit", 1, None),
    ],
)
def test_volume_attachments_count(name: str, va_count: int, want: Status | None) -> None:
    pvcs, pvs, classes = _world()
    handle = FakeHandle(objects=objects(pvcs, pvs, classes, [csi_node("node-a", {EBS: 2})]))
    # Attachments of other volumes of the driver (pv-...-1 and -2), so they add to ebs_one's -0.
    handle.objects["VolumeAttachment"] = {
        f"va-{i}": volume_attachment(f"va-{i}", "node-a", EBS, f"pv-{EBS}-{i + 1}") for i in range(va_count)
    }
    plugin = NodeVolumeLimits(None, handle)
    state = CycleState()
    assert plugin.pre_filter(state, ebs_one, []) == (None, None)
    assert plugin.filter(state, ebs_one, node_info("node-a")) == want
    assert plugin.filter(CycleState(), ebs_one, node_info("node-a")) == want  # without PreFilter


def test_volume_attachments_not_counted_twice_or_when_unusable() -> None:
    pvcs, pvs, classes = _world()
    handle = FakeHandle(objects=objects(pvcs, pvs, classes, [csi_node("node-a", {EBS: 3})]))
    handle.objects["VolumeAttachment"] = {
        # the volume ebs_two's pod already holds: attached once
        "same": volume_attachment("same", "node-a", EBS, f"pv-{EBS}-1"),
        "other-node": volume_attachment("other-node", "node-b", EBS, f"pv-{EBS}-3"),
        "no-attacher": volume_attachment("no-attacher", "node-a", "", f"pv-{EBS}-3"),
        "no-pv-name": volume_attachment("no-pv-name", "node-a", EBS, None),
        "missing-pv": volume_attachment("missing-pv", "node-a", EBS, "pv-gone"),
        "not-csi": volume_attachment("not-csi", "node-a", EBS, "pv-hostpath"),
    }
    plugin = NodeVolumeLimits(None, handle)
    assert plugin.filter(CycleState(), ebs_one, node_info("node-a", pods=[ebs_two])) is None
    handle.objects["VolumeAttachment"]["real"] = volume_attachment("real", "node-a", EBS, f"pv-{EBS}-3")
    assert plugin.filter(CycleState(), ebs_one, node_info("node-a", pods=[ebs_two])) == EXCEEDED


def csi_driver(name: str, prevent: bool | None) -> Any:
    spec: dict[str, Any] = {}
    if prevent is not None:
        spec["preventPodSchedulingIfMissing"] = prevent
    return view(
        {"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": name}, "spec": spec}
    )


NOT_INSTALLED = Status.unschedulable(f"{EBS} CSI driver is not installed on the node")


@pytest.mark.parametrize(
    ("name", "node_drivers", "driver_obj", "want"),
    [
        (
            "allow scheduling when CSIDriver exists but PreventPodSchedulingIfMissing is not set",
            {},
            False,
            None,
        ),
        ("fail when driver not installed and PreventPodSchedulingIfMissing is true", {}, True, NOT_INSTALLED),
        ("driver installed within limit", {EBS: 2}, True, None),
        ("allow scheduling when CSIDriver object missing", {}, None, None),
        ("no CSINode at all and the driver opted in", None, True, NOT_INSTALLED),
    ],
)
def test_volume_limit_scaling_driver_check(
    name: str, node_drivers: dict[str, int | None] | None, driver_obj: bool | None, want: Status | None
) -> None:
    pvcs, pvs, classes = _world()
    nodes = [csi_node("node-a", node_drivers)] if node_drivers is not None else []
    handle = FakeHandle(objects=objects(pvcs, pvs, classes, nodes))
    if driver_obj is not None:
        handle.objects["CSIDriver"] = {EBS: csi_driver(EBS, driver_obj)}
    plugin = NodeVolumeLimits(None, handle)
    state = CycleState()
    assert plugin.pre_filter(state, ebs_one, []) == (None, None)
    assert plugin.filter(state, ebs_one, node_info("node-a")) == want


def test_pre_filter_skips_pods_without_attachable_volumes() -> None:
    plugin = NodeVolumeLimits(None, FakeHandle(objects=objects()))
    only_cm = pod_with(
        "p", {"name": "c", "configMap": {"name": "x"}}, {"name": "s", "secret": {"secretName": "y"}}
    )
    _, status = plugin.pre_filter(CycleState(), only_cm, [])
    assert status is not None and status.code == Code.SKIP
    with_pvc = pod_with(
        "p",
        {"name": "c", "configMap": {"name": "x"}},
        {"name": "d", "persistentVolumeClaim": {"claimName": "x"}},
    )
    assert plugin.pre_filter(CycleState(), with_pvc, []) == (None, None)
    assert plugin.pre_filter(CycleState(), inline_ebs, []) == (None, None)


def test_ephemeral_volumes() -> None:
    pod = pod_with("abc", {"name": "xyz", "ephemeral": {}}, namespace="test", uid="12345")
    pvcs, pvs, classes = _world()
    drivers = [csi_node("node-a", {EBS: 2})]
    handle = FakeHandle(objects=objects(pvcs, pvs, classes, drivers))
    plugin = NodeVolumeLimits(None, handle)
    info = node_info("node-a")
    assert plugin.filter(CycleState(), pod, info) == Status.unresolvable(
        'looking up PVC test/abc-xyz: persistentvolumeclaim "abc-xyz" not found'
    )
    not_owned = view(pvc("abc-xyz", "csi-sc", namespace="test"))
    handle.objects["PersistentVolumeClaim"]["test/abc-xyz"] = not_owned
    status = plugin.filter(CycleState(), pod, info)
    assert status is not None and status.code == Code.ERROR
    assert status.message == "PVC test/abc-xyz was not created for pod test/abc (pod is not owner)"
    owned = view(pvc("abc-xyz", "csi-sc", namespace="test", owner_uid="12345"))
    handle.objects["PersistentVolumeClaim"]["test/abc-xyz"] = owned
    assert plugin.filter(CycleState(), pod, info) is None
    assert plugin.filter(CycleState(), pod, node_info("node-a", pods=[running, ebs_two])) == EXCEEDED


def test_events_and_hints() -> None:
    plugin = NodeVolumeLimits(None, FakeHandle())
    events = {(e.event.resource, e.event.action): e.hint for e in plugin.events_to_register()}
    assert (EventResource.CSI_NODE, ActionType.ADD) in events
    pod_hint = events[(EventResource.ASSIGNED_POD, ActionType.DELETE)]
    assert pod_hint is not None
    new = pod_with_claims(f"csi-{EBS}-2")
    assert pod_hint(new, pod_with_claims("placeholder", node_name="node-a"), None) == QueueingHint.QUEUE
    inline = pod_with("d", {"name": "v", "awsElasticBlockStore": {}}, node_name="node-a")
    assert pod_hint(new, inline, None) == QueueingHint.QUEUE
    assert pod_hint(new, pod_with("d", node_name="node-a"), None) == QueueingHint.QUEUE_SKIP
    assert pod_hint(new, pod_with_claims(f"csi-{EBS}-0", name="d"), None) == QueueingHint.QUEUE_SKIP
    nominated = pod_with_claims(f"csi-{EBS}-0", name="d")
    nominated.nominated_node_name = "node-a"
    assert pod_hint(new, nominated, None) == QueueingHint.QUEUE  # unbound but nominated counts too
    azure_file = pod_with("d", {"name": "v", "azureFile": {"shareName": "s"}}, node_name="node-a")
    assert pod_hint(new, azure_file, None) == QueueingHint.QUEUE  # inline migratable
    pvc_hint = events[(EventResource.PVC, ActionType.ADD)]
    assert pvc_hint is not None
    ns1 = pod_with_claims("pvc1", namespace="ns1")
    assert (
        pvc_hint(pod_with("p", namespace="ns1"), None, view(pvc("pvc2", namespace="ns2")))
        == QueueingHint.QUEUE_SKIP
    )
    assert pvc_hint(ns1, None, view(pvc("pvc1", namespace="ns1"))) == QueueingHint.QUEUE
    eph = pod_with("pod1", {"name": "ephemeral", "ephemeral": {}}, namespace="ns1")
    assert pvc_hint(eph, None, view(pvc("pod1-ephemeral", namespace="ns1"))) == QueueingHint.QUEUE
    assert pvc_hint(ns1, None, view(pvc("pvc2", namespace="ns1"))) == QueueingHint.QUEUE_SKIP


def test_csi_node_update_hint() -> None:
    plugin = NodeVolumeLimits(None, FakeHandle())
    events = {(e.event.resource, e.event.action): e.hint for e in plugin.events_to_register()}
    hint = events[(EventResource.CSI_NODE, ActionType.UPDATE)]
    assert hint is not None
    p = pod_with_claims("x")
    assert hint(p, view(csi_node("n", {EBS: 2})), view(csi_node("n", {EBS: 3}))) == QueueingHint.QUEUE
    assert hint(p, view(csi_node("n", {EBS: 2})), view(csi_node("n", {EBS: 2}))) == QueueingHint.QUEUE_SKIP
    assert hint(p, view(csi_node("n", {EBS: 2})), view(csi_node("n", {EBS: 1}))) == QueueingHint.QUEUE_SKIP
    assert hint(p, view(csi_node("n", {EBS: 2})), view(csi_node("n", {EBS: 2, GCE: 1}))) == QueueingHint.QUEUE
    assert (
        hint(p, view(csi_node("n", {EBS: 2})), view(csi_node("n", {EBS: 2, GCE: None})))
        == QueueingHint.QUEUE_SKIP
    )


def test_volume_attachment_delete_hint() -> None:
    plugin = NodeVolumeLimits(None, FakeHandle())
    events = {(e.event.resource, e.event.action): e.hint for e in plugin.events_to_register()}
    hint = events[(EventResource.VOLUME_ATTACHMENT, ActionType.DELETE)]
    assert hint is not None
    va = volume_attachment("va", "node-a", EBS, "pv")
    assert hint(pod_with("p"), va, None) == QueueingHint.QUEUE_SKIP  # no volumes
    assert hint(pod_with_claims("c"), va, None) == QueueingHint.QUEUE
    ebs_inline = pod_with("p", {"name": "v", "awsElasticBlockStore": {"volumeID": "x"}})
    assert hint(ebs_inline, va, None) == QueueingHint.QUEUE
    gce_inline = pod_with("p", {"name": "v", "gcePersistentDisk": {"pdName": "x"}})
    assert hint(gce_inline, va, None) == QueueingHint.QUEUE_SKIP
