"""NodeVolumeLimits: CSI attach limits per driver and node (reference ``nodevolumelimits/csi.go``).

A node can attach only so many volumes of a CSI driver (``CSINode.spec.drivers[].allocatable.count``,
or the node's ``attachable-volumes-*`` allocatable). Volumes are counted once per unique
``driver/volumeHandle`` across the pods already on the node and the incoming pod. Unbound claims
are counted through their StorageClass's provisioner with a per-claim handle, and in-tree volumes
(AWS EBS, GCE PD, Azure Disk, Cinder) count against their CSI driver when the node's CSINode says
that plugin is migrated.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kopf_scheduler.api.objects import PodSpec
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
    Status,
)
from kopf_scheduler.framework.types import NodeInfo
from kopf_scheduler.plugins._volumes import (
    MIGRATED_PLUGINS_ANNOTATION,
    annotations_of,
    claim_of_volume,
    labels,
    meta,
    not_found,
    pvc_class,
    spec,
    volume_is_for_pod,
)

__all__ = ["NodeVolumeLimits"]

ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED = "node(s) exceed max volume count"

ATTACHABLE_VOLUMES_PREFIX = "attachable-volumes-"
CSI_ATTACH_LIMIT_PREFIX = "attachable-volumes-csi-"
RESOURCE_NAME_LENGTH_LIMIT = 63

# In-tree volume source -> (in-tree plugin name, CSI driver), as csi-translation-lib migrates them.
_IN_TREE = {
    "awsElasticBlockStore": ("kubernetes.io/aws-ebs", "ebs.csi.aws.com"),
    "gcePersistentDisk": ("kubernetes.io/gce-pd", "pd.csi.storage.gke.io"),
    "azureDisk": ("kubernetes.io/azure-disk", "disk.csi.azure.com"),
    "cinder": ("kubernetes.io/cinder", "cinder.csi.openstack.org"),
}
_DRIVER_OF_PLUGIN = {plugin: driver for plugin, driver in _IN_TREE.values()}
_ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")


def csi_attach_limit_key(driver: str) -> str:
    """``GetCSIAttachLimitKey``: long driver names are shortened with a hash to fit a resource name."""
    if len(CSI_ATTACH_LIMIT_PREFIX) + len(driver) >= RESOURCE_NAME_LENGTH_LIMIT:
        digest = hashlib.sha1(driver.encode()).hexdigest()[:16]  # a name, not a secret
        return CSI_ATTACH_LIMIT_PREFIX + driver[:23] + digest
    return CSI_ATTACH_LIMIT_PREFIX + driver


def _is_csi_migration_on(csi_node: Mapping[str, Any] | None, plugin: str) -> bool:
    """Migration counts only for the GA in-tree plugins the node lists as migrated."""
    if csi_node is None or plugin not in _DRIVER_OF_PLUGIN:
        return False
    migrated = str(annotations_of(csi_node).get(MIGRATED_PLUGINS_ANNOTATION) or "")
    return plugin in migrated.split(",")


def _in_tree_source(source: Mapping[str, Any]) -> tuple[str, str, Mapping[str, Any]] | None:
    for key, (plugin, driver) in _IN_TREE.items():
        value = source.get(key)
        if isinstance(value, Mapping):
            return plugin, driver, value
    return None


def _ebs_volume_id(volume_id: str) -> str:
    """``KubernetesVolumeIDToEBSVolumeID``: ``aws://zone/vol-123`` names ``vol-123``."""
    if volume_id.startswith("aws://"):
        return volume_id[len("aws://") :].strip("/").rsplit("/", 1)[-1]
    return volume_id


def _translated_handle(key: str, source: Mapping[str, Any], pv_labels: Mapping[str, str]) -> str:
    """The CSI volume handle csi-translation-lib gives an in-tree volume."""
    if key == "awsElasticBlockStore":
        return _ebs_volume_id(str(source.get("volumeID") or ""))
    if key == "gcePersistentDisk":
        zone = next((pv_labels[label] for label in _ZONE_LABELS if label in pv_labels), "UNSPECIFIED")
        if "__" in zone:
            return f"projects/UNSPECIFIED/regions/UNSPECIFIED/disks/{source.get('pdName', '')}"
        return f"projects/UNSPECIFIED/zones/{zone}/disks/{source.get('pdName', '')}"
    if key == "azureDisk":
        return str(source.get("diskURI") or "")
    return str(source.get("volumeID") or "")


