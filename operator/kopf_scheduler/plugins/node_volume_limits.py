"""NodeVolumeLimits: CSI attach limits per driver and node (reference ``nodevolumelimits/csi.go``).

A node can attach only so many volumes of a CSI driver (``CSINode.spec.drivers[].allocatable.count``;
since 1.35 the node's ``attachable-volumes-*`` allocatable no longer counts). Volumes are counted
once per unique ``driver/volumeHandle`` across the pods already on the node, the VolumeAttachments
to the node and the incoming pod. Unbound claims are counted through their StorageClass's
provisioner with a per-claim handle; in-tree volumes (AWS EBS, GCE PD, Azure Disk, Cinder,
Portworx) count against their CSI driver whenever the node has a CSINode (migration is GA).
With VolumeLimitScaling (beta, on in 1.37) a CSIDriver with ``preventPodSchedulingIfMissing`` also
rejects nodes whose CSINode does not list the driver.

CSIDriver and VolumeAttachment views are read from ``handle.objects`` (cluster-scoped, keyed by
name); without them (an edge that does not watch those kinds) nothing is rejected for them.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kopf_scheduler.api import kinds
from kopf_scheduler.api.kinds import Objects
from kopf_scheduler.api.objects import Pod
from kopf_scheduler.api.volumes import PERSISTENT_VOLUME_CLAIM, InTreeVolumeSource, PodVolume
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
from kopf_scheduler.plugins._volumes import (
    not_found,
    pod_uses_claim,
    volume_is_for_pod,
)
from kopf_scheduler.plugins.feature import FEATURE_GATES

if TYPE_CHECKING:  # api/storage.py is imported with the first storage object (api/kinds.py's parsers)
    from kopf_scheduler.api.storage import CSINode, PersistentVolume, PersistentVolumeClaim, VolumeAttachment

__all__ = ["NodeVolumeLimits"]

ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED = "node(s) exceed max volume count"
VOLUME_LIMIT_SCALING = FEATURE_GATES["VolumeLimitScaling"]
PRE_FILTER_STATE_KEY = "PreFilterNodeVolumeLimits"

# In-tree volume source -> (in-tree plugin name, CSI driver), as csi-translation-lib migrates them;
# these are the plugins isCSIMigrationOn accepts (vSphere and Azure File translate but never count).
_IN_TREE = {
    "awsElasticBlockStore": ("kubernetes.io/aws-ebs", "ebs.csi.aws.com"),
    "gcePersistentDisk": ("kubernetes.io/gce-pd", "pd.csi.storage.gke.io"),
    "azureDisk": ("kubernetes.io/azure-disk", "disk.csi.azure.com"),
    "cinder": ("kubernetes.io/cinder", "cinder.csi.openstack.org"),
    "portworxVolume": ("kubernetes.io/portworx-volume", "pxd.portworx.com"),
}
_DRIVER_OF_PLUGIN = {plugin: driver for plugin, driver in _IN_TREE.values()}
# Every inline source the translation library can migrate (IsInlineMigratable), with its driver.
_INLINE_MIGRATABLE = {
    **{key: driver for key, (_, driver) in _IN_TREE.items()},
    "azureFile": "file.csi.azure.com",
    "vsphereVolume": "csi.vsphere.vmware.com",
}
_ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")


def _is_csi_migration_on(csi_node: CSINode | None, plugin: str) -> bool:
    """``isCSIMigrationOn`` (1.37): the GA-migrated plugins, on any node that has a CSINode."""
    return csi_node is not None and plugin in _DRIVER_OF_PLUGIN


def _ebs_volume_id(volume_id: str) -> str:
    """``KubernetesVolumeIDToEBSVolumeID``: ``aws://zone/vol-123`` names ``vol-123``."""
    if volume_id.startswith("aws://"):
        return volume_id[len("aws://") :].strip("/").rsplit("/", 1)[-1]
    return volume_id


