"""NodeVolumeLimits (CSI), after the reference's csi_test.go (without VolumeAttachment counting)."""

from __future__ import annotations

from typing import Any

import pytest
from _volume_helpers import FakeHandle, csi_node, node_info, objects, pod_with, pod_with_claims, pv, pvc
from _volume_helpers import storage_class as sc

from kopf_scheduler.api.objects import PodSpec
from kopf_scheduler.framework.interface import (
    ActionType,
    Code,
    CycleState,
    EventResource,
    QueueingHint,
    Status,
)
from kopf_scheduler.plugins.node_volume_limits import NodeVolumeLimits, csi_attach_limit_key

EBS = "ebs.csi.aws.com"
GCE = "pd.csi.storage.gke.io"
EBS_IN_TREE = "kubernetes.io/aws-ebs"
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


CASES: list[tuple[str, PodSpec, list[PodSpec], dict[str, int | None] | None, Status | None]] = [
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
    pod: PodSpec,
    existing: list[PodSpec],
    drivers: dict[str, int | None] | None,
    want: Status | None,
) -> None:
    pvcs, pvs, classes = _world()
    nodes = [csi_node("node-a", drivers, migrated=[EBS_IN_TREE])] if drivers is not None else []
    plugin = NodeVolumeLimits(None, FakeHandle(objects=objects(pvcs, pvs, classes, nodes)))
    info = node_info("node-a", pods=existing)
    _, pre = plugin.pre_filter(CycleState(), pod, [info])
    assert pre is None
    assert plugin.filter(CycleState(), pod, info) == want


def test_in_tree_not_counted_without_migration_annotation() -> None:
    pvcs, pvs, classes = _world()
    handle = FakeHandle(objects=objects(pvcs, pvs, classes, [csi_node("node-a", {EBS: 2})]))
    plugin = NodeVolumeLimits(None, handle)
    assert plugin.filter(CycleState(), in_tree_one, node_info("node-a", pods=[in_tree_two])) is None


def test_node_allocatable_attach_limit_is_used() -> None:
    pvcs, pvs, classes = _world()
    plugin = NodeVolumeLimits(None, FakeHandle(objects=objects(pvcs, pvs, classes)))
    info = node_info("node-a", pods=[running, ebs_two], extra={csi_attach_limit_key(EBS): "3"})
    assert plugin.filter(CycleState(), ebs_one, info) == EXCEEDED
    roomy = node_info("node-a", pods=[running, ebs_two], extra={csi_attach_limit_key(EBS): "4"})
    assert plugin.filter(CycleState(), ebs_one, roomy) is None


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
    not_owned = pvc("abc-xyz", "csi-sc", namespace="test")
    handle.objects["PersistentVolumeClaim"]["test/abc-xyz"] = not_owned
    status = plugin.filter(CycleState(), pod, info)
    assert status is not None and status.code == Code.ERROR
    assert status.message == "PVC test/abc-xyz was not created for pod test/abc (pod is not owner)"
    owned = pvc("abc-xyz", "csi-sc", namespace="test", owner_uid="12345")
    handle.objects["PersistentVolumeClaim"]["test/abc-xyz"] = owned
    assert plugin.filter(CycleState(), pod, info) is None
    assert plugin.filter(CycleState(), pod, node_info("node-a", pods=[running, ebs_two])) == EXCEEDED


def test_attach_limit_key() -> None:
    assert csi_attach_limit_key(EBS) == "attachable-volumes-csi-ebs.csi.aws.com"
    long_name = "a-very-long-csi-driver-name.storage.example.com"
    key = csi_attach_limit_key(long_name)
    assert key.startswith("attachable-volumes-csi-a-very-long-csi-drive")
    assert len(key) == len("attachable-volumes-csi-") + 23 + 16


def test_events_and_hints() -> None:
    plugin = NodeVolumeLimits(None, FakeHandle())
    events = {(e.event.resource, e.event.action): e.hint for e in plugin.events_to_register()}
    assert (EventResource.CSI_NODE, ActionType.ADD) in events
    pod_hint = events[(EventResource.POD, ActionType.DELETE)]
    assert pod_hint is not None
    new = pod_with_claims(f"csi-{EBS}-2")
    assert pod_hint(new, pod_with_claims("placeholder", node_name="node-a"), None) == QueueingHint.QUEUE
    inline = pod_with("d", {"name": "v", "awsElasticBlockStore": {}}, node_name="node-a")
    assert pod_hint(new, inline, None) == QueueingHint.QUEUE
    assert pod_hint(new, pod_with("d", node_name="node-a"), None) == QueueingHint.QUEUE_SKIP
    assert pod_hint(new, pod_with_claims(f"csi-{EBS}-0", name="d"), None) == QueueingHint.QUEUE_SKIP
    pvc_hint = events[(EventResource.PVC, ActionType.ADD)]
    assert pvc_hint is not None
    ns1 = pod_with_claims("pvc1", namespace="ns1")
    assert (
        pvc_hint(pod_with("p", namespace="ns1"), None, pvc("pvc2", namespace="ns2"))
        == QueueingHint.QUEUE_SKIP
    )
    assert pvc_hint(ns1, None, pvc("pvc1", namespace="ns1")) == QueueingHint.QUEUE
    eph = pod_with("pod1", {"name": "ephemeral", "ephemeral": {}}, namespace="ns1")
    assert pvc_hint(eph, None, pvc("pod1-ephemeral", namespace="ns1")) == QueueingHint.QUEUE
    assert pvc_hint(ns1, None, pvc("pvc2", namespace="ns1")) == QueueingHint.QUEUE_SKIP