def _source_key(driver: str) -> str:
    return next(key for key, (_, d) in _IN_TREE.items() if d == driver)


class NodeVolumeLimits(Plugin):
    name = "NodeVolumeLimits"

    def __init__(self, args: Any = None, handle: Any = None) -> None:
        super().__init__(args, handle)
        # Unbound claims get a handle no real volume has, so two pods sharing a pending claim
        # count it once and it never collides with a bound volume.
        self.random_volume_id_prefix = secrets.token_hex(16)

    @property
    def _objects(self) -> Mapping[str, Mapping[str, Any]]:
        return self.handle.objects if self.handle is not None else {}

    # -- events --

    def events_to_register(self) -> Iterable[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.CSI_NODE, ActionType.ADD)),
            ClusterEventWithHint(ClusterEvent(EventResource.POD, ActionType.DELETE), self._after_pod_deleted),
            ClusterEventWithHint(ClusterEvent(EventResource.PVC, ActionType.ADD), self._after_pvc_added),
        ]

    @staticmethod
    def _after_pod_deleted(pod: PodSpec, old: Any, new: Any) -> QueueingHint:
        deleted = old if isinstance(old, PodSpec) else new
        if not isinstance(deleted, PodSpec) or not deleted.volumes or not deleted.node_name:
            return QueueingHint.QUEUE_SKIP
        for vol in deleted.volumes:
            if claim_of_volume(deleted, vol) is not None or _in_tree_source(vol) is not None:
                return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    @staticmethod
    def _after_pvc_added(pod: PodSpec, old: Any, new: Any) -> QueueingHint:
        m = meta(new)
        if (m.get("namespace") or "default") != pod.namespace:
            return QueueingHint.QUEUE_SKIP
        for vol in pod.volumes:
            claim = claim_of_volume(pod, vol)
            if claim is not None and claim[0] == m.get("name"):
                return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    # -- PreFilter / Filter --

    def pre_filter(
        self, state: CycleState, pod: PodSpec, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        for vol in pod.volumes:
            if claim_of_volume(pod, vol) is not None or _in_tree_source(vol) is not None:
                return None, None
        return None, Status(Code.SKIP)

    def filter(self, state: CycleState, pod: PodSpec, node_info: NodeInfo) -> Status | None:
        if not pod.volumes:
            return None
        node = node_info.node
        if node is None:
            return Status.as_error(ValueError("node not found"))
        csi_node = self._objects.get("CSINode", {}).get(node.name)
        new_volumes: dict[str, str] = {}
        try:
            err = self._filter_attachable_volumes(pod, csi_node, True, new_volumes)
        except LookupError as exc:
            return Status.unresolvable(str(exc.args[0]))
        if err is not None:
            return Status.as_error(ValueError(err))
        if not new_volumes:
            return None
        limits = self._volume_limits(node_info, csi_node)
        if not limits:
            return None
        attached: dict[str, str] = {}
        for existing in node_info.pods:
            err = self._filter_attachable_volumes(existing, csi_node, False, attached)
            if err is not None:
                return Status.as_error(ValueError(err))
        attached_count: dict[str, int] = {}
        for unique_name, limit_key in attached.items():
            new_volumes.pop(unique_name, None)  # a volume shared with a pod on the node is attached once
            attached_count[limit_key] = attached_count.get(limit_key, 0) + 1
        new_count: dict[str, int] = {}
        for limit_key in new_volumes.values():
            new_count[limit_key] = new_count.get(limit_key, 0) + 1
        for limit_key, count in new_count.items():
            limit = limits.get(limit_key)
            if limit is not None and attached_count.get(limit_key, 0) + count > limit:
                return Status.unschedulable(ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED)
        return None

    @staticmethod
    def _volume_limits(node_info: NodeInfo, csi_node: Mapping[str, Any] | None) -> dict[str, int]:
        limits = {
            name: amount
            for name, amount in node_info.allocatable.scalar.items()
            if name.startswith(ATTACHABLE_VOLUMES_PREFIX)
        }
        if csi_node is not None:
            for driver in spec(csi_node).get("drivers") or ():
                count = ((driver or {}).get("allocatable") or {}).get("count")
                if count is not None:
                    limits[csi_attach_limit_key(str(driver.get("name", "")))] = int(count)
        return limits

    def _filter_attachable_volumes(
        self, pod: PodSpec, csi_node: Mapping[str, Any] | None, new_pod: bool, result: dict[str, str]
    ) -> str | None:
        """Add ``unique name -> limit key`` for the pod's CSI volumes; an error message on failure.

        A missing claim of the incoming pod raises LookupError (unresolvable until it is created);
        a missing claim of a pod already on the node is not counted.
        """
        claims = self._objects.get("PersistentVolumeClaim", {})
        for vol in pod.volumes:
            claim = claim_of_volume(pod, vol)
            if claim is None:
                self._check_attachable_inline_volume(vol, csi_node, result)
                continue
            name, ephemeral = claim
            if not name:
                return "PersistentVolumeClaim had no name"
            pvc = claims.get(f"{pod.namespace}/{name}")
            if pvc is None:
                if new_pod:
                    raise LookupError(
                        f"looking up PVC {pod.namespace}/{name}: {not_found('PersistentVolumeClaim', name)}"
                    )
                continue
            if ephemeral:
                err = volume_is_for_pod(pod, pvc)
                if err:
                    return err
            driver, handle = self._csi_driver_info(csi_node, pvc)
            if not driver or not handle:
                continue
            result[f"{driver}/{handle}"] = csi_attach_limit_key(driver)
        return None

    @staticmethod
    def _check_attachable_inline_volume(
        vol: Mapping[str, Any], csi_node: Mapping[str, Any] | None, result: dict[str, str]
    ) -> None:
        found = _in_tree_source(vol)
        if found is None:
            return
        plugin, driver, source = found
        if not _is_csi_migration_on(csi_node, plugin):
            return
        handle = _translated_handle(_source_key(driver), source, {})
        result[f"{driver}/{handle}"] = csi_attach_limit_key(driver)

    def _csi_driver_info(self, csi_node: Mapping[str, Any] | None, pvc: Mapping[str, Any]) -> tuple[str, str]:
        pv_name = str(spec(pvc).get("volumeName") or "")
        if not pv_name:
            return self._csi_driver_info_from_sc(csi_node, pvc)
        pv = self._objects.get("PersistentVolume", {}).get(pv_name)
        if pv is None:
            # Deleted, or pre-bound to a PV not created yet: count through the StorageClass.
            return self._csi_driver_info_from_sc(csi_node, pvc)
        pv_spec = spec(pv)
        csi = pv_spec.get("csi")
        if isinstance(csi, Mapping):
            return str(csi.get("driver") or ""), str(csi.get("volumeHandle") or "")
        found = _in_tree_source(pv_spec)
        if found is None:
            return "", ""
        plugin, driver, source = found
        if not _is_csi_migration_on(csi_node, plugin):
            return "", ""
        return driver, _translated_handle(_source_key(driver), source, labels(pv))

    def _csi_driver_info_from_sc(
        self, csi_node: Mapping[str, Any] | None, pvc: Mapping[str, Any]
    ) -> tuple[str, str]:
        sc_name = pvc_class(pvc)
        if not sc_name:
            return "", ""  # Immediate binding without a class: it must be bound already, do not count
        sc = self._objects.get("StorageClass", {}).get(sc_name)
        if sc is None:
            return "", ""
        m = meta(pvc)
        handle = f"{self.random_volume_id_prefix}-{m.get('namespace') or 'default'}/{m.get('name', '')}"
        provisioner = str(sc.get("provisioner") or "")
        if provisioner in _DRIVER_OF_PLUGIN:
            if not _is_csi_migration_on(csi_node, provisioner):
                return "", ""
            return _DRIVER_OF_PLUGIN[provisioner], handle
        return provisioner, handle