def _translated_handle(source: InTreeVolumeSource, pv_labels: Mapping[str, str]) -> str:
    """The CSI volume handle csi-translation-lib gives an in-tree volume."""
    if source.source == "awsElasticBlockStore":
        return _ebs_volume_id(source.volume_id)
    if source.source == "gcePersistentDisk":
        zone = next((pv_labels[label] for label in _ZONE_LABELS if label in pv_labels), "UNSPECIFIED")
        if "__" in zone:
            return f"projects/UNSPECIFIED/regions/UNSPECIFIED/disks/{source.volume_id}"
        return f"projects/UNSPECIFIED/zones/{zone}/disks/{source.volume_id}"
    return source.volume_id  # azureDisk's diskURI, cinder's and portworx's volumeID


def _volume_limits(csi_node: CSINode | None) -> dict[str, int]:
    """``getVolumeLimits``: driver name -> allocatable count, from the CSINode only."""
    if csi_node is None:
        return {}
    return {d.name: d.allocatable_count for d in csi_node.drivers if d.allocatable_count is not None}


def _inline_driver(vol: PodVolume) -> str | None:
    """The CSI driver of an inline volume the translation library can migrate, else None."""
    return _INLINE_MIGRATABLE.get(vol.source.kind)


def _csi_node_drivers(csi_node: CSINode | None) -> set[str]:
    if csi_node is None:
        return set()
    return {d.name for d in csi_node.drivers}


@dataclass(slots=True)
class _PreFilterState:
    """VolumeAttachments by node, indexed once per cycle (the reference's informer index)."""

    attachments: dict[str, list[VolumeAttachment]]

    def clone(self) -> _PreFilterState:
        return self


