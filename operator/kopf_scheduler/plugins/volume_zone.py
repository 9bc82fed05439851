"""VolumeZone: a pod must run in the zone/region of the PVs it mounts (reference ``volumezone``).

Only bound claims count (their PV's topology labels); unbound WaitForFirstConsumer claims are left
to VolumeBinding. A node without any topology label accepts every pod, so that single-zone
clusters without zone labels keep working.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kopf_scheduler.api import kinds
from kopf_scheduler.api.kinds import Objects
from kopf_scheduler.api.objects import Pod
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
    from kopf_scheduler.api.storage import PersistentVolume, PersistentVolumeClaim, StorageClass

__all__ = ["VolumeZone"]

PRE_FILTER_STATE_KEY = "PreFilterVolumeZone"
ERR_REASON_CONFLICT = "node(s) had no available volume zone"

LABEL_BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
LABEL_BETA_REGION = "failure-domain.beta.kubernetes.io/region"
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_REGION = "topology.kubernetes.io/region"
TOPOLOGY_LABELS = (LABEL_BETA_ZONE, LABEL_BETA_REGION, LABEL_ZONE, LABEL_REGION)
_GA_LABEL = {LABEL_BETA_ZONE: LABEL_ZONE, LABEL_BETA_REGION: LABEL_REGION}
MULTI_ZONE_DELIMITER = "__"


@dataclass(frozen=True, slots=True)
class _PVTopology:
    pv_name: str
    key: str
    values: frozenset[str]


@dataclass(slots=True)
class _StateData:
    topologies: tuple[_PVTopology, ...]

    def clone(self) -> _StateData:
        return self


def _label_zones_to_set(value: str) -> frozenset[str] | None:
    """``LabelZonesToSet``: ``a__b`` is two zones; an empty element makes the label invalid (None)."""
    zones = set()
    for zone in value.split(MULTI_ZONE_DELIMITER):
        zone = zone.strip()
        if not zone:
            return None
        zones.add(zone)
    return frozenset(zones)


class VolumeZone(Plugin):
    name = "VolumeZone"

    def sign(self, pod: Pod) -> tuple[SignFragments, Status | None]:
        return [(signers.VOLUMES, signers.volumes(pod))], None

    def _pv_topologies(self, pod: Pod) -> tuple[tuple[_PVTopology, ...], Status | None]:
        objects: Objects = self.handle.objects if self.handle is not None else {}
        claims = kinds.objects_of(objects, kinds.PERSISTENT_VOLUME_CLAIM)
        out: list[_PVTopology] = []
        for claim_name in pvc_claim_names(pod):
            if not claim_name:
                return (), Status.unresolvable("PersistentVolumeClaim had no name")
            pvc = claims.get(f"{pod.namespace}/{claim_name}")
            if pvc is None:
                return (), Status.unresolvable(not_found("PersistentVolumeClaim", claim_name))
            pv_name = pvc.volume_name
            if not pv_name:
                sc_name = pvc.class_name
                if not sc_name:
                    return (), Status.unresolvable(
                        "PersistentVolumeClaim had no pv name and storageClass name"
                    )
                sc = kinds.objects_of(objects, kinds.STORAGE_CLASS).get(sc_name)
                if sc is None:
                    return (), Status.unresolvable(not_found("StorageClass", sc_name))
                mode = sc.volume_binding_mode
                if not mode:
                    return (), Status.unresolvable(f'VolumeBindingMode not set for StorageClass "{sc_name}"')
                if mode == "WaitForFirstConsumer":
                    continue  # unbound, VolumeBinding decides
                return (), Status.unresolvable("PersistentVolume had no name")
            pv = kinds.objects_of(objects, kinds.PERSISTENT_VOLUME).get(pv_name)
            if pv is None:
                return (), Status.unresolvable(not_found("PersistentVolume", pv_name))
            pv_labels = pv.metadata.labels
            for key in TOPOLOGY_LABELS:
                if key in pv_labels:
                    zones = _label_zones_to_set(pv_labels[key])
                    if zones is not None:  # the reference logs and ignores an invalid label
                        out.append(_PVTopology(pv.metadata.name, key, zones))
        return tuple(out), None

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        topologies, status = self._pv_topologies(pod)
        if status is not None:
            return None, status
        if not topologies:
            return None, Status(Code.SKIP)
        state.write(PRE_FILTER_STATE_KEY, _StateData(topologies))
        return None, None

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status | None:
        if not pod.volumes:
            return None
        data = state.get(PRE_FILTER_STATE_KEY)
        if isinstance(data, _StateData):
            topologies = data.topologies
        else:
            topologies, status = self._pv_topologies(pod)
            if status is not None:
                return status
        node = node_info.node
        node_labels: Mapping[str, str] = node.labels if node is not None else {}
        if not any(key in node_labels for key in TOPOLOGY_LABELS):
            return None  # a node without zone labels: single-zone cluster
        for topo in topologies:
            value = node_labels.get(topo.key)
            if value is None:
                value = node_labels.get(_GA_LABEL.get(topo.key, topo.key))
            if value is None or value not in topo.values:
                return Status.unresolvable(ERR_REASON_CONFLICT)
        return None

    def events_to_register(self) -> Iterable[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.STORAGE_CLASS, ActionType.ADD), self._after_sc_added
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.PVC, ActionType.ADD | ActionType.UPDATE), self._after_pvc_change
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.PV, ActionType.ADD | ActionType.UPDATE), self._after_pv_change
            ),
        ]

    @staticmethod
    def _after_pvc_change(
        pod: Pod, old: PersistentVolumeClaim | None, new: PersistentVolumeClaim
    ) -> QueueingHint:
        return QueueingHint.QUEUE if pod_uses_claim(pod, new, ephemeral=False) else QueueingHint.QUEUE_SKIP

    @staticmethod
    def _after_sc_added(pod: Pod, old: None, new: StorageClass) -> QueueingHint:
        if new.volume_binding_mode == "WaitForFirstConsumer":
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    @staticmethod
    def _after_pv_change(pod: Pod, old: PersistentVolume | None, new: PersistentVolume) -> QueueingHint:
        if old is None:
            return QueueingHint.QUEUE
        old_labels, new_labels = old.metadata.labels, new.metadata.labels
        if any(old_labels.get(key) != new_labels.get(key) for key in TOPOLOGY_LABELS):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP
