"""VolumeRestrictions, after the reference's volume_restrictions_test.go."""

from __future__ import annotations

from typing import Any

import pytest
from _volume_helpers import FakeHandle, claim_volume, node_info, objects, pod_with, pod_with_claims, pvc, view

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.cache.snapshot import Snapshot
from kopf_scheduler.framework.interface import (
    ActionType,
    Code,
    CycleState,
    EventResource,
    QueueingHint,
    Status,
)
from kopf_scheduler.framework.types import NodeInfo
from kopf_scheduler.plugins.volume_restrictions import VolumeRestrictions

DISK_CONFLICT = Status.unschedulable("node(s) had no available disk")
RWOP_CONFLICT = Status.unschedulable(
    "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode "
    "already in-use by another pod"
)


def _vol(source: str, **fields: Any) -> dict[str, Any]:
    return {"name": f"v-{source}", source: fields}


def _run(pod: Pod, info: NodeInfo, pvcs: list[dict[str, Any]] | None = None) -> Status | None:
    handle = FakeHandle(snapshot=Snapshot([info]), objects=objects(pvcs or []))
    plugin = VolumeRestrictions(None, handle)
    state = CycleState()
    _, status = plugin.pre_filter(state, pod, [info])
    if status is not None:
        assert status.code == Code.SKIP
        return None
    return plugin.filter(state, pod, info)


GCE = [
    ("no volumes on node", [], None),
    ("same disk read-write", [_vol("gcePersistentDisk", pdName="foo")], DISK_CONFLICT),
    ("other disk", [_vol("gcePersistentDisk", pdName="bar")], None),
]


@pytest.mark.parametrize(("name", "existing", "want"), GCE, ids=[c[0] for c in GCE])
def test_gce_pd_conflicts(name: str, existing: list[dict[str, Any]], want: Status | None) -> None:
    pod = pod_with("new", _vol("gcePersistentDisk", pdName="foo"))
    info = node_info("node-a", pods=[pod_with("old", *existing, node_name="node-a")] if existing else [])
    assert _run(pod, info) == want


def test_gce_pd_read_only_everywhere_shares() -> None:
    pod = pod_with("new", _vol("gcePersistentDisk", pdName="foo", readOnly=True))
    shared = node_info("n", pods=[pod_with("old", _vol("gcePersistentDisk", pdName="foo", readOnly=True))])
    assert _run(pod, shared) is None
    one_rw = node_info("n", pods=[pod_with("old", _vol("gcePersistentDisk", pdName="foo"))])
    assert _run(pod, one_rw) == DISK_CONFLICT


def test_aws_ebs_never_shares() -> None:
    pod = pod_with("new", _vol("awsElasticBlockStore", volumeID="foo", readOnly=True))
    same = node_info("n", pods=[pod_with("old", _vol("awsElasticBlockStore", volumeID="foo", readOnly=True))])
    other = node_info("n", pods=[pod_with("old", _vol("awsElasticBlockStore", volumeID="bar"))])
    assert _run(pod, same) == DISK_CONFLICT
    assert _run(pod, other) is None


def test_rbd_conflict_needs_shared_monitor_same_pool_and_image() -> None:
    pod = pod_with("new", _vol("rbd", monitors=["a", "b"], pool="foo", image="bar"))

    def on_node(**fields: Any) -> NodeInfo:
        return node_info("n", pods=[pod_with("old", _vol("rbd", **fields))])

    assert _run(pod, on_node(monitors=["c", "b"], pool="foo", image="bar")) == DISK_CONFLICT
    assert _run(pod, on_node(monitors=["c", "d"], pool="foo", image="bar")) is None
    assert _run(pod, on_node(monitors=["a"], pool="other", image="bar")) is None
    assert _run(pod, on_node(monitors=["a"], pool="foo", image="other")) is None
    ro = pod_with("new", _vol("rbd", monitors=["a"], pool="foo", image="bar", readOnly=True))
    assert _run(ro, on_node(monitors=["a"], pool="foo", image="bar", readOnly=True)) is None


def test_iscsi_conflict_unless_read_only() -> None:
    pod = pod_with(
        "new", _vol("iscsi", targetPortal="127.0.0.1:3260", iqn="iqn.2016-12.server:storage.target01")
    )
    same = node_info("n", pods=[pod_with("old", _vol("iscsi", iqn="iqn.2016-12.server:storage.target01"))])
    other = node_info("n", pods=[pod_with("old", _vol("iscsi", iqn="iqn.2017-12.server:storage.target01"))])
    assert _run(pod, same) == DISK_CONFLICT
    assert _run(pod, other) is None


def test_pod_without_restricted_volumes_or_rwop_skips() -> None:
    handle = FakeHandle(objects=objects([pvc("plain", "sc")]))
    plugin = VolumeRestrictions(None, handle)
    _, status = plugin.pre_filter(CycleState(), pod_with_claims("plain"), [])
    assert status is not None and status.code == Code.SKIP


