"""VolumeRestrictions: volumes that cannot be shared (reference ``volumerestrictions``).

Two rules. In-tree disks that attach to one node at a time (GCE PD unless every mount is read-only,
AWS EBS always, RBD and iSCSI unless read-only) conflict with the same disk used by a pod already
on the node. A ReadWriteOncePod claim may be used by one pod in the whole cluster; that conflict
is Unschedulable (not unresolvable) because preempting the user can free the claim, which is why
PreFilter keeps a count that preemption's add_pod/remove_pod adjust.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kopf_scheduler.api import kinds
from kopf_scheduler.api.objects import Pod
from kopf_scheduler.api.volumes import ISCSI, RBD, PodVolume, VolumeSource
from kopf_scheduler.framework import signers
from kopf_scheduler.framework.interface import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    Code,
    CycleState,
    EventResource,
    Plugin,
    PreFilterResult,
    QueueingHint,
    SignFragments,
    Status,
)
from kopf_scheduler.framework.types import NodeInfo
from kopf_scheduler.plugins._volumes import not_found, pod_uses_claim, pvc_claim_names

if TYPE_CHECKING:  # api/storage.py is imported with the first storage object (api/kinds.py's parsers)
    from kopf_scheduler.api.storage import PersistentVolumeClaim

__all__ = ["VolumeRestrictions"]

PRE_FILTER_STATE_KEY = "PreFilterVolumeRestrictions"

ERR_REASON_DISK_CONFLICT = "node(s) had no available disk"
ERR_REASON_RWOP_CONFLICT = (
    "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode "
    "already in-use by another pod"
)

_RESTRICTED_SOURCES = frozenset(("gcePersistentDisk", "awsElasticBlockStore", RBD, ISCSI))


@dataclass(slots=True)
class _PreFilterState:
    """Names of the pod's ReadWriteOncePod claims and how many scheduled pods already use them."""

    rwop_claims: frozenset[str] = frozenset()
    conflicting_ref_count: int = 0

    def clone(self) -> _PreFilterState:
        return _PreFilterState(self.rwop_claims, self.conflicting_ref_count)

    def update_with_pod(self, pod: Pod, multiplier: int) -> None:
        self.conflicting_ref_count += multiplier * sum(
            1 for name in pvc_claim_names(pod) if name in self.rwop_claims
        )


def _needs_restrictions_check(volume: PodVolume) -> bool:
    return volume.source.kind in _RESTRICTED_SOURCES


def _is_volume_conflict(volume: VolumeSource, pod: Pod) -> bool:
    """Does ``volume`` (a source of the incoming pod) clash with any volume of ``pod``?"""
    kind = volume.kind
    for existing in pod.volumes:
        other = existing.source
        if other.kind != kind:
            continue
        if kind == "awsElasticBlockStore":
            # The same EBS volume conflicts even when every mount is read-only.
            if volume.in_tree == other.in_tree:
                return True
        elif volume.read_only and other.read_only:
            continue
        elif kind == "gcePersistentDisk":
            if volume.in_tree == other.in_tree:
                return True
        elif kind == ISCSI:
            if volume.iscsi_iqn == other.iscsi_iqn:
                return True
        elif kind == RBD:
            # The same image in the same pool through a Ceph monitor both name.
            a, b = volume.rbd, other.rbd
            if (
                a is not None
                and b is not None
                and not set(a.monitors).isdisjoint(b.monitors)
                and a.pool == b.pool
                and a.image == b.image
            ):
                return True
    return False


def _satisfy_volume_conflicts(pod: Pod, pods: Iterable[Pod]) -> bool:
    restricted = [v.source for v in pod.volumes if _needs_restrictions_check(v)]
    if not restricted:
        return True
    existing = list(pods)
    return not any(_is_volume_conflict(v, other) for v in restricted for other in existing)