class NodeVolumeLimits(Plugin):
    name = "NodeVolumeLimits"

    def sign(self, pod: Pod) -> tuple[SignFragments, Status | None]:
        return [(signers.VOLUMES, signers.volumes(pod))], None

    def __init__(self, args: Any = None, handle: Any = None) -> None:
        super().__init__(args, handle)
        # Unbound claims get a handle no real volume has, so two pods sharing a pending claim
        # count it once and it never collides with a bound volume.
        self.random_volume_id_prefix = secrets.token_hex(16)

    @property
    def _objects(self) -> Objects:
        return self.handle.objects if self.handle is not None else {}

    # -- events --

    def events_to_register(self) -> Iterable[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.CSI_NODE, ActionType.ADD)),
            ClusterEventWithHint(
                ClusterEvent(EventResource.CSI_NODE, ActionType.UPDATE), self._after_csi_node_updated
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE), self._after_pod_deleted
            ),
            ClusterEventWithHint(ClusterEvent(EventResource.PVC, ActionType.ADD), self._after_pvc_added),
            ClusterEventWithHint(
                ClusterEvent(EventResource.VOLUME_ATTACHMENT, ActionType.DELETE),
                self._after_volume_attachment_deleted,
            ),
        ]

    @staticmethod
    def _after_pod_deleted(pod: Pod, old: Any, new: Any) -> QueueingHint:
        deleted = old if isinstance(old, Pod) else new
        if not isinstance(deleted, Pod) or not deleted.volumes:
            return QueueingHint.QUEUE_SKIP
        if not deleted.node_name and not deleted.nominated_node_name:
            return QueueingHint.QUEUE_SKIP
        for vol in deleted.volumes:
            if vol.claim_name is not None or _inline_driver(vol) is not None:
                return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    @staticmethod
    def _after_csi_node_updated(pod: Pod, old: CSINode, new: CSINode) -> QueueingHint:
        """Queue only when some driver's attach limit grew (a new driver counts from 0)."""
        old_limits = {d.name: d.allocatable_count or 0 for d in old.drivers}
        for d in new.drivers:
            if (d.allocatable_count or 0) > old_limits.get(d.name, 0):
                return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    @staticmethod
    def _after_volume_attachment_deleted(
        pod: Pod, old: VolumeAttachment | None, new: VolumeAttachment | None
    ) -> QueueingHint:
        deleted = old if old is not None else new
        attacher = deleted.attacher if deleted is not None else ""
        for vol in pod.volumes:
            if vol.source.kind == PERSISTENT_VOLUME_CLAIM:
                return QueueingHint.QUEUE
            driver = _inline_driver(vol)
            if driver is not None and driver == attacher:
                return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    @staticmethod
    def _after_pvc_added(pod: Pod, old: None, new: PersistentVolumeClaim) -> QueueingHint:
        return QueueingHint.QUEUE if pod_uses_claim(pod, new, ephemeral=True) else QueueingHint.QUEUE_SKIP

    # -- PreFilter / Filter --

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        for vol in pod.volumes:
            if vol.claim_name is not None or _inline_driver(vol) is not None:
                state.write(PRE_FILTER_STATE_KEY, _PreFilterState(self._attachments_by_node()))
                return None, None
        return None, Status(Code.SKIP)

    def _attachments_by_node(self) -> dict[str, list[VolumeAttachment]]:
        by_node: dict[str, list[VolumeAttachment]] = {}
        for va in kinds.objects_of(self._objects, kinds.VOLUME_ATTACHMENT).values():
            by_node.setdefault(va.node_name, []).append(va)
        return by_node

    def _attached_by_volume_attachments(self, state: CycleState, node_name: str) -> dict[str, str]:
        """``getNodeVolumeAttachmentInfo``: unique name -> driver of CSI volumes attached to the node."""
        s = state.get(PRE_FILTER_STATE_KEY)
        by_node = s.attachments if isinstance(s, _PreFilterState) else self._attachments_by_node()
        pvs = kinds.objects_of(self._objects, kinds.PERSISTENT_VOLUME)
        out: dict[str, str] = {}
        for va in by_node.get(node_name, ()):
            attacher = va.attacher
            if not attacher or va.persistent_volume_name is None:
                continue
            pv = pvs.get(va.persistent_volume_name)
            if pv is None or pv.csi is None:
                continue
            out[f"{attacher}/{pv.csi.volume_handle}"] = attacher
        return out

    def _driver_installed(self, driver: str, csi_node: CSINode | None) -> bool:
        """``checkCSIDriverOnNode``: only drivers that opt in can reject a node lacking them."""
        csi_driver = kinds.objects_of(self._objects, kinds.CSI_DRIVER).get(driver)
        if csi_driver is None or not csi_driver.prevent_pod_scheduling_if_missing:
            return True
        return driver in _csi_node_drivers(csi_node)

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status | None:
        if not pod.volumes:
            return None
        node = node_info.node
        if node is None:
            return Status.as_error(ValueError("node not found"))
        csi_node = kinds.objects_of(self._objects, kinds.CSI_NODE).get(node.name)
        new_volumes: dict[str, str] = {}
        try:
            err = self._filter_attachable_volumes(pod, csi_node, True, new_volumes)
        except LookupError as exc:
            return Status.unresolvable(str(exc.args[0]))
        if err is not None:
            return Status.as_error(ValueError(err))
        if not new_volumes:
            return None
        if VOLUME_LIMIT_SCALING:
            for driver in new_volumes.values():
                if not self._driver_installed(driver, csi_node):
                    return Status.unschedulable(f"{driver} CSI driver is not installed on the node")
        limits = _volume_limits(csi_node)
        if not limits:
            return None
        attached: dict[str, str] = {}
        for existing in node_info.pods:
            err = self._filter_attachable_volumes(existing, csi_node, False, attached)
            if err is not None:
                return Status.as_error(ValueError(err))
        attached_count: dict[str, int] = {}
        for unique_name, driver in attached.items():
            new_volumes.pop(unique_name, None)  # a volume shared with a pod on the node is attached once
            attached_count[driver] = attached_count.get(driver, 0) + 1
        for unique_name, driver in self._attached_by_volume_attachments(state, node.name).items():
            if unique_name not in attached:
                attached_count[driver] = attached_count.get(driver, 0) + 1
        new_count: dict[str, int] = {}
        for driver in new_volumes.values():
            new_count[driver] = new_count.get(driver, 0) + 1
        for driver, count in new_count.items():
            limit = limits.get(driver)
            if limit is not None and attached_count.get(driver, 0) + count > limit:
                return Status.unschedulable(ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED)
        return None

    def _filter_attachable_volumes(
        self, pod: Pod, csi_node: CSINode | None, new_pod: bool, result: dict[str, str]
    ) -> str | None:
        """Add ``unique name -> limit key`` for the pod's CSI volumes; an error message on failure.

        A missing claim of the incoming pod raises LookupError (unresolvable until it is created);
        a missing claim of a pod already on the node is not counted.
        """
        claims = kinds.objects_of(self._objects, kinds.PERSISTENT_VOLUME_CLAIM)
        for vol in pod.volumes:
            name = vol.claim_name
            if name is None:
                self._check_attachable_inline_volume(vol, csi_node, result)
                continue
            if not name:
                return "PersistentVolumeClaim had no name"
            pvc = claims.get(f"{pod.namespace}/{name}")
            if pvc is None:
                if new_pod:
                    raise LookupError(
                        f"looking up PVC {pod.namespace}/{name}: {not_found('PersistentVolumeClaim', name)}"
                    )
                continue
            if vol.ephemeral:
                err = volume_is_for_pod(pod, pvc)
                if err:
                    return err
            driver, handle = self._csi_driver_info(csi_node, pvc)
            if not driver or not handle:
                continue
            result[f"{driver}/{handle}"] = driver
        return None

    @staticmethod
    def _check_attachable_inline_volume(
        vol: PodVolume, csi_node: CSINode | None, result: dict[str, str]
    ) -> None:
        source = vol.source.in_tree
        if source is None:
            return
        plugin, driver = _IN_TREE[source.source]
        if not _is_csi_migration_on(csi_node, plugin):
            return
        handle = _translated_handle(source, {})
        result[f"{driver}/{handle}"] = driver

    def _csi_driver_info(self, csi_node: CSINode | None, pvc: PersistentVolumeClaim) -> tuple[str, str]:
        if not pvc.volume_name:
            return self._csi_driver_info_from_sc(csi_node, pvc)
        pv: PersistentVolume | None = kinds.objects_of(self._objects, kinds.PERSISTENT_VOLUME).get(
            pvc.volume_name
        )
        if pv is None:
            # Deleted, or pre-bound to a PV not created yet: count through the StorageClass.
            return self._csi_driver_info_from_sc(csi_node, pvc)
        if pv.csi is not None:
            return pv.csi.driver, pv.csi.volume_handle
        if pv.in_tree is None:
            return "", ""
        plugin, driver = _IN_TREE[pv.in_tree.source]
        if not _is_csi_migration_on(csi_node, plugin):
            return "", ""
        return driver, _translated_handle(pv.in_tree, pv.metadata.labels)

    def _csi_driver_info_from_sc(
        self, csi_node: CSINode | None, pvc: PersistentVolumeClaim
    ) -> tuple[str, str]:
        sc_name = pvc.class_name
        if not sc_name:
            return "", ""  # Immediate binding without a class: it must be bound already, do not count
        sc = kinds.objects_of(self._objects, kinds.STORAGE_CLASS).get(sc_name)
        if sc is None:
            return "", ""
        handle = f"{self.random_volume_id_prefix}-{pvc.key}"
        provisioner = sc.provisioner
        if provisioner in _DRIVER_OF_PLUGIN:
            if not _is_csi_migration_on(csi_node, provisioner):
                return "", ""
            return _DRIVER_OF_PLUGIN[provisioner], handle
        return provisioner, handle