# --- ReadWriteOncePod ----------------------------------------------------------------------------


def _rwop(name: str) -> dict[str, Any]:
    return pvc(name, "sc", access_modes=["ReadWriteOncePod"])


def test_rwop_missing_claim_is_unresolvable() -> None:
    plugin = VolumeRestrictions(None, FakeHandle(objects=objects()))
    _, status = plugin.pre_filter(CycleState(), pod_with_claims("claim-with-rwop-1"), [])
    assert status == Status.unresolvable('persistentvolumeclaim "claim-with-rwop-1" not found')
    assert status is not None and status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE


RWOP_CASES = [
    # (name, claims, claim used by a pod on another node, PreFilter skips, Filter status)
    ("no access modes", [pvc("claim", "sc", access_modes=())], "claim", True, None),
    ("no access mode conflict", [_rwop("claim"), _rwop("other")], "other", True, None),
    ("access mode conflict", [_rwop("claim")], "claim", False, RWOP_CONFLICT),
]


@pytest.mark.parametrize(
    ("name", "pvcs", "user_claim", "skip", "want"), RWOP_CASES, ids=[c[0] for c in RWOP_CASES]
)
def test_rwop(
    name: str, pvcs: list[dict[str, Any]], user_claim: str, skip: bool, want: Status | None
) -> None:
    # The user sits on another node: the ReadWriteOncePod rule is cluster-wide, not per node.
    elsewhere = node_info("node-b", pods=[pod_with_claims(user_claim, name="user", node_name="node-b")])
    target = node_info("node-a")
    handle = FakeHandle(snapshot=Snapshot([target, elsewhere]), objects=objects(pvcs))
    plugin = VolumeRestrictions(None, handle)
    pod = pod_with_claims("claim", name="new")
    state = CycleState()
    _, status = plugin.pre_filter(state, pod, [target, elsewhere])
    if skip:
        assert status is not None and status.code == Code.SKIP
        return
    assert status is None
    assert plugin.filter(state, pod, target) == want
    assert plugin.filter(state, pod, elsewhere) == want


def test_rwop_preemption_remove_and_add_pod() -> None:
    user = pod_with_claims("claim", name="user", node_name="node-a")
    target = node_info("node-a", pods=[user])
    handle = FakeHandle(snapshot=Snapshot([target]), objects=objects([_rwop("claim")]))
    plugin = VolumeRestrictions(None, handle)
    pod = pod_with_claims("claim", name="new")
    state = CycleState()
    assert plugin.pre_filter(state, pod, [target]) == (None, None)
    assert plugin.filter(state, pod, target) == RWOP_CONFLICT
    copy_state = state.clone()
    assert plugin.remove_pod(copy_state, pod, user, target) is None
    assert plugin.filter(copy_state, pod, target) is None
    # The original state is untouched by the clone's change.
    assert plugin.filter(state, pod, target) == RWOP_CONFLICT
    assert plugin.add_pod(copy_state, pod, user, target) is None
    assert plugin.filter(copy_state, pod, target) == RWOP_CONFLICT


def test_events_and_hints() -> None:
    plugin = VolumeRestrictions(None, FakeHandle())
    events = {(e.event.resource, e.event.action): e.hint for e in plugin.events_to_register()}
    assert set(events) == {
        (EventResource.ASSIGNED_POD, ActionType.DELETE),
        (EventResource.NODE, ActionType.ADD),
        (EventResource.PVC, ActionType.ADD),
    }
    pod = pod_with("p", _vol("gcePersistentDisk", pdName="foo"), claim_volume("claim"))
    deleted_hint = events[(EventResource.ASSIGNED_POD, ActionType.DELETE)]
    assert deleted_hint is not None
    assert (
        deleted_hint(pod, pod_with("d", _vol("gcePersistentDisk", pdName="foo")), None) == QueueingHint.QUEUE
    )
    assert deleted_hint(pod, pod_with_claims("claim", name="d"), None) == QueueingHint.QUEUE
    assert (
        deleted_hint(pod, pod_with("d", _vol("gcePersistentDisk", pdName="bar")), None)
        == QueueingHint.QUEUE_SKIP
    )
    other_ns = pod_with("d", _vol("gcePersistentDisk", pdName="foo"), namespace="other")
    assert deleted_hint(pod, other_ns, None) == QueueingHint.QUEUE_SKIP
    pvc_hint = events[(EventResource.PVC, ActionType.ADD)]
    assert pvc_hint is not None
    assert pvc_hint(pod, None, view(pvc("claim"))) == QueueingHint.QUEUE
    assert pvc_hint(pod, None, view(pvc("unrelated"))) == QueueingHint.QUEUE_SKIP
    assert pvc_hint(pod, None, view(pvc("claim", namespace="other"))) == QueueingHint.QUEUE_SKIP