class VolumeRestrictions(Plugin):
    name = "VolumeRestrictions"

    def sign(self, pod: Pod) -> tuple[SignFragments, Status | None]:
        return [(signers.VOLUMES, signers.volumes(pod))], None

    def _rwop_claims(self, pod: Pod) -> tuple[frozenset[str], str | None]:
        objects = self.handle.objects if self.handle is not None else {}
        claims = kinds.objects_of(objects, kinds.PERSISTENT_VOLUME_CLAIM)
        names: set[str] = set()
        for claim_name in pvc_claim_names(pod):
            pvc = claims.get(f"{pod.namespace}/{claim_name}")
            if pvc is None:
                return frozenset(), not_found("PersistentVolumeClaim", claim_name)
            if "ReadWriteOncePod" in pvc.access_modes:
                names.add(pvc.metadata.name)
        return frozenset(names), None

    def _is_pvc_used_by_pods(self, key: str) -> bool:
        """``StorageInfos().IsPVCUsedByPods``: any pod in the snapshot refers to the claim."""
        if self.handle is None:
            return False
        return any(key in info.pvc_ref_counts for info in self.handle.snapshot.list())

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        needs_check = any(_needs_restrictions_check(v) for v in pod.volumes)
        rwop, err = self._rwop_claims(pod)
        if err is not None:
            return None, Status.unresolvable(err)
        conflicts = sum(1 for name in rwop if self._is_pvc_used_by_pods(f"{pod.namespace}/{name}"))
        if not needs_check and conflicts == 0:
            return None, Status(Code.SKIP)
        state.write(PRE_FILTER_STATE_KEY, _PreFilterState(rwop, conflicts))
        return None, None

    def add_pod(self, state: CycleState, pod: Pod, pod_to_add: Pod, node_info: NodeInfo) -> Status | None:
        s = state.get(PRE_FILTER_STATE_KEY)
        if not isinstance(s, _PreFilterState):
            return Status.as_error(KeyError(f'cannot read "{PRE_FILTER_STATE_KEY}" from cycleState'))
        s.update_with_pod(pod_to_add, 1)
        return None

    def remove_pod(
        self, state: CycleState, pod: Pod, pod_to_remove: Pod, node_info: NodeInfo
    ) -> Status | None:
        s = state.get(PRE_FILTER_STATE_KEY)
        if not isinstance(s, _PreFilterState):
            return Status.as_error(KeyError(f'cannot read "{PRE_FILTER_STATE_KEY}" from cycleState'))
        s.update_with_pod(pod_to_remove, -1)
        return None

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status | None:
        if not _satisfy_volume_conflicts(pod, node_info.pods):
            return Status.unschedulable(ERR_REASON_DISK_CONFLICT)
        s = state.get(PRE_FILTER_STATE_KEY)
        if not isinstance(s, _PreFilterState):
            return Status.as_error(KeyError(f'cannot read "{PRE_FILTER_STATE_KEY}" from cycleState'))
        if s.conflicting_ref_count > 0:
            return Status.unschedulable(ERR_REASON_RWOP_CONFLICT)
        return None

    def events_to_register(self) -> Iterable[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE), self._after_pod_deleted
            ),
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD)),
            ClusterEventWithHint(ClusterEvent(EventResource.PVC, ActionType.ADD), self._after_pvc_added),
        ]

    @staticmethod
    def _after_pvc_added(pod: Pod, old: None, new: PersistentVolumeClaim) -> QueueingHint:
        return QueueingHint.QUEUE if pod_uses_claim(pod, new, ephemeral=False) else QueueingHint.QUEUE_SKIP

    @staticmethod
    def _after_pod_deleted(pod: Pod, old: Any, new: Any) -> QueueingHint:
        deleted = old if isinstance(old, Pod) else new
        if not isinstance(deleted, Pod) or deleted.namespace != pod.namespace:
            return QueueingHint.QUEUE_SKIP
        if not _satisfy_volume_conflicts(pod, [deleted]):
            return QueueingHint.QUEUE
        # The deleted pod may have held one of our ReadWriteOncePod claims (access mode not checked).
        claims = set(pvc_claim_names(pod))
        if any(name in claims for name in pvc_claim_names(deleted)):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP
